"""runs.reason: why a run failed or stopped (the NaN guard's message, the signal that interrupted it).

Revision ID: 0002
Revises: 0001
"""
import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    columns = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("runs")}
    if "reason" not in columns:  # stores made just before versioning may have it already
        with op.batch_alter_table("runs") as batch:
            batch.add_column(sa.Column("reason", sa.Text))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("reason")
