"""What goes wrong with a run store: the errors Store raises, and the words that say what to do about them."""

from __future__ import annotations

import os
import re

from sqlalchemy.exc import SQLAlchemyError

from ortholab.db.locations import ENV_VAR, RUNS_ENV_VAR, sqlite_folder
from ortholab.db.masking import mask_url
from ortholab.db.sqlite_files import starts_as_sqlite
from ortholab.errors import ReportedError

FIX = f"pass --db URL, or set {ENV_VAR} to a writable database or {RUNS_ENV_VAR} to a writable folder"
DAMAGED = "the file is damaged (SQLite found bytes that are not text where its schema or a text value belongs)"
DAMAGED_WORDS = re.compile(r"damaged|malformed|file is not a database|Could not decode to UTF-8|disk image")
READER_FIX = f"check --db, {ENV_VAR} or {RUNS_ENV_VAR}: it must name a store this machine can read"  # no write
DAMAGED_FIX = "nothing was changed; restore it from a backup (`sqlite3 FILE .recover` salvages what it can)"
WRONG_FILE_FIX = "nothing was changed; check --db, $ORTHOLAB_DB or $ORTHOLAB_RUNS: they name another file"
# PostgreSQL asks for a password the URL does not hold, or refuses the one given (libpq's words)
NO_PASSWORD = re.compile(r"no password supplied")
WRONG_PASSWORD = re.compile(r"password authentication failed")
PASSWORD_WAYS = "PGPASSWORD, a ~/.pgpass line, or the URL's USER:PASSWORD@HOST (percent-encoded: '@' as %40)"


class StoreError(ReportedError, RuntimeError):
    """The run database cannot be opened or written, or a request names something absent."""


class InvalidArgument(StoreError, ValueError):
    """A call's argument outside what it takes (a field, a status, a step): a ValueError as well."""


class RunMissing(StoreError):
    """The store holds no run with the id asked for (a store that failed to answer is a StoreError)."""


class StoreMissing(StoreError):
    """There is no store at the URL (no SQLite file, or a database without OrthoLab's tables) and the caller may not
    create one."""


class RunBusy(StoreError):
    """Another live process holds the run's lease: it is still being written."""


class LeaseLost(StoreError):
    """This process's lease on a run expired and another process took the run over."""


def unusable(url: str, access: str, reason: str) -> StoreError:
    """The StoreError of a store at `url` opened for `access` ('create', 'write', 'read') that failed for `reason`
    (the driver's words): what is wrong, and what to do about it."""
    fix = DAMAGED_FIX if DAMAGED_WORDS.search(reason) else FIX if access != "read" else READER_FIX
    folder = sqlite_folder(url)
    if re.search(r"unable to open database file|readonly database", reason) and folder and folder.is_dir():
        if not os.access(folder, os.W_OK):  # SQLite writes its -wal and -shm files beside the store
            reason += f" (its folder {folder} is read-only here: SQLite writes its -wal and -shm files there)"
    if fix is DAMAGED_FIX and not starts_as_sqlite(url):  # a YAML file or a CSV named by mistake
        reason, fix = "the file is no SQLite database at all (it does not begin as one)", WRONG_FILE_FIX
    elif NO_PASSWORD.search(reason):
        fix = f"the server asks this user for a password: give it by {PASSWORD_WAYS}"
    elif WRONG_PASSWORD.search(reason):
        fix = f"the server refused the password given: check it, wherever it came from ({PASSWORD_WAYS})"
    elif re.search(r"dialects:postgres(?!ql)", reason):  # the postgres:// that some hosts print
        fix = "write the URL as postgresql+psycopg://USER@HOST/DB (SQLAlchemy has no 'postgres://' scheme)"
    return StoreError(f"Cannot use the run database {mask_url(url)}: {reason}; {fix}.")


def driver_reason(error: SQLAlchemyError) -> str:
    """The driver's own words for a database error, without SQLAlchemy's boilerplate."""
    original = getattr(error, "orig", None)
    return str(original if original is not None else error).strip().splitlines()[0]
