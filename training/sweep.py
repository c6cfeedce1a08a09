"""`ortholab sweep`: grid, random or TPE search over config keys, coordinated by Optuna through the run store.

The study lives in the same database as the runs (Optuna's RDB storage on the store's URL), so workers on
several machines pointed at one PostgreSQL store join one sweep. Each trial is a normal `ortholab fit` in its
own process, recorded as a run tagged `sweep:<name>` and `trial:<number>`; the trial's value is the run's
best main metric.

A space file maps dotted config keys to what to try:

    model.hidden_size: [64, 128]                              # choices (grid or sampled)
    model.family_args.rho: {low: 0.1, high: 0.7}              # a float range
    model.optimizers.recurrent.lr: {low: 1.0e-5, high: 1.0e-3, log: true}
    data.batch_size: {low: 10, high: 50, step: 10}            # an int range (int bounds)
"""
from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import optuna
import yaml

from ortholab.db import Store, default_db_url
from ortholab.models import ConfigError

SAMPLERS = ("grid", "random", "tpe")


def load_space(path: str) -> dict:
    try:
        space = yaml.safe_load(Path(path).read_text())
    except OSError as err:
        raise ConfigError(f"--space {path}: cannot read it ({err.strerror})") from None
    if not isinstance(space, dict) or not space:
        raise ConfigError(f"--space {path}: expected a mapping of config keys to choices or ranges")
    for key, value in space.items():
        if not (isinstance(value, list) and value) and not (isinstance(value, dict) and {"low", "high"} <= set(value)):
            raise ConfigError(f"--space {path}: {key} must be a list of choices or {{low: .., high: ..}}")
    return space


def suggest(trial: optuna.Trial, space: dict) -> dict:
    """One value per key: a choice from a list, else a float range, or an int range when both bounds are ints."""
    values = {}
    for key, spec in space.items():
        if isinstance(spec, list):
            values[key] = trial.suggest_categorical(key, spec)
        elif isinstance(spec["low"], int) and isinstance(spec["high"], int) and not spec.get("log"):
            values[key] = trial.suggest_int(key, spec["low"], spec["high"], step=spec.get("step", 1))
        else:
            values[key] = trial.suggest_float(key, spec["low"], spec["high"], log=bool(spec.get("log")))
    return values


def grid_points(space: dict) -> list[dict]:
    """Every combination of the choices, for `--sampler grid`."""
    ranges = [k for k, v in space.items() if not isinstance(v, list)]
    if ranges:
        raise ConfigError(f"--sampler grid needs lists of choices; {ranges[0]} is a range (use random or tpe)")
    return [dict(zip(space, values)) for values in itertools.product(*space.values())]


def open_study(name: str, db: str, kind: str, space: dict, seed: int) -> optuna.Study:
    """Create the study, or join it. Its creator enqueues a grid's points, so that concurrent workers take each
    point exactly once (Optuna's GridSampler may repeat points across workers)."""
    sampler = optuna.samplers.TPESampler(seed=seed) if kind == "tpe" else optuna.samplers.RandomSampler(seed=seed)
    try:
        study = optuna.create_study(study_name=name, storage=db, sampler=sampler, direction="minimize")
    except optuna.exceptions.DuplicatedStudyError:
        return optuna.load_study(study_name=name, storage=db, sampler=sampler)
    if kind == "grid":
        for point in grid_points(space):
            study.enqueue_trial(point)
    return study


MAPPING_KEYS = ("model.family_args", "model.optimizers")  # free-form mappings: the CLI replaces them whole


