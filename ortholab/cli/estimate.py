"""`ortholab reproduce TABLE --estimate`: how long each row would take here, measured, before running it.

Each row trains briefly in its own process on a temporary store (nothing is recorded in yours): a row planned in
steps with a validation every k steps trains 2k + 10 steps, so that two validations fall inside the timed stretch
(the `train/loss` wall times from step 9 on); a row planned in epochs trains 50 steps with a validation after the
50th (test too where the config measures it at every validation), timing the steps and the evaluation apart. The
estimate is the plan's steps times a step, plus the epochs times an evaluation; the other flags given (e.g.
`--data.path`) apply as they would to the row's run. Threads: torch's default, or OMP_NUM_THREADS.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from ortholab.cli import children
from ortholab.cli.common import exit_reason
from ortholab.cli.reproduce_flags import check_flags
from ortholab.cli.reproduce_listing import select_rows
from ortholab.cli.reproduce_rows import Outcome, finish_reproduce
from ortholab.db import Store, runs_root
from ortholab.db.published import PaperRow, load_tables
from ortholab.threads import exceeds_free_cores, other_work, threads_beside
from ortholab.training.config_files import PACKAGE_ROOT as REPO_ROOT

LOG_EVERY = 10  # train/loss every 10 steps: the timed stretch runs from step 9 to the last logged step
EPOCH_STEPS = 50  # training steps timed for a row planned in epochs, then one evaluation


@dataclass
class Estimate:
    row: PaperRow
    plan: str  # e.g. '10000 steps, validation every 50' or '70 epochs x 1100 steps'
    step_s: float  # one training step; for step plans the validations inside the stretch included
    evaluation_s: float | None  # one evaluation (validation, test where measured beside it), for epoch plans
    hours: float


def setting(config: dict, flags: list[str], key: str):
    """A dotted `key` (e.g. trainer.max_steps) as the row's run would get it: its last `--key value` flag, else the
    config file's value."""
    given = [flags[i + 1] for i, flag in enumerate(flags[:-1]) if flag == f"--{key}"]
    if given:
        return yaml.safe_load(given[-1])
    value = config
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _timed_steps(store: Store, run_id: int) -> tuple[list[int], list[float]]:
    points = [p for p in store.metric_series(run_id, "train/loss") if p.step >= LOG_EVERY - 1]
    return [p.step for p in points], [p.wall_time for p in points]


