"""The run selection shared by every page: a sidebar multiselect in the navigation frame, kept in
st.session_state[SELECTED] (run ids) and mirrored in the URL (?run=3&run=7) so a view can be shared."""

from __future__ import annotations

import streamlit as st

from ortholab.app.labels import run_label
from ortholab.app.tables import merge_selection
from ortholab.db import RunSummary

SELECTED = "run"  # session-state key and URL query parameter
NOT_HERE = "runs_not_in_store"  # the address's run ids this store lacks, warned about once


def sidebar_selection(runs: list[RunSummary]) -> list[int]:
    """Draw the selection widget and return the selected run ids. A new session starts from the URL's
    ?run= ids when given (ids this store lacks are named in a warning), else with the newest run that trained (not
    a predict run); runs no longer in the store drop out."""
    labels = {run.id: run_label(run) for run in runs}
    if SELECTED not in st.session_state:
        given = [v for v in st.query_params.get_all(SELECTED) if v.strip()]  # (`?run=` alone names none)
        from_url = [int(v) for v in given if v.isdigit() and int(v) in labels]
        missing = [v for v in given if v.isdigit() and int(v) not in labels]
        no_ids = [v for v in given if not v.isdigit()]  # `?run=abc`: no store holds it
        said = []
        if missing:
            said.append(
                f"The address names run{'s' * (len(missing) > 1)} {', '.join(missing)}, which this store does not "
                f"hold (a link from another store? `ortholab dashboard --db STORE` opens that one)"
            )
        if no_ids:
            quoted = ", ".join(f"run={v}" for v in no_ids)
            said.append(
                f"The address's {quoted} names no run: a run is named by its number (`ortholab runs` lists them)"
            )
        if said:  # said once, below
            then = "the others are shown." if from_url else "the newest run is shown instead."
            st.session_state[NOT_HERE] = "; ".join(said) + "; " + then
        trained = [run.id for run in runs if run.stage == "fit"]  # a predict run has no curves, a validate or test
        scored = [run.id for run in runs if run.stage != "predict"]  # run one point
        st.session_state[SELECTED] = from_url if from_url else (trained or scored or [run.id for run in runs])[:1]
    st.session_state[SELECTED] = [i for i in st.session_state[SELECTED] if i in labels]
    if warning := st.session_state.pop(NOT_HERE, None):
        st.sidebar.warning(warning)
    chosen = st.sidebar.multiselect(
        "Selected runs",
        list(labels),
        format_func=lambda i: labels.get(i, f"#{i}"),
        key=SELECTED,
        placeholder="pick runs here or on the Runs page",
        help="Every page shows the runs selected here; the Runs table's checkboxes edit the same selection.",
    )
    st.query_params[SELECTED] = [str(i) for i in chosen]  # the address bar names the view's runs
    return chosen


def selected_ids() -> list[int]:
    return list(st.session_state.get(SELECTED, []))


def apply_table_choice(displayed: list[int], chosen: list[int]) -> None:
    """Called by the Runs table when its checkboxes change: displayed runs are selected exactly when checked."""
    st.session_state[SELECTED] = merge_selection(selected_ids(), displayed, chosen)
