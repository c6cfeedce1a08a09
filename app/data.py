"""The dashboard's reads of the run store, cached.

Everything goes through `db.Store`'s read API. The runs list is cached for RUNS_TTL_S seconds, so live
runs show up; every other query is keyed by the run's status, last step and heartbeat (bumped by each write to
the run), so a finished run is read once and a live run is re-read after it writes. Artifact bytes never change and are
cached by id. The database URL is `$ORTHOLAB_DB` (set by `app.launch`), else the CLI's default file.
"""

from __future__ import annotations

from datetime import datetime
from functools import cached_property

import numpy as np
import pandas as pd
import streamlit as st

from ortholab.app.tables import with_optimizer_defaults
from ortholab.app.wav import decode_wav, spectrogram
from ortholab.db import ArtifactRecord, RunDetail, RunSummary, Store, default_db_url, published
from ortholab.db.artifacts import array_from_bytes
from ortholab.db.progress import run_progress

RUNS_TTL_S = 2.0


@st.cache_resource(show_spinner=False)
def _store(url: str) -> Store:
    return Store(url, access="read")  # a reader never creates a store, and reads one it cannot write


@st.cache_data(ttl=RUNS_TTL_S, show_spinner=False)
def _runs(url: str) -> list[RunSummary]:
    return _store(url).list_runs()


@st.cache_data(max_entries=1024, show_spinner=False)
def _detail(url: str, run_id: int, version: str) -> RunDetail:
    return _store(url).get_run(run_id)


@st.cache_data(max_entries=1024, show_spinner=False)
def _metric_keys(url: str, run_id: int, version: str) -> list[str]:
    return _store(url).metric_keys(run_id)


@st.cache_data(max_entries=4096, show_spinner=False)
def _metric(url: str, run_id: int, key: str, version: str) -> pd.DataFrame:
    columns = _store(url).metric_columns(run_id, key)  # numpy columns: no object per point (8,000 points: 25 ms)
    columns["epoch"] = pd.array(columns["epoch"], dtype="Int64")  # whole epochs, <NA> where none was logged
    return pd.DataFrame(columns, columns=["step", "epoch", "value", "wall_time"])


# the Runs page reads every run at once: one query each, cached under the versions of all runs
@st.cache_data(max_entries=64, show_spinner=False)
def _params_of(url: str, versions: tuple[tuple[int, str], ...]) -> dict[int, dict]:
    return _store(url).params_of([run_id for run_id, _ in versions])


@st.cache_data(max_entries=64, show_spinner=False)
def _metric_keys_of(url: str, versions: tuple[tuple[int, str], ...]) -> dict[int, list[str]]:
    return _store(url).metric_keys_of([run_id for run_id, _ in versions])


@st.cache_data(max_entries=512, show_spinner=False)
def _last_values(url: str, key: str, versions: tuple[tuple[int, str], ...]) -> dict[int, float]:
    found = _store(url).last_values([run_id for run_id, _ in versions], [key])
    return {run_id: value for (run_id, _), value in found.items()}


@st.cache_data(max_entries=2048, show_spinner=False)
def _artifacts(url: str, run_id: int, kind: str | None, version: str) -> list[ArtifactRecord]:
    return _store(url).artifacts(run_id, kind)


@st.cache_data(max_entries=512, show_spinner=False)
def _artifact_bytes(url: str, artifact_id: int) -> bytes:
    return _store(url).artifact_data(artifact_id)


@st.cache_data(max_entries=2048, show_spinner=False)
def _artifact_array(url: str, artifact_id: int) -> np.ndarray:
    return array_from_bytes(_artifact_bytes(url, artifact_id))


@st.cache_data(max_entries=256, show_spinner=False)
def _spectrogram(url: str, artifact_id: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, float, int]:
    samples, rate = decode_wav(_artifact_bytes(url, artifact_id))
    times, freqs, power = spectrogram(samples, rate)
    return times, freqs, power, samples.size / rate, rate


def clear_caches() -> None:
    """Forget every cached query and the open store (tests use a new database each)."""
    st.cache_data.clear()
    st.cache_resource.clear()


