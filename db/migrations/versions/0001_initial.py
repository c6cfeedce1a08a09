"""The first versioned schema: runs, params, metrics, artifacts.

Revision ID: 0001
Revises:
"""
import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

UTC_TIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String, nullable=False),
        sa.Column("family", sa.String),
        sa.Column("task", sa.String),
        sa.Column("status", sa.String, nullable=False),
        sa.Column("stage", sa.String, nullable=False),
        sa.Column("created_at", UTC_TIME, nullable=False),
        sa.Column("ended_at", UTC_TIME),
        sa.Column("heartbeat_at", UTC_TIME, nullable=False),
        sa.Column("config", sa.JSON),
        sa.Column("main_metric", sa.String),
        sa.Column("main_metric_mode", sa.String, nullable=False),
        sa.Column("baseline", sa.Float),
        sa.Column("run_dir", sa.String),
        sa.Column("hostname", sa.String, nullable=False),
        sa.Column("world_size", sa.Integer, nullable=False),
        sa.Column("tags", sa.JSON, nullable=False),
        sa.Column("parameter_count", sa.Integer),
        sa.Column("info", sa.JSON),
    )
    op.create_table(
        "params",
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("key", sa.String, primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
    )
    op.create_table(
        "metrics",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("key", sa.String, nullable=False),
        sa.Column("step", sa.Integer, nullable=False),
        sa.Column("epoch", sa.Integer),
        sa.Column("value", sa.Float),
        sa.Column("wall_time", sa.Float, nullable=False),
    )
    op.create_index("ix_metrics_run_key_step", "metrics", ["run_id", "key", "step"])
    op.create_table(
        "artifacts",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("kind", sa.String, nullable=False),
        sa.Column("name", sa.String, nullable=False),
        sa.Column("step", sa.Integer),
        sa.Column("epoch", sa.Integer),
        sa.Column("created_at", UTC_TIME, nullable=False),
        sa.Column("meta", sa.JSON),
        sa.Column("data", sa.LargeBinary),
        sa.Column("media_type", sa.String),
    )
    op.create_index("ix_artifacts_run_kind", "artifacts", ["run_id", "kind"])


def downgrade() -> None:
    for table in ("artifacts", "metrics", "params", "runs"):
        op.drop_table(table)
