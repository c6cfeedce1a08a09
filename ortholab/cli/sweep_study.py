"""`ortholab sweep`: grid, random or TPE search over config keys, coordinated by Optuna through the run store.

The study lives in the same database as the runs (Optuna's RDB storage on the store's URL), so workers on
several machines pointed at one PostgreSQL store join one sweep. Each trial is a normal `ortholab fit` in its
own process, recorded as a run tagged `sweep:<name>` and `trial:<number>`; the trial's value is the run's
best main metric.

Pruning (`--pruner median`, the default, as Optuna's own): while a trial trains, its validation points of the main
metric are read from the store and reported to Optuna; once at least PRUNE_STARTUP trials have completed, a trial
whose best so far is worse than the median of the completed trials' at the same step is stopped (SIGTERM: a
checkpoint, status interrupted), tagged `pruned`, and recorded as pruned in the study. `--pruner none` runs every
trial to its end.

Stopping (Ctrl-C, or SIGTERM to the sweep alone): the running trial stops at a batch boundary with its checkpoint
(cli/children.py), is recorded as failed with the user attribute `stopped`, and a copy of it with the same values
waits in the study; the same command again trains that copy (after any trial already waiting, such as a grid
sweep's points), and a stopped trial does not count toward `--trials`.

A space file maps dotted config keys to what to try:

    model.hidden_size: [64, 128]                              # choices (grid or sampled)
    model.family_args.rho: {low: 0.1, high: 0.7}              # a float range
    model.optimizers.recurrent.lr: {low: 1.0e-5, high: 1.0e-3, log: true}
    data.batch_size: {low: 10, high: 50, step: 10}            # an int range (int bounds)
    trainer.gradient_clip_val: {low: 0.5, high: 2.0, step: 0.5}  # a float range on a grid
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import os
import re
import signal
import socket
import subprocess
import sys
import time
import warnings
import zlib
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path

import numpy as np
import optuna
import yaml

from ortholab.cli import children
from ortholab.db import Store, default_db_url
from ortholab.db.logger import is_run_name
from ortholab.db.masking import child_env, mask_secrets, mask_url
from ortholab.db.sqlite_files import SQLITE_WAIT_S
from ortholab.errors import ConfigError
from ortholab.threads import threads_each
from ortholab.training.config_files import PACKAGE_ROOT, check_config_files, load_yaml

SAMPLERS = ("grid", "random", "tpe")
PRUNERS = ("median", "none")
PRUNE_STARTUP = 5  # completed trials before any is pruned (Optuna's MedianPruner default)
POLL_S = 2.0  # how often a running trial's validation points are read from the store
HEARTBEAT_S = 10  # how often a worker records that its running trial is alive (Optuna's heartbeat)
LOST_AFTER_S = 60  # a running trial with no heartbeat for this long lost its worker: the next worker trains a copy
PRUNED_TAG = "pruned"
STOPPED = "stopped"  # the user attribute of a trial Ctrl-C or SIGTERM stopped (its reason), and its run's tag
STARTED = tuple(s for s in optuna.trial.TrialState if s != optuna.trial.TrialState.WAITING)


SET_BY_SWEEP = ("name", "tags", "db")  # each trial's run name, its sweep:/trial: tags and the sweep's store
NOT_SETTINGS = ("runs_dir", "resume", "config", "print_config", "help")  # where and how a run goes, not what it is
RANGE_KEYS = {"low", "high", "step", "log"}
SPACE_EXAMPLE = "e.g. model.hidden_size: [64, 128] or model.optimizers.other.lr: {low: 1.0e-4, high: 1.0e-2, log: true}"


def load_space(path: str) -> dict:
    """The space file, checked key by key: one line naming the file, the key and the fix for anything else."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(
            f"--space {path}: cannot read it ({err.strerror}); give a YAML file ({SPACE_EXAMPLE})"
        ) from None
    except UnicodeDecodeError:
        raise ConfigError(f"--space {path}: not a text file (not UTF-8); give a YAML file ({SPACE_EXAMPLE})") from None
    try:
        space = load_yaml(text)  # the safe loader (a !!python tag is refused, never constructed); no key twice
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = " ".join((getattr(err, "problem", None) or str(err)).split())
        raise ConfigError(
            f"--space {path}: not valid YAML{where}: {problem}; a space holds plain YAML values only ({SPACE_EXAMPLE})"
        ) from None
    if not isinstance(space, dict) or not space:
        held = "nothing" if not space else f"a {type(space).__name__}"
        raise ConfigError(
            f"--space {path}: holds {held}; expected a mapping of config keys to choices or ranges ({SPACE_EXAMPLE})"
        )
    for key, value in space.items():
        if isinstance(value, dict):  # `1e-5`: text to YAML 1.1 (its floats need a dot: 1.0e-5), a number to the user
            space[key] = value = {k: _yaml_number(v) if k in RANGE_KEYS else v for k, v in value.items()}
        check_dimension(path, key, value)
    return space


_EXPONENT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def _yaml_number(value):
    """A number YAML 1.1 reads as text (an exponent without a dot: 1e-5) as the float it means; anything else as it
    is."""
    return float(value) if isinstance(value, str) and _EXPONENT.fullmatch(value.strip()) else value


