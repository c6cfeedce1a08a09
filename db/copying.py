"""Copying runs from one store's database into another's, under the same ids, in one transaction there."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from sqlalchemy import insert, select
from sqlalchemy.engine import Engine

from ortholab.db.queries import chunks
from ortholab.db.schema import Artifact, Metric, Param, Run
from ortholab.db.store_errors import StoreError


def copy_runs(
    from_engine: Engine,
    to_engine: Engine,
    run_ids: Iterable[int],
    keep: Callable[[str, int], Iterable[int]] | None,
    with_artifacts: bool,
    shown: str,
) -> None:
    """Copy runs (their rows, params and metric points, artifacts with `with_artifacts`) from the store of
    `from_engine` into that of `to_engine`, under the same ids (runs and points), in one transaction there.
    `keep(key, n)` gives the indices (in step order) of a series' n points to copy (None: all); a copied run holds
    no lease. `shown` names the source store (its URL, password masked) in the StoreError of a run it lacks."""
    ids = sorted(set(int(i) for i in run_ids))
    runs = {c.name: c for c in Run.__table__.columns}
    with from_engine.connect() as source, to_engine.begin() as sink:
        for chunk in chunks(ids):
            rows = [dict(r._mapping) for r in source.execute(select(Run.__table__).where(Run.id.in_(chunk)))]
            missing = set(chunk) - {r["id"] for r in rows}
            if missing:
                raise StoreError(f"No run with id {min(missing)} in {shown}.")
            for row in rows:
                row.update(lease_owner=None, lease_expires_at=None)
            sink.execute(insert(Run.__table__), [{k: v for k, v in r.items() if k in runs} for r in rows])
            params = [dict(r._mapping) for r in source.execute(select(Param.__table__).where(Param.run_id.in_(chunk)))]
            if params:
                sink.execute(insert(Param.__table__), params)
            if with_artifacts:
                for artifact in source.execute(select(Artifact.__table__).where(Artifact.run_id.in_(chunk))):
                    sink.execute(insert(Artifact.__table__), [dict(artifact._mapping)])
        for run_id in ids:
            keys = source.execute(select(Metric.key).where(Metric.run_id == run_id).distinct()).scalars()
            for key in sorted(keys):
                points = [
                    dict(r._mapping)
                    for r in source.execute(
                        select(Metric.__table__).where(Metric.run_id == run_id, Metric.key == key).order_by(Metric.step)
                    )
                ]
                chosen = points if keep is None else [points[i] for i in keep(key, len(points))]
                if chosen:  # under their own ids too: a copied run's checkpoint watermarks (ids) still hold
                    sink.execute(insert(Metric.__table__), chosen)
