"""The run store: the one place that reads and writes the run database.

Writers (the Lightning logger, the CLI) and readers (`ortholab runs`, the dashboard)
go through `Store`; nothing but it and its parts (below) knows the schema. Every call is its own
transaction, committed before it returns, so other processes see it at once.

Access: `create` (a training run: the store is made if missing), `write` (an existing store only) and `read`
(readers: never create anything; a SQLite file they cannot write is opened read-only). A process writing a run
holds its lease (db/lease.py): its writes succeed only while it holds it, so two processes never write one run.

Store's parts, each a module of its own: where a store is (db/locations.py), its errors (db/store_errors.py), the
arguments its calls take (db/arguments.py), opening and upgrading it (db/opening.py), the SQL its calls share
(db/queries.py) and copying runs between stores (db/copying.py). The names other code imports from here
(`from ortholab.db.store import StoreError, db_flag, ...`) are those modules' own, imported here (__all__).
"""

from __future__ import annotations

import json
import numbers
import os
import socket
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Float, and_, delete, false, func, insert, or_, select, type_coerce, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from ortholab.db import copying, lease
from ortholab.db.arguments import (
    JSON_FIELDS,
    RUN_FIELDS,
    check_choice,
    checked_run_id,
    flatten,
    storable_run_id,
    to_json,
)
from ortholab.db.locations import (
    ENV_VAR,
    EXPORT_FILES,
    RUNS_ENV_VAR,
    db_flag,
    default_db_url,
    expand_home,
    is_export,
    runs_root,
    store_url,
)
from ortholab.db.masking import mask_url
from ortholab.db.opening import open_engine, upgrade_store
from ortholab.db.queries import chunks, driver_rows, summary_fields, summary_query, upsert_points
from ortholab.db.reconnect import waits_for_the_server
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
    StoreInfo,
    utcnow,
)
from ortholab.db.schema_version import store_facts
from ortholab.db.sqlite_files import sqlite_file
from ortholab.db.store_errors import (
    DAMAGED,
    InvalidArgument,
    LeaseLost,
    RunBusy,
    RunMissing,
    StoreError,
    StoreMissing,
    driver_reason,
    unusable,
)

__all__ = [
    "ENV_VAR",
    "EXPORT_FILES",
    "RUNS_ENV_VAR",
    "STATUSES",
    "InvalidArgument",
    "LeaseLost",
    "RunBusy",
    "Store",
    "StoreError",
    "StoreMissing",
    "db_flag",
    "default_db_url",
    "expand_home",
    "flatten",
    "is_export",
    "runs_root",
    "store_url",
    "to_json",
]
ACCESS = ("create", "write", "read")