class Reader:
    """The store as the pages see it: runs, details, metrics and artifacts, all cached."""

    def __init__(self, url: str):
        self.url = url
        self.display_url = _store(url).display_url  # opens the store: StoreError here if it cannot
        frozen_at = _store(url).frozen_at  # an export's copy, not written since: when it was made
        self.copied = f"{frozen_at:%Y-%m-%d %H:%M} UTC" if frozen_at else None
        self.analyses_left_out = _store(url).copied_without_analyses  # an export without --with-artifacts

    def clock(self) -> datetime:
        """Now; for an export's frozen copy, the moment it was made (Store.clock): its runs as they were then."""
        return _store(self.url).clock()

    @cached_property
    def _all(self) -> list[RunSummary]:
        return _runs(self.url)

    def runs(self) -> list[RunSummary]:
        """Every run, newest first."""
        return self._all

    @cached_property
    def _by_id(self) -> dict[int, RunSummary]:
        return {run.id: run for run in self._all}

    def progress(self) -> dict[int, dict]:
        """Every running run's steps of its plan, epoch and ETA, or its silence (db/progress.py), by id: read
        afresh on each rerun (two small queries a running run), as an ETA and a silence change with the clock."""
        now = self.clock()
        return {run.id: run_progress(_store(self.url), run, now) for run in self._all if run.status == "running"}

    def summaries(self, run_ids: list[int]) -> list[RunSummary]:
        """The runs with these ids that exist, in the order given."""
        return [self._by_id[i] for i in run_ids if i in self._by_id]

    def _version(self, run_id: int) -> str:
        """What keys the run's cached reads: its status, last step and heartbeat (bumped by every write to the run).
        A finished run's never changes, so its series are read once; a running run's changes with each write."""
        run = self._by_id.get(run_id)
        return f"{run.status}:{run.steps}:{run.heartbeat_at.isoformat()}" if run else ""

    def detail(self, run_id: int) -> RunDetail:
        return _detail(self.url, run_id, self._version(run_id))

    def metric_keys(self, run_id: int) -> list[str]:
        return _metric_keys(self.url, run_id, self._version(run_id))

    def metric(self, run_id: int, key: str) -> pd.DataFrame:
        """The metric's points (columns step, epoch, value, wall_time), by step."""
        return _metric(self.url, run_id, key, self._version(run_id))

    def artifacts(self, run_id: int, kind: str | None = None) -> list[ArtifactRecord]:
        return _artifacts(self.url, run_id, kind, self._version(run_id))

    def artifact_bytes(self, artifact_id: int) -> bytes:
        return _artifact_bytes(self.url, artifact_id)

    def artifact_array(self, artifact_id: int) -> np.ndarray:
        """An .npy artifact's array (see db/artifacts.py), decoded once per artifact (one run, one step)."""
        return _artifact_array(self.url, artifact_id)

    def spectrogram(self, artifact_id: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, float, int]:
        """A WAV artifact's spectrogram (times, freqs, power dB; app/wav.py), its length (s) and sample rate;
        computed once per clip. ValueError when the bytes are no PCM WAV."""
        return _spectrogram(self.url, artifact_id)

    def params(self, run_id: int) -> dict:
        """The run's flattened params (dotted keys)."""
        return self.detail(run_id).params

    def fields(self, run_id: int) -> dict:
        """What runs are compared and grouped by: family, task and every param."""
        run = self._by_id[run_id]
        params = {k: v for k, v in with_optimizer_defaults(self.params(run_id)).items() if k != "model.family"}
        return {"family": run.family, "task": run.task, **params}  # (model.family: the same as family)

    def _versions(self, run_ids: list[int]) -> tuple[tuple[int, str], ...]:
        return tuple((i, self._version(i)) for i in run_ids)

    def params_of(self, run_ids: list[int]) -> dict[int, dict]:
        """The flattened params of many runs (one query, cached until one of them writes)."""
        return _params_of(self.url, self._versions(run_ids))

    def metric_keys_of(self, run_ids: list[int]) -> dict[int, list[str]]:
        """The metric names of many runs (one query, cached until one of them writes)."""
        return _metric_keys_of(self.url, self._versions(run_ids))

    def last_values(self, run_ids: list[int], key: str) -> dict[int, float]:
        """The metric's value at its highest step, for those of the runs that have it (one query, cached)."""
        return _last_values(self.url, key, self._versions(run_ids))

    def last_value(self, run_id: int, key: str) -> float | None:
        """The metric's value at its highest step (the last logged there), None when the run has no such metric."""
        if key not in self.metric_keys(run_id):
            return None
        values = self.metric(run_id, key)["value"]
        return float(values.iloc[-1]) if len(values) else None


def reader() -> Reader:
    """The Reader for the database this dashboard was started on."""
    return Reader(default_db_url())


@st.cache_data(max_entries=8, show_spinner=False)
def _paper_tables(folders: tuple[str, ...]) -> dict[str, published.PaperTable]:
    return published.load_tables()


def paper_tables() -> dict[str, published.PaperTable]:
    """The published tables (db/published.py), read from their YAML files once per folder."""
    return _paper_tables((str(published.PUBLISHED_DIR), str(published.CHECKS_DIR)))


@st.cache_data(max_entries=256, show_spinner=False)
def _paper_comparison(url: str, table_id: str, version: str) -> list[dict]:
    tables = paper_tables()
    return published.comparison_rows(published.reproductions(_store(url), tables[table_id], tables))


def paper_comparison(url: str, table_id: str) -> list[dict]:
    """Published vs reproduced rows of one paper table (db/published.py), re-read when a run is added or writes
    (the runs list's newest heartbeat and its length key the cache)."""
    runs = _runs(url)
    version = f"{len(runs)}:{max((r.heartbeat_at for r in runs), default='')}"
    return _paper_comparison(url, table_id, version)
