"""Plain, immutable records that the store hands to readers (CLI, dashboard)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class MetricPoint:
    """One value of one metric."""

    step: int
    epoch: int | None
    value: float  # NaN where the run logged NaN
    wall_time: float  # unix seconds


@dataclass(frozen=True)
class ArtifactRecord:
    """An artifact's description; its bytes come from `Store.artifact_data`."""

    id: int
    run_id: int
    kind: str
    name: str
    step: int | None
    epoch: int | None
    created_at: datetime
    meta: dict[str, Any] | None
    media_type: str | None


@dataclass(frozen=True)
class RunSummary:
    """One line of the runs table: identity, status and the main metric at a glance."""

    id: int
    name: str
    family: str | None
    task: str | None
    status: str
    reason: str | None  # why it failed or stopped, when known (e.g. the NaN guard's message)
    stage: str
    steps: int  # highest step of any metric point, 0 if none
    main_metric: str | None
    main_metric_mode: str
    best: float | None  # min or max of the main metric per mode; None without points
    last: float | None  # main metric at the highest step; None without points
    baseline: float | None
    created_at: datetime
    ended_at: datetime | None
    heartbeat_at: datetime
    parameter_count: int | None
    tags: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON-friendly values (datetimes as ISO 8601 strings, tuples as lists)."""
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}


@dataclass(frozen=True)
class RunDetail(RunSummary):
    """Everything about one run except its metric points and artifacts."""

    config: dict[str, Any] | None
    params: dict[str, Any]  # flattened dotted keys -> decoded values
    run_dir: str | None
    hostname: str
    world_size: int
    info: dict[str, Any] | None


def _plain(value: Any) -> Any:
    """`value` with datetimes as ISO strings and tuples as lists."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value
