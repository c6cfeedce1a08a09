"""`ortholab restore DIR`: an export's runs.db and checkpoints (`report TABLE --export DIR --with-checkpoints`, or
`runs [filters] --export DIR --with-checkpoints`) made the store and run folders of this machine, so that its
unfinished runs go on here with `reproduce --resume` or `fit --resume ID` (docs/checkpoints.md). Into any runs
folder: runs.db records its runs' folders by their absolute paths under the runs folder they trained in, and where
that is another one, the restored store, the runs' config.yaml and checkpoints are rewritten to the same layout under
this one (db/relocate.py), each run's info keeping the folder it trained in. It checks what the two copies by hand
left to chance: no store or run folder is there to be written over or replayed; and it is all or nothing: one that
fails midway (a full disk, a file it cannot read, Ctrl-C) removes what it had made (_Made) and can be run again."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import sqlite3
from pathlib import Path

from ortholab.command_name import as_typed
from ortholab.errors import ConfigError, home_path

USAGE = "restore DIR [--runs-dir FOLDER]"
HELP = "make an export's runs.db and checkpoints this machine's store and run folders, to continue its runs here"


def add_arguments(parser) -> None:
    parser.add_argument(
        "export",
        metavar="DIR",
        help="a folder `ortholab report TABLE --export DIR --with-checkpoints` or `ortholab runs [filters] --export "
        "DIR --with-checkpoints` wrote (runs.db, checkpoints/)",
    )
    parser.add_argument(
        "--runs-dir",
        "--runs_dir",  # as `fit --runs_dir` spells it
        dest="runs_dir",
        default=None,
        help="the runs folder to restore into, any one (default: $ORTHOLAB_RUNS, else ./runs); where the runs "
        "trained in another, the paths recorded under that one (their folders; in the store, config.yaml and "
        "checkpoints) are moved to this one, each run's info keeping where it trained; continue them with "
        "ORTHOLAB_RUNS set to it",
    )


def _checkpointed_runs(export: Path) -> dict[int, Path]:
    """The runs the export's checkpoints/ holds a folder of (store-ID/NAME/RUN, or NAME/RUN): id -> that folder."""
    held = export / "checkpoints"
    folders = {path.parent for path in held.glob("**/config.yaml")}
    folders |= {path.parents[1] for path in held.glob("**/checkpoints/*.ckpt")}  # (a config.yaml not copied)
    return {int(folder.name): folder.relative_to(held) for folder in sorted(folders) if folder.name.isdigit()}


def _target_root(given: str | None) -> tuple[Path, str]:
    """Where to restore: --runs-dir, else the runs root ($ORTHOLAB_RUNS, else ./runs), as an absolute path spelt as
    a fit spells its run folders (db.SQLLogger: `..` and `.` resolved, links kept); and how it was given."""
    from ortholab.db.store import RUNS_ENV_VAR, runs_root

    root = Path(os.path.abspath(home_path(given, "--runs-dir") if given is not None else runs_root()))
    if given is not None:
        return root, "--runs-dir"
    return root, f"${RUNS_ENV_VAR}" if os.environ.get(RUNS_ENV_VAR) else "the default runs folder"


def _moved_roots(runs: dict, root: Path) -> dict[str, str]:
    """The runs folders the runs' folders are recorded under (db/relocate.py), other than `root`: old -> `root`."""
    from ortholab.db.relocate import recorded_root

    recorded = {recorded_root(run.run_dir, run.id) for run in runs.values()}
    return {str(old): str(root) for old in recorded if old is not None and old != root}


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


