"""`ortholab runs [filters] --export DIR`: the runs a listing shows, handed on as evidence. Writes runs.db (a store of
exactly those runs, db/extract.py's, thinned and kept small as `report --export` keeps it; artifacts with
`--with-artifacts`), runs.csv (a line per run: the listing's columns, its tags, and the commit, machine and command
that trained it) and export.txt (who wrote them, when, where, from which store), each whole or not at all; with
`--with-checkpoints` also checkpoints/, from which `ortholab restore DIR` continues the unfinished runs elsewhere.
No figures: `ortholab dashboard --db DIR/runs.db` draws the runs' curves."""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path

from ortholab.app.export import (
    RUNS_CSV,
    check_earlier_checkpoints,
    check_export_target,
    export_checkpoints,
    export_command,
    export_writer,
    folder_error,
    run_provenance,
    write_atomically,
    write_export_txt,
)
from ortholab.db import Store
from ortholab.db.extract import write_run_store_within
from ortholab.db.progress import duration
from ortholab.errors import ConfigError

REPORT_CSV = "report.csv"  # a folder holding it is a paper table's export (app/export.py)
PROVENANCE = ["tags", "commit", "machine", "command"]


def check_runs_export_folder(folder: str | Path) -> Path:
    """The folder an export of runs may be written into, checked before anything is read: refused when empty ('' would
    be the current folder) or holding a paper table's export, whose runs.db its report is written from."""
    if not str(folder).strip():
        raise ConfigError("--export '': give the folder to write the runs into")
    if (Path(folder) / REPORT_CSV).is_file():
        raise ConfigError(
            f"--export {folder}: it holds a report's export (`ortholab report TABLE --export`, {REPORT_CSV}); "
            "writing runs there would replace its runs.db; give another folder"
        )
    return Path(folder)


def cell(value) -> str | int | float:
    """A value as runs.csv writes it: nothing for None, a float whole (repr), a mapping or list as JSON."""
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, default=str)
    return value


def csv_lines(store: Store, rows: list[dict], columns: Sequence[str]) -> list[dict]:
    """Per run the listing's `columns` as `ortholab runs --json` gives them (the start time in full, a reason whole;
    `eta` as the table says it), its tags, and the commit, machine and command that trained it."""
    lines = []
    for row in rows:
        values = {column: cell(row.get(column)) for column in columns}
        if "eta" in values:
            values["eta"] = cell(duration(row.get("eta_s")))
        lines.append({**values, "tags": ",".join(row.get("tags") or ()), **run_provenance(store, row["id"])})
    return lines


def export_runs(
    store: Store,
    rows: list[dict],
    columns: Sequence[str],
    folder: str | Path,
    with_artifacts: bool = False,
    with_checkpoints: bool = False,
) -> list[Path]:
    """Write runs.csv, runs.db and export.txt of the listed `rows` (`ortholab runs`'s, with `columns`) into `folder`
    (created); returns the paths written. A folder it may not write into and an empty listing are refused, with
    nothing written; so is a folder whose runs.db is the store read or a store of its own (check_export_target)."""
    folder = check_runs_export_folder(folder)
    if not rows:
        raise ConfigError(f"--export {folder}: no run to export")
    check_export_target(store, folder, reader="this listing")
    check_earlier_checkpoints(folder, with_checkpoints)
    ids = [row["id"] for row in rows]
    try:
        folder.mkdir(parents=True, exist_ok=True)
        writer = export_writer()  # before any file is written: the export's own files are no "+changes"
        command = export_command("ortholab runs --export")
        lines = csv_lines(store, rows, columns)

        def write_csv(path: Path) -> None:
            with open(path, "w", newline="") as out:
                table = csv.DictWriter(out, fieldnames=[*columns, *PROVENANCE], extrasaction="ignore")
                table.writeheader()
                table.writerows(lines)

        checkpoints = export_checkpoints(store, ids, folder) if with_checkpoints else []  # before the points
        written = [write_atomically(folder / RUNS_CSV, write_csv)]
        run_store, points = write_run_store_within(store, ids, folder / "runs.db", with_artifacts=with_artifacts)
        written += [run_store, *checkpoints]
        written.append(write_export_txt(folder, store, command, writer, ids, points))
    except OSError as err:
        raise folder_error(folder, err, what="the runs") from None
    return written
