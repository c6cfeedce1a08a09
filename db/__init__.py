"""The run database: a SQL store of runs, params, metrics and artifacts, and a Lightning logger writing it."""

from typing import Any

from ortholab.db.records import ArtifactRecord, MetricPoint, RunDetail, RunSummary
from ortholab.db.store import Store, StoreError, default_db_url, runs_root

__all__ = [
    "ArtifactRecord",
    "MetricPoint",
    "RunDetail",
    "RunSummary",
    "SQLLogger",
    "Store",
    "StoreError",
    "default_db_url",
    "runs_root",
]


def __getattr__(name: str) -> Any:
    # SQLLogger pulls in Lightning (seconds to import); readers such as `ortholab runs` never need it
    if name == "SQLLogger":
        from ortholab.db.logger import SQLLogger

        return SQLLogger
    raise AttributeError(f"module 'db' has no attribute {name!r}")