class _Made:
    """What a restore made, so that one that does not finish takes back exactly that: the run folders it copied
    (whole), the folders it made above them and the runs folder (each only while empty), and its store's .part file
    with SQLite's side files of it (restore's own, also where a restore killed outright left them); nothing else that
    was there before."""

    def __init__(self, part: Path) -> None:
        from ortholab.db.sqlite_files import SQLITE_SIDE_FILES

        self.files = [part, *(part.with_name(part.name + side) for side in SQLITE_SIDE_FILES)]
        self.folders: list[tuple[Path, bool]] = []  # (folder, a run folder: removed whole), in the order made

    def folder(self, path: Path, whole: bool = False) -> None:
        """Make `path` (FileExistsError where something is there) and its missing parents, recording each."""
        if not path.parent.exists():
            self.folder(path.parent)
        path.mkdir()
        self.folders.append((path, whole))

    def take_back(self) -> None:
        for path in self.files:
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)
        for path, whole in reversed(self.folders):
            with contextlib.suppress(OSError):  # a folder not empty: something else was put there meanwhile
                if whole:
                    shutil.rmtree(path)
                else:
                    path.rmdir()


def _not_restored(err: OSError | sqlite3.OperationalError, part: Path, root: Path) -> ConfigError:
    """An error of the copy as one line: the path, the reason, and that nothing was restored."""
    if isinstance(err, shutil.Error) and err.args and isinstance(err.args[0], list):  # copytree's (src, dst, why)s
        src, dst, why = err.args[0][0]  # the first file it could not copy; `why` names it where it is an OSError's
        what = why if src in why or dst in why else f"{src}: {why}"
    elif isinstance(err, OSError):  # a copy's names the file read and the one written (filename2)
        where = err.filename if err.filename2 is None else f"{err.filename} -> {err.filename2}"
        what = f"{where or root}: {err.strerror or err}"
    else:  # SQLite's, in the store's copy (a full disk)
        what = f"{part}: {err}"
    return ConfigError(f"{what}; nothing was restored into {root} (what the restore had copied there is removed again)")


def _adopt_folders(root: Path, checkpointed: dict[int, Path], store_id: str) -> None:
    """The restored store (id `store_id`) names itself the writer of the run folders it brought (`runs delete` then
    owns them, and `fit --resume` writes into them)."""
    from ortholab.db import folder_lock

    url = f"sqlite:///{(root / 'ortholab.db').absolute()}"
    for run_id, folder in checkpointed.items():
        folder_lock.adopt(root / folder, store_id, run_id, url)


