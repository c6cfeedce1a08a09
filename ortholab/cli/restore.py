"""`ortholab restore DIR`: an export's runs.db and checkpoints (`report TABLE --export DIR --with-checkpoints`) made
the store and run folders of this machine, so that its unfinished runs go on here with `reproduce --resume` or `fit
--resume ID` (docs/checkpoints.md). It checks what the two copies by hand left to chance: the runs folder is the one
runs.db records its runs' folders under, and no store or run folder is there to be written over or replayed."""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

from ortholab.errors import ConfigError

USAGE = "restore DIR [--runs-dir FOLDER]"
HELP = "make an export's runs.db and checkpoints this machine's store and run folders, to continue its runs here"


def add_arguments(parser) -> None:
    parser.add_argument(
        "export",
        metavar="DIR",
        help="a folder `ortholab report TABLE --export DIR --with-checkpoints` wrote (runs.db, checkpoints/)",
    )
    parser.add_argument(
        "--runs-dir",
        "--runs_dir",  # as `fit --runs_dir` spells it
        dest="runs_dir",
        default=None,
        help="the runs folder to restore into: the one the runs trained in, as runs.db records their folders as full "
        "paths (default: that one; $ORTHOLAB_RUNS, where set, must name it)",
    )


def _checkpointed_runs(export: Path) -> dict[int, Path]:
    """The runs the export's checkpoints/ holds a folder of (store-ID/NAME/RUN, or NAME/RUN): id -> that folder."""
    held = export / "checkpoints"
    folders = {path.parent for path in held.glob("**/config.yaml")}
    folders |= {path.parents[1] for path in held.glob("**/checkpoints/*.ckpt")}  # (a config.yaml not copied)
    return {int(folder.name): folder.relative_to(held) for folder in sorted(folders) if folder.name.isdigit()}


def _target_root(roots: set[Path], given: str | None) -> Path:
    """Where to restore: the runs folder of the unfinished runs with checkpoints (`roots`), which --runs-dir or
    $ORTHOLAB_RUNS must name when given; with none, --runs-dir, else the runs root ($ORTHOLAB_RUNS, else ./runs)."""
    from ortholab.db.store import RUNS_ENV_VAR, runs_root

    if len(roots) > 1:
        raise ConfigError(
            f"runs.db records its runs' folders under {len(roots)} runs folders "
            f"({', '.join(map(str, sorted(roots)))}); restore needs one: export the runs of one machine at a time"
        )
    recorded = next(iter(roots), None)
    for flag, value in (("--runs-dir", given), (f"${RUNS_ENV_VAR}", os.environ.get(RUNS_ENV_VAR))):
        if value is None:
            continue
        chosen = Path(value).expanduser().absolute()
        if recorded is not None and chosen != recorded:
            raise ConfigError(
                f"{flag} {value}: runs.db records its runs' folders under {recorded}, and a run goes on only where "
                f"its folder was; restore with --runs-dir {recorded} (and ORTHOLAB_RUNS={recorded} for the resume)"
            )
        return chosen
    return recorded if recorded is not None else runs_root().absolute()  # nothing to go on: any runs folder


def _refuse_what_is_there(root: Path, folders: list[Path]) -> None:
    """Nothing the restore would write over: a store (its side files too: SQLite replays a -wal onto the copy)."""
    from ortholab.db.sqlite_files import SQLITE_SIDE_FILES
    from ortholab.db.store import ENV_VAR

    if os.environ.get(ENV_VAR):
        raise ConfigError(
            f"${ENV_VAR} names the store, so the restored one would not be used: unset it (the store restored is "
            f"{root / 'ortholab.db'}, the default of runs folder {root})"
        )
    for name in ("ortholab.db", *(f"ortholab.db{side}" for side in SQLITE_SIDE_FILES)):
        if (root / name).exists():
            raise ConfigError(
                f"{root / name} exists: a store is there already; restore into a runs folder without one (move it "
                f"away first; nothing was copied)"
            )
    for folder in folders:
        if (root / folder).exists():
            raise ConfigError(f"{root / folder} exists: a run folder would be written over (nothing was copied)")


def _adopt_folders(root: Path, checkpointed: dict[int, Path]) -> None:
    """The restored store names itself the writer of the run folders it brought (`runs delete` then owns them)."""
    from ortholab.db import Store, folder_lock

    url = f"sqlite:///{(root / 'ortholab.db').absolute()}"
    store_id = Store(url, access="read").store_id
    for run_id, folder in checkpointed.items():
        folder_lock.adopt(root / folder, store_id, run_id, url)


def run(args, extra: list[str]) -> None:
    from ortholab.db import Store, StoreError
    from ortholab.db.logger import runs_folder_of
    from ortholab.db.schema import utcnow
    from ortholab.db.schema_version import STORE_INFO

    export = Path(args.export)
    copy = export / "runs.db"
    if not copy.is_file():
        raise ConfigError(
            f"{export}: no runs.db there; give a folder `ortholab report TABLE --export DIR --with-checkpoints` wrote"
        )
    try:
        source = Store(f"sqlite:///{copy.absolute()}", access="read")
    except StoreError as err:  # its own fix would point at --db, which restore does not take
        raise ConfigError(
            f"{str(err).split('; ')[0]}; {export} is not a folder `ortholab report TABLE --export DIR` wrote (its "
            f"runs.db must be the export's store, as written)"
        ) from None
    runs = {run.id: source.get_run(run.id) for run in source.list_runs()}
    checkpointed = _checkpointed_runs(export)
    unknown = sorted(set(checkpointed) - set(runs))
    if unknown:
        raise ConfigError(f"{export}/checkpoints holds runs {unknown}, which its runs.db does not: not one export")
    going_on = sorted(i for i in checkpointed if runs[i].status != "finished")
    root = _target_root({runs_folder_of(runs[i].run_dir) for i in going_on if runs[i].run_dir}, args.runs_dir)
    _refuse_what_is_there(root, list(checkpointed.values()))
    root.mkdir(parents=True, exist_ok=True)
    for folder in checkpointed.values():
        shutil.copytree(export / "checkpoints" / folder, root / folder)
    part = root / "ortholab.db.part"
    shutil.copyfile(copy, part)
    with sqlite3.connect(part) as connection:  # this machine's store from now on, not a frozen copy (Store.frozen_at)
        connection.execute(f"INSERT INTO {STORE_INFO} (key, value) VALUES ('restored_at', ?)", (utcnow().isoformat(),))
    connection.close()
    os.replace(part, root / "ortholab.db")  # the store appears whole, after its run folders
    _adopt_folders(root, checkpointed)
    restored = f"Restored {len(runs)} run{'' if len(runs) == 1 else 's'} from {copy} into {root / 'ortholab.db'}"
    print(f"{restored}, with the run folders of {len(checkpointed)}." if checkpointed else f"{restored}.")
    if going_on:
        print(
            f"Unfinished, with their checkpoints: {', '.join(map(str, going_on))}. Continue with "
            f"`ORTHOLAB_RUNS={root} ortholab reproduce TABLE --resume` (a paper's rows) or "
            f"`ORTHOLAB_RUNS={root} ortholab fit --resume ID`."
        )
    else:
        print("No unfinished run among them: the store takes new runs and seeds beside these.")
