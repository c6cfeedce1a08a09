"""SQL the store's calls share: the run summary query, ids in chunks, rows straight from the driver, upserted points."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from sqlalchemy import and_, case, delete, exists, func, insert, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from ortholab.db.schema import Metric, Run

IN_CHUNK = 500  # ids per IN (...) list: well under every backend's limit on bound parameters


def driver_rows(session: Session, query: Any) -> list[tuple]:
    """The rows of a SELECT as the database driver returns them (tuples; no SQLAlchemy type processing: NULL is
    None), on the session's connection and transaction."""
    compiled = query.compile(dialect=session.get_bind().dialect)
    params = compiled.construct_params()
    arguments = tuple(params[name] for name in compiled.positiontup) if compiled.positional else params
    cursor = session.connection().connection.cursor()
    try:
        cursor.execute(str(compiled), arguments)
        return cursor.fetchall()
    finally:
        cursor.close()


def chunks(ids: list[int]) -> Iterator[list[int]]:
    """`ids` in lists of at most IN_CHUNK, for IN (...) lists."""
    for start in range(0, len(ids), IN_CHUNK):
        yield ids[start : start + IN_CHUNK]


def summary_query(*extra_columns: Any):
    """SELECT of the RunSummary columns; steps, best and last are correlated subqueries over `metrics`: steps and
    last one index seek per run (ix_metrics_run_step, ux_metrics_run_key_step), best a read of the main metric's
    range of the unique index (an index on (run, key, value) would make it a seek too, at 40% more store size)."""
    of_run = Metric.run_id == Run.id
    main = and_(of_run, Metric.key == Run.main_metric)
    steps = select(func.max(Metric.step)).where(of_run).scalar_subquery()
    has_main = exists().where(main)
    low = select(func.min(Metric.value)).where(main).scalar_subquery()  # NULL (NaN) points are never the best
    high = select(func.max(Metric.value)).where(main).scalar_subquery()
    last = select(Metric.value).where(main).order_by(Metric.step.desc()).limit(1).scalar_subquery()
    return select(
        Run.id,
        Run.name,
        Run.family,
        Run.task,
        Run.status,
        Run.reason,
        Run.stage,
        func.coalesce(steps, 0).label("steps"),
        Run.main_metric,
        Run.main_metric_mode,
        case((Run.main_metric_mode == "max", high), else_=low).label("best"),
        last.label("last"),
        has_main.label("n_main"),
        Run.baseline,
        Run.created_at,
        Run.ended_at,
        Run.heartbeat_at,
        Run.parameter_count,
        Run.tags,
        *extra_columns,
    )


def summary_fields(row: Mapping[str, Any]) -> dict[str, Any]:
    """A summary query row as dataclass keyword arguments."""
    fields = dict(row)
    if not fields.pop("n_main"):  # no main-metric points: nothing to report
        fields["best"] = fields["last"] = None
    fields["tags"] = tuple(fields["tags"] or ())
    return fields


def upsert_points(session: Session, rows: list[dict[str, Any]]) -> None:
    """Insert metric points; one at a (run, key, step) already recorded takes the new value (ON CONFLICT)."""
    name = session.get_bind().dialect.name
    dialect = {"sqlite": sqlite, "postgresql": postgresql}.get(name)
    if dialect is None:  # other backends: delete-then-insert in the same transaction
        for row in rows:
            session.execute(
                delete(Metric).where(
                    Metric.run_id == row["run_id"], Metric.key == row["key"], Metric.step == row["step"]
                )
            )
        session.execute(insert(Metric), rows)
        return
    statement = dialect.insert(Metric)
    statement = statement.on_conflict_do_update(
        index_elements=[Metric.run_id, Metric.key, Metric.step],
        set_={
            "epoch": statement.excluded.epoch,
            "value": statement.excluded.value,
            "wall_time": statement.excluded.wall_time,
        },
    )
    session.execute(statement, rows)