def cli_overrides(config: str, overrides: dict) -> list[str]:
    """`--key value` flags; a key inside a free-form mapping (model.optimizers.recurrent.lr) is merged into the
    config's mapping and the whole mapping passed, since the CLI would replace it rather than merge."""
    base = yaml.safe_load(Path(config).read_text()) or {}
    merged: dict[str, dict] = {}
    flags = []
    for key, value in overrides.items():
        parent = next((p for p in MAPPING_KEYS if key.startswith(p + ".")), None)
        if parent is None:
            flags += [f"--{key}", json.dumps(value)]
            continue
        if parent not in merged:
            node = base
            for part in parent.split("."):
                node = (node or {}).get(part, {})
            merged[parent] = json.loads(json.dumps(node or {}))
        node = merged[parent]
        *path, leaf = key[len(parent) + 1:].split(".")
        for part in path:
            node = node.setdefault(part, {})
        node[leaf] = value
    for parent, mapping in merged.items():
        flags += [f"--{parent}", json.dumps(mapping)]
    return flags


def fit_trial(config: str, overrides: dict, db: str, run_name: str, tags: list[str], extra: list[str]) -> int:
    """Run one trial as `ortholab fit` in its own process; the id of the run it recorded."""
    args = ["fit", "--config", config, "--db", db, "--name", run_name, "--tags", json.dumps(tags), *extra,
            *cli_overrides(config, overrides)]  # the trial's values last: they win over the shared flags
    done = subprocess.run([sys.executable, "-c", "from ortholab.training.cli import main; main()", *args],
                          capture_output=True, text=True)
    recorded = [r.id for r in Store(db).list_runs() if r.name == run_name and set(tags) <= set(r.tags)]
    if done.returncode != 0 or not recorded:
        last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit code {done.returncode}"
        raise RuntimeError(f"trial {run_name} failed: {last}")
    return recorded[0]


def run_sweep(config: str, space_file: str, trials: int, db: str | None = None, name: str | None = None,
              sampler: str = "tpe", seed: int = 0, workers: int = 1, extra: list[str] = ()) -> optuna.Study:
    """Run `trials` trials in all (shared by `workers` processes on this machine, and by any other worker started
    with the same name and store); the finished study."""
    db = db or default_db_url()
    Store(db)  # the run tables first: the store must be OrthoLab's before Optuna adds its own tables
    space = load_space(space_file)
    name = name or f"{Path(config).stem}-sweep"
    if sampler == "grid":
        trials = min(trials, len(grid_points(space)))
    study = open_study(name, db, sampler, space, seed)
    helpers = [subprocess.Popen([sys.executable, "-c", "from ortholab.training.cli import main; main()", "sweep",
                                 "--config", config, "--space", space_file, "--trials", str(trials), "--db", db,
                                 "--name", name, "--sampler", sampler, "--seed", str(seed + k + 1), *extra])
               for k in range(workers - 1)]

    def objective(trial: optuna.Trial) -> float:  # minimised: a metric to maximise enters negated
        overrides = suggest(trial, space)
        run_id = fit_trial(config, overrides, db, f"{name}-t{trial.number}",
                           [f"sweep:{name}", f"trial:{trial.number}"], list(extra))
        run = Store(db).get_run(run_id)
        trial.set_user_attr("run_id", run_id)
        if run.best is None:
            raise RuntimeError(f"run {run_id} recorded no {run.main_metric}")
        return run.best if run.main_metric_mode == "min" else -run.best

    started = tuple(s for s in optuna.trial.TrialState if s != optuna.trial.TrialState.WAITING)
    remaining = trials - len(study.get_trials(deepcopy=False, states=started))
    if remaining > 0:  # the callback stops every worker once `trials` trials have started in the shared study
        study.optimize(objective, n_trials=remaining, catch=(RuntimeError,),
                       callbacks=[optuna.study.MaxTrialsCallback(trials, states=started)])
    for helper in helpers:
        helper.wait()
    return study


def report(study: optuna.Study) -> str:
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    if not done:
        return f"sweep {study.study_name}: no trial completed"
    best = min(done, key=lambda t: t.value)
    params = ", ".join(f"{k}={v}" for k, v in best.params.items())
    failed = len(study.trials) - len(done)
    return (f"sweep {study.study_name}: {len(done)} trials completed" + (f", {failed} failed" if failed else "") +
            f"; best run {best.user_attrs['run_id']} (trial {best.number}, objective {best.value:.4g}) with {params}")