def check_dimension(path: str, key, value) -> None:
    """One key of a space: a dotted config key with a non-empty list of plain choices or a numeric range."""
    # any other key is read by fit's parser before a trial runs (check_space_values), which names its own keys
    if not isinstance(key, str) or not key or key.split(".")[0] in (*SET_BY_SWEEP, *NOT_SETTINGS):
        raise ConfigError(
            f"--space {path}: {key!r} is not a setting a trial can vary (the sweep sets {', '.join(SET_BY_SWEEP)} "
            f"itself; {', '.join(NOT_SETTINGS[:2])} say where and how a run goes); keys are config keys as "
            f"`ortholab fit` takes them ({SPACE_EXAMPLE})"
        )
    if isinstance(value, list):
        if not value:
            raise ConfigError(f"--space {path}: {key} is an empty list; give at least one choice")
        bad = next((v for v in value if v is not None and not isinstance(v, (bool, int, float, str))), None)
        if bad is not None:
            raise ConfigError(
                f"--space {path}: {key} has the choice {bad!r}; choices are numbers, strings, booleans "
                f"or null (for a mapping, sweep its keys: {key}.<option>: [...])"
            )
        return
    if not isinstance(value, dict):
        raise ConfigError(f"--space {path}: {key} = {value!r}; give a list of choices or {{low: .., high: ..}}")
    unknown = sorted(set(value) - RANGE_KEYS, key=str)
    if unknown or not {"low", "high"} <= set(value):
        raise ConfigError(
            f"--space {path}: {key} = {value!r}; a range has low and high (and optionally step or "
            f"log: true), {'not ' + repr(unknown[0]) if unknown else 'both'}"
        )
    low, high, step, log = value["low"], value["high"], value.get("step"), value.get("log", False)
    for name, bound in (("low", low), ("high", high)):
        if not _finite_number(bound):
            raise ConfigError(f"--space {path}: {key}.{name} = {bound!r} must be a finite number")
    if low > high:
        raise ConfigError(f"--space {path}: {key} has low = {low} above high = {high}; swap them")
    if not isinstance(log, bool):
        raise ConfigError(f"--space {path}: {key}.log = {log!r} must be true or false")
    if log and low <= 0:
        raise ConfigError(f"--space {path}: {key} samples on a log scale from low = {low}; low must be positive")
    if step is not None and (not _finite_number(step) or step <= 0 or log):
        raise ConfigError(f"--space {path}: {key}.step = {step!r} must be a positive number, and not with log: true")


def _finite_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def resolve_config(config: str) -> Path:
    """The sweep's --config: a file here, else one installed with OrthoLab (`ortholab list configs` names)."""
    for candidate in (Path(config), PACKAGE_ROOT / config):
        if candidate.is_file():
            return candidate
    raise ConfigError(
        f"--config {config}: no such file; give the config every trial starts from (`ortholab list "
        f"configs` shows the installed ones)"
    )


def suggest(trial: optuna.Trial, space: dict) -> dict:
    """One value per key: a choice from a list, else a float range, or an int range when both bounds (and the step)
    are ints (on a log scale too: `model.hidden_size: {low: 32, high: 256, log: true}` drew 100.18, which every
    trial refused)."""
    values = {}
    for key, spec in space.items():
        if isinstance(spec, list):
            values[key] = trial.suggest_categorical(key, spec)
        elif all(isinstance(spec.get(k, 1), int) for k in ("low", "high", "step")):  # `log: true` too: ints on a log
            values[key] = trial.suggest_int(
                key, spec["low"], spec["high"], step=spec.get("step", 1), log=bool(spec.get("log"))
            )
        else:
            values[key] = trial.suggest_float(
                key, spec["low"], spec["high"], step=spec.get("step"), log=bool(spec.get("log"))
            )
    return values


MAX_GRID_POINTS = 10_000  # each a waiting trial in the study's store, enqueued when the study is made


def grid_points(space: dict) -> list[dict]:
    """Every combination of the choices, for `--sampler grid`: a list's, or a range's grid from low by step to high
    (an int range's step 1 unless given). A grid of more than MAX_GRID_POINTS is refused before any is made."""
    axes = {key: grid_values(key, spec) for key, spec in space.items()}
    if (size := math.prod(len(values) for values in axes.values())) > MAX_GRID_POINTS:
        counts = " x ".join(f"{key} {len(values)}" for key, values in axes.items())
        raise ConfigError(
            f"--sampler grid: the space is a grid of {size} points ({counts}), more than {MAX_GRID_POINTS}; give "
            "coarser steps or fewer choices, or use random or tpe"
        )
    return [dict(zip(axes, values)) for values in itertools.product(*axes.values())]


def grid_values(key: str, spec) -> list:
    """A key's values on the grid: a list as it is; a range low, low + step, ... up to high, counted in decimals
    (0.1 + 2 * 0.1 is 0.3 here, as written, not 0.30000000000000004); one of more than MAX_GRID_POINTS values is
    refused before they are made."""
    if isinstance(spec, list):
        return spec
    low, high, step = spec["low"], spec["high"], spec.get("step")
    ints = all(isinstance(v, int) for v in (low, high, step if step is not None else 1))
    if spec.get("log") or (step is None and not ints):
        raise ConfigError(
            f"--sampler grid needs lists of choices or ranges with a step; {key} is a "
            f"{'log-scale' if spec.get('log') else 'continuous'} range (give step, a list, or use random or tpe)"
        )
    first, by = Decimal(str(low)), Decimal(str(step or 1))
    count = int((Decimal(str(high)) - first) / by) + 1
    if count > MAX_GRID_POINTS:
        raise ConfigError(
            f"--sampler grid: {key} has {count} values from {low} to {high} by {step or 1}, more than "
            f"{MAX_GRID_POINTS}; give a coarser step, or use random or tpe"
        )
    return [(int if ints else float)(first + k * by) for k in range(count)]


def make_pruner(kind: str) -> optuna.pruners.BasePruner:
    if kind not in PRUNERS:
        raise ConfigError(f"--pruner {kind!r}: choose one of {', '.join(PRUNERS)}")
    return (
        optuna.pruners.MedianPruner(n_startup_trials=PRUNE_STARTUP) if kind == "median" else optuna.pruners.NopPruner()
    )


