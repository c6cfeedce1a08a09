"""The run database schema: runs, their params, metric points and artifacts.

Column types are chosen to work unchanged on SQLite and PostgreSQL.
Only `db.store` and its parts (db/queries.py, db/opening.py, ...) should import this module.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (
    JSON,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    TypeDecorator,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

STATUSES = ("running", "finished", "failed", "interrupted")
TERMINAL_STATUSES = ("finished", "failed", "interrupted")
STAGES = ("fit", "validate", "test", "predict")  # predict: `ortholab predict`, linked to its source in info
MODES = ("min", "max")


def utcnow() -> datetime:
    """The current time as a UTC-aware datetime."""
    return datetime.now(timezone.utc)


class UTCDateTime(TypeDecorator):
    """A timezone-aware DateTime that is always UTC on the way in and out.

    SQLite drops the offset and hands back naive values; those are read as UTC.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:  # naive values are taken to be UTC already
            return value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc)

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc)


class NaNFloat(TypeDecorator):
    """A Float that stores NaN as NULL (SQLite cannot store NaN) and reads NULL back as NaN."""

    impl = Float
    cache_ok = True

    def process_bind_param(self, value: float | None, dialect: Any) -> float | None:
        return None if value is None or math.isnan(value) else float(value)

    def process_result_value(self, value: float | None, dialect: Any) -> float:
        return math.nan if value is None else float(value)


class Base(DeclarativeBase):
    type_annotation_map = {
        datetime: UTCDateTime,
        dict[str, Any]: JSON,
        list[str]: JSON,
        bytes: LargeBinary,
    }


class Run(Base):
    """One training, validation or test run."""

    __tablename__ = "runs"
    __table_args__ = {"sqlite_autoincrement": True}  # a deleted run's id is never given again (PostgreSQL: a sequence)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String)
    family: Mapped[str | None] = mapped_column(String)  # model family, e.g. 'scornn'
    task: Mapped[str | None] = mapped_column(String)  # e.g. 'copy', 'adding', 'pmnist'
    status: Mapped[str] = mapped_column(String, default="running")
    reason: Mapped[str | None] = mapped_column(Text)  # why the run failed or stopped, when known
    stage: Mapped[str] = mapped_column(String, default="fit")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    ended_at: Mapped[datetime | None]
    heartbeat_at: Mapped[datetime] = mapped_column(default=utcnow)  # bumped on every write
    lease_owner: Mapped[str | None] = mapped_column(String)  # the process writing the run (db/lease.py), if any
    lease_expires_at: Mapped[datetime | None]  # its lease holds until then unless renewed
    config: Mapped[dict[str, Any] | None]  # the full resolved YAML config
    main_metric: Mapped[str | None] = mapped_column(String)  # e.g. 'val/loss'
    main_metric_mode: Mapped[str] = mapped_column(String, default="min")
    baseline: Mapped[float | None] = mapped_column(Float)  # analytic baseline of the main metric
    run_dir: Mapped[str | None] = mapped_column(String)
    hostname: Mapped[str] = mapped_column(String)
    world_size: Mapped[int] = mapped_column(Integer, default=1)
    tags: Mapped[list[str]] = mapped_column(default=list)
    parameter_count: Mapped[int | None] = mapped_column(Integer)
    info: Mapped[dict[str, Any] | None]  # free-form extras


class Param(Base):
    """One flattened hyperparameter, e.g. ('model.hidden_size', '128'); value is JSON text."""

    __tablename__ = "params"

    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    key: Mapped[str] = mapped_column(String, primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class Metric(Base):
    """One scalar metric value at one step: at most one per (run, key, step), a re-run step rewrites it."""

    __tablename__ = "metrics"
    __table_args__ = (
        Index("ux_metrics_run_key_step", "run_id", "key", "step", unique=True),
        Index("ix_metrics_run_step", "run_id", "step"),  # a run's last step: one index seek
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String)
    step: Mapped[int] = mapped_column(Integer)
    epoch: Mapped[int | None] = mapped_column(Integer)
    value: Mapped[float] = mapped_column(NaNFloat, nullable=True)  # NULL means NaN
    wall_time: Mapped[float] = mapped_column(Float)  # unix seconds


class Artifact(Base):
    """A non-scalar record: an eigenvalue snapshot, a gradient-norm profile, an audio clip."""

    __tablename__ = "artifacts"
    __table_args__ = (Index("ix_artifacts_run_kind", "run_id", "kind"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String)
    name: Mapped[str] = mapped_column(String)
    step: Mapped[int | None] = mapped_column(Integer)
    epoch: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    meta: Mapped[dict[str, Any] | None]
    data: Mapped[bytes | None]
    media_type: Mapped[str | None] = mapped_column(String)  # e.g. 'audio/wav'


class StoreInfo(Base):
    """Facts about the store itself: its id (`store_id`, a UUID that run folders carry) and the OrthoLab version
    that last created or upgraded it (`written_by`); and `claim:` keys, each a row and seed that a `reproduce`
    command is training (Store.claim), so that two commands never train it twice."""

    __tablename__ = "store_info"

    key: Mapped[str] = mapped_column(String, primary_key=True)
    value: Mapped[str] = mapped_column(Text)
