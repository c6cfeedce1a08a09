"""The runs behind an export as a store of their own (`ortholab report TABLE --export DIR` writes DIR/runs.db): the
chosen runs under their own ids, their params and metric points (artifacts on request), in one SQLite file that a
reader opens read-only, also in a read-only folder (no WAL beside it).

With the runs' checkpoints (`--with-checkpoints`), an unfinished run can go on elsewhere: `copy_resume_files` puts
its config.yaml and checkpoints (last and best) under DIR/checkpoints in its run folder's layout
(store-XXXXXXXX/NAME/ID), and runs.db names the store it was copied from, whose stamp those checkpoints carry (`fit
--resume` accepts it).

Very long series are thinned so that a committed store stays small: a series of more than `max_points` points keeps
`max_points` of them, evenly spaced over its steps, first and last included. Validation and test series (`val/*`,
`test/*`), which the report reads, are always kept whole. An export's store is kept under `MAX_BYTES` (issue 48's
limit for a committed runs.db) by `write_run_store_within`, which halves `max_points` until the file fits.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from collections.abc import Iterable
from pathlib import Path

from ortholab.db.schema import utcnow
from ortholab.db.schema_version import STORE_INFO
from ortholab.db.store import Store
from ortholab.errors import ConfigError

MAX_POINTS = 2_000  # points kept per thinned series
WHOLE = ("val/", "test/")  # never thinned
MAX_BYTES = 5_000_000  # a committed runs.db stays under 5 MB: the git history keeps every version
MIN_POINTS = 100  # the thinnest a training series gets to fit MAX_BYTES: its curve's shape still shows


def thinned(key: str, n: int, max_points: int = MAX_POINTS) -> list[int]:
    """The indices of a series' n points to keep: all of them, or `max_points` evenly spaced (first and last)."""
    if n <= max_points or key.startswith(WHOLE):
        return list(range(n))
    return sorted({round(i * (n - 1) / (max_points - 1)) for i in range(max_points)})


def write_run_store(
    source: Store,
    run_ids: Iterable[int],
    path: str | Path,
    *,
    with_artifacts: bool = False,
    max_points: int = MAX_POINTS,
) -> Path:
    """`run_ids` of `source` into a new SQLite store at `path` (replaced whole, never half-written); returns it."""
    if max_points < 2:
        raise ValueError(f"max_points must be at least 2 (the first and the last point), got {max_points}")
    path = Path(path)
    part = path.with_name(path.name + ".part")
    for leftover in (part, part.with_name(part.name + "-wal"), part.with_name(part.name + "-shm")):
        leftover.unlink(missing_ok=True)
    target = Store(f"sqlite:///{part.absolute()}")
    try:
        source.copy_runs(
            run_ids, target, keep=lambda key, n: thinned(key, n, max_points), with_artifacts=with_artifacts
        )
    finally:
        target.close()
    copied_at = source.frozen_at or utcnow()  # after the copy, so no copied heartbeat is later (a frozen copy: its own)
    with sqlite3.connect(part) as connection:  # committed on leaving: journal_mode cannot change in a transaction
        facts = [("copied_from", source.store_id), ("copied_at", copied_at.isoformat())]
        connection.executemany(f"INSERT INTO {STORE_INFO} (key, value) VALUES (?, ?)", facts)
    connection.close()
    with sqlite3.connect(part) as connection:  # one self-contained file: readable where nothing can be written
        connection.execute("PRAGMA journal_mode=DELETE")
    connection.close()
    with sqlite3.connect(part) as connection:
        connection.execute("VACUUM")
    connection.close()
    os.replace(part, path)
    return path


