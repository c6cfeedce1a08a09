"""Versions of the store's schema (Alembic migrations in db/migrations): create, check, upgrade.

A new database gets the current tables and the head revision. An existing one must be at the head revision:
an older store is upgraded by `ortholab db upgrade` (never implicitly, since a shared PostgreSQL store may
serve several OrthoLab installs), and a store from a newer OrthoLab is refused, naming the version that wrote it.
A database holding someone else's tables is neither created in nor upgraded unless the user says so.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection
from sqlalchemy.schema import CreateIndex, CreateTable

from ortholab.db.schema import Base, StoreInfo

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
OUR_TABLES = frozenset(Base.metadata.tables)
VERSION_TABLE = "ortholab_schema_version"  # not Alembic's default name: Optuna keeps its own in the same store
FIRST_REVISION = "0001"
STORE_INFO = StoreInfo.__tablename__
MIGRATION_LOCK_KEY = 0x6F72_7468_6F6C  # PostgreSQL advisory lock id of `ortholab db upgrade` ("orthol")


@dataclass(frozen=True)
class Upgraded:
    """What `ortholab db upgrade` did."""

    before: str | None
    after: str
    duplicate_points_removed: int = 0


class SchemaMismatch(Exception):
    """The database holds something this OrthoLab cannot use as it is; the message says what to do."""


class NoStore(SchemaMismatch):
    """The database holds no tables at all, and the caller may not create them (a reader)."""


def alembic_config(connection: Connection) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    return ScriptDirectory(str(MIGRATIONS)).get_current_head()


def current_revision(connection: Connection) -> str | None:
    return MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE}).get_current_revision()


def ortholab_version() -> str:
    try:
        return metadata.version("ortholab")
    except metadata.PackageNotFoundError:
        return "unknown"


def ensure_current(connection: Connection, create: bool = True) -> bool:
    """Accept a store at the head revision; create a new one there when `create` (writers); raise SchemaMismatch
    otherwise, saying what to do. True when it created the store."""
    tables = set(inspect(connection).get_table_names())
    if not tables & (OUR_TABLES | {VERSION_TABLE}):  # new, or someone else's (Optuna's tables come after ours)
        if tables:
            raise SchemaMismatch(
                f"it is not an OrthoLab store (it holds the tables {sorted(tables)}); "
                f"give a new file or an empty database, or add OrthoLab's tables beside them with "
                f"`ortholab db upgrade --allow-foreign --db URL`"
            )
        if not create:
            raise NoStore(
                "it holds no OrthoLab store yet (no runs were recorded there); check the URL, or "
                "record a run there first with `ortholab fit --db URL` (`ortholab db upgrade --db URL` makes it an "
                "empty store, for a dashboard started before the first run)"
            )
        _create(connection)
        return True
    revision, head = current_revision(connection), head_revision()
    if revision == head:
        return False
    if revision is None or revision in _known_revisions():
        raise SchemaMismatch(
            f"its schema is at revision {revision or 'none (written before versioning)'} and this "
            f"OrthoLab needs {head}; run `ortholab db upgrade --db URL` once (back it up first)"
        )
    raise SchemaMismatch(_newer(connection, revision))


def _newer(connection: Connection, revision: str) -> str:
    writer = store_facts(connection).get("written_by")
    version = f"OrthoLab {writer}, " if writer else ""
    return (
        f"it was written by a newer OrthoLab ({version}schema revision {revision}; this OrthoLab "
        f"{ortholab_version()} knows revisions up to {head_revision()}); upgrade OrthoLab to use it"
    )


def store_facts(connection: Connection) -> dict[str, str]:
    """The store_info rows (store_id, written_by); {} for a store without that table."""
    if STORE_INFO not in inspect(connection).get_table_names():
        return {}
    return {key: value for key, value in connection.execute(text(f"SELECT key, value FROM {STORE_INFO}"))}


def upgrade(connection: Connection, allow_foreign: bool = False) -> Upgraded:
    """Migrate a store to the head revision. Refused (SchemaMismatch) for a store from a newer OrthoLab and, unless
    `allow_foreign`, for a database holding tables but no OrthoLab schema. Call it first in a transaction: it takes
    the migration lock, so two upgrades at once run one after the other and the whole upgrade commits or none."""
    _lock_for_migration(connection)
    tables = set(inspect(connection).get_table_names())
    before = current_revision(connection)
    if tables and not tables & (OUR_TABLES | {VERSION_TABLE}) and not allow_foreign:
        raise SchemaMismatch(
            f"it is not an OrthoLab store (it holds the tables {sorted(tables)}), so there is "
            f"nothing to upgrade; to add OrthoLab's tables to this database anyway, run `ortholab "
            f"db upgrade --allow-foreign --db URL`"
        )
    if before is not None and before not in _known_revisions():
        raise SchemaMismatch(_newer(connection, before))
    config = alembic_config(connection)
    if before is None and "runs" in tables:
        command.stamp(config, FIRST_REVISION)  # a store from before versioning holds the first schema
    command.upgrade(config, "head")
    _record_writer(connection)
    return Upgraded(before, current_revision(connection), config.attributes.get("duplicate_points_removed", 0))


def _lock_for_migration(connection: Connection) -> None:
    """Serialise migrations: SQLite's write lock for the whole upgrade (one transaction, DDL included), or
    PostgreSQL's transaction-scoped advisory lock; the second upgrade then finds the store already at head."""
    if connection.dialect.name == "sqlite":
        connection.exec_driver_sql("BEGIN IMMEDIATE")  # pysqlite would run each DDL statement on its own
    elif connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})


def _record_writer(connection: Connection) -> None:
    connection.execute(text(f"DELETE FROM {STORE_INFO} WHERE key = 'written_by'"))
    connection.execute(
        text(f"INSERT INTO {STORE_INFO} (key, value) VALUES ('written_by', :version)"), {"version": ortholab_version()}
    )


def _create(connection: Connection) -> None:
    """The current tables and the head revision; IF NOT EXISTS and a guarded insert make concurrent starts safe."""
    for table in Base.metadata.sorted_tables:
        connection.execute(CreateTable(table, if_not_exists=True))
        for index in table.indexes:
            connection.execute(CreateIndex(index, if_not_exists=True))
    connection.execute(
        text(f"CREATE TABLE IF NOT EXISTS {VERSION_TABLE} (version_num VARCHAR(32) NOT NULL PRIMARY KEY)")
    )
    connection.execute(
        text(
            f"INSERT INTO {VERSION_TABLE} (version_num) SELECT :head WHERE NOT EXISTS (SELECT 1 FROM {VERSION_TABLE})"
        ),
        {"head": head_revision()},
    )
    for key, value in (("store_id", uuid.uuid4().hex), ("written_by", ortholab_version())):
        connection.execute(
            text(
                f"INSERT INTO {STORE_INFO} (key, value) SELECT :key, :value WHERE NOT EXISTS "
                f"(SELECT 1 FROM {STORE_INFO} WHERE key = :present)"
            ),
            {"key": key, "value": value, "present": key},
        )  # one use each: PostgreSQL types them


def _known_revisions() -> set[str]:
    return {script.revision for script in ScriptDirectory(str(MIGRATIONS)).walk_revisions()}
