"""Where a run store is: a --db value as a URL, the runs root, the default store, an export's runs.db."""

from __future__ import annotations

import os
import re
from pathlib import Path

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from ortholab.db.masking import GIVEN_VAR, mask_url
from ortholab.db.sqlite_files import sqlite_file
from ortholab.errors import home_path

ENV_VAR = "ORTHOLAB_DB"
RUNS_ENV_VAR = "ORTHOLAB_RUNS"  # the folder that holds the default store and the run folders (default ./runs)
URL_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:")  # sqlite:, postgresql+psycopg: (a path has no such start)
EXPORT_FILES = ("runs.db", "export.txt")  # an export folder's store and its provenance (app/export.py)


def store_url(value: str, said: str = "--db") -> str:
    """The database URL a --db value or $ORTHOLAB_DB names: a SQLite file's path (docs/results/x/runs.db,
    ~/runs/ortholab.db, relative to the current folder) as its absolute sqlite:/// URL; a URL as given, with a
    leading ~ in a SQLite file's name expanded (expand_home). `said`: where it was given, as a ~user with no home
    names it."""
    if URL_SCHEME.match(value):
        return expand_home(value, said)
    path = str(home_path(value, said).absolute())  # URL.create quotes what a URL would misread (?, #, %)
    return URL.create("sqlite", database=path).render_as_string(hide_password=False)


def expand_home(url: str, said: str = "--db") -> str:
    """A SQLite URL whose file starts with ~ (sqlite:///~/runs/ortholab.db) with the home folder put in, as a shell
    would: SQLite itself would make a folder named ~ in the current one. Other URLs are returned as given."""
    if not url.startswith("sqlite") or "~" not in url:
        return url
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return url  # Store reports what is wrong with it
    if not (parsed.database or "").startswith("~"):
        return url
    home = home_path(parsed.database, said)
    return parsed.set(database=str(home)).render_as_string(hide_password=False)


def is_export(path: Path) -> bool:
    """Whether a SQLite file is an export's runs.db: readers open it as it is, writers are refused."""
    return path.name == EXPORT_FILES[0] and (path.parent / EXPORT_FILES[1]).is_file()


def runs_root() -> Path:
    """`$ORTHOLAB_RUNS` if set (`~` expanded), else ./runs: where the default store and the run folders live.
    Set it to a folder outside any checkout (e.g. ~/ortholab-runs) so a fresh clone finds the same runs."""
    root = os.environ.get(RUNS_ENV_VAR)
    return home_path(root, f"${RUNS_ENV_VAR}") if root else Path("runs")


def default_db_url() -> str:
    """`$ORTHOLAB_DB` if set, else the SQLite file ortholab.db in runs_root() (absolute, from the current
    directory)."""
    return os.environ.get(ENV_VAR) or f"sqlite:///{Path.cwd() / runs_root() / 'ortholab.db'}"


def db_flag(url: str) -> tuple[str, str]:
    """The `--db` of a command to copy (none for the default store) and what to say of it: a URL holding a password
    is never printed whole, so the command names URL, the one given, and says so. A parent's --db that
    `reproduce` or `sweep` handed its fits through $ORTHOLAB_DB is named too: the user's shell lacks it."""
    if url == store_url(default_db_url()) and os.environ.get(GIVEN_VAR) != "1":
        return "", ""
    shown = mask_url(url)
    return (f" --db '{shown}'", "") if shown == url else (" --db URL", " (URL: the one given, password and all)")


def sqlite_folder(url: str) -> Path | None:
    """The folder holding a SQLite store's file, None for a server or an in-memory database."""
    file = sqlite_file(url)
    return None if file is None else file.parent