class Store:
    """Runs, params, metric points and artifacts in one SQL database (SQLite file or server).

    access: 'create' (default) makes a missing store and checks that it takes writes, so a bad path fails
    before any training starts; 'write' opens an existing store for writing; 'read' opens an existing store
    without writing anything (a SQLite file this process cannot write is opened read-only).
    """

    def __init__(self, url: str | None = None, *, access: str = "create"):
        if access not in ACCESS:
            raise ValueError(f"access must be one of {ACCESS}, not {access!r}")
        if isinstance(url, os.PathLike):  # a SQLite file's path, as frames and every command take it
            url = os.fspath(url)
        if url is not None and not isinstance(url, str):
            raise TypeError(f"url must be a SQLite file's path or an SQLAlchemy URL string, got {url!r}")
        self._url = store_url(url or default_db_url())
        self._access = access
        self._owners: dict[int, str] = {}  # runs this Store writes under a lease: run id -> owner token
        self._facts: dict[str, str] | None = None
        # created: whether opening it made the store (a new file or an empty database)
        self._engine, self.created = open_engine(self._url, access)
        self._sessions = sessionmaker(self._engine, expire_on_commit=False)
        # a writer to a server waits out its restart (db/reconnect.py); a reader fails at once, SQLite never waits
        self.waits_for_restarts = access != "read" and self._engine.dialect.name != "sqlite"
        self.unreachable_since: float | None = None  # when the current outage began (time.monotonic())

    @property
    def url(self) -> str:
        """The database URL, password included."""
        return self._url

    @property
    def display_url(self) -> str:
        """The database URL with any password masked, for messages and logs."""
        return mask_url(self._url)

    @property
    def store_id(self) -> str:
        """The store's own id (a UUID's 32 hex digits): run folders and checkpoints carry it."""
        return self._store_facts()["store_id"]

    @property
    def copied_from(self) -> str | None:
        """The id of the store this one's runs were copied from (an export's runs.db, db/extract.py), else None:
        their checkpoints, stamped by that store, may resume them here."""
        return self._store_facts().get("copied_from")

    @property
    def copied_at(self) -> datetime | None:
        """When an export copied this store's runs (UTC), else None (a live store, or a copy from before 2026-12)."""
        stamp = self._store_facts().get("copied_at")
        return datetime.fromisoformat(stamp) if stamp else None

    @property
    def copied_without_analyses(self) -> bool:
        """Whether this store is an export's copy holding no artifact (`report --export` without --with-artifacts):
        its runs' eigenvalues, gradient profiles and clips stayed in the store they were recorded in. An export from
        before copies recorded copied_from is known by its place: a runs.db beside its export.txt."""
        file = sqlite_file(self._url)  # None for a server, or a file: URI
        if self.copied_from is None and not (file is not None and is_export(file)):
            return False
        with self._session() as session:
            return session.execute(select(Artifact.id).limit(1)).first() is None

    @property
    def restored(self) -> bool:
        """Whether `ortholab restore` made this copy a live store of its own."""
        return bool(self._store_facts().get("restored_at"))

    @property
    def frozen_at(self) -> datetime | None:
        """When an export copied this store, while nothing was written to it since (its runs write elsewhere); None
        for a live store, and for a copy restored as one (`cp DIR/runs.db $ORTHOLAB_RUNS/ortholab.db`) and written to
        since. A copy from before copied_at was recorded counts as live."""
        copied_at = self.copied_at if self.copied_from is not None else None
        if copied_at is None or self._store_facts().get("restored_at"):  # `ortholab restore` made it a live store
            return None
        with self._session() as session:
            last = session.execute(select(func.max(Run.heartbeat_at))).scalar_one_or_none()
        return copied_at if last is None or last <= copied_at else None

    def clock(self) -> datetime:
        """The moment a 'running' run's silence is measured at: now; in a frozen copy (frozen_at), the moment it was
        copied, so that it shows its runs as they were then."""
        return self.frozen_at or utcnow()

    @property
    def written_by(self) -> str | None:
        """The OrthoLab version that created or last upgraded the store."""
        return self._store_facts().get("written_by")

    def _store_facts(self) -> dict[str, str]:
        if self._facts is None:
            with self._engine.connect() as conn:
                self._facts = store_facts(conn)
        return self._facts

    def __repr__(self) -> str:
        return f"Store({self.display_url!r})"

    def close(self) -> None:
        """Close pooled connections; the Store reconnects if used again."""
        self._engine.dispose()

    # ---- opening (db/opening.py) ----------------------------------------------------

    upgrade = staticmethod(upgrade_store)  # `ortholab db upgrade`: Store.upgrade(url, allow_foreign=False)

    def _error(self, reason: str) -> StoreError:
        return unusable(self.url, self._access, reason)

    @contextmanager
    def _session(self) -> Iterator[Session]:
        """One transaction, committed on success; database failures become StoreError."""
        try:
            with self._sessions.begin() as session:
                yield session
        except SQLAlchemyError as e:
            raise self._error(driver_reason(e)) from e
        except UnicodeDecodeError:
            raise self._error(DAMAGED) from None

    def _touch(self, session: Session, run_id: int, *, releasing: bool = False, **values: Any) -> None:
        """Update the run's columns and bump its heartbeat (and its lease, for a run written under one); StoreError
        if there is no such run, LeaseLost if another process took it over. `releasing`: the write gives the lease
        up, and a lease already given up counts as this writer's (a retry of a release whose reply was lost)."""
        now = utcnow()
        values = {"heartbeat_at": now, **values}
        query = update(Run).where(Run.id == run_id)
        owner = self._owners.get(run_id)
        if owner is not None:  # the write and the check of the lease are one statement: no two writers ever
            held = Run.lease_owner == owner
            query = query.where(or_(held, Run.lease_owner.is_(None)) if releasing else held)
            values.setdefault("lease_expires_at", now + timedelta(seconds=lease.LEASE_S))
        if session.execute(query.values(**values)).rowcount == 0:
            raise self._not_writable(session, run_id, owner)

    def _no_such_run(self, run_id: int) -> RunMissing:
        where, said = db_flag(self.url)  # the hint lists this store, not the default one
        return RunMissing(
            f"No run with id {run_id} in {self.display_url}; `ortholab runs{where}` lists its runs{said}."
        )

    def _not_writable(self, session: Session, run_id: int, owner: str | None) -> StoreError:
        holder = session.execute(select(Run.lease_owner).where(Run.id == run_id)).first()
        if holder is None or owner is None:
            return self._no_such_run(run_id)
        taker = lease.parse(holder.lease_owner)
        return LeaseLost(
            f"Run {run_id} in {self.display_url} was taken over by "
            f"{taker.describe() if taker else 'another process'} after this process wrote nothing for "
            f"{lease.LEASE_S:.0f} s; this process stops writing it."
        )

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
        owner: str | None = None,
    ) -> int:
        """Record a new run with status 'running' and return its id; with `owner` (a lease token, db/lease.py) the
        run is written under that owner's lease from the start."""
        check_choice("stage", stage, STAGES)
        check_choice("main_metric_mode", main_metric_mode, MODES)
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
            lease_owner=owner,
            lease_expires_at=utcnow() + timedelta(seconds=lease.LEASE_S) if owner else None,
        )
        with self._session() as session:
            session.add(run)
            session.flush()
            run_id = run.id
        if owner is not None:
            self._owners[run_id] = owner
        return run_id

    @waits_for_the_server
    def acquire_run(self, run_id: int, owner: str) -> None:
        """Take the run's lease for `owner` (a resume): RunBusy, naming the holder, while another process holds it
        and is alive; a lease whose holder died on this machine, or which expired, is taken over."""
        now = utcnow()
        with self._session() as session:
            row = session.execute(
                select(Run.lease_owner, Run.lease_expires_at, Run.heartbeat_at).where(Run.id == run_id)
            ).first()
            if row is None:
                raise self._no_such_run(run_id)
            free = or_(
                Run.lease_owner.is_(None),
                Run.lease_owner == owner,
                Run.lease_expires_at.is_(None),
                Run.lease_expires_at < now,
            )
            holder = lease.parse(row.lease_owner)
            if holder is not None and row.lease_owner != owner and lease.is_gone(holder):
                free = or_(free, Run.lease_owner == row.lease_owner)  # exactly that dead holder's lease
            taken = session.execute(
                update(Run)
                .where(Run.id == run_id, free)
                .values(lease_owner=owner, lease_expires_at=now + timedelta(seconds=lease.LEASE_S), heartbeat_at=now)
            )
            if taken.rowcount == 0:
                raise RunBusy(self._busy_message(run_id, holder, row.heartbeat_at))
        self._owners[run_id] = owner

    def lease_holder(self, run_id: int) -> str | None:
        """Who is writing the run now, as a sentence (RunBusy's), or None when nobody live holds its lease."""
        with self._session() as session:
            row = session.execute(
                select(Run.lease_owner, Run.lease_expires_at, Run.heartbeat_at).where(Run.id == run_id)
            ).first()
        if row is None or row.lease_owner is None or row.lease_expires_at is None or row.lease_expires_at < utcnow():
            return None
        holder = lease.parse(row.lease_owner)
        if holder is not None and lease.is_gone(holder):
            return None
        return self._busy_message(run_id, holder, row.heartbeat_at)

    @waits_for_the_server
    def claim(self, key: str, owner: str, seconds: float = lease.LEASE_S) -> str | None:
        """Claim `key` for `owner` for `seconds` (renewed by claiming it again): what `reproduce` holds on a row and
        seed while it starts and trains it, before and beside its run's own lease. None when this owner holds it now;
        else who does, as words. An expired claim, or one whose holder ended on this machine, is taken over."""
        name, now = lease.CLAIM_PREFIX + key, utcnow()
        mine = f"{owner} {(now + timedelta(seconds=seconds)).isoformat()}"
        try:  # a write first (a read then a write loses to a concurrent writer in SQLite's WAL: 'database is locked')
            with self._session() as session:
                session.add(StoreInfo(key=name, value=mine))
            return None
        except StoreError as error:
            if not isinstance(error.__cause__, IntegrityError):
                raise
        with self._session() as session:  # held: ours to renew, or another's, or a dead or expired one to take over
            held = session.execute(select(StoreInfo.value).where(StoreInfo.key == name)).scalar_one_or_none()
            token, _, until = (held or "").rpartition(" ")
            holder = lease.parse(token)
            live = held and datetime.fromisoformat(until) > now and not (holder and lease.is_gone(holder))
            if live and token != owner:
                return holder.describe() if holder else "another process"
            taken = session.execute(
                update(StoreInfo).where(StoreInfo.key == name, StoreInfo.value == held).values(value=mine)
            )
            return None if taken.rowcount else "another process"  # released or taken meanwhile: left to the other

    def release_claim(self, key: str, owner: str) -> None:
        """Give up `owner`'s claim on `key` (someone else's is left alone)."""
        name = lease.CLAIM_PREFIX + key
        with self._session() as session:
            session.execute(
                delete(StoreInfo).where(StoreInfo.key == name, StoreInfo.value.startswith(owner + " ", autoescape=True))
            )

    def holder_ended(self, run_id: int) -> bool:
        """Whether the process that last held the run's lease provably ended: it ran on this machine and is gone
        (killed by SIGKILL or the out-of-memory killer, which leave the run 'running'). Another machine's holder
        never counts: only its silence tells."""
        with self._session() as session:
            token = session.execute(select(Run.lease_owner).where(Run.id == run_id)).scalar_one_or_none()
        holder = lease.parse(token)
        return holder is not None and lease.is_gone(holder)

    def _busy_message(self, run_id: int, holder: lease.Owner | None, heartbeat_at) -> str:
        who = holder.describe() if holder else "another process"
        kill = f"`kill -TERM {holder.pid}` on {holder.host}" if holder else "SIGTERM"
        age = max((utcnow() - heartbeat_at).total_seconds(), 0.0)
        return (
            f"Run {run_id} in {self.display_url} is still being written by {who} (last heartbeat {age:.0f} s "
            f"ago); stop it first ({kill} saves a checkpoint), then resume; a run whose process died is taken "
            f"over {lease.LEASE_S:.0f} s after its last heartbeat, at once on the same machine."
        )

    def renew(self, run_id: int) -> None:
        """A heartbeat: bump the run's heartbeat (and its lease, when this Store holds it)."""
        with self._session() as session:
            self._touch(session, run_id)

    @waits_for_the_server
    def update_run(self, run_id: int, **fields: Any) -> None:
        """Set any of the run's columns (all but id), e.g. update_run(7, task='copy', parameter_count=1234)."""
        run_id = checked_run_id(run_id)
        unknown = sorted(set(fields) - RUN_FIELDS)
        if unknown:
            raise InvalidArgument(f"Unknown run field(s) {unknown}; known fields: {sorted(RUN_FIELDS)}.")
        for name, choices in (("status", STATUSES), ("stage", STAGES), ("main_metric_mode", MODES)):
            if name in fields:
                check_choice(name, fields[name], choices)
        for name in JSON_FIELDS:
            if fields.get(name) is not None:
                fields[name] = to_json(list(fields[name]) if name == "tags" else fields[name])
        with self._session() as session:
            self._touch(session, run_id, **fields)

    @waits_for_the_server
    def log_params(self, run_id: int, params: Mapping[str, Any]) -> None:
        """Record hyperparameters under flattened dotted keys; a key logged again takes the new value."""
        run_id = checked_run_id(run_id)
        if not isinstance(params, Mapping):
            raise TypeError(f"params must be a mapping of names to values, got {params!r}")
        rows = [
            {"run_id": run_id, "key": key, "value": json.dumps(value, default=str)}
            for key, value in flatten(params).items()
        ]
        with self._session() as session:
            self._touch(session, run_id)
            if rows:  # delete-then-insert is an upsert that works on every backend
                session.execute(delete(Param).where(Param.run_id == run_id, Param.key.in_([r["key"] for r in rows])))
                session.execute(insert(Param), rows)

    @waits_for_the_server
    def log_metrics(
        self,
        run_id: int,
        metrics: Mapping[str, float],
        step: int,
        epoch: int | None = None,
        wall_time: float | None = None,
    ) -> None:
        """Record one point per metric at `step`; NaN and infinities are kept as they are. A (key, step) already
        recorded is rewritten (a step re-run after a resume), never doubled."""
        run_id = checked_run_id(run_id)
        if not isinstance(metrics, Mapping):
            raise TypeError(f"metrics must be a mapping of metric names to numbers, got {metrics!r}")
        if isinstance(step, bool) or not isinstance(step, numbers.Integral) or step < 0:
            raise InvalidArgument(f"step must be an int >= 0 (the trainer's global step), got {step!r}")
        wall_time = time.time() if wall_time is None else wall_time
        rows = [
            {
                "run_id": run_id,
                "key": key,
                "step": int(step),
                "epoch": epoch,
                "value": float(value),
                "wall_time": wall_time,
            }
            for key, value in metrics.items()
        ]
        with self._session() as session:
            self._touch(session, run_id)
            if rows:
                upsert_points(session, rows)

    @waits_for_the_server
    def set_status(
        self, run_id: int, status: str, reason: str | None = None, *, clear_reason: bool = False, release: bool = False
    ) -> None:
        """Set the run's status (and why, e.g. the NaN guard's message); a terminal status stamps ended_at,
        'running' clears it. A reason given once is kept when a later call gives none, unless `clear_reason`;
        `release` gives up this Store's lease on the run (the run's writer is done)."""
        run_id = checked_run_id(run_id)
        check_choice("status", status, STATUSES)
        ended_at = utcnow() if status in TERMINAL_STATUSES else None
        extra: dict[str, Any] = {"reason": reason} if reason is not None or clear_reason else {}
        if release and run_id in self._owners:
            extra.update(lease_owner=None, lease_expires_at=None)
        with self._session() as session:
            self._touch(
                session, run_id, releasing=release and run_id in self._owners, status=status, ended_at=ended_at, **extra
            )
        if release:
            self._owners.pop(run_id, None)

    @waits_for_the_server
    def truncate_run(self, run_id: int, from_step: int) -> int:
        """Delete the run's metric points and artifacts at steps >= from_step (steps about to be re-run after a
        resume); return how many points were deleted."""
        run_id = checked_run_id(run_id)
        if isinstance(from_step, bool) or not isinstance(from_step, numbers.Integral) or from_step < 0:
            raise InvalidArgument(f"from_step must be an int >= 0 (steps from it on are deleted), got {from_step!r}")
        with self._session() as session:
            self._touch(session, run_id)
            deleted = session.execute(delete(Metric).where(Metric.run_id == run_id, Metric.step >= from_step))
            session.execute(delete(Artifact).where(Artifact.run_id == run_id, Artifact.step >= from_step))
        return deleted.rowcount

    def remove_at_step(
        self,
        run_id: int,
        step: int,
        key_prefixes: Iterable[str],
        artifact_kinds: Iterable[str] = (),
        name_prefix: str = "",
        keep_keys: Iterable[str] = (),
        keep_names: Iterable[str] = (),
    ) -> int:
        """Delete the run's metric points at `step` whose key starts with one of `key_prefixes` (but for
        `keep_keys`), and its artifacts at `step` of `artifact_kinds` whose name starts with `name_prefix` (but for
        `keep_names`): what an earlier record at that step held that a new one, written first, did not write again
        (an audio evaluation of fewer utterances); returns how many points were deleted."""
        prefixes, kinds, keys, names = list(key_prefixes), list(artifact_kinds), list(keep_keys), list(keep_names)
        with self._session() as session:
            self._touch(session, run_id)
            matching = or_(*(Metric.key.startswith(p, autoescape=True) for p in prefixes)) if prefixes else false()
            deleted = session.execute(
                delete(Metric).where(Metric.run_id == run_id, Metric.step == step, matching, Metric.key.not_in(keys))
            )
            if kinds:
                session.execute(
                    delete(Artifact).where(
                        Artifact.run_id == run_id,
                        Artifact.step == step,
                        Artifact.kind.in_(kinds),
                        Artifact.name.startswith(name_prefix, autoescape=True),
                        Artifact.name.not_in(names),
                    )
                )
        return deleted.rowcount

    @waits_for_the_server
    def watermark(self, run_id: int) -> dict[str, int]:
        """The ids of the run's newest metric point and artifact (0 for none): what a checkpoint written now
        follows. Rows are numbered in the order they are recorded."""
        with self._session() as session:
            points = session.scalar(select(func.max(Metric.id)).where(Metric.run_id == run_id))
            artifacts = session.scalar(select(func.max(Artifact.id)).where(Artifact.run_id == run_id))
        return {"metrics_upto": int(points or 0), "artifacts_upto": int(artifacts or 0)}

    @waits_for_the_server
    def rewind_run(self, run_id: int, metrics_upto: int, artifacts_upto: int, step: int) -> int:
        """Forget what the run recorded after a checkpoint written at optimizer step `step` (a resume from it re-runs
        that): the points and artifacts at later steps, and those at `step` newer than the checkpoint's watermark.
        A point of an earlier step recorded after the watermark stays: it belongs to a batch the checkpoint had
        already trained on (Lightning records a batch's training loss after on_train_batch_end, where an interrupt
        writes its checkpoint), and the resume does not train on that batch again. Return how many points went."""
        with self._session() as session:
            self._touch(session, run_id)
            deleted = session.execute(
                delete(Metric).where(
                    Metric.run_id == run_id,
                    or_(Metric.step > step, and_(Metric.step == step, Metric.id > metrics_upto)),
                )
            )
            session.execute(
                delete(Artifact).where(
                    Artifact.run_id == run_id,
                    or_(  # no step: by the watermark alone
                        Artifact.step > step,
                        and_(or_(Artifact.step == step, Artifact.step.is_(None)), Artifact.id > artifacts_upto),
                    ),
                )
            )
        return deleted.rowcount

    @waits_for_the_server
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
        """Record an artifact (e.g. kind='eigenvalues') with optional bytes and JSON meta; return its id. One
        recorded before with the same kind, name and step is replaced (a step re-run after a resume)."""
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
            if step is not None:
                session.execute(
                    delete(Artifact).where(
                        Artifact.run_id == run_id, Artifact.kind == kind, Artifact.name == name, Artifact.step == step
                    )
                )
            session.add(artifact)
            session.flush()
            return artifact.id

    # ---- reading -------------------------------------------------------------------

    def list_runs(self) -> list[RunSummary]:
        """Every run, newest first, with steps/best/last computed in one SQL query."""
        with self._session() as session:
            rows = session.execute(summary_query().order_by(Run.id.desc())).all()
        return [RunSummary(**summary_fields(row._mapping)) for row in rows]

    @waits_for_the_server
    def get_run(self, run_id: int) -> RunDetail:
        """One run with its config, params and host details; StoreError if there is no such run."""
        run_id = checked_run_id(run_id)
        if not storable_run_id(run_id):
            raise self._no_such_run(run_id)
        query = summary_query(Run.config, Run.run_dir, Run.hostname, Run.world_size, Run.info)
        with self._session() as session:
            row = session.execute(query.where(Run.id == run_id)).first()
            if row is None:
                raise self._no_such_run(run_id)
            params = session.execute(select(Param.key, Param.value).where(Param.run_id == run_id)).all()
        decoded = {key: json.loads(value) for key, value in sorted(params)}
        return RunDetail(**summary_fields(row._mapping), params=decoded)

    def runs_made_from(self, run_ids: list[int]) -> dict[int, dict[str, list[int]]]:
        """For each of `run_ids`, the other runs made from it, by their stage: predict runs naming it as the run they
        predicted with (info.predict), and test, validate and fit runs whose ckpt_path lies in its run folder."""
        with self._session() as session:
            folders = dict(session.execute(select(Run.id, Run.run_dir).where(Run.id.in_(run_ids))).all())
            rows = session.execute(
                select(Run.id, Run.stage, Run.info, Run.config).where(Run.id.not_in(run_ids)).order_by(Run.id)
            ).all()
        made: dict[int, dict[str, list[int]]] = {}
        for run_id, stage, info, config in rows:
            source = _predicted_with(info) if stage == "predict" else _checkpoint_owner(config, folders)
            if source in folders:
                made.setdefault(source, {}).setdefault(stage, []).append(run_id)
        return made

    def run_plan(self, run_id: int) -> dict[str, Any]:
        """The run's planned length as recorded at its start (total_steps, steps_per_epoch, max_epochs), or {}."""
        with self._session() as session:
            info = session.scalar(select(Run.info).where(Run.id == run_id))
        return (info or {}).get("plan") or {}

    def recent_values(self, run_id: int, key: str, count: int) -> list[float]:
        """The values of a metric's last `count` points, oldest first (one index range read)."""
        query = (
            select(Metric.value)
            .where(Metric.run_id == run_id, Metric.key == key)
            .order_by(Metric.step.desc())
            .limit(count)
        )
        with self._session() as session:
            return list(reversed(session.scalars(query).all()))

    def metric_keys(self, run_id: int) -> list[str]:
        """The names of the run's metrics, sorted."""
        query = select(Metric.key).where(Metric.run_id == run_id).distinct().order_by(Metric.key)
        with self._session() as session:
            return list(session.scalars(query))

    def metric_series(self, run_id: int, key: str) -> list[MetricPoint]:
        """The points of one metric, ordered by step (one per step)."""
        query = (
            select(Metric.step, Metric.epoch, Metric.value, Metric.wall_time)
            .where(Metric.run_id == run_id, Metric.key == key)
            .order_by(Metric.step)  # one point per step: the unique index's order
        )
        with self._session() as session:
            return [MetricPoint(*row) for row in session.execute(query)]

    # ---- bulk reads (the dashboard: many runs at once, whole series without per-point objects) -------------

    def params_of(self, run_ids: Iterable[int]) -> dict[int, dict[str, Any]]:
        """The decoded params of several runs, in one query per IN_CHUNK runs: {run id: {dotted key: value}}."""
        out: dict[int, dict[str, Any]] = {run_id: {} for run_id in run_ids}
        for ids in chunks(list(out)):
            query = select(Param.run_id, Param.key, Param.value).where(Param.run_id.in_(ids)).order_by(Param.key)
            with self._session() as session:
                for run_id, key, value in session.execute(query):
                    out[run_id][key] = json.loads(value)
        return out

    def metric_keys_of(self, run_ids: Iterable[int]) -> dict[int, list[str]]:
        """The metric names of several runs, sorted: {run id: [key, ...]}."""
        out: dict[int, list[str]] = {run_id: [] for run_id in run_ids}
        for ids in chunks(list(out)):
            query = (
                select(Metric.run_id, Metric.key)
                .where(Metric.run_id.in_(ids))
                .distinct()
                .order_by(Metric.run_id, Metric.key)
            )
            with self._session() as session:
                for run_id, key in session.execute(query):
                    out[run_id].append(key)
        return out

    def last_values(self, run_ids: Iterable[int], keys: Iterable[str]) -> dict[tuple[int, str], float]:
        """The value at the highest step of each (run, key) that has points (RunSummary.last's rule)."""
        keys, out = list(keys), {}
        for ids in chunks(list(run_ids)):
            last = (
                select(Metric.run_id, Metric.key, func.max(Metric.step).label("step"))
                .where(Metric.run_id.in_(ids), Metric.key.in_(keys))
                .group_by(Metric.run_id, Metric.key)
                .subquery()
            )
            query = select(Metric.run_id, Metric.key, Metric.value).join(
                last, and_(Metric.run_id == last.c.run_id, Metric.key == last.c.key, Metric.step == last.c.step)
            )
            with self._session() as session:
                out.update({(run_id, key): value for run_id, key, value in session.execute(query)})
        return out

    def metric_columns(self, run_id: int, key: str) -> dict[str, Any]:
        """One metric's points as numpy columns, ordered by step: step (int64), epoch (float64, NaN where none),
        value (float64, NaN kept), wall_time (float64); read without building a record per point."""
        import numpy as np

        query = (
            select(Metric.step, Metric.epoch, type_coerce(Metric.value, Float), Metric.wall_time)
            .where(Metric.run_id == run_id, Metric.key == key)
            .order_by(Metric.step)
        )
        with self._session() as session:
            rows = driver_rows(session, query)  # plain tuples: building a Row per point costs more than the read
        steps, epochs, values, wall_times = zip(*rows) if rows else ((), (), (), ())
        return {
            "step": np.array(steps, dtype=np.int64),
            "epoch": np.array(epochs, dtype=float),  # None -> nan
            "value": np.array(values, dtype=float),
            "wall_time": np.array(wall_times, dtype=float),
        }

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

    def copy_runs(
        self,
        run_ids: Iterable[int],
        target: "Store",
        keep: Callable[[str, int], Iterable[int]] | None = None,
        with_artifacts: bool = False,
    ) -> None:
        """Copy runs (their rows, params and metric points, artifacts with `with_artifacts`) into `target`, under
        the same ids (runs and points), in one transaction there. `keep(key, n)` gives the indices (in step order)
        of a series' n points to copy (default: all); a copied run holds no lease."""
        copying.copy_runs(self._engine, target._engine, run_ids, keep, with_artifacts, self.display_url)

    def set_tags(self, run_id: int, add: Iterable[str] = (), remove: Iterable[str] = ()) -> tuple[str, ...]:
        """Add and remove labels of a run (`ortholab runs tag/untag`); its tags afterwards, in order."""
        for name, given in (("add", add), ("remove", remove)):
            if isinstance(given, str) or not isinstance(given, Iterable):  # "abc" would be the tags a, b and c
                raise TypeError(f"{name} must be a list of tags, got {given!r}")
        add, remove = list(add), list(remove)
        for name, given in (("add", add), ("remove", remove)):
            if bad := [t for t in given if not isinstance(t, str) or not t.strip()]:
                raise InvalidArgument(f"{name}: a tag is a non-empty string, got {bad[0]!r}")
        tags = [t for t in self.get_run(run_id).tags if t not in set(remove)]
        tags += [t for t in dict.fromkeys(add) if t not in tags]
        with self._session() as session:  # labels only: no heartbeat, no lease (a running run may be tagged)
            session.execute(update(Run).where(Run.id == run_id).values(tags=tags))
        return tuple(tags)

    def delete_run(self, run_id: int) -> None:
        """Remove a run's row, params, metric points and artifacts in one transaction; StoreError if it is being
        written (its lease is held and not expired) or does not exist."""
        self.get_run(run_id)  # StoreError naming a run that does not exist
        busy = self.lease_holder(run_id)
        if busy is not None:  # its message says who writes it and how to stop it
            raise StoreError(busy.replace(", then resume;", ", then delete it;"))
        with self._session() as session:
            for table in (Metric, Param, Artifact):
                session.execute(delete(table).where(table.run_id == run_id))
            session.execute(delete(Run).where(Run.id == run_id))


def _predicted_with(info: Any) -> int | None:
    """The run a predict run predicted with, as it recorded it (training/callbacks/predictions.py)."""
    link = info.get("predict") if isinstance(info, dict) else None
    return link.get("source_run") if isinstance(link, dict) else None


def _checkpoint_owner(config: Any, folders: dict[int, str | None]) -> int | None:
    """Which of `folders` ({run id: run folder}) holds the checkpoint a run's config started from, if one does."""
    checkpoint = config.get("ckpt_path") if isinstance(config, dict) else None
    if not isinstance(checkpoint, str) or not os.path.isabs(checkpoint):  # recorded absolute since 2026-12-06
        return None
    return next(
        (i for i, folder in folders.items() if folder and checkpoint.startswith(folder.rstrip("/") + "/")), None
    )
