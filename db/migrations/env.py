"""Alembic environment for the run store: migrations run on the connection `db.schema_version` hands over."""
from alembic import context

connection = context.config.attributes["connection"]
context.configure(connection=connection, render_as_batch=True)  # batch mode: SQLite's ALTER TABLE is limited
with context.begin_transaction():
    context.run_migrations()
