"""SQLite files as the store uses them: per-connection settings (a lock wait, WAL for writers), connections that
never create a file, and read-only access that sees a live writer's changes or works on read-only media."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from ortholab.db.schema_version import OUR_TABLES, VERSION_TABLE

SQLITE_WAIT_S = 30  # how long a connection waits for a lock; also for the switch to WAL (switch_to_wal)
SQLITE_PRAGMAS = (f"busy_timeout={SQLITE_WAIT_S * 1000}", "foreign_keys=ON", "synchronous=NORMAL")  # wait first
SQLITE_JOURNAL = "journal_mode=WAL"  # kept by the file: set only on an empty file or an OrthoLab store
SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")
SQLITE_WAL_HEADER_BYTE = 18  # the file format's write version: 2 in WAL mode


def sqlite_file(url: str) -> Path | None:
    """The file a SQLite store's URL names, relative paths taken from here; None for a server, an in-memory database,
    a `file:` URI or a URL that does not parse."""
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return None
    database = parsed.database or ""
    if parsed.get_backend_name() != "sqlite" or database in ("", ":memory:") or database.startswith("file:"):
        return None
    return Path(database).absolute()


def starts_as_sqlite(url: str) -> bool:
    """Whether a SQLite URL's file begins with SQLite's header (True for other URLs and unreadable files): a file
    that does not was never a store, so no backup restores it."""
    parsed = make_url(url)
    if not parsed.drivername.startswith("sqlite") or not parsed.database:
        return True
    try:
        with open(parsed.database, "rb") as file:
            return file.read(16) in (b"SQLite format 3\x00", b"")
    except OSError:
        return True


def sqlite_pragmas(set_journal: bool) -> Callable[[Any, Any], None]:
    """Per-connection SQLite settings: a generous lock wait, and (writers only) WAL so readers never block the
    writer, set only on a file that is empty or an OrthoLab store: the file keeps its journal mode, and someone
    else's is refused."""

    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        for pragma in SQLITE_PRAGMAS:
            cursor.execute(f"PRAGMA {pragma}")
        if set_journal:
            tables = {row[0] for row in cursor.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if not tables or tables & (OUR_TABLES | {VERSION_TABLE}):
                switch_to_wal(cursor)
        cursor.close()

    return on_connect


def switch_to_wal(cursor: Any) -> None:
    """WAL for the file, unless it has it already. Several processes opening a new file at once (DDP ranks, sweep
    jobs) each try the switch, and SQLite answers 'database is locked' at once, not after busy_timeout, to all but
    one: those wait and look again, for up to SQLITE_WAIT_S."""
    deadline = time.monotonic() + SQLITE_WAIT_S
    pause = 0.01
    while True:
        try:
            if cursor.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                cursor.execute(f"PRAGMA {SQLITE_JOURNAL}")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(pause)
            pause = min(pause * 2, 0.5)


def is_wal(path: Path) -> bool:
    with open(path, "rb") as f:
        header = f.read(SQLITE_WAL_HEADER_BYTE + 1)
    return len(header) > SQLITE_WAL_HEADER_BYTE and header[SQLITE_WAL_HEADER_BYTE] == 2


def sqlite_connector(path: Path, read_only: bool) -> Callable[[], sqlite3.Connection]:
    """Connections to an existing SQLite file that never create it. Read-only: `mode=ro`, which sees a live
    writer's WAL; a WAL file without side files (no writer has it open) or one on read-only media, where `mode=ro`
    cannot open it, as `immutable=1`, which creates no -wal or -shm file and reads the main file as it is. Chosen
    anew for each connection, so that a reader (with connections not pooled: Store) sees a writer that began later."""
    base = path.as_uri()

    def candidates() -> list[str]:
        if not read_only:
            return [f"{base}?mode=rw"]
        if any(Path(f"{path}{suffix}").exists() for suffix in SQLITE_SIDE_FILES) or not is_wal(path):
            return [f"{base}?mode=ro", f"{base}?immutable=1"]
        return [f"{base}?immutable=1"]

    def connect() -> sqlite3.Connection:
        error: sqlite3.Error | None = None
        for uri in candidates():
            connection = sqlite3.connect(uri, uri=True, check_same_thread=False)
            try:
                connection.execute("SELECT count(*) FROM sqlite_master").fetchone()  # opening is lazy: read now
                return connection
            except (sqlite3.Error, UnicodeDecodeError) as e:  # a damaged schema's message may not decode
                connection.close()
                error = e
        raise error

    return connect
