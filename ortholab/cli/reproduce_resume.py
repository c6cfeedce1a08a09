"""Rows whose runs stopped before their end: found in the store and continued from their checkpoint (--resume)."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

from ortholab.cli.reproduce_listing import select_rows
from ortholab.cli.reproduce_rows import (
    Outcome,
    evaluate_row,
    fit_failed,
    not_started,
    run_each,
    run_ortholab,
    run_row,
)
from ortholab.cli.reproduce_seeds import chosen_seeds
from ortholab.cli.row_claims import claim_key, claimed
from ortholab.command_name import as_typed
from ortholab.db import Store
from ortholab.db.published import PaperRow, load_tables, run_flags, run_scale
from ortholab.db.seeds import SEED_TAG, seed_of
from ortholab.db.store import StoreMissing
from ortholab.errors import ConfigError


def unfinished_runs(store: Store, stale_after_s: float) -> list[tuple[PaperRow, object]]:
    """Paper rows whose latest fit stopped before its end: interrupted; 'running' with its process on this machine
    gone (killed by SIGKILL, e.g. the out-of-memory killer), or without a sign of life (no write or heartbeat) for
    `stale_after_s` seconds (killed with its machine); and rows whose fit finished but whose evaluation never did
    (stopped between the two, or the fit resumed by hand)."""
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    found = []
    runs = store.list_runs()
    for table in load_tables().values():
        for row in table.rows:
            by_seed: dict[str | None, list] = {}  # each seed of the row on its own (runs before seeds: None)
            for run in (r for r in runs if row.tag in r.tags and r.stage == "fit"):
                by_seed.setdefault(next((t for t in run.tags if t.startswith(SEED_TAG)), None), []).append(run)
            for fits in by_seed.values():
                fit = max(fits, key=lambda r: r.id)
                silent = (now - fit.heartbeat_at.replace(tzinfo=None)).total_seconds()
                if (
                    fit.status == "interrupted"
                    or (fit.status == "running" and (silent > stale_after_s or store.holder_ended(fit.id)))
                    or (fit.status == "finished" and not _evaluated(store, row, fit, runs))
                ):
                    found.append((row, fit))
    return found


def _resumable(store: Store, run) -> bool:
    """Whether `fit --resume` can continue this run: a finished fit (only its evaluation is left) or one with a
    last checkpoint; a run stopped before its first checkpoint is trained anew instead."""
    if run.status == "finished":
        return True
    return (Path(store.get_run(run.id).run_dir or "") / "checkpoints" / "last.ckpt").is_file()


def _evaluated(store: Store, row: PaperRow, fit, runs: list) -> bool:
    """Whether the evaluation `reproduce` runs after this row's fit exists: a finished test run of the row (and of
    the fit's seed) after the fit (test/ metrics), the audio metric in the fit itself (audio/ metrics); nothing to
    run otherwise."""
    if row.metric.startswith("test/"):
        seed = [t for t in fit.tags if t.startswith(SEED_TAG)]
        return any(
            row.tag in r.tags
            and all(t in r.tags for t in seed)
            and r.stage == "test"
            and r.status == "finished"
            and r.id > fit.id
            for r in runs
        )
    if row.metric.startswith("audio/"):
        return row.metric in store.metric_keys(fit.id)
    return True


def recorded_seeds(
    db: str | None, scale: str, flags: str | None = None
) -> tuple[dict[tuple[str, int], str], dict[tuple[str, int], int]]:
    """Per (row tag, seed) of the runs at `scale` given the same experiment `flags` (experiment_flags): why it
    needs no new run (its latest fit finished and was evaluated, or another process is training it now), and the id
    of its latest fit where that stopped before its end (interrupted; 'running' with no live process holding it;
    finished but not evaluated). Nothing where there is no store yet."""
    try:
        store = Store(db, access="read")
    except StoreMissing:
        return {}, {}
    try:  # closed before the runs start: an open reader would hold the SQLite file
        runs = store.list_runs()
        latest: dict[tuple[str, int], object] = {}
        ours = (r for r in runs if r.stage == "fit" and f"scale:{scale}" in r.tags and run_flags(r) == flags)
        for run in sorted(ours, key=lambda r: r.id):
            seed = seed_of(run, {})
            for tag in (t for t in run.tags if t.startswith("paper:")):
                latest[tag, seed] = run
        rows = {row.tag: row for table in load_tables().values() for row in table.rows}
        found, stopped = {}, {}
        for (tag, seed), run in latest.items():
            if tag in rows and run.status == "finished" and _evaluated(store, rows[tag], run, runs):
                found[tag, seed] = f"run {run.id} finished (--again trains it anew)"
            elif run.status != "finished" and store.lease_holder(run.id) is not None:  # interrupted: still ending
                found[tag, seed] = f"run {run.id} is being trained by another process"
            elif tag in rows and run.status in ("interrupted", "running", "finished") and _resumable(store, run):
                stopped[tag, seed] = run.id
        return found, stopped
    finally:
        store.close()


def resume_unfinished(
    db: str | None,
    stale_after_s: float,
    extra: list[str],
    workers: int = 1,
    rows: list[str] | None = None,
    table: str | None = None,
    seeds: int | list[int] | None = None,
    scale: str | None = None,
) -> list[Outcome]:
    """`ortholab reproduce [TABLE] --resume`: continue every unfinished row's run (of `table`, if given; or those of
    the row ids in `rows`; with `seeds`, only the runs tagged with those seeds, and at `scale` if given) from its
    last checkpoint (the same run id: no point lost or doubled), `workers` at a time, then evaluate it as `reproduce`
    would have (only that, where the fit had finished). A run with no checkpoint here (stopped before its first, or
    its run folder left behind on another machine) is trained anew, with its seed and scale, as a new run."""
    if not stale_after_s >= 0:  # NaN too: it compared as never stale, silently
        raise ConfigError(
            f"--stale_minutes {stale_after_s / 60:g}: give a number of minutes >= 0 after which a "
            f"silent 'running' run counts as stopped (default 30)"
        )
    if rows:
        known = {row.row for table in load_tables().values() for row in table.rows}
        if unknown := [name for name in rows if name not in known]:
            raise ConfigError(
                f"--rows: no published row is called {', '.join(map(repr, unknown))}; "
                f"`ortholab reproduce --list` shows every row id"
            )
    store = Store(db, access="write")

    def resume(found) -> Outcome:
        row, listed = found
        seed = seed_of(listed, {})
        with claimed(db, claim_key(row.tag, seed, run_scale(listed), run_flags(listed))) as holder:
            if holder is not None:  # another command is continuing it
                label = row.tag if seed is None else f"{row.tag} (seed {seed})"
                outcome = Outcome(f"{label}: skipped, {holder} is training it", "skipped")
                return replace(outcome, resumed=(row.tag, seed))
            return resume_claimed(row, listed, seed)

    def resume_claimed(row: PaperRow, listed, seed: int | None) -> Outcome:
        # the store again, just before the row: another process may have trained, or be training, it since
        fit = next(
            (f for r, f in unfinished_runs(store, stale_after_s) if f.id == listed.id and r.tag == row.tag), None
        )
        if fit is None:  # (printed by run_each, as every outcome)
            label = row.tag if seed is None else f"{row.tag} (seed {seed})"
            outcome = Outcome(
                f"{label}: skipped, trained or being trained by another process since run {listed.id} was listed",
                "skipped",
            )
            return replace(outcome, resumed=(row.tag, seed))
        if _resumable(store, fit):
            outcome = continue_run(row, fit.id, store, extra)
        else:  # stopped before its first checkpoint, or trained on a machine whose run folders are gone
            scale = run_scale(fit) or "full"
            print(
                f"{row.tag} (seed {seed}): run {fit.id} has no checkpoint at {store.get_run(fit.id).run_dir}: "
                f"trained anew as a new run",
                flush=True,
            )
            outcome = run_row(row, scale, db, extra, seed)
        return replace(outcome, resumed=(row.tag, seed))

    if table is not None:
        select_rows(load_tables(), table, None)  # an unknown table: one line naming the tables
    found = [(row, fit) for row, fit in unfinished_runs(store, stale_after_s) if table in (None, row.table)]
    if seeds is not None:  # only runs tagged with a seed asked for, at `scale`; any other is left as it is
        found = [
            (row, fit)
            for row, fit in found
            if seed_of(fit, {}) in chosen_seeds(row, seeds) and (scale is None or f"scale:{scale}" in fit.tags)
        ]
    if rows:
        chosen = [(row, fit) for row, fit in found if row.row in rows]
        if idle := [name for name in rows if all(row.row != name for row, _ in chosen)]:
            others = sorted({row.row for row, _ in found} - set(rows))
            failed = failed_fits(store, idle)
            for fit in failed:
                print(as_typed(failed_note(fit)), file=sys.stderr, flush=True)
            if idle := [
                name
                for name in idle
                if not any(tag.startswith("paper:") and tag.endswith(f"/{name}") for fit in failed for tag in fit.tags)
            ]:
                print(
                    f"nothing to resume for {', '.join(idle)}: not stopped early, still running, or never started"
                    + (f" (unfinished rows: {', '.join(others)})" if others else ""),
                    file=sys.stderr,
                    flush=True,
                )
        found = chosen
    outcomes = run_each(resume, found, workers)
    if not outcomes:
        print(
            f"no unfinished paper rows in {store.display_url} (a 'running' run counts as stopped once its process "
            f"on this machine has ended, or after {stale_after_s / 60:g} minutes without a write)",
            flush=True,
        )
    return outcomes


def failed_fits(store: Store, row_ids: list[str]) -> list:
    """The latest fit of each of these rows (and seeds) where it failed (the NaN guard, an error): `--resume`
    continues only runs that stopped, since running a failed one again the same way fails the same way."""
    latest: dict[tuple[str, str | None], object] = {}
    for run in store.list_runs():
        row_tags = [t for t in run.tags if t.startswith("paper:") and t.split("/", 1)[-1] in row_ids]
        if run.stage == "fit" and row_tags:
            key = (row_tags[0], next((t for t in run.tags if t.startswith(SEED_TAG)), None))
            if key not in latest or run.id > latest[key].id:
                latest[key] = run
    return [fit for fit in latest.values() if fit.status == "failed"]


def failed_note(fit) -> str:
    """What to do about a failed paper run, in one line: its reason, and the two ways on."""
    reason = (fit.reason or "no reason recorded").split(" (checkpoint before the step")[0]
    return (
        f"{fit.name}: run {fit.id} failed, recorded up to step {fit.steps} ({reason}); --resume continues only "
        f"stopped runs: "
        f"after fixing the cause, continue it with `ortholab fit --resume {fit.id} --KEY VALUE` (the changed keys "
        f"are recorded with the run) or train the row anew with `--again`"
    )


def continue_run(row: PaperRow, fit_id: int, store: Store, extra: list[str]) -> Outcome:
    """A stopped fit of `row` continued from its last checkpoint as the same run (no point lost or doubled), then
    evaluated as `reproduce` would have; a fit that had finished is only evaluated."""
    fit = store.get_run(fit_id)
    seed = seed_of(fit, {})
    label = row.tag if seed is None else f"{row.tag} (seed {seed})"
    code = 0 if fit.status == "finished" else run_ortholab("fit", "--resume", str(fit.id), *extra, db=store.url)
    if code is None:
        return not_started(label, f"run {fit.id} not continued")
    if code and store.get_run(fit.id).status != "finished":  # finished: a stop heard as it ended
        return fit_failed(label, code, row, store.url, extra, what=f"resuming run {fit.id}")
    run = store.get_run(fit.id)
    tags = ["--tags", json.dumps(list(run.tags))]
    path = Path(run.run_dir) / "config.yaml"
    return evaluate_row(row, run, path, run.name, tags, store.url, [], extra, store, label)
