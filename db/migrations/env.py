"""Alembic environment for the run store: migrations run on the connection `db.schema_version` hands over."""

from alembic import context

from ortholab.db.schema_version import VERSION_TABLE

connection = context.config.attributes["connection"]
# batch mode: SQLite's ALTER TABLE is limited; our own version table: Optuna keeps `alembic_version` here too
context.configure(connection=connection, render_as_batch=True, version_table=VERSION_TABLE)
with context.begin_transaction():
    context.run_migrations()
