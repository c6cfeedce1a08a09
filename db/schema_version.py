"""Versions of the store's schema (Alembic migrations in db/migrations): create, check, upgrade.

A new database gets the current tables and the head revision. An existing one must be at the head revision:
an older store is upgraded by `ortholab db upgrade` (never implicitly, since a shared PostgreSQL store may
serve several OrthoLab installs), and a store from a newer OrthoLab is refused.
"""
from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection
from sqlalchemy.schema import CreateIndex, CreateTable

from ortholab.db.schema import Base

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
OUR_TABLES = frozenset(Base.metadata.tables)
VERSION_TABLE = "ortholab_schema_version"  # not Alembic's default name: Optuna keeps its own in the same store
FIRST_REVISION = "0001"


class SchemaMismatch(Exception):
    """The database holds something this OrthoLab cannot use as it is; the message says what to do."""


def alembic_config(connection: Connection) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    return ScriptDirectory(str(MIGRATIONS)).get_current_head()


def current_revision(connection: Connection) -> str | None:
    return MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE}).get_current_revision()


def ensure_current(connection: Connection) -> None:
    """Create a new store at the head revision, accept one at head, raise SchemaMismatch otherwise."""
    tables = set(inspect(connection).get_table_names())
    if not tables & (OUR_TABLES | {VERSION_TABLE}):  # new, or someone else's (Optuna's tables come after ours)
        if tables:
            raise SchemaMismatch(f"it is not an OrthoLab store (it holds the tables {sorted(tables)}); "
                                 f"give a new file or an empty database")
        _create(connection)
        return
    revision, head = current_revision(connection), head_revision()
    if revision == head:
        return
    if revision is None or revision in _known_revisions():
        raise SchemaMismatch(f"its schema is at revision {revision or 'none (written before versioning)'} and this "
                             f"OrthoLab needs {head}; run `ortholab db upgrade --db URL` once (back it up first)")
    raise SchemaMismatch(f"it was written by a newer OrthoLab (schema revision {revision}, this one knows up to "
                         f"{head}); upgrade OrthoLab")


def upgrade(connection: Connection) -> tuple[str | None, str]:
    """Migrate a store to the head revision; (revision before, revision after)."""
    before = current_revision(connection)
    config = alembic_config(connection)
    if before is None and "runs" in inspect(connection).get_table_names():
        command.stamp(config, FIRST_REVISION)  # a store from before versioning holds the first schema
    command.upgrade(config, "head")
    return before, current_revision(connection)


def _create(connection: Connection) -> None:
    """The current tables and the head revision; IF NOT EXISTS and a guarded insert make concurrent starts safe."""
    for table in Base.metadata.sorted_tables:
        connection.execute(CreateTable(table, if_not_exists=True))
        for index in table.indexes:
            connection.execute(CreateIndex(index, if_not_exists=True))
    connection.execute(text(f"CREATE TABLE IF NOT EXISTS {VERSION_TABLE} "
                            f"(version_num VARCHAR(32) NOT NULL PRIMARY KEY)"))
    connection.execute(text(f"INSERT INTO {VERSION_TABLE} (version_num) SELECT :head WHERE NOT EXISTS "
                            f"(SELECT 1 FROM {VERSION_TABLE})"), {"head": head_revision()})


def _known_revisions() -> set[str]:
    return {script.revision for script in ScriptDirectory(str(MIGRATIONS)).walk_revisions()}
