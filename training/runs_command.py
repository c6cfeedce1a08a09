"""`ortholab runs`: the recorded runs, filtered; `runs tag ID... LABEL` / `runs untag ID... LABEL` add or remove a
label; `runs delete ID...` removes runs (their rows, metric points, artifacts and run folders) after a confirmation
(`--yes` for scripts), never a run that is being written, never another run."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

from ortholab.errors import ConfigError

ACTIONS = ("tag", "untag", "delete")


def filter_rows(rows: list[dict], family: str | None = None, task: str | None = None, status: str | None = None,
                tag: str | None = None, name: str | None = None) -> list[dict]:
    """The rows matching every filter given: family, task and status exactly, a tag among the run's, a part of the
    name (case-insensitive)."""
    def keep(row: dict) -> bool:
        return ((family is None or row["family"] == family) and (task is None or row["task"] == task)
                and (status is None or row["status"] == status) and (tag is None or tag in row["tags"])
                and (name is None or name.lower() in str(row["name"]).lower()))
    return [row for row in rows if keep(row)]


def _run_ids(values: list[str], action: str) -> list[int]:
    try:
        ids = [int(v) for v in values]
    except ValueError:
        bad = next(v for v in values if not v.lstrip("-").isdigit())
        raise ConfigError(f"runs {action}: {bad!r} is not a run id; give run ids (`ortholab runs` lists them)"
                          + (" then the label" if action in ("tag", "untag") else "")) from None
    if not ids:
        usage = "ID... LABEL" if action in ("tag", "untag") else "ID..."
        raise ConfigError(f"runs {action}: give at least one run id: `ortholab runs {action} {usage}`")
    return list(dict.fromkeys(ids))


def manage(action: str, targets: list[str], db: str | None, yes: bool = False) -> None:
    """Tag, untag or delete the runs named in `targets` (for tag/untag the last target is the label)."""
    from ortholab.db import Store

    if action in ("tag", "untag"):
        if len(targets) < 2:
            raise ConfigError(f"runs {action}: give run ids then the label: `ortholab runs {action} 3 4 best`")
        ids, label = _run_ids(targets[:-1], action), targets[-1]
        if not label.strip() or any(c in label for c in "\n\t,"):
            raise ConfigError(f"runs {action}: the label {label!r} must be a word without commas or line breaks")
    else:
        ids, label = _run_ids(targets, action), None
    store = Store(db, access="write")  # never creates a store: a mistyped --db is named
    runs = {run_id: store.get_run(run_id) for run_id in ids}  # StoreError naming a missing one, before any change
    if action in ("tag", "untag"):
        for run_id in ids:
            tags = store.set_tags(run_id, add=[label] if action == "tag" else [], remove=[label] if action == "untag"
                                  else [])
            print(f"run {run_id}: tags {', '.join(tags) or '(none)'}")
        return
    busy = [message for run_id in ids if (message := store.lease_holder(run_id))]
    if busy:  # nothing deleted while one of them is being written
        raise ConfigError(busy[0].replace(", then resume;", ", then delete it;"))
    listed = "; ".join(f"{run_id} {run.name} ({run.status}{', folder ' + run.run_dir if run.run_dir else ''})"
                       for run_id, run in runs.items())
    if not yes:
        if not sys.stdin.isatty():
            raise ConfigError(f"runs delete: cannot ask for a confirmation here (stdin is not a terminal); add --yes "
                              f"to delete {listed}")
        answer = input(f"delete {len(ids)} run(s): {listed}? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing deleted")
            return
    for run_id, run in runs.items():
        store.delete_run(run_id)
        folder = Path(run.run_dir) if run.run_dir else None
        removed = ""
        if folder is not None and folder.is_dir() and folder.name == str(run_id):  # a run folder: .../<name>/<id>
            shutil.rmtree(folder)
            removed = f" and its folder {folder}"
        print(f"deleted run {run_id} ({run.name}){removed}")
