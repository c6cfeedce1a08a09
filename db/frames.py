"""The run store as pandas DataFrames, for a notebook: the numbers `ortholab runs` and the dashboard show.

    from ortholab.db import frames
    runs = frames.runs("sqlite:///runs/ortholab.db")             # one row per run, parameters flattened
    curves = frames.metrics([3, 4], ["val/loss"], db=...)        # long format: run, key, step, epoch, value, ...
    frames.artifacts(3, kind="eigenvalues", db=...)              # what a run stored besides its metrics

Read only: nothing here writes to the store, nor creates one (a missing store is a StoreError saying so; a file
this process cannot write is opened read-only). `db` is any SQLAlchemy URL (default: $ORTHOLAB_DB, else
ortholab.db in the runs folder, $ORTHOLAB_RUNS or ./runs), as for every command. A run id is an int (numpy's too);
one the store does not hold is a ValueError (and a StoreError) naming the argument, as for `load_run`.
"""

from __future__ import annotations

import difflib
import numbers
import os
from collections.abc import Iterable

import pandas as pd

from ortholab.db.store import Store
from ortholab.db.store_errors import InvalidArgument, RunMissing

RUN_COLUMNS = [
    "id",
    "name",
    "stage",
    "family",
    "task",
    "status",
    "reason",
    "steps",
    "main_metric",
    "main_metric_mode",
    "best",
    "last",
    "baseline",
    "parameter_count",
    "tags",
    "created_at",
    "ended_at",
]
METRIC_COLUMNS = ["run", "key", "step", "epoch", "value", "wall_time"]
ARTIFACT_COLUMNS = ["id", "run", "kind", "name", "step", "epoch", "media_type", "meta", "created_at"]


def runs(db: str | os.PathLike | None = None, params: bool = True) -> pd.DataFrame:
    """One row per run (newest first, as `ortholab runs`): its summary, and with `params` every recorded config
    key as a column named `param.<dotted key>` (absent in a run: NaN)."""
    store = _store(db)
    rows = []
    for summary in store.list_runs():
        row = {column: getattr(summary, column) for column in RUN_COLUMNS}
        row["tags"] = list(summary.tags)
        if params:
            row.update({f"param.{key}": value for key, value in store.get_run(summary.id).params.items()})
        rows.append(row)
    frame = pd.DataFrame(rows, columns=None if rows else RUN_COLUMNS)
    return frame.set_index("id", drop=False).rename_axis(None) if rows else frame


def metrics(
    run_ids: int | Iterable[int], keys: str | Iterable[str] | None = None, db: str | os.PathLike | None = None
) -> pd.DataFrame:
    """The metric points of `run_ids` (every key, or `keys`), long format: run, key, step, epoch, value,
    wall_time (unix seconds), ordered by run, key and step. A key none of the runs recorded is a ValueError naming
    the nearest one they did (a run without it, beside others with it, has no rows)."""
    store = _store(db)
    single = isinstance(run_ids, numbers.Integral) or not isinstance(run_ids, Iterable) or isinstance(run_ids, str)
    ids = [_run_id(store, r, "run_ids") for r in ([run_ids] if single else list(run_ids))]
    if keys is not None and not isinstance(keys, str | Iterable):
        raise TypeError(f"keys must be a metric's name or a list of them, got {keys!r}")
    wanted = [keys] if isinstance(keys, str) else (None if keys is None else list(keys))
    if wanted is not None:
        recorded = sorted({key for run_id in ids for key in store.metric_keys(run_id)})
        for key in wanted:
            if key not in recorded:
                near = difflib.get_close_matches(str(key), recorded, n=1)
                hint = f"did you mean {near[0]!r}? " if near else ""
                raise ValueError(f"keys: no run of {ids} recorded {key!r}; {hint}they recorded {recorded}")
    rows = []
    for run_id in ids:
        for key in wanted if wanted is not None else store.metric_keys(run_id):
            rows += [(run_id, key, p.step, p.epoch, p.value, p.wall_time) for p in store.metric_series(run_id, key)]
    return pd.DataFrame(rows, columns=METRIC_COLUMNS)


def artifacts(run_id: int, kind: str | None = None, db: str | os.PathLike | None = None) -> pd.DataFrame:
    """A run's artifacts (eigenvalue snapshots, gradient profiles, audio, ...) without their bytes;
    `Store(db, access="read").artifact_data(id)` reads one's bytes (a plain `Store(db)` creates a store where there
    is none). A `kind` the run has none of, while it has others, is a ValueError naming them."""
    store = _store(db)
    run_id = _run_id(store, run_id, "run_id")
    records = store.artifacts(run_id, kind)
    if kind is not None and not records:
        kinds = sorted({a.kind for a in store.artifacts(run_id)})
        if kinds:
            near = difflib.get_close_matches(str(kind), kinds, n=1)
            hint = f"did you mean {near[0]!r}? " if near else ""
            raise ValueError(f"kind: run {run_id} holds no {kind!r} artifact; {hint}its kinds are {kinds}")
    return pd.DataFrame(
        [(a.id, a.run_id, a.kind, a.name, a.step, a.epoch, a.media_type, a.meta, a.created_at) for a in records],
        columns=ARTIFACT_COLUMNS,
    )


def _store(db) -> Store:
    """The store `db` names (a URL, a SQLite file's path as str or os.PathLike, None: the default), read only."""
    if db is not None and not isinstance(db, (str, os.PathLike)):
        raise TypeError(f"db must be a database URL or a SQLite file's path, got {db!r} ({type(db).__name__})")
    return Store(None if db is None else os.fspath(db), access="read")


def _run_id(store: Store, value, argument: str) -> int:
    """`value` as the id of a run in `store`: TypeError unless an int, InvalidArgument (a ValueError and a StoreError)
    naming `argument` unless the store holds it."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        several = " or a list of them" if argument == "run_ids" else ""
        raise TypeError(f"{argument} must be a run id (int){several}, got {value!r} ({type(value).__name__})")
    try:
        store.get_run(int(value))
    except RunMissing as error:  # a store that fails to answer stays the store's StoreError
        raise InvalidArgument(f"{argument}: {error}") from None
    return int(value)
