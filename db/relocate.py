"""A store's runs moved to another runs folder (`ortholab restore DIR --runs-dir FOLDER`): a store records each run's
folder by its absolute path (RUNS/store-ID/NAME/RUN), and beside it other paths under that runs folder (the store's
own file in the config's `db`, a `--runs_dir`, an evaluated or predicted checkpoint, a predictions file). Each is
rewritten from under the runs folder it names to under the new one, in the same relative layout; what a command was
typed as (info's `command`s) stays as typed, and each moved run's info['restores'] keeps the folder it trained in.

`moved` rewrites any value (a config, a checkpoint's callback states, a path) the same way, for the files of the run
folders (training/run_folder_move.py)."""

from __future__ import annotations

import copy
import json
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

SQLITE_PREFIXES = ("", "sqlite:///")  # a path as itself, or a SQLite store's URL naming its file
KEPT = ("command", "restores")  # info's commands as typed and the folders runs were restored from: never rewritten


def recorded_root(run_dir: str | None, run_id: int) -> Path | None:
    """The runs folder holding run `run_id`'s recorded folder, RUNS/store-ID/NAME/RUN (RUNS/NAME/RUN of older runs);
    None where the folder is not in such a layout (not absolute, not named for the run, or directly under the
    filesystem's root), so that nothing outside a runs folder is ever rewritten."""
    if not run_dir:
        return None
    path = Path(run_dir)
    if not path.is_absolute() or path.name != str(run_id) or len(path.parts) < 4:
        return None
    root = path.parents[2] if path.parents[1].name.startswith("store-") else path.parents[1]
    return None if root == Path(root.anchor) else root


def moved_path(value: str, roots: Mapping[str, str]) -> str:
    """`value` with the runs folder it lies under (a key of `roots`, the longest first; also as a SQLite URL's file)
    replaced by that folder's new place; `value` itself where it lies under none."""
    for old in sorted(roots, key=len, reverse=True):
        for prefix in SQLITE_PREFIXES:
            start = prefix + old
            if value == start or value.startswith(start + "/"):
                return prefix + roots[old] + value[len(start) :]
    return value


def moved(value: Any, roots: Mapping[str, str]) -> Any:
    """`value` (JSON-like: dicts, lists, tuples, strings; anything else, a tensor, kept) with every path string and
    dict key under a runs folder of `roots` rewritten (moved_path), and the values of KEPT's keys kept as they are.
    What holds nothing to rewrite is returned as the very object given (`moved(x, roots) is x`: nothing moved)."""
    if isinstance(value, str):
        return moved_path(value, roots)
    if isinstance(value, dict):
        items = [
            (moved_path(k, roots) if isinstance(k, str) else k, v if k in KEPT else moved(v, roots))
            for k, v in value.items()
        ]
        if all(k is old_k and v is old_v for (k, v), (old_k, old_v) in zip(items, value.items(), strict=True)):
            return value
        duplicate = copy.copy(value)  # its type and attributes kept (a state dict's _metadata)
        duplicate.clear()
        duplicate.update(items)
        return duplicate
    if type(value) in (list, tuple):
        items = [moved(v, roots) for v in value]
        return value if all(new is old for new, old in zip(items, value, strict=True)) else type(value)(items)
    return value


def relocate_store(db_file: Path, roots: Mapping[str, str], at: str) -> dict[int, tuple[str, str]]:
    """Rewrite the SQLite store `db_file` (a restore's copy, not yet in use) from the runs folders `roots` names (old
    -> new) to their new places: every run's folder, config, info, params and artifacts' meta. A run whose folder
    moved gets a `restores` entry in its info (when, from where, to where). Returns {run id: (old, new) folder}."""
    moves: dict[int, tuple[str, str]] = {}
    with sqlite3.connect(db_file) as connection:
        rows = connection.execute("SELECT id, run_dir, config, info FROM runs").fetchall()
        for run_id, run_dir, config, info in rows:
            new_dir = moved_path(run_dir, roots) if run_dir else run_dir
            new_info = moved(json.loads(info), roots) if info else None
            if new_dir != run_dir:
                moves[run_id] = (run_dir, new_dir)
                entry = {"at": at, "from": run_dir, "to": new_dir}
                new_info = {**(new_info or {}), "restores": [*(new_info or {}).get("restores", []), entry]}
            connection.execute(
                "UPDATE runs SET run_dir = ?, config = ?, info = ? WHERE id = ?",
                (new_dir, _json(config, roots), None if new_info is None else json.dumps(new_info), run_id),
            )
        for table, column, keys in (("params", "value", ("run_id", "key")), ("artifacts", "meta", ("id",))):
            where = " AND ".join(f"{key} = ?" for key in keys)
            for *key, value in connection.execute(f"SELECT {', '.join(keys)}, {column} FROM {table}").fetchall():
                rewritten = _json(value, roots)
                if rewritten != value:
                    connection.execute(f"UPDATE {table} SET {column} = ? WHERE {where}", (rewritten, *key))
    connection.close()
    return moves


def _json(text: str | None, roots: Mapping[str, str]) -> str | None:
    """JSON text with its paths moved; the text as it was where nothing in it moves."""
    if text is None:
        return None
    value = json.loads(text)
    rewritten = moved(value, roots)
    return text if rewritten is value else json.dumps(rewritten)
