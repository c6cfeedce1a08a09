"""Opening a store's database: its engine for an access, checked before use, and the upgrade of its schema."""

from __future__ import annotations

import difflib
from pathlib import Path

from alembic.util import CommandError
from sqlalchemy import create_engine, event, insert
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlalchemy.pool import NullPool

from ortholab.db.locations import ENV_VAR, RUNS_ENV_VAR, default_db_url, is_export, store_url
from ortholab.db.masking import mask_url
from ortholab.db.schema import Run
from ortholab.db.schema_version import NoStore, SchemaMismatch, Upgraded, ensure_current
from ortholab.db.schema_version import upgrade as upgrade_schema
from ortholab.db.sqlite_files import sqlite_connector, sqlite_file, sqlite_pragmas, starts_as_sqlite
from ortholab.db.store_errors import (
    DAMAGED,
    DAMAGED_FIX,
    DAMAGED_WORDS,
    WRONG_FILE_FIX,
    StoreError,
    StoreMissing,
    driver_reason,
    unusable,
)

POSTGRES_CONNECT = {"connect_timeout": 10, "keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10}


def open_engine(url: str, access: str) -> tuple[Engine, bool]:
    """The engine of the store at `url` for `access` ('create', 'write', 'read') and whether opening it made the
    store: the tables created (access 'create'); the database proved to take writes (unless 'read')."""
    shown = mask_url(url)
    try:
        parsed = make_url(url)
    except ArgumentError as e:
        why = "it is not a database URL (a SQLite file is given by its path, or as sqlite:////abs/path/runs.db)"
        raise unusable(url, access, why) from e
    except ValueError as e:  # a port that is not a number
        why = f"it is not a database URL ({e}); a server is written postgresql+psycopg://user@host:5432/runs"
        raise unusable(url, access, why) from None
    is_sqlite = parsed.get_backend_name() == "sqlite"
    creator = None
    if is_sqlite and parsed.database and parsed.database != ":memory:" and not parsed.database.startswith("file:"):
        path = Path(parsed.database).absolute()  # SQLite resolves relative paths from the cwd too
        if path.is_dir():
            raise unusable(url, access, f"{path} is a directory, not a database file")
        if access != "read" and is_export(path):  # a tracked file: training would change the evidence
            raise StoreError(
                f"Cannot write the run database {shown}: it is the runs.db of an export ({path.parent}"
                f" holds its export.txt), kept as `ortholab report --export` wrote it; `ortholab restore "
                f"{path.parent}` makes a store of its runs to go on with (`dashboard` and `report` read it as "
                f"it is)."
            )
        if access == "create":
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                why = "a file is in the way" if isinstance(e, (FileExistsError, NotADirectoryError)) else e.strerror
                raise unusable(url, access, f"cannot create the directory {path.parent} ({why})") from e
        elif not path.is_file():
            shipped = (  # the exports the docs open by their paths in a checkout
                " The exports under docs/results/ come with OrthoLab's repository, not with the installed "
                "package: give their path in a checkout."
                if "docs/results/" in parsed.database.replace("\\", "/")
                else ""
            )
            near = _near_database(path)
            raise StoreMissing(
                f"The run database {shown} does not exist ({path}); {near}check --db, "
                f"${ENV_VAR} or ${RUNS_ENV_VAR} (a run database is made by the first `ortholab fit` "
                f"that records there).{shipped}"
            )
        else:
            creator = sqlite_connector(path, read_only=access == "read")
    try:
        if creator or is_sqlite:
            pooled = {"poolclass": NullPool} if creator and access == "read" else {}  # a connection a
            engine = (  # query: an immutable one (no writer then) does not outlive a writer that begins later
                create_engine(parsed, creator=creator, **pooled) if creator else create_engine(parsed)
            )
        else:  # a server's pooled connection is tested before use (one a restart ended is replaced, not failed
            # on); PostgreSQL gives up connecting after 10 s and notices a silent network cut (TCP keepalives)
            postgres = parsed.get_backend_name() == "postgresql"
            engine = create_engine(
                parsed,
                pool_pre_ping=True,
                connect_args=POSTGRES_CONNECT if postgres else {},
                # a reader's every transaction is READ ONLY at the server: a write through it fails there
                execution_options={"postgresql_readonly": True} if postgres and access == "read" else {},
            )
    except (ArgumentError, ImportError) as e:  # unknown dialect or driver not installed
        raise unusable(url, access, f"no database driver for it ({e})") from e
    if is_sqlite:
        event.listen(engine, "connect", sqlite_pragmas(set_journal=access != "read"))
    try:
        with engine.connect() as conn:
            if is_sqlite and access == "create":  # one transaction, as pysqlite commits each CREATE
                conn.exec_driver_sql("BEGIN IMMEDIATE")  # TABLE on its own: a store opened at once elsewhere
            created = ensure_current(conn, create=access == "create")  # seen whole or not at all
            conn.commit()
        if access != "read":
            with engine.connect() as conn:  # a write that is rolled back: fails now if read-only; its own id
                conn.execute(insert(Run).values(id=-1, name="write-probe", hostname=""))  # uses no sequence number
                conn.rollback()
    except SchemaMismatch as e:
        engine.dispose()
        error = StoreMissing if isinstance(e, NoStore) else StoreError
        raise error(f"Cannot use the run database {shown}: {e}.") from None
    except SQLAlchemyError as e:
        engine.dispose()
        raise unusable(url, access, driver_reason(e)) from e
    except UnicodeDecodeError:  # SQLite's own error message quotes the damaged bytes
        engine.dispose()
        raise unusable(url, access, DAMAGED) from None
    return engine, created


def upgrade_store(url: str | None = None, allow_foreign: bool = False) -> Upgraded:
    """Migrate the store at `url` to this OrthoLab's schema (`ortholab db upgrade`). Refused: a SQLite file that
    does not exist, a store from a newer OrthoLab, and (unless `allow_foreign`) a database of someone else's
    tables."""
    url = store_url(url or default_db_url())
    shown = mask_url(url)
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):  # ValueError: a port that is not a number
        raise StoreError(
            f"Cannot upgrade the run database {shown}: it is not a database URL (a SQLite file is "
            f"given by its path, or as sqlite:////abs/path/runs.db)."
        ) from None
    file = sqlite_file(url)
    if file is not None and not file.is_file():
        raise StoreError(
            f"Cannot upgrade the run database {shown}: {file} does not exist, so there is nothing to upgrade; "
            f"check --db or ${ENV_VAR}."
        )
    try:
        engine = create_engine(parsed)
    except (ArgumentError, ImportError) as e:
        raise StoreError(f"Cannot upgrade the run database {shown}: no database driver for it ({e}).") from None
    if parsed.get_backend_name() == "sqlite":  # wait for another upgrade's lock, as writers do
        event.listen(engine, "connect", sqlite_pragmas(set_journal=False))
    try:
        with engine.begin() as conn:
            return upgrade_schema(conn, allow_foreign=allow_foreign)
    except SchemaMismatch as e:
        raise StoreError(f"Cannot upgrade the run database {shown}: {e}.") from None
    except (SQLAlchemyError, CommandError) as e:
        reason = driver_reason(e) if isinstance(e, SQLAlchemyError) else str(e).splitlines()[0]
        fix = ""
        if DAMAGED_WORDS.search(reason):  # `db upgrade --db notes.txt`: said what to check, not only SQLite's words
            fix = f"; {DAMAGED_FIX}" if starts_as_sqlite(url) else f"; it is no SQLite database: {WRONG_FILE_FIX}"
        raise StoreError(f"Cannot upgrade the run database {shown}: {reason}{fix}.") from e
    finally:
        engine.dispose()


def _near_database(path: Path) -> str:
    """'did you mean FILE? Else ' for a database file beside a mistyped one (`--db runs/ortolab.db`), else ''."""
    try:
        held = [p.name for p in path.parent.iterdir() if p.suffix in (".db", ".sqlite", ".sqlite3") and p.is_file()]
    except OSError:  # no such folder, or one that cannot be read
        return ""
    near = difflib.get_close_matches(path.name, held, n=1, cutoff=0.6)
    return f"did you mean {path.parent / near[0]}? Else " if near else ""