def write_run_store_within(
    source: Store,
    run_ids: Iterable[int],
    path: str | Path,
    *,
    max_bytes: int = MAX_BYTES,
    with_artifacts: bool = False,
) -> tuple[Path, int]:
    """`write_run_store` with `max_points` halved from MAX_POINTS (not below MIN_POINTS) until the file has at most
    `max_bytes`; returns the path and the `max_points` it was written with (the file may still be larger when the
    validation series, kept whole, or the artifacts alone exceed it: the caller says so)."""
    if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes <= 0:
        raise ValueError(f"max_bytes must be a positive number of bytes, got {max_bytes!r}")
    run_ids = list(run_ids)
    points = MAX_POINTS
    while True:
        written = write_run_store(source, run_ids, path, with_artifacts=with_artifacts, max_points=points)
        if written.stat().st_size <= max_bytes or points <= MIN_POINTS:
            return written, points
        points = max(MIN_POINTS, points // 2)


NAN_GUARD_CHECKPOINTS = "nan-step*.ckpt"  # the weights before a non-finite step (training/callbacks/nan_guard.py)


def copy_resume_files(
    source: Store, run_ids: Iterable[int], folder: str | Path, earlier: str | Path | None = None
) -> list[Path]:
    """For every run of `run_ids` that has not finished and has a last checkpoint, its config.yaml and checkpoints
    (last.ckpt, which `fit --resume` loads, the best one, which the row's test at the end loads, and a NaN guard's)
    into folder/store-XXXXXXXX/NAME/ID (its run folder's last parts); for a finished run, its config.yaml and NaN
    guard's checkpoints alone, where it has any (the evidence of a step it went on past, which a float64 recheck
    reads); returns the files written. A run whose folder is not on this machine (a store restored from an export's
    runs.db) keeps the copies `earlier` (the folder an earlier export wrote them to) holds for it."""
    written = []
    for run_id in sorted(set(int(i) for i in run_ids)):
        run = source.get_run(run_id)
        run_dir = Path(run.run_dir or "")
        in_store_folder = len(run_dir.parts) >= 3 and run_dir.parts[-3].startswith("store-")
        parts = run_dir.parts[-3:] if in_store_folder else run_dir.parts[-2:]  # (legacy folders: NAME/ID)
        if not parts:
            continue
        finished = run.status == "finished"
        wanted = NAN_GUARD_CHECKPOINTS if finished else "*.ckpt"

        if not _worth_copying(run_dir, finished):
            kept = Path(earlier, *parts) if earlier is not None else None
            if kept is not None and _worth_copying(kept, finished) and not run_dir.is_dir():
                files = [kept / "config.yaml", *sorted((kept / "checkpoints").glob(wanted))]
                copies = [copy_settled(path, Path(folder, *parts, path.relative_to(kept))) for path in files]
                written += [target for target in copies if target is not None]
            continue
        for attempt in range(3):  # a live run that saves a better best-step file deletes the one listed: again
            files = [run_dir / "config.yaml", *sorted((run_dir / "checkpoints").glob(wanted))]
            copied = [copy_settled(path, Path(folder, *parts, path.relative_to(run_dir))) for path in files]
            if all(copied) or attempt == 2:
                break
            for target in copied:  # the round's files are taken again, together
                if target is not None:
                    target.unlink()
        written += [target for target in copied if target is not None]
    return written


def _worth_copying(run_dir: Path, finished: bool) -> bool:
    """A run folder (or an earlier export's copy of one) holds what an export keeps of it: a NaN guard's checkpoint
    (a finished run), last.ckpt (one still to go on)."""
    checkpoints = run_dir / "checkpoints"
    return any(checkpoints.glob(NAN_GUARD_CHECKPOINTS)) if finished else (checkpoints / "last.ckpt").is_file()


def copy_settled(source: Path, target: Path, tries: int = 5) -> Path | None:
    """Copy `source` again until it did not change while being copied (a live run rewrites last.ckpt in place,
    not by rename); returns `target`, or None when `source` is not there (or went away meanwhile: a run deletes an
    older best-step file); after `tries` copies that each saw a change, a ConfigError (a ValueError) naming it."""
    target.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(tries):
        try:
            before = source.stat()
            shutil.copyfile(source, target)
            after = source.stat()
        except FileNotFoundError:
            target.unlink(missing_ok=True)
            return None
        if (before.st_size, before.st_mtime_ns) == (after.st_size, after.st_mtime_ns):
            return target
    raise ConfigError(f"{source} changed during each of {tries} copies: stop the run writing it, then export again")
