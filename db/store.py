"""The run store: the one place that reads and writes the run database.

Writers (the Lightning logger, the CLI) and readers (`ortholab runs`, the dashboard)
go through `Store`; nothing else knows the schema. Every call is its own
transaction, committed before it returns, so other processes see it at once.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import case, create_engine, delete, event, func, insert, select, update
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from ortholab.db.schema_version import OUR_TABLES, VERSION_TABLE, SchemaMismatch, ensure_current
from ortholab.db.schema_version import upgrade as upgrade_schema
from ortholab.db.records import ArtifactRecord, MetricPoint, RunDetail, RunSummary
from ortholab.db.schema import (
    MODES,
    STAGES,
    STATUSES,
    TERMINAL_STATUSES,
    Artifact,
    Metric,
    Param,
    Run,
    utcnow,
)

ENV_VAR = "ORTHOLAB_DB"
FIX = f"pass --db URL or set {ENV_VAR} to a writable database"
SQLITE_PRAGMAS = ("busy_timeout=30000", "foreign_keys=ON", "synchronous=NORMAL")  # wait first
SQLITE_JOURNAL = "journal_mode=WAL"  # kept by the file: set only on an empty file or an OrthoLab store
JSON_FIELDS = ("config", "info", "tags")
RUN_FIELDS = frozenset(Run.__table__.columns.keys()) - {"id"}


class StoreError(RuntimeError):
    """The run database cannot be opened or written, or a request names something absent."""


def default_db_url() -> str:
    """`$ORTHOLAB_DB` if set, else the SQLite file ./runs/ortholab.db (absolute, from the current directory)."""
    return os.environ.get(ENV_VAR) or f"sqlite:///{Path.cwd() / 'runs' / 'ortholab.db'}"


def flatten(params: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as one level of dotted keys: {'model': {'hidden_size': 8}} -> {'model.hidden_size': 8}."""
    flat: dict[str, Any] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = dict(value) if isinstance(value, Mapping) else value
    return flat


def to_json(value: Any) -> Any:
    """`value` reduced to what a JSON column holds; anything unserialisable becomes its str()."""
    return json.loads(json.dumps(value, default=str))


