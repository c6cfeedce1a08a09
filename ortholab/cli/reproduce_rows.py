"""A row and seed trained and evaluated in child `ortholab` processes, rows several at a time, and their outcomes."""

from __future__ import annotations

import json
import os
import shlex
import signal
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

import yaml

from ortholab.cli import children
from ortholab.cli.common import exit_reason
from ortholab.cli.reproduce_flags import experiment_flags, last_flags_win, smoke_overrides
from ortholab.cli.reproduce_seeds import row_seeds, seeds_flag
from ortholab.command_name import as_typed
from ortholab.db import Store
from ortholab.db.published import FLAGS_TAG, PaperRow
from ortholab.db.seeds import SEED_TAG
from ortholab.db.store import StoreMissing
from ortholab.errors import ConfigError
from ortholab.threads import threads_each
from ortholab.training.config_files import PACKAGE_ROOT as REPO_ROOT


@dataclass(frozen=True)
class Outcome:
    """What became of one row (and seed): its line, and whether it is done, failed, stopped (by a signal, with a
    checkpoint: --resume continues it) or skipped."""

    line: str
    state: str = "done"
    resumed: tuple[str, int | None] | None = None  # the (row tag, seed) a --resume continued


AFTER_A_STOP = " (a stopped run continues from its checkpoint)"


def finish_reproduce(outcomes: list[Outcome], after_a_stop: str = AFTER_A_STOP, done: str = "done") -> None:
    """The summary line last; exit 1 when a row failed or was stopped (0 when every row is done or skipped), 128 + the
    signal when Ctrl-C or SIGTERM stopped the command itself (130, 143)."""
    if stopped := children.stopped_by():
        goes_on = (
            "the rows not timed are marked above" if done == "timed" else "the same command again goes on from there"
        )
        print(f"reproduce: stopped by {children.stop_name()}; {goes_on}{after_a_stop}", flush=True)
    print(summary(outcomes, done=done), flush=True)
    if stopped:
        raise SystemExit(128 + stopped)
    if any(o.state in ("failed", "stopped") for o in outcomes):  # a stopped row is not done either
        raise SystemExit(1)


def summary(outcomes: list[Outcome], what: str = "reproduce", done: str = "done") -> str:
    """The last line a script reads: 'reproduce: 3 done, 1 failed, 0 skipped' ('3 timed' for --estimate), and ', 1
    stopped' where a row's fit was stopped by a signal (with a checkpoint: not failed, not done)."""
    counts = {state: sum(o.state == state for o in outcomes) for state in ("done", "failed", "skipped", "stopped")}
    line = f"{what}: {counts['done']} {done}, {counts['failed']} failed, {counts['skipped']} skipped"
    return line + (f", {counts['stopped']} stopped" if counts["stopped"] else "")


def not_started(label: str, what: str = "not started") -> Outcome:
    """The outcome of a row this command was stopped before: the same command again goes on from there."""
    return Outcome(f"{label}: {what}, reproduce was stopped ({children.stop_name()})", "skipped")


_child_threads: int | None = None  # OMP_NUM_THREADS of the child processes while several rows run at a time


def run_ortholab(*args: str, db: str | None = None) -> int | None:
    """A child `ortholab` process; the store's URL travels in its environment, never on its command line (`ps`).
    None: not started, this command was stopped (Ctrl-C, SIGTERM) before it."""
    from ortholab.db.masking import child_env

    env = child_env(db) if db else dict(os.environ)
    if _child_threads is not None:
        env["OMP_NUM_THREADS"] = str(_child_threads)
    return children.run([*children.ORTHOLAB, *args], env)


def run_each(work, items: list, workers: int) -> list[Outcome]:
    """work(item) for every item, `workers` at a time (each a child process, so threads suffice here); every
    outcome printed as it comes. Several workers share the CPU: each child gets cpu_count / workers threads
    (OMP_NUM_THREADS, read by torch at its start) unless the user has set it."""
    if workers < 1:
        raise ConfigError(f"--workers {workers}: give a positive number of rows to run at a time")

    def printed(outcome: Outcome) -> Outcome:
        print(as_typed(outcome.line), flush=True)
        return outcome

    if workers == 1:  # in this thread; Ctrl-C and SIGTERM: cli/children.py
        return [printed(work(item)) for item in items]
    global _child_threads
    _child_threads = threads_each(workers)
    try:  # Ctrl-C in a terminal reaches every child too (one process group), SIGTERM is passed on: cli/children.py
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return [printed(done.result()) for done in as_completed([pool.submit(work, item) for item in items])]
    finally:
        _child_threads = None


_seeds_given: int | list[int] | None = None  # this command's --seeds, for the hint that continues a stopped row


def remember_seeds(seeds: int | list[int] | None) -> None:
    """This command's --seeds, kept for the hint (fit_failed) that continues a stopped row."""
    global _seeds_given
    _seeds_given = seeds


def fit_failed(label: str, code: int, row: PaperRow, db: str | None, extra: list[str], what: str = "fit") -> Outcome:
    """A fit's non-zero exit as an outcome line; a stop by SIGTERM or Ctrl-C (which save a checkpoint,
    training/callbacks/lifecycle.py) says so and how to continue the row: in its store, with the flags it trained
    with (a run trained anew, having no checkpoint here, takes them again)."""
    from ortholab.db.store import db_flag, default_db_url, store_url

    stops = {128 + signal.SIGTERM: "SIGTERM", 128 + signal.SIGINT: "Ctrl-C"}
    if code in stops:
        where, _ = db_flag(store_url(db or default_db_url()))
        flags = f"{seeds_flag(_seeds_given)}{f' {shlex.join(extra)}' if extra else ''}"
        return Outcome(
            f"{label}: {what} stopped by {stops[code]} with a checkpoint; continue it with "
            f"`ortholab reproduce {row.table} --resume --rows {row.row}{where}{flags}`",
            "stopped",
        )
    return Outcome(f"{label}: {what} failed ({exit_reason(code)})", "failed")


