"""Gradients and states page: ‖∂L/∂h_t‖ over t per snapshot (the scoRNN paper's Figure 5), runs overlaid
at one step, and the probe sequence's hidden-state trajectory as a heatmap (the SRNN paper's Figure 5)."""

import numpy as np
import streamlit as st

from ortholab.app import data, state
from ortholab.app.figures import heatmap_figure, lines_figure
from ortholab.app.labels import run_label
from ortholab.app.smoothing import thin
from ortholab.app.snapshots import at_step, by_step, no_snapshot_note, steps_of
from ortholab.db.artifacts import GRAD_NORMS, HIDDEN_TRAJECTORY

MAX_PROFILES = 12  # snapshot lines per run chart

reader = data.reader()
runs = reader.summaries(state.selected_ids())
st.title("Gradients and states")
if not runs:
    st.info("No runs selected: pick runs in the sidebar or tick them on the Runs page.")
    st.stop()

# ---- ‖∂L/∂h_t‖ profiles ------------------------------------------------------------------------
st.header("‖∂L/∂h_t‖ over t")
profiles = {run.id: by_step(reader.artifacts(run.id, GRAD_NORMS)) for run in runs}
with_profiles = [run for run in runs if profiles[run.id]]
for run in runs:
    if not profiles[run.id]:
        st.info(no_snapshot_note(run, "gradient-norm profiles"))

if with_profiles:
    log_y = st.toggle("Log scale", value=True, key="grad_log")
    st.caption(
        "How much of the loss's gradient reaches each hidden state: flat lines mean no vanishing gradient. "
        "One line per snapshot step, early dark, late bright."
    )
    for run in with_profiles:
        records = profiles[run.id]
        chosen = [records[i] for i in thin(len(records), MAX_PROFILES)]
        lines = []
        for record in chosen:
            norms = reader.artifact_array(record.id)
            lines.append((f"step {record.step}", np.arange(norms.size), norms))
        st.plotly_chart(
            lines_figure(lines, x_title="t", y_title="‖∂L/∂h_t‖", log_y=log_y, title=run_label(run), sequential=True),
            key=f"grad_{run.id}",
        )
        if len(chosen) < len(records):
            st.caption(f"{run_label(run)}: {len(chosen)} of {len(records)} snapshots drawn, evenly spaced.")

    if len(with_profiles) > 1:
        st.subheader("Runs overlaid at one step")
        step = st.select_slider(
            "Step (each run shows its latest profile at or before it)",
            steps_of(*(profiles[r.id] for r in with_profiles)), key="grad_step",
        )  # fmt: skip
        lines = []
        for run in with_profiles:
            record = at_step(profiles[run.id], step)
            if record is not None:
                norms = reader.artifact_array(record.id)
                lines.append((f"{run_label(run)} · step {record.step}", np.arange(norms.size), norms))
        st.plotly_chart(
            lines_figure(
                lines, x_title="t", y_title="‖∂L/∂h_t‖", log_y=log_y, title="the scoRNN paper's Figure 5 view"
            ),
            key="grad_overlay",
        )

# ---- hidden-state trajectory --------------------------------------------------------------------
st.header("Hidden-state trajectory of the probe sequence")
trajectories = {run.id: by_step(reader.artifacts(run.id, HIDDEN_TRAJECTORY)) for run in runs}
with_states = [run for run in runs if trajectories[run.id]]
if not with_states:
    st.info("No selected run records hidden-state trajectories ('hidden_trajectory' snapshots).")
else:
    run_col, step_col = st.columns(2)
    run_id = run_col.selectbox(
        "Run", [r.id for r in with_states], format_func=lambda i: run_label(reader.summaries([i])[0]), key="state_run"
    )
    records = trajectories[run_id]
    steps = steps_of(records)
    if len(steps) > 1:
        with step_col:
            step = st.select_slider("Snapshot step", steps, value=steps[-1], key="state_step")
    else:
        step = steps[0]
    record = at_step(records, step) or records[-1]
    states = reader.artifact_array(record.id)
    if states.ndim == 1:  # a single unit
        states = states[:, None]
    unshifted = (record.meta or {}).get("unshifted")
    title = f"{run_label(reader.summaries([run_id])[0])} · step {record.step}" + (" · unshifted" if unshifted else "")
    st.plotly_chart(
        heatmap_figure(states.T, x_title="t", y_title="hidden unit", title=title + " (the SRNN paper's Figure 5 view)"),
        key="states",
    )
    st.caption(f"h_t of one probe sequence, {states.shape[0]} steps × {states.shape[1]} units.")
