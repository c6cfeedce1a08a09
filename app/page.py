"""The preamble shared by the pages that show the selected runs."""

from __future__ import annotations

import streamlit as st

from ortholab.app import data, state
from ortholab.db import RunSummary

NO_RUNS = "No runs selected: pick runs in the sidebar or tick them on the Runs page."


def selected_runs_page(title: str) -> tuple[data.Reader, list[RunSummary]]:
    """Open the store reader, read the selected runs and write the page title; stop the page (after a note)
    when no run is selected. Returns the reader and the selected runs."""
    reader = data.reader()
    runs = reader.summaries(state.selected_ids())
    st.title(title)
    if not runs:
        st.info(NO_RUNS)
        st.stop()
    return reader, runs