def run_row(row: PaperRow, scale: str, db: str | None, extra: list[str], seed: int | None = None) -> Outcome:
    """Train (and evaluate) one row with `seed` (default: its config's); returns its outcome."""
    if row.config is None:
        return Outcome(
            f"{row.tag}: skipped, no config (family {row.family!r}: {row.notes or 'not available'})", "skipped"
        )
    config_path = REPO_ROOT / row.config
    config = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    seed = row_seeds(config, None)[0] if seed is None else seed
    seed_tag = f"{SEED_TAG}{seed}"
    changes = experiment_flags(extra)  # a run given them is its own experiment, not the paper's row (db/published.py)
    tags = ["--tags", json.dumps([row.tag, f"scale:{scale}", seed_tag, *([FLAGS_TAG + changes] if changes else [])])]
    flags = smoke_overrides(config) if scale == "cpu-smoke" else []
    name = f"{row.table}.{row.row}"
    label = f"{row.tag} (seed {seed})"
    before = _newest_fit_id(db, row.tag, seed_tag)
    code = run_ortholab(
        "fit",
        "--config",
        str(config_path),
        "--name",
        name,
        *tags,
        *last_flags_win(list(row.args), flags, extra),
        "--seed_everything",
        str(seed),
        db=db,
    )
    if code is None:
        return not_started(label)
    if code and not _finished_since(db, row.tag, seed_tag, before):  # a stop heard after its end: it finished
        return fit_failed(label, code, row, db, extra)
    store = Store(db)
    return evaluate_row(
        row, _newest_fit(store, row.tag, seed_tag), config_path, name, tags, db, flags, extra, store, label
    )


def _newest_fit(store: Store, tag: str, seed_tag: str):
    """The row's newest fit with that seed, or None."""
    fits = [r for r in store.list_runs() if tag in r.tags and seed_tag in r.tags and r.stage == "fit"]
    return max(fits, key=lambda r: r.id, default=None)


def _newest_fit_read(db: str | None, tag: str, seed_tag: str):
    """The row's newest fit with that seed, read from the store (None: no store, or no such fit)."""
    try:
        store = Store(db, access="read")
    except StoreMissing:
        return None
    try:
        return _newest_fit(store, tag, seed_tag)
    finally:
        store.close()


def _newest_fit_id(db: str | None, tag: str, seed_tag: str) -> int | None:
    fit = _newest_fit_read(db, tag, seed_tag)
    return None if fit is None else fit.id


def _finished_since(db: str | None, tag: str, seed_tag: str, before: int | None) -> bool:
    """Whether a fit of the row and seed newer than run `before` finished (its process may still exit non-zero:
    a Ctrl-C that came as it ended)."""
    newest = _newest_fit_read(db, tag, seed_tag)
    return newest is not None and (before is None or newest.id > before) and newest.status == "finished"


def evaluate_row(
    row: PaperRow,
    run,
    config_path: Path,
    name: str,
    tags: list[str],
    db: str | None,
    flags: list[str],
    extra: list[str],
    store: Store,
    label: str | None = None,
) -> Outcome:
    """After a row's fit: the test run of its best checkpoint and the audio evaluation, where the row asks."""
    label = label or row.tag
    if row.metric.startswith("test/"):
        from ortholab.training.checkpoint_choice import best_or_last, run_checkpoint

        # the run folder's file: Lightning's own `--ckpt_path last` names none in a new process, so a fit that kept
        # only last.ckpt (it never validated) was tested untrained, at the config's seed
        fit = store.get_run(run.id)
        try:
            checkpoint = str(run_checkpoint(run.id, fit.run_dir, best_or_last(fit.run_dir)))
        except ValueError as err:
            return Outcome(f"{label}: run {run.id} trained; not tested: {err}", "failed")
        seed = (fit.config or {}).get("seed_everything")  # the fit's, so that the test run records its seed
        seeded = ["--seed_everything", str(seed)] if isinstance(seed, int) and not isinstance(seed, bool) else []
        code = run_ortholab(
            "test",
            "--config",
            str(config_path),
            "--name",
            name,
            *tags,
            *last_flags_win(list(row.args), flags, extra),
            *seeded,
            "--ckpt_path",
            checkpoint,
            db=db,
        )
        if code is None:
            return not_started(label, f"run {run.id} trained, its test not started")
        if code:
            return Outcome(f"{label}: run {run.id} trained; test failed ({exit_reason(code)})", "failed")
    if row.metric.startswith("audio/"):
        code = run_ortholab("evaluate-audio", str(run.id), "--split", "test", db=db)
        if code is None:
            return not_started(label, f"run {run.id} trained, its audio evaluation not started")
        if code:
            return Outcome(f"{label}: run {run.id} trained; audio evaluation failed ({exit_reason(code)})", "failed")
    return Outcome(
        f"{label}: run {run.id} {run.status}", {"finished": "done", "interrupted": "stopped"}.get(run.status, "failed")
    )