def evaluations_per_epoch(interval, every_n_epochs, steps_per_epoch: int) -> float:
    """Validations an epoch as Lightning schedules them: every `interval` batches (an int), 1 / interval times (a
    fraction of an epoch) or once; on every `every_n_epochs`-th epoch only."""
    if isinstance(interval, int) and interval > 0:
        count = max(1, steps_per_epoch // interval)
    else:
        count = round(1 / interval) if isinstance(interval, float) and 0 < interval < 1 else 1
    return count / (every_n_epochs if isinstance(every_n_epochs, int) and every_n_epochs > 0 else 1)


def estimate_row(row: PaperRow, config_path: Path, extra: list[str], run_fit) -> Estimate | str:
    """Measure one row (`run_fit(args, db)` runs `ortholab fit` in a child process, returning its exit code)."""
    config = yaml.safe_load(config_path.read_text()) or {}
    flags = [*row.args, *extra]
    max_steps = setting(config, flags, "trainer.max_steps") or -1
    interval = setting(config, flags, "trainer.val_check_interval")
    by_steps = max_steps > 0 and isinstance(interval, int)
    measure = (
        ["--trainer.max_steps", str(min(max_steps, 2 * interval + LOG_EVERY))]
        if by_steps
        else [
            "--trainer.max_steps",
            str(EPOCH_STEPS),
            "--trainer.val_check_interval",
            str(EPOCH_STEPS),
            "--trainer.check_val_every_n_epoch",
            "null",
        ]
    )
    cache = setting(config, flags, "data.cache_dir") or setting(config, [], "data.init_args.cache_dir")
    if isinstance(cache, str) and not Path(cache).expanduser().is_absolute():  # the features real runs share, not
        flags = [*flags, "--data.cache_dir", str(runs_root().absolute() / cache)]  # the timing run's own runs folder
    with tempfile.TemporaryDirectory(prefix="ortholab-estimate-") as folder:
        db = f"sqlite:///{Path(folder) / 'estimate.db'}"
        code = run_fit(
            [
                "--config",
                str(config_path),
                *flags,
                *measure,
                "--trainer.log_every_n_steps",
                str(LOG_EVERY),
                "--trainer.num_sanity_val_steps",
                "0",
                "--trainer.enable_progress_bar",
                "false",
                "--trainer.enable_model_summary",
                "false",
                "--runs_dir",
                str(Path(folder) / "runs"),
            ],
            db,
        )
        if code:
            return f"{row.tag}: the timing run failed ({exit_reason(code)})"
        store = Store(db)
        (run,) = store.list_runs()
        steps, walls = _timed_steps(store, run.id)
        per_epoch = store.run_plan(run.id).get("steps_per_epoch")
        evaluated = [
            p.wall_time
            for key in store.metric_keys(run.id)
            if key.startswith(("val/", "test/"))
            for p in store.metric_series(run.id, key)
        ]  # validation, and test where measured beside it
        store.close()
    if len(steps) < 2:
        return f"{row.tag}: too few steps logged to time"
    step_s = (walls[-1] - walls[0]) / (steps[-1] - steps[0])  # for a step plan, its validations included
    if by_steps:
        return Estimate(row, f"{max_steps} steps, validation every {interval}", step_s, None, max_steps * step_s / 3600)
    epochs = setting(config, flags, "trainer.max_epochs")
    if not (epochs and epochs > 0 and per_epoch and evaluated):
        return f"{row.tag}: no epoch plan (trainer.max_epochs) or no validation to time"
    evaluation_s = max(0.0, max(evaluated) - walls[-1])  # from the last training step's log to the evaluation's end
    evaluations = evaluations_per_epoch(interval, setting(config, flags, "trainer.check_val_every_n_epoch"), per_epoch)
    return Estimate(
        row,
        f"{epochs} epochs x {per_epoch} steps",
        step_s,
        evaluation_s,
        epochs * (per_epoch * step_s + evaluations * evaluation_s) / 3600,
    )


def oversubscribed(busy: float, threads: int, cores: int) -> str | None:
    """A warning when the rows were timed with more threads than the cores other work left free (`busy`: its
    cores' worth when timing began): each thread then waits on the others, and a step can take several times
    as long as alone, unevenly across rows (on 2 cores, scoRNN copying T = 2000 timed 0.918 s a step with 2
    threads beside one 1-thread training, and 0.558 s with 1 thread beside two)."""
    free = cores - busy
    if not exceeds_free_cores(threads, cores, busy):
        return None
    if threads == 1:  # fewer threads is no remedy: say what the times are
        return (
            f"other work kept about {busy:.1f} of the {cores} cores busy when timing began, so even one thread "
            f"shared a core: the times are an upper bound for a quiet machine"
        )
    return (
        f"other work kept about {busy:.1f} of the {cores} cores busy when timing began and each row was timed with "
        f"{threads} thread{'s' * (threads > 1)}: oversubscribed, so the times can be several times too long and "
        f"unevenly so; time the rows as they will run beside that work, e.g. OMP_NUM_THREADS={max(1, round(free))}"
    )


LEGEND = (
    "a step: seconds a training step, its validations included where the plan is in steps; evaluation: one "
    "validation (and test where measured beside it) of a plan in epochs, - where a step already holds it"
)


def render(estimates: list[Estimate | str], busy: float | None = None) -> str:
    """The estimates as a table, then the rows that could not be timed; `busy`: the cores' worth of other work
    before timing (ortholab/threads.py `other_work`). With OMP_NUM_THREADS unset each timing fit took the cores that
    work left free (training/lightning_cli.py), as the rows' own fits will beside it."""
    threads = os.environ.get("OMP_NUM_THREADS")
    cores = os.cpu_count() or 1
    load = f", other work on {busy:.1f} cores when timing began" if busy is not None else ""
    given = int(threads) if threads and threads.isdigit() and int(threads) > 0 else None
    fewer = threads_beside(busy, cores, cores, {}) if given is None else None
    timed_with = given or fewer or cores  # else torch's default: a thread per core
    said = f"OMP_NUM_THREADS={threads}" if threads else "torch default threads"
    said = f"{fewer} torch thread{'s' * (fewer > 1)}: the cores other work left free" if fewer else said
    lines = [
        f"measured here ({said}), {cores} cores{load}; one row at a time",
        f"{'row':<52} {'plan':<36} {'a step':>9} {'evaluation':>10} {'hours':>7}",
    ]
    lines += [line(item) for item in estimates if isinstance(item, Estimate)]
    if any(isinstance(item, Estimate) for item in estimates):  # a table to explain
        lines.append(LEGEND)
    lines += [item for item in estimates if isinstance(item, str)]
    warning = oversubscribed(busy, timed_with, cores) if busy is not None else None
    return "\n".join(lines + ([warning] if warning else []))


def line(item: Estimate) -> str:
    """One row of `render`'s table (also printed alone as soon as the row is timed)."""
    evaluation = "-" if item.evaluation_s is None else f"{item.evaluation_s:.2f} s"
    return (
        f"{item.row.tag.removeprefix('paper:'):<52} {item.plan:<36} {item.step_s:>7.3f} s "
        f"{evaluation:>10} {item.hours:>7.3g}"  # 3 significant digits: a tiny plan's 0.00311, not 0.00
    )


def estimate(table: str | None, rows: list[str] | None, extra: list[str], seeds: int | list[int] | None = None) -> list:
    """`reproduce --estimate`: time every chosen row briefly, one at a time, and print the hours each would take
    (with `seeds`, in all for its seeds); exit 1 when a row's timing run failed."""
    from ortholab.db.masking import child_env

    def run_fit(args: list[str], db: str) -> int:  # quiet: its output only where it failed
        with tempfile.TemporaryFile("w+") as errors:  # a file, not a pipe: a pipe left unread could stall the child
            child = children.start(
                [*children.ORTHOLAB, "fit", *args],
                env=child_env(db),
                stdout=subprocess.DEVNULL,
                stderr=errors,
            )
            if child is None:  # stopped before it started
                return 128 + children.stopped_by()
            code = children.wait(child)
            if code and not children.stopped_by():
                errors.seek(0)
                print(errors.read()[-2000:], file=sys.stderr)
        return code

    def stopped(row) -> str:  # a row the stop came before or during: timed again by the same command
        return f"{row.tag}: not timed, the estimate was stopped ({children.stop_name()})"

    chosen = select_rows(load_tables(), table, rows)
    check_flags(chosen, extra)  # a mistyped flag, or a task's data not there, is one line before any row is timed
    busy = other_work()  # other work on the cores, before this timing adds to it
    results = []
    for row in chosen:
        if row.config is None:
            results.append(f"{row.tag}: no config (family {row.family!r}: {row.notes or 'not available'})")
            continue
        if children.stopped_by():
            results.append(stopped(row))
            continue
        print(f"timing {row.tag} ...", file=sys.stderr, flush=True)
        measured = estimate_row(row, REPO_ROOT / row.config, extra, run_fit)
        if children.stopped_by():  # a timing cut short is no timing
            measured = stopped(row)
        results.append(measured)
        # each row as it is timed: an estimate stopped midway keeps what it measured
        print(f"  {line(measured) if isinstance(measured, Estimate) else measured}", file=sys.stderr, flush=True)
    print(render(results, busy), flush=True)
    timed = [item for item in results if isinstance(item, Estimate)]
    if seeds is not None and timed:
        per_row = len(seeds) if isinstance(seeds, list) else seeds
        print(
            f"with {per_row} seed{'s' * (per_row > 1)} per row: {per_row * sum(e.hours for e in timed):.3g} hours "
            f"in all, one run at a time",
            flush=True,
        )
    finish_reproduce(
        [
            Outcome(str(item), "done" if isinstance(item, Estimate) else "failed" if "failed" in item else "skipped")
            for item in results
        ],
        after_a_stop="",
        done="timed",
    )
    return results