class _SaidAlready(logging.Filter):
    """Optuna's two warnings for a trial whose objective returned NaN ('Trial 1 failed with value nan.'): the sweep's
    own line said why (failed, or stopped and waiting to be trained again). An exception's warning stays."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        ours = "The value nan is not acceptable" in text or text.endswith("failed with value nan.")
        return record.exc_info is not None or not (text.startswith("Trial ") and ours)


def quiet_failed_trials() -> None:
    optimize = logging.getLogger("optuna.study._optimize")  # where Optuna logs a failed trial
    if not any(isinstance(f, _SaidAlready) for f in optimize.filters):
        optimize.addFilter(_SaidAlready())


def make_sampler(kind: str, seed: int) -> optuna.samplers.BaseSampler:
    """TPE for `tpe`; random draws for `random` and for a grid's trials beyond its enqueued points."""
    return optuna.samplers.TPESampler(seed=seed) if kind == "tpe" else optuna.samplers.RandomSampler(seed=seed)


def joining_seed(seed: int, held: int) -> int:
    """The sampler seed of a command joining a study that holds `held` trials: mixed with them and with this process
    (host and PID), since --seed alone would redraw the values the study's first command drew (walk-through 7: a
    continued sweep trained two of its four trials again), and two machines joining at once would draw alike."""
    process = zlib.crc32(socket.gethostname().encode()), os.getpid()
    return int(np.random.SeedSequence([seed, held, *process]).generate_state(1)[0])


class _HeartbeatStorage(optuna.storages.RDBStorage):
    """Optuna's RDBStorage whose heartbeat outlives a write that fails (a SQLite lock held past SQLITE_WAIT_S, a
    dropped connection): Optuna's heartbeat thread ended at its first exception, so LOST_AFTER_S later another worker
    failed the live trial as lost (its run tagged `stopped`, its copy trained) and this worker ended in Optuna's
    `ValueError: Cannot tell a FAIL trial`. A failed beat is tried again HEARTBEAT_S later."""

    def record_heartbeat(self, trial_id: int) -> None:
        from sqlalchemy.exc import SQLAlchemyError

        try:
            super().record_heartbeat(trial_id)
        except (optuna.exceptions.StorageInternalError, SQLAlchemyError):
            pass  # the next beat; a lapse of LOST_AFTER_S would be a lost worker