class Store:
    """Runs, params, metric points and artifacts in one SQL database (SQLite file or server).

    Opening a Store creates the tables and checks that the database takes writes,
    so a bad path fails before any training starts.
    """

    def __init__(self, url: str | None = None):
        self._url = url or default_db_url()
        self._engine = self._open()
        self._sessions = sessionmaker(self._engine, expire_on_commit=False)

    @property
    def url(self) -> str:
        """The database URL, password included."""
        return self._url

    @property
    def display_url(self) -> str:
        """The database URL with any password masked, for messages and logs."""
        try:
            return make_url(self._url).render_as_string(hide_password=True)
        except ArgumentError:
            return self._url

    def __repr__(self) -> str:
        return f"Store({self.display_url!r})"

    def close(self) -> None:
        """Close pooled connections; the Store reconnects if used again."""
        self._engine.dispose()

    # ---- opening -------------------------------------------------------------------

    def _open(self) -> Engine:
        """Create the engine and tables, and prove the database takes writes."""
        try:
            url = make_url(self._url)
        except ArgumentError as e:
            raise self._error("it is not a database URL (a file is written sqlite:////abs/path/runs.db)") from e
        is_sqlite = url.get_backend_name() == "sqlite"
        if is_sqlite and url.database and url.database != ":memory:" and not url.database.startswith("file:"):
            path = Path(url.database).absolute()  # SQLite resolves relative paths from the cwd too
            if path.is_dir():
                raise self._error(f"{path} is a directory, not a database file")
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                why = "a file is in the way" if isinstance(e, (FileExistsError, NotADirectoryError)) else e.strerror
                raise self._error(f"cannot create the directory {path.parent} ({why})") from e
        try:
            engine = create_engine(url)
        except (ArgumentError, ImportError) as e:  # unknown dialect or driver not installed
            raise self._error(f"no database driver for it ({e})") from e
        if is_sqlite:
            event.listen(engine, "connect", _set_sqlite_pragmas)
        try:
            with engine.connect() as conn:
                if is_sqlite:  # one transaction, as pysqlite commits each CREATE TABLE on its own: a store
                    conn.exec_driver_sql("BEGIN IMMEDIATE")  # opened at once elsewhere is seen whole or not at all
                ensure_current(conn)
                conn.commit()
            with engine.connect() as conn:  # a write that is rolled back: fails now if read-only
                conn.execute(insert(Run).values(name="write-probe", hostname=""))
                conn.rollback()
        except SchemaMismatch as e:
            engine.dispose()
            raise StoreError(f"Cannot use the run database {self.display_url}: {e}.") from None
        except SQLAlchemyError as e:
            engine.dispose()
            raise self._error(_reason(e)) from e
        return engine

    @staticmethod
    def upgrade(url: str | None = None) -> tuple[str | None, str]:
        """Migrate the store at `url` to this OrthoLab's schema (`ortholab db upgrade`); (before, after)."""
        engine = create_engine(url or default_db_url())
        try:
            with engine.begin() as conn:
                return upgrade_schema(conn)
        except SQLAlchemyError as e:
            raise StoreError(f"Cannot upgrade the run database {url}: {_reason(e)}.") from e
        finally:
            engine.dispose()

    def _error(self, reason: str) -> StoreError:
        return StoreError(f"Cannot use the run database {self.display_url}: {reason}; {FIX}.")

    @contextmanager
    def _session(self) -> Iterator[Session]:
        """One transaction, committed on success; database failures become StoreError."""
        try:
            with self._sessions.begin() as session:
                yield session
        except SQLAlchemyError as e:
            raise self._error(_reason(e)) from e

    def _touch(self, session: Session, run_id: int, **values: Any) -> None:
        """Update the run's columns and bump its heartbeat; StoreError if there is no such run."""
        values = {"heartbeat_at": utcnow(), **values}
        result = session.execute(update(Run).where(Run.id == run_id).values(**values))
        if result.rowcount == 0:
            raise StoreError(f"No run with id {run_id} in {self.display_url}; `ortholab runs` lists the runs.")

    # ---- writing -------------------------------------------------------------------

    def create_run(
        self,
        *,
        name: str,
        stage: str = "fit",
        family: str | None = None,
        task: str | None = None,
        config: dict[str, Any] | None = None,
        main_metric: str | None = None,
        main_metric_mode: str = "min",
        baseline: float | None = None,
        run_dir: str | None = None,
        world_size: int = 1,
        tags: Iterable[str] = (),
        hostname: str | None = None,
    ) -> int:
        """Record a new run with status 'running' and return its id."""
        _check_choice("stage", stage, STAGES)
        _check_choice("main_metric_mode", main_metric_mode, MODES)
        run = Run(
            name=name,
            stage=stage,
            status="running",
            family=family,
            task=task,
            config=to_json(config) if config is not None else None,
            main_metric=main_metric,
            main_metric_mode=main_metric_mode,
            baseline=baseline,
            run_dir=run_dir,
            world_size=world_size,
            tags=[str(t) for t in tags],
            hostname=hostname or socket.gethostname(),
        )
        with self._session() as session:
            session.add(run)
            session.flush()
            return run.id

    def update_run(self, run_id: int, **fields: Any) -> None:
        """Set any of the run's columns (all but id), e.g. update_run(7, task='copy', parameter_count=1234)."""
        unknown = sorted(set(fields) - RUN_FIELDS)
        if unknown:
            raise StoreError(f"Unknown run field(s) {unknown}; known fields: {sorted(RUN_FIELDS)}.")
        for name, choices in (("status", STATUSES), ("stage", STAGES), ("main_metric_mode", MODES)):
            if name in fields:
                _check_choice(name, fields[name], choices)
        for name in JSON_FIELDS:
            if fields.get(name) is not None:
                fields[name] = to_json(list(fields[name]) if name == "tags" else fields[name])
        with self._session() as session:
            self._touch(session, run_id, **fields)

    def log_params(self, run_id: int, params: Mapping[str, Any]) -> None:
        """Record hyperparameters under flattened dotted keys; a key logged again takes the new value."""
        rows = [
            {"run_id": run_id, "key": key, "value": json.dumps(value, default=str)}
            for key, value in flatten(params).items()
        ]
        with self._session() as session:
            self._touch(session, run_id)
            if rows:  # delete-then-insert is an upsert that works on every backend
                session.execute(delete(Param).where(Param.run_id == run_id, Param.key.in_([r["key"] for r in rows])))
                session.execute(insert(Param), rows)

    def log_metrics(
        self,
        run_id: int,
        metrics: Mapping[str, float],
        step: int,
        epoch: int | None = None,
        wall_time: float | None = None,
    ) -> None:
        """Record one point per metric at `step`; NaN and infinities are kept as they are."""
        wall_time = time.time() if wall_time is None else wall_time
        rows = [
            {"run_id": run_id, "key": key, "step": int(step), "epoch": epoch, "value": float(value), "wall_time": wall_time}
            for key, value in metrics.items()
        ]
        with self._session() as session:
            self._touch(session, run_id)
            if rows:
                session.execute(insert(Metric), rows)

    def set_status(self, run_id: int, status: str, reason: str | None = None) -> None:
        """Set the run's status (and why, e.g. the NaN guard's message); a terminal status stamps ended_at,
        'running' clears it. A reason given once is kept when a later call gives none."""
        _check_choice("status", status, STATUSES)
        ended_at = utcnow() if status in TERMINAL_STATUSES else None
        extra = {"reason": reason} if reason is not None else {}
        with self._session() as session:
            self._touch(session, run_id, status=status, ended_at=ended_at, **extra)

    def truncate_run(self, run_id: int, from_step: int) -> int:
        """Delete the run's metric points and artifacts at steps >= from_step (steps about to be re-run after a
        resume); return how many points were deleted."""
        with self._session() as session:
            self._touch(session, run_id)
            deleted = session.execute(delete(Metric).where(Metric.run_id == run_id, Metric.step >= from_step))
            session.execute(delete(Artifact).where(Artifact.run_id == run_id, Artifact.step >= from_step))
        return deleted.rowcount

    def add_artifact(
        self,
        run_id: int,
        kind: str,
        name: str,
        *,
        step: int | None = None,
        epoch: int | None = None,
        data: bytes | None = None,
        meta: dict[str, Any] | None = None,
        media_type: str | None = None,
    ) -> int:
        """Record an artifact (e.g. kind='eigenvalues') with optional bytes and JSON meta; return its id."""
        artifact = Artifact(
            run_id=run_id,
            kind=kind,
            name=name,
            step=step,
            epoch=epoch,
            data=data,
            meta=to_json(meta) if meta is not None else None,
            media_type=media_type,
        )
        with self._session() as session:
            self._touch(session, run_id)
            session.add(artifact)
            session.flush()
            return artifact.id

    # ---- reading -------------------------------------------------------------------

    def list_runs(self) -> list[RunSummary]:
        """Every run, newest first, with steps/best/last computed in one SQL query."""
        with self._session() as session:
            rows = session.execute(_summary_query().order_by(Run.id.desc())).all()
        return [RunSummary(**_summary_fields(row._mapping)) for row in rows]

    def get_run(self, run_id: int) -> RunDetail:
        """One run with its config, params and host details; StoreError if there is no such run."""
        query = _summary_query(Run.config, Run.run_dir, Run.hostname, Run.world_size, Run.info)
        with self._session() as session:
            row = session.execute(query.where(Run.id == run_id)).first()
            if row is None:
                raise StoreError(f"No run with id {run_id} in {self.display_url}; `ortholab runs` lists the runs.")
            params = session.execute(select(Param.key, Param.value).where(Param.run_id == run_id)).all()
        decoded = {key: json.loads(value) for key, value in sorted(params)}
        return RunDetail(**_summary_fields(row._mapping), params=decoded)

    def run_plan(self, run_id: int) -> dict[str, Any]:
        """The run's planned length as recorded at its start (total_steps, steps_per_epoch, max_epochs), or {}."""
        return (self.get_run(run_id).info or {}).get("plan") or {}

    def metric_keys(self, run_id: int) -> list[str]:
        """The names of the run's metrics, sorted."""
        query = select(Metric.key).where(Metric.run_id == run_id).distinct().order_by(Metric.key)
        with self._session() as session:
            return list(session.scalars(query))

    def metric_series(self, run_id: int, key: str) -> list[MetricPoint]:
        """The points of one metric, ordered by step, then by the order they were logged."""
        query = (
            select(Metric.step, Metric.epoch, Metric.value, Metric.wall_time)
            .where(Metric.run_id == run_id, Metric.key == key)
            .order_by(Metric.step, Metric.id)
        )
        with self._session() as session:
            return [MetricPoint(*row) for row in session.execute(query)]

    def artifacts(self, run_id: int, kind: str | None = None) -> list[ArtifactRecord]:
        """The run's artifacts (optionally of one kind) in the order they were added, without their bytes."""
        query = select(
            Artifact.id,
            Artifact.run_id,
            Artifact.kind,
            Artifact.name,
            Artifact.step,
            Artifact.epoch,
            Artifact.created_at,
            Artifact.meta,
            Artifact.media_type,
        ).where(Artifact.run_id == run_id)
        if kind is not None:
            query = query.where(Artifact.kind == kind)
        with self._session() as session:
            return [ArtifactRecord(*row) for row in session.execute(query.order_by(Artifact.id))]

    def artifact_data(self, artifact_id: int) -> bytes:
        """The artifact's bytes (b'' if it has none); StoreError if there is no such artifact."""
        with self._session() as session:
            row = session.execute(select(Artifact.data).where(Artifact.id == artifact_id)).first()
        if row is None:
            raise StoreError(f"No artifact with id {artifact_id} in {self.display_url}.")
        return bytes(row.data or b"")


