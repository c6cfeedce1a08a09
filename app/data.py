"""The dashboard's reads of the run store, cached.

Everything goes through `db.Store`'s read API. The runs list is cached for RUNS_TTL_S seconds, so live
runs show up; every other query is keyed by the run's heartbeat (bumped by each write to the run), so a
finished run is read once and a live run is re-read after it writes. Artifact bytes never change and are
cached by id. The database URL is `$ORTHOLAB_DB` (set by `app.launch`), else the CLI's default file.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np
import pandas as pd
import streamlit as st

from ortholab.db import ArtifactRecord, RunDetail, RunSummary, Store, default_db_url
from ortholab.db import published
from ortholab.db.artifacts import array_from_bytes

RUNS_TTL_S = 2.0


@st.cache_resource(show_spinner=False)
def _store(url: str) -> Store:
    return Store(url)


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
    points = _store(url).metric_series(run_id, key)
    return pd.DataFrame(points, columns=["step", "epoch", "value", "wall_time"])


@st.cache_data(max_entries=2048, show_spinner=False)
def _artifacts(url: str, run_id: int, kind: str | None, version: str) -> list[ArtifactRecord]:
    return _store(url).artifacts(run_id, kind)


@st.cache_data(max_entries=512, show_spinner=False)
def _artifact_bytes(url: str, artifact_id: int) -> bytes:
    return _store(url).artifact_data(artifact_id)


def clear_caches() -> None:
    """Forget every cached query and the open store (tests use a new database each)."""
    st.cache_data.clear()
    st.cache_resource.clear()


class Reader:
    """The store as the pages see it: runs, details, metrics and artifacts, all cached."""

    def __init__(self, url: str):
        self.url = url
        self.display_url = _store(url).display_url  # opens the store: StoreError here if it cannot

    @cached_property
    def _all(self) -> list[RunSummary]:
        return _runs(self.url)

    def runs(self) -> list[RunSummary]:
        """Every run, newest first."""
        return self._all

    @cached_property
    def _by_id(self) -> dict[int, RunSummary]:
        return {run.id: run for run in self._all}

    def summaries(self, run_ids: list[int]) -> list[RunSummary]:
        """The runs with these ids that exist, in the order given."""
        return [self._by_id[i] for i in run_ids if i in self._by_id]

    def _version(self, run_id: int) -> str:
        run = self._by_id.get(run_id)
        return run.heartbeat_at.isoformat() if run else ""

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
        """An .npy artifact's array (see db/artifacts.py)."""
        return array_from_bytes(self.artifact_bytes(artifact_id))


def reader() -> Reader:
    """The Reader for the database this dashboard was started on."""
    return Reader(default_db_url())


@st.cache_data(ttl=RUNS_TTL_S, show_spinner=False)
def paper_comparison(url: str, table_id: str) -> list[dict]:
    """Published vs reproduced rows of one paper table (db/published.py), re-read as runs come in."""
    table = published.load_tables()[table_id]
    return published.comparison_rows(published.reproductions(_store(url), table))