def run(args, extra: list[str]) -> None:
    from ortholab.db import Store, StoreError
    from ortholab.db.relocate import relocate_store
    from ortholab.db.schema import utcnow
    from ortholab.db.schema_version import STORE_INFO
    from ortholab.db.sqlite_files import SQLITE_SIDE_FILES
    from ortholab.training.preflight import check_writable_folder
    from ortholab.training.run_folder_move import move_folder_files

    export = Path(args.export)
    copy = export / "runs.db"
    if not copy.is_file():
        raise ConfigError(
            f"{export}: no runs.db there; give a folder `ortholab report TABLE --export DIR --with-checkpoints` (or "
            f"`ortholab runs [filters] --export DIR --with-checkpoints`) wrote"
        )
    try:
        source = Store(f"sqlite:///{copy.absolute()}", access="read")
    except StoreError as err:  # its own fix would point at --db, which restore does not take
        raise ConfigError(
            f"{str(err).split('; ')[0]}; {export} is not a folder `ortholab report|runs ... --export DIR` wrote (its "
            f"runs.db must be the export's store, as written)"
        ) from None
    runs = {run.id: source.get_run(run.id) for run in source.list_runs()}
    checkpointed = _checkpointed_runs(export)
    unknown = sorted(set(checkpointed) - set(runs))
    if unknown:
        raise ConfigError(f"{export}/checkpoints holds runs {unknown}, which its runs.db does not: not one export")
    going_on = sorted(i for i in checkpointed if runs[i].status != "finished")
    root, given_as = _target_root(args.runs_dir)
    roots = _moved_roots(runs, root)
    _refuse_what_is_there(root, list(checkpointed.values()))
    check_writable_folder(str(root), given_as, "--runs-dir or $ORTHOLAB_RUNS")  # a file, a folder not ours: one line
    part = root / "ortholab.db.part"
    made = _Made(part)
    try:  # all or nothing: whatever stops it before the store appears takes back what it made
        try:
            if not root.is_dir():
                made.folder(root)
        except OSError as err:  # what the check could not foresee (root writes anywhere, but not under /proc)
            raise ConfigError(
                f"{given_as} {root}: cannot make it ({err.strerror}); give a writable folder with --runs-dir or "
                f"$ORTHOLAB_RUNS (nothing was copied)"
            ) from None
        for folder in checkpointed.values():
            made.folder(root / folder, whole=True)
            shutil.copytree(export / "checkpoints" / folder, root / folder, dirs_exist_ok=True)  # into its own
            if roots:  # their config.yaml and checkpoints name the folder they trained in
                move_folder_files(root / folder, roots)
        for side in SQLITE_SIDE_FILES:  # an earlier restore killed outright left its journal: SQLite would replay it
            part.with_name(part.name + side).unlink(missing_ok=True)  # onto this copy (the .part is restore's own)
        shutil.copyfile(copy, part)
        now = utcnow().isoformat()
        with sqlite3.connect(part) as connection:  # this machine's store from now on, not a frozen copy (frozen_at)
            connection.execute(f"INSERT INTO {STORE_INFO} (key, value) VALUES ('restored_at', ?)", (now,))
            (store_id,) = connection.execute(f"SELECT value FROM {STORE_INFO} WHERE key = 'store_id'").fetchone()
        connection.close()
        moves = relocate_store(part, roots, now) if roots else {}
        _adopt_folders(root, checkpointed, store_id)  # before the store appears: a failure takes them back too
        os.replace(part, root / "ortholab.db")  # the store appears whole, after its run folders
    except BaseException as err:  # Ctrl-C too
        made.take_back()
        if isinstance(err, (OSError, sqlite3.OperationalError)):
            raise _not_restored(err, part, root) from None
        raise
    _say_restored(copy, root, runs, checkpointed, going_on, roots, moves)


def _say_restored(copy: Path, root: Path, runs: dict, checkpointed: dict, going_on: list, roots: dict, moves: dict):
    restored = f"Restored {len(runs)} run{'' if len(runs) == 1 else 's'} from {copy} into {root / 'ortholab.db'}"
    print(f"{restored}, with the run folders of {len(checkpointed)}." if checkpointed else f"{restored}.")
    if moves:
        print(
            as_typed(
                f"The folders of {len(moves)} run{'' if len(moves) == 1 else 's'}, recorded under "
                f"{', '.join(sorted(roots))}, are now recorded under {root} (the paths under them too); each run's "
                f"info keeps the folder it trained in (`ortholab runs show ID`)."
            )
        )
    if going_on:
        # exported, not set for one command: the hints later commands print leave out the store the shell's
        # $ORTHOLAB_RUNS names, so a one-command setting left them naming ./runs
        tables = sorted({t.split("/")[0].removeprefix("paper:") for i in going_on for t in runs[i].tags if _row(t)})
        fit = f"`ortholab fit --resume {going_on[0] if len(going_on) == 1 else 'ID'}`"
        table = f" {tables[0]}" if len(tables) == 1 else ""  # several: `reproduce --resume` continues every table
        rows = f"`ortholab reproduce{table} --resume` (a paper's rows) or " if tables else ""
        print(
            as_typed(
                f"Unfinished, with their checkpoints: {', '.join(map(str, going_on))}. Continue with "
                f"`export ORTHOLAB_RUNS={shlex.quote(str(root))}`, then {rows}{fit}."
            )
        )
    else:
        print("No unfinished run among them: the store takes new runs and seeds beside these.")


def _row(tag: str) -> bool:
    """A `paper:TABLE/ROW` tag: the run is a paper row's, which `reproduce TABLE --resume` continues."""
    return tag.startswith("paper:") and "/" in tag
