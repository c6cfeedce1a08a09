"""One point per (run, key, step); run leases; the store's id.

- metrics: duplicate (run, key, step) points are removed, keeping the one logged last (a re-run step's value), then
  a unique index makes them impossible; an index on (run, step) gives `ortholab runs` each run's last step.
- runs.lease_owner, runs.lease_expires_at: which process writes the run (db/lease.py).
- store_info: the store's id (run folders carry it, so two stores never share one) and the OrthoLab that wrote it.

Revision ID: 0003
Revises: 0002
"""
import uuid

import sqlalchemy as sa
from alembic import context, op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

UTC_TIME = sa.DateTime(timezone=True)
DUPLICATES = """DELETE FROM metrics WHERE EXISTS (SELECT 1 FROM metrics AS later WHERE later.run_id = metrics.run_id
AND later.key = metrics.key AND later.step = metrics.step AND later.id > metrics.id)"""


def upgrade() -> None:
    bind = op.get_bind()
    inspector = sa.inspect(bind)
    if "store_info" not in inspector.get_table_names():
        info = op.create_table("store_info", sa.Column("key", sa.String, primary_key=True),
                               sa.Column("value", sa.Text, nullable=False))
        op.bulk_insert(info, [{"key": "store_id", "value": uuid.uuid4().hex}])
    columns = {c["name"] for c in inspector.get_columns("runs")}
    with op.batch_alter_table("runs") as batch:
        if "lease_owner" not in columns:
            batch.add_column(sa.Column("lease_owner", sa.String))
        if "lease_expires_at" not in columns:
            batch.add_column(sa.Column("lease_expires_at", UTC_TIME))
    removed = bind.execute(sa.text(DUPLICATES)).rowcount  # served by the (run_id, key, step) index
    context.config.attributes["duplicate_points_removed"] = removed
    indexes = {i["name"] for i in inspector.get_indexes("metrics")}
    if "ix_metrics_run_key_step" in indexes:
        op.drop_index("ix_metrics_run_key_step", table_name="metrics")
    if "ux_metrics_run_key_step" not in indexes:  # idempotent: a store half-migrated by an older OrthoLab has it
        op.create_index("ux_metrics_run_key_step", "metrics", ["run_id", "key", "step"], unique=True)
    if "ix_metrics_run_step" not in indexes:
        op.create_index("ix_metrics_run_step", "metrics", ["run_id", "step"])


def downgrade() -> None:
    op.drop_index("ix_metrics_run_step", table_name="metrics")
    op.drop_index("ux_metrics_run_key_step", table_name="metrics")
    op.create_index("ix_metrics_run_key_step", "metrics", ["run_id", "key", "step"])
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("lease_expires_at")
        batch.drop_column("lease_owner")
    op.drop_table("store_info")