def study_storage(db: str) -> optuna.storages.RDBStorage:
    """Optuna's storage on the store's URL, with a heartbeat for each running trial (lost_trial: a worker killed with
    -9 left its trial RUNNING for ever, counted toward --trials and never trained; the next worker fails it and
    trains a copy). On SQLite each of its transactions takes the write lock as it begins (BEGIN IMMEDIATE): Optuna
    takes a waiting grid point by reading its state, then writing RUNNING, and SQLite ignores the FOR UPDATE that
    serialises this on PostgreSQL, so two workers could both read it waiting and both train it (the second then
    failed: "Cannot tell a COMPLETE trial")."""
    sqlite = db.startswith("sqlite")
    engine = {"connect_args": {"timeout": SQLITE_WAIT_S}} if sqlite else None
    heartbeat = {"heartbeat_interval": HEARTBEAT_S, "grace_period": LOST_AFTER_S}

    def lost(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        lost_trial(db, study, trial)

    with warnings.catch_warnings():  # Optuna calls the heartbeat experimental, on stderr
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        try:
            storage = _HeartbeatStorage(db, engine_kwargs=engine, **heartbeat, heartbeat_stale_trial_callback=lost)
        except TypeError:  # Optuna before 4.9 names it failed_trial_callback
            storage = _HeartbeatStorage(db, engine_kwargs=engine, **heartbeat, failed_trial_callback=lost)
    if not sqlite:
        return storage
    from sqlalchemy import event

    @event.listens_for(storage.engine, "connect")
    def _own_transactions(dbapi_connection, _record) -> None:  # pysqlite's own BEGIN would be deferred
        dbapi_connection.isolation_level = None

    @event.listens_for(storage.engine, "begin")
    def _immediate(connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    storage.engine.dispose()  # the connections opened before the listeners: new ones take them
    return storage


def lost_trial(db: str, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
    """A trial whose worker stopped beating (killed with -9, its machine gone), which Optuna has just failed: a copy
    with its values waits in the study (as a stopped trial's does; the copy counts toward --trials, not it), and its
    run, if it recorded one, is tagged `stopped` (the dashboard counts it apart and never names it the best). A run
    that had finished with its value recorded (the worker was killed after its fit ended) is kept instead (_keep_run):
    nothing is trained again, and the run is not tagged."""
    name = f"{study.study_name}-t{trial.number}"
    runs = [r for r in Store(db, access="read").list_runs() if r.name == name and f"trial:{trial.number}" in r.tags]
    kept = _keep_run(db, study, trial, runs[0]) if runs and runs[0].status == "finished" else None
    if kept is not None:
        print(
            f"sweep {study.study_name}: trial {trial.number} (run {runs[0].id}, finished) lost its worker (no "
            f"heartbeat for {LOST_AFTER_S} s) after its run had finished; its best {kept} is kept as the trial's "
            "result, nothing is trained again",
            flush=True,
        )
        return
    _waiting_copy(study, trial)
    where = "nothing recorded"
    if runs:
        run = runs[0]
        reason = {}
        if run.status != "finished":  # its reason said `fit --resume ID`; the sweep trains a copy of the trial instead
            reason["reason"] = (
                f"its worker of sweep {study.study_name} was lost: the same sweep command trains this trial's values "
                f"again as a new run (`ortholab fit --resume {run.id}` goes on with this one outside the sweep)"
            )
        Store(db, access="write").update_run(run.id, tags=[*run.tags, STOPPED], **reason)
        where = f"run {run.id}, {run.status}"
    print(
        f"sweep {study.study_name}: trial {trial.number} ({where}) lost its worker (no heartbeat for "
        f"{LOST_AFTER_S} s); its values wait to be trained again",
        flush=True,
    )


KEPT = "kept"  # the user attribute of a completed trial holding a lost trial's finished run (retry_of: its number)


def _keep_run(db: str, study: optuna.Study, frozen: optuna.trial.FrozenTrial, run) -> str | None:
    """A completed trial standing in for the lost trial `frozen`, whose run had finished: its values, its reported
    points (the pruner compares with them) and the value its objective would have returned (scored_run). Its
    `retry_of` counts it as the lost trial's copy (started_trials, summary_line), trained already. The kept value
    ('val/loss 0.4'), or None for a run without one (its copy trains, as the objective would have failed it)."""
    try:
        scored = scored_run(db, run.id, f"{study.study_name}-t{frozen.number}")
    except TrialFailed:
        return None
    study.add_trial(
        optuna.trial.create_trial(
            state=optuna.trial.TrialState.COMPLETE,
            value=objective_value(scored),
            params=frozen.params,
            distributions=frozen.distributions,
            user_attrs={
                **frozen.user_attrs,
                "run_id": run.id,
                **score_attrs(scored),
                "retry_of": frozen.number,
                KEPT: True,
            },
            system_attrs={**frozen.system_attrs, "retry_of": frozen.number},
            intermediate_values=frozen.intermediate_values,
        )
    )
    return f"{scored.main_metric} {scored.best:.4g}"


def open_study(
    name: str, db: str, kind: str, space: dict, seed: int, pruner: str = "median", flags: list[str] = ()
) -> optuna.Study:
    """Create the study, or join it. Its creator enqueues a grid's points, so that concurrent workers take each
    point exactly once (Optuna's GridSampler may repeat points across workers), and records the space and the
    flags every trial gets, which a later command joining it is compared with."""
    chosen = make_pruner(pruner)
    plan = {"space": json.loads(json.dumps(space)), "flags": [t for f in flags for t in f.split("=", 1)]}  # --k=v
    try:
        sampler = make_sampler(kind, seed)
        storage = study_storage(db)
        study = optuna.create_study(
            study_name=name, storage=storage, sampler=sampler, pruner=chosen, direction="minimize"
        )
    except optuna.exceptions.DuplicatedStudyError:
        study = optuna.load_study(study_name=name, storage=storage, pruner=chosen)
        study.sampler = make_sampler(kind, joining_seed(seed, len(study.get_trials(deepcopy=False))))
        changed = [what for what, value in plan.items() if study.user_attrs.get(what, value) != value]
        if changed:  # e.g. a wider range, or --trainer.max_steps 10 where the earlier trials trained 20
            said = {"space": "another space", "flags": "other flags"}
            flags = mask_secrets(" ".join(study.user_attrs.get("flags") or ())) or "none"  # a URL's password: ***
            earlier = flags if "flags" in changed else ""
            print(
                f"warning: sweep {name}: the study's earlier trials had {' and '.join(said[c] for c in changed)} "
                f"than this command gives{f' (their flags: {earlier})' if earlier else ''}; their values are ranked "
                f"with these (--name NEW starts a study of its own)",
                flush=True,
            )
        return study
    for what, value in plan.items():
        study.set_user_attr(what, value)
    if kind == "grid":
        for point in grid_points(space):
            study.enqueue_trial(point)
    return study


def cli_overrides(overrides: dict) -> list[str]:
    """A trial's values as `--key value` flags. A key inside a free-form mapping (model.optimizers.recurrent.lr) stays
    a dotted flag: fit merges it into the mapping the config and the earlier flags built (training/mapping_flags.py), so
    that the sweep's own flags inside it (--model.family_args.init zeros) hold in every trial."""
    return [token for key, value in overrides.items() for token in (f"--{key}", _flag_value(value))]


def _flag_value(value) -> str:
    """A value as the command line gives it: text as it is where YAML reads it back as that text (jsonargparse keeps
    the quotes of '"zeros"' for a free-form mapping's entry and a str option), anything else as JSON."""
    if isinstance(value, str):
        try:
            if yaml.safe_load(value) == value:
                return value
        except yaml.YAMLError:
            pass
    return json.dumps(value)


def trial_args(config: str, overrides: dict, run_name: str, tags: list[str], extra: list[str]) -> list[str]:
    """The `ortholab fit` arguments of one trial: the config, the sweep's flags, then the trial's values (they win)."""
    return [
        "fit",
        "--config",
        config,
        "--name",
        run_name,
        "--tags",
        json.dumps(tags),
        *extra,
        *cli_overrides(overrides),
    ]


def _with_threads(env: dict, threads: int | None) -> dict:
    """env with OMP_NUM_THREADS (torch's, OpenMP's and numba's threads in the child) where `threads` is given."""
    return env if threads is None else {**env, "OMP_NUM_THREADS": str(threads)}


def fit_trial(
    config: str,
    overrides: dict,
    db: str,
    run_name: str,
    tags: list[str],
    extra: list[str],
    trial: optuna.Trial | None = None,
    threads: int | None = None,
) -> int:
    """Run one trial as `ortholab fit` in its own process; the id of the run it recorded. The store's URL goes to
    the child through its environment: a password on its command line would be readable by every local user.
    With `trial`, its validation points are reported to the study as they come, and a trial the pruner stops
    raises optuna.TrialPruned after its run is stopped and tagged `pruned`. TrialStopped when Ctrl-C or SIGTERM
    stopped the sweep before the run finished (or before it started). `threads`: its OMP_NUM_THREADS where given."""
    args = trial_args(config, overrides, run_name, tags, extra)
    with _scratch() as errors_file:
        child = children.start(
            [*children.ORTHOLAB, *args],
            env={**_with_threads(child_env(db), threads), children.PARENT_ENV: str(os.getpid())},
            stdout=subprocess.DEVNULL,
            stderr=errors_file,
        )
        if child is None:
            raise TrialStopped(f"trial {run_name}: not started, the sweep was stopped ({children.stop_name()})")
        pruned = _watch(child, db, run_name, tags, trial) if trial is not None else False
        code = children.wait(child)
        errors_file.seek(0)
        stderr = errors_file.read()
    recorded = [r.id for r in Store(db).list_runs() if r.name == run_name and set(tags) <= set(r.tags)]
    if pruned and recorded and Store(db).get_run(recorded[0]).status == "finished":  # it ended before the stop came
        pruned = False
    if pruned and recorded:
        store = Store(db, access="write")
        store.update_run(recorded[0], tags=[*store.get_run(recorded[0]).tags, PRUNED_TAG])
        run = Store(db).get_run(recorded[0])
        best = f", best {run.main_metric} {run.best:.4g}" if run.best is not None else ""
        print(
            f"sweep {tags[0].removeprefix('sweep:')}: trial {run_name.rpartition('-t')[2]} is run {run.id}, pruned "
            f"at step {pruned}{best}",
            flush=True,
        )
        raise optuna.TrialPruned(f"trial {run_name}: pruned at step {pruned}")
    if children.stopped_by() and not (recorded and Store(db).get_run(recorded[0]).status == "finished"):
        where = f"run {recorded[0]} stopped with a checkpoint" if recorded else "nothing recorded"
        stopped = recorded and Store(db).get_run(recorded[0]).status == "interrupted"  # a failure keeps its reason
        if stopped:  # its reason said `fit --resume ID`; the sweep itself trains a copy of the trial instead
            sweep = tags[0].removeprefix("sweep:")
            store = Store(db, access="write")
            store.update_run(
                recorded[0],
                tags=[*store.get_run(recorded[0]).tags, STOPPED],  # the dashboard counts its copy, not it
                reason=f"stopped with sweep {sweep} by {children.stop_name()}: the same sweep command trains this "
                f"trial's values again as a new run (`ortholab fit --resume {recorded[0]}` goes on with this one "
                "outside the sweep)",
            )
        raise TrialStopped(f"trial {run_name}: stopped by {children.stop_name()} ({where})")
    if code != 0 or not recorded:
        errors = [line for line in stderr.splitlines() if line.startswith("ortholab: error:")]
        last = (errors or stderr.strip().splitlines() or [f"exit code {code}"])[-1]
        why = last.removeprefix("ortholab: error: ").replace("(on the command line)", "(given to the trial)")
        raise TrialFailed(f"trial {run_name} failed: {mask_secrets(why)}")  # its flags: the space's or the sweep's
    return recorded[0]


def _scratch():
    import tempfile

    return tempfile.TemporaryFile("w+")  # the child's stderr: a pipe left unread could fill and stall it


def _watch(child: subprocess.Popen, db: str, run_name: str, tags: list[str], trial: optuna.Trial) -> int | bool:
    """Report the trial's validation points to the study while it trains; stop it when the pruner says so. The
    step it was stopped at, or False when it ran to its end."""
    reported: set[int] = set()
    store = Store(db, access="read")  # one reader for the trial's whole life, not an engine per poll
    while child.poll() is None:
        time.sleep(POLL_S)
        runs = [r for r in store.list_runs() if r.name == run_name and set(tags) <= set(r.tags)]
        if not runs or not runs[0].main_metric:
            continue
        run = runs[0]
        sign = 1.0 if run.main_metric_mode == "min" else -1.0  # the study minimises
        for point in store.metric_series(run.id, run.main_metric):
            if point.step not in reported and math.isfinite(point.value):
                reported.add(point.step)
                try:
                    trial.report(sign * point.value, point.step)
                except optuna.exceptions.UpdateFinishedTrialError:  # another worker took the trial as lost
                    child.send_signal(signal.SIGTERM)  # its copy trains again; this run stops with its checkpoint
                    store.close()
                    return False  # the objective says so (TakenAsLost)
        last = store.run_plan(run.id).get("total_steps")  # a point at the run's last step: training is over
        ended = last is not None and max(reported, default=0) >= last
        if reported and not ended and not children.stopped_by() and trial.should_prune():
            child.send_signal(signal.SIGTERM)  # a checkpoint, then status interrupted (training/callbacks)
            store.close()
            return max(reported)
    store.close()
    return False


class TrialFailed(RuntimeError):
    """A trial's run could not be trained or recorded; the message is its one-line reason."""


class TrialStopped(RuntimeError):
    """Ctrl-C or SIGTERM stopped the sweep while this trial trained (or before it started); the message says so."""


class TakenAsLost(BaseException):
    """Another worker failed this worker's trial as lost while this one was silent for LOST_AFTER_S (suspended with
    Ctrl-Z, a laptop asleep, a paused VM; lost_trial tagged its run `stopped` and queued a copy); the message says so.
    Not an Exception: Optuna's optimize tells the study the outcome of any Exception its objective raises (`catch`
    is read after that), and telling a finished trial ended the sweep in `ValueError: Cannot tell a FAIL trial`. This
    one leaves optimize before the tell, and optimize_trials goes on with the sweep's remaining trials."""


def _check_not_taken(trial: optuna.Trial, db: str) -> None:
    """TakenAsLost where the trial is no longer running: only lost_trial finishes a trial while its objective runs."""
    if not trial.storage.get_trial(trial._trial_id).state.is_finished():
        return
    name = f"{trial.study.study_name}-t{trial.number}"
    runs = [r.id for r in Store(db, access="read").list_runs() if r.name == name and f"trial:{trial.number}" in r.tags]
    where, kept = (f"run {runs[0]}", "its run is kept, ") if runs else ("nothing recorded", "")
    trials = trial.study.get_trials(deepcopy=False)
    if any(t.user_attrs.get(KEPT) and t.user_attrs.get("retry_of") == trial.number for t in trials):
        kept, again = "", "its finished run's value is kept as the trial's result"  # lost_trial found it finished
    else:
        again = "its copy trains again"
    raise TakenAsLost(
        f"trial {trial.number} ({where}) was taken as lost by another worker while this one was silent for more than "
        f"{LOST_AFTER_S} s; {kept}{again}"
    )


def _try_again_later(trial: optuna.Trial) -> None:
    """A waiting copy of a stopped trial, with its values: the sweep's next `optimize` trains it (as Optuna's
    RetryFailedTrialCallback makes one; its system attributes keep a grid sweep's point)."""
    frozen = next(t for t in trial.study.get_trials(deepcopy=False) if t.number == trial.number)
    _waiting_copy(trial.study, frozen)


def _waiting_copy(study: optuna.Study, frozen: optuna.trial.FrozenTrial) -> None:
    study.add_trial(
        optuna.trial.create_trial(
            state=optuna.trial.TrialState.WAITING,
            params=frozen.params,
            distributions=frozen.distributions,
            user_attrs={"retry_of": frozen.number},
            system_attrs={**frozen.system_attrs, "retry_of": frozen.number},
        )
    )


def _retried(trials) -> set[int]:
    """The trials a copy trains again (a stopped one, one whose worker was lost)."""
    return {t.user_attrs["retry_of"] for t in trials if "retry_of" in t.user_attrs}


def started_trials(study: optuna.Study) -> int:
    """The trials that count toward `--trials`: every one started, but a stopped one (its waiting copy counts once
    it starts), and one whose worker was lost (its copy counts)."""
    trials = study.get_trials(deepcopy=False)
    retried = _retried(trials)
    return sum(t.state in STARTED and STOPPED not in t.user_attrs and t.number not in retried for t in trials)


def run_sweep(
    config: str,
    space_file: str,
    trials: int,
    db: str | None = None,
    name: str | None = None,
    sampler: str = "tpe",
    seed: int = 0,
    workers: int = 1,
    extra: list[str] = (),
    pruner: str = "median",
) -> optuna.Study:
    """Run `trials` trials in all (shared by `workers` processes on this machine, and by any other worker started
    with the same name and store); the finished study. ConfigError when no trial of the sweep completed."""
    if trials < 1 or workers < 1:
        key, value = ("--trials", trials) if trials < 1 else ("--workers", workers)
        raise ConfigError(f"{key} {value}: give a positive number")
    config = str(resolve_config(config))
    check_config_files(["--config", config])  # a YAML mapping, named in one line otherwise
    space = load_space(space_file)
    name = name or f"{Path(config).stem}-sweep"
    if not is_run_name(f"{name}-t0"):  # each trial's run is named NAME-tN: one folder name under the runs folder
        raise ConfigError(
            f"--name {name!r}: the trials' runs are named {name}-t0, -t1, ...: one folder name each, letters and "
            "digits of any script and punctuation without spaces or '/'"
        )
    if sampler == "grid" and trials > (points := len(grid_points(space))):
        print(f"sweep {name}: the grid has {points} points, so --trials {trials} trains {points}", flush=True)
        trials = points
    if workers > trials:  # a worker with no trial to take would only start, check and wait
        print(f"sweep {name}: --workers {workers} for {trials} trials starts {trials}", flush=True)
        workers = trials
    if os.environ.get(WORKER_ENV) != "1":  # the worker's starter read them already
        check_space_values(config, space, space_file, extra)  # a refused space or flag leaves no new store behind
    store = Store(db or default_db_url())  # OrthoLab's tables first, before Optuna adds its own
    if store.created:  # a first sweep, or a mistyped --db (the trials' own note goes where their output goes)
        print(f"New run store {mask_url(store.url)}: nothing was recorded there before.", flush=True)
    db = store.url  # a file's path as the URL Optuna and the trials take
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # a line per trial is ours (its run and best value)
    quiet_failed_trials()
    study = open_study(name, db, sampler, space, seed, pruner, flags=list(extra))
    fail_lost_trials(study)  # before --trials is counted (Optuna checks again as each trial starts)
    say_continued(study, trials)
    threads = threads_each(workers) if workers > 1 else None  # each worker's trials get their share of the cores
    helpers = start_workers(workers - 1, config, space_file, trials, name, sampler, seed, pruner, extra, db, threads)

    def objective(trial: optuna.Trial) -> float:  # minimised: a metric to maximise enters negated
        overrides = suggest(trial, space)
        try:
            run_id = fit_trial(
                config,
                overrides,
                db,
                f"{name}-t{trial.number}",
                [f"sweep:{name}", f"trial:{trial.number}"],
                list(extra),
                trial,
                threads,
            )
            trial.set_user_attr("run_id", run_id)
            run = scored_run(db, run_id, f"{name}-t{trial.number}")
            for key, value in score_attrs(run).items():
                trial.set_user_attr(key, value)
            print(
                f"sweep {name}: trial {trial.number} is run {run_id}, best {run.main_metric} {run.best:.4g}", flush=True
            )
        except TrialFailed as failure:  # recorded with the trial (every worker sees it); NaN marks it failed
            trial.set_user_attr("error", str(failure))
            print(f"ortholab sweep: {failure}", file=sys.stderr, flush=True)
            return math.nan
        except TrialStopped as stop:  # failed too, but not counted: its copy waits for the same command again
            trial.set_user_attr(STOPPED, str(stop))
            _try_again_later(trial)
            print(f"ortholab sweep: {stop}", file=sys.stderr, flush=True)
            trial.study.stop()
            return math.nan
        return objective_value(run)

    optimize_trials(study, objective, trials, db)
    for helper in helpers:
        if helper is not None:
            children.wait(helper)
    if not children.stopped_by() and os.environ.get(WORKER_ENV) != "1":  # the starter says it, once
        check_completed(study)
    return study


def optimize_trials(study: optuna.Study, train, trials: int, db: str) -> None:
    """Optuna's optimize with `train` as the objective until `trials` trials of the shared study count toward
    --trials, or a stop; a trial another worker took as lost while this one was silent (TakenAsLost) is one line, and
    the sweep goes on (its copy counts toward --trials, not it)."""

    def objective(trial: optuna.Trial) -> float:
        try:
            value = train(trial)
        except Exception:  # e.g. UpdateFinishedTrialError: its run id cannot be kept with a trial failed as lost
            _check_not_taken(trial, db)
            raise
        _check_not_taken(trial, db)
        return value

    def enough(study: optuna.Study, _) -> None:  # stops every worker once `trials` have started in the shared study
        if started_trials(study) >= trials:
            study.stop()

    remaining = trials - started_trials(study)
    while remaining > 0 and not children.stopped_by():
        try:
            study.optimize(objective, n_trials=remaining, callbacks=[enough])
            return
        except TakenAsLost as taken:
            print(f"sweep {study.study_name}: {taken}", flush=True)
            remaining = trials - started_trials(study)


def start_workers(
    count: int,
    config: str,
    space_file: str,
    trials: int,
    name: str,
    sampler: str,
    seed: int,
    pruner: str,
    extra: list[str],
    db: str,
    threads: int | None,
) -> list:
    """`count` more `ortholab sweep` processes joining this sweep, each with its own sampler seed (None for one a stop
    came before); the store's URL goes in their environment, not on their command line."""
    return [
        children.start(
            [
                *children.ORTHOLAB,
                "sweep",
                "--config",
                config,
                "--space",
                space_file,
                "--trials",
                str(trials),
                "--name",
                name,
                "--sampler",
                sampler,
                "--seed",
                str(seed + k + 1),
                "--pruner",
                pruner,
                *extra,
            ],
            env={**_with_threads(child_env(db), threads), WORKER_ENV: "1"},
        )
        for k in range(count)
    ]


WORKER_ENV = "ORTHOLAB_SWEEP_WORKER"  # set in a worker `sweep` starts: the sweep's own summary is the starter's


def scored_run(db: str, run_id: int, trial_name: str):
    """The trial's run, which recorded its best main metric; TrialFailed saying why not where it did not (fit's own
    note about it went where a trial's output goes)."""
    store = Store(db, access="read")
    run = store.get_run(run_id)
    if run.best is not None:
        return run
    why = f"trial {trial_name}: run {run_id} recorded no {run.main_metric}"
    validated = store.metric_series(run_id, run.main_metric)  # its points, NaN ones too
    if run.status == "finished" and not validated:
        why += (
            f" (no validation ran in its {run.steps} steps: a smaller --trainer.val_check_interval, or "
            f"--trainer.check_val_every_n_epoch, validates sooner)"
        )
    elif run.status == "finished":
        why += f" (none of its {len(validated)} validation values was finite)"
    raise TrialFailed(why)


def objective_value(run) -> float:
    """A scored run's value in the study, which minimises: its best main metric, negated for one to maximise."""
    return run.best if run.main_metric_mode == "min" else -run.best


def score_attrs(run) -> dict:
    """The user attributes of a scored run's trial: its metric's name and sign (the report names the metric in its
    own sign, not the negated objective)."""
    return {"metric": run.main_metric, "sign": 1 if run.main_metric_mode == "min" else -1}


def fail_lost_trials(study: optuna.Study) -> None:
    """Fail the study's running trials whose worker stopped beating (lost_trial makes each a waiting copy)."""
    with warnings.catch_warnings():  # Optuna calls it experimental
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)


def say_continued(study: optuna.Study, trials: int) -> None:
    """A sweep of this name ran in the store before: say so, and that `--trials` counts its trials."""
    if os.environ.get(WORKER_ENV) == "1":  # a worker this sweep started joins its starter's study: it said so if so
        return
    waiting = optuna.trial.TrialState.WAITING  # a new grid study holds its points as waiting trials
    if any(t.state != waiting for t in study.get_trials(deepcopy=False)) and started_trials(study) < trials:
        so_far = summary_line(study).removeprefix("sweep: ")
        print(
            f"sweep {study.study_name}: continuing the study of that name in the store ({so_far}); --trials {trials} "
            f"counts its trials (--name NEW starts another)",
            flush=True,
        )


def check_points(space: dict) -> list[dict]:
    """Points of the space whose values, together, hold every choice of every list and both ends of every range
    (as many points as the longest list, the first one the first values; shorter lists repeat their last choice):
    each value a trial can draw is read once before any trial."""
    count = max((len(spec) if isinstance(spec, list) else 2) for spec in space.values())
    points = []
    for j in range(count):
        point = {
            key: spec[min(j, len(spec) - 1)] if isinstance(spec, list) else _range_end(spec, j)
            for key, spec in space.items()
        }
        if point not in points:
            points.append(point)
    return points


def _range_end(spec: dict, j: int):
    """A range's low for the first point, else the highest value its sampler can draw (high on its step's grid)."""
    if j == 0:
        return spec["low"]
    if spec.get("step") is None:
        return spec["high"]
    ints = all(isinstance(spec[k], int) for k in ("low", "high", "step"))
    grid = optuna.distributions.IntDistribution if ints else optuna.distributions.FloatDistribution
    with warnings.catch_warnings():  # that it rounds high down is said by the trial's own draw
        warnings.simplefilter("ignore", UserWarning)
        return grid(spec["low"], spec["high"], step=spec["step"]).high  # Optuna rounds high down to the step's grid


def check_space_values(config: str, space: dict, space_file: str, extra: list[str]) -> None:
    """The space's keys, every value of its lists and both ends of its ranges, and the extra flags, read as a trial
    reads them before any trial (children.read_fit_args, side by side up to the cores): a typo
    (`model.family_args.rhoo`, `--model.hiden_size`, a misspelt family among the choices) is one line, and no failed
    trial joins the study."""
    points = check_points(space)
    argvs = [["--config", config, *extra, *cli_overrides(point)] for point in points]  # as trial_args orders them
    workers = max(1, min(len(argvs), os.cpu_count() or 1, 4))  # each read imports torch: a few hundred MB
    with ThreadPoolExecutor(max_workers=workers) as pool:
        reads = list(pool.map(children.read_fit_args, argvs))
    for j, (point, (why, printed)) in enumerate(zip(points, reads)):
        why = why or children.validates_nothing(printed, "no trial would record the metric it is scored by")
        if why:
            why = _placed(why, space, space_file)
            values = "first values" if j == 0 else "values " + ", ".join(f"{k} = {v}" for k, v in point.items())
            raise ConfigError(f"{why} (read with {space_file}'s {values} and the flags given to sweep; no trial ran)")


def _placed(why: str, space: dict, space_file: str) -> str:
    """fit's reason with '(on the command line)' after a key of the space said as '(in SPACE_FILE)': the space's
    typo `model.hiden_size` read 'unknown config key model.hiden_size (on the command line)', where none was typed.
    A flag given to sweep stays 'on the command line'."""
    place = "(on the command line)"
    at = why.find(place)
    if at < 0:
        return why
    before = why[:at]
    named = [m.end() for key in space for m in re.finditer(rf"(?<![\w.]){re.escape(key)}(?![\w.])", before)]
    flags = [m.end() for m in re.finditer(r"(?<![\w.])[A-Za-z_]\w*(?:\.\w+)+(?![\w.])", before)]
    if named and max(named) >= max(flags, default=0):  # the key right before the place is the space's
        return f"{before}(in {space_file}){why[at + len(place) :]}"
    return why


def check_completed(study: optuna.Study) -> None:
    """Refuse a sweep none of whose trials completed, with the first trial's reason (exit code 2, not 0)."""
    trials = study.get_trials(deepcopy=False)
    if any(t.state == optuna.trial.TrialState.COMPLETE for t in trials):
        return
    failed = [t for t in trials if t.state == optuna.trial.TrialState.FAIL]
    reason = next((t.user_attrs["error"] for t in failed if "error" in t.user_attrs), "no reason recorded")
    print(summary_line(study), flush=True)  # the script-friendly last line of stdout, as after a sweep that ran
    raise ConfigError(
        f"sweep {study.study_name}: none of its {len(trials)} trials completed; the first failure: {reason}"
    )


def summary_line(study: optuna.Study) -> str:
    """`sweep: N trials done, N failed, N pruned[, N stopped][, N lost]`: the line a script reads (the last of the
    command's output); a stopped trial, or one whose worker was lost, is not among the failed ones, and counts as
    stopped (lost) until its copy has been trained (the copy is then counted as done, failed or pruned)."""
    trials = study.get_trials(deepcopy=False)
    retried = _retried(trials)
    State = optuna.trial.TrialState
    failed = sum(t.state == State.FAIL and STOPPED not in t.user_attrs and t.number not in retried for t in trials)
    trained_again = {t.user_attrs.get("retry_of") for t in trials if t.state in STARTED}
    waiting = [t for t in trials if t.state == State.FAIL and t.number in retried - trained_again]
    stopped = sum(STOPPED in t.user_attrs for t in waiting)
    lost = len(waiting) - stopped
    done, pruned = (sum(t.state == state for t in trials) for state in (State.COMPLETE, State.PRUNED))
    return (
        f"sweep: {done} trials done, {failed} failed, {pruned} pruned"
        + (f", {stopped} stopped" if stopped else "")
        + (f", {lost} lost" if lost else "")
    )


def best_value(trial: optuna.trial.FrozenTrial) -> str:
    """'val/acc 0.93' in the metric's own sign (the study minimises a metric to maximise negated), or the objective
    of a trial recorded before the metric's name was kept."""
    metric = trial.user_attrs.get("metric")
    if metric is None:
        return f"objective {trial.value:.4g}"
    return f"{metric} {trial.value * trial.user_attrs.get('sign', 1):.4g}"


def report(study: optuna.Study) -> str:
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    if not done:
        return f"sweep {study.study_name}: no trial completed\n{summary_line(study)}"
    best = min(done, key=lambda t: t.value)
    trained = best.user_attrs["retry_of"] if best.user_attrs.get(KEPT) else best.number  # its run's NAME-tN, trial:N
    params = ", ".join(f"{k}={v}" for k, v in best.params.items())
    retried = _retried(study.trials)
    failed = sum(
        t.state == optuna.trial.TrialState.FAIL and STOPPED not in t.user_attrs and t.number not in retried
        for t in study.trials
    )
    pruned = sum(t.state == optuna.trial.TrialState.PRUNED for t in study.trials)
    return (
        f"sweep {study.study_name}: {len(done)} trial{'' if len(done) == 1 else 's'} completed"
        + (f", {failed} failed" if failed else "")
        + (f", {pruned} pruned" if pruned else "")
        + f"; best run {best.user_attrs['run_id']} (trial {trained}, {best_value(best)}) with {params}"
        f"\n{summary_line(study)}"
    )