def _summary_query(*extra_columns: Any):
    """SELECT of the RunSummary columns; steps, best and last are correlated aggregates over `metrics`."""
    of_run = Metric.run_id == Run.id
    main = of_run & (Metric.key == Run.main_metric)
    steps = select(func.max(Metric.step)).where(of_run).scalar_subquery()
    n_main = select(func.count(Metric.id)).where(main).scalar_subquery()
    low = select(func.min(Metric.value)).where(main).scalar_subquery()
    high = select(func.max(Metric.value)).where(main).scalar_subquery()
    last = select(Metric.value).where(main).order_by(Metric.step.desc(), Metric.id.desc()).limit(1).scalar_subquery()
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
        n_main.label("n_main"),
        Run.baseline,
        Run.created_at,
        Run.ended_at,
        Run.heartbeat_at,
        Run.parameter_count,
        Run.tags,
        *extra_columns,
    )


def _summary_fields(row: Mapping[str, Any]) -> dict[str, Any]:
    """A summary query row as dataclass keyword arguments."""
    fields = dict(row)
    if not fields.pop("n_main"):  # no main-metric points: nothing to report
        fields["best"] = fields["last"] = None
    fields["tags"] = tuple(fields["tags"] or ())
    return fields


def _set_sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    """Per-connection SQLite settings: a generous lock wait, and WAL so readers never block the writer (only on a
    file that is empty or an OrthoLab store: the file keeps its journal mode, and someone else's is refused)."""
    cursor = dbapi_connection.cursor()
    for pragma in SQLITE_PRAGMAS:
        cursor.execute(f"PRAGMA {pragma}")
    tables = {row[0] for row in cursor.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not tables or tables & (OUR_TABLES | {VERSION_TABLE}):
        cursor.execute(f"PRAGMA {SQLITE_JOURNAL}")
    cursor.close()


def _check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise StoreError(f"Invalid {name} {value!r}; expected one of {list(choices)}.")


def _reason(error: SQLAlchemyError) -> str:
    """The driver's own words for a database error, without SQLAlchemy's boilerplate."""
    original = getattr(error, "orig", None)
    return str(original if original is not None else error).strip().splitlines()[0]
