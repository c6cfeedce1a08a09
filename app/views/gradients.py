"""Gradients and states page: ‖∂L/∂h_t‖ over t per snapshot (the scoRNN paper's Figure 5), runs overlaid
at one step, and the probe sequence's hidden-state trajectory as a heatmap (the SRNN paper's Figure 5)."""

import numpy as np
import streamlit as st

from ortholab.app import controls
from ortholab.app.charts import show
from ortholab.app.figures import Line, heatmap_figure, lines_figure
from ortholab.app.labels import run_label
from ortholab.app.page import selected_runs_page
from ortholab.app.smoothing import thin
from ortholab.app.snapshots import at_step, by_step, no_snapshot_note, steps_of
from ortholab.db.artifacts import GRAD_NORMS, HIDDEN_TRAJECTORY

MAX_PROFILES = 12  # snapshot lines per run chart
GRADIENT = "‖∂L/∂h<sub>t</sub>‖"  # plotly text: HTML subscripts

reader, runs = selected_runs_page("Gradients and states")

# ---- ‖∂L/∂h_t‖ profiles ------------------------------------------------------------------------
st.header(r"$\lVert \partial L / \partial h_t \rVert$ over $t$")
profiles = {run.id: by_step(reader.artifacts(run.id, GRAD_NORMS)) for run in runs}
with_profiles = [run for run in runs if profiles[run.id]]
for run in runs:
    if not profiles[run.id]:
        st.info(no_snapshot_note(run, "gradient-norm profiles", reader.analyses_left_out))

if with_profiles:
    log_y = controls.toggle(st, "Log scale", key="grad_log", default=True)
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
            lines.append(Line(f"step {record.step}", np.arange(norms.size), norms))
        show(
            lines_figure(lines, x_title="t", y_title=GRADIENT, log_y=log_y, title=run_label(run), sequential=True),
            f"grad_{run.id}",
        )
        if len(chosen) < len(records):
            st.caption(f"{run_label(run)}: {len(chosen)} of {len(records)} snapshots drawn, evenly spaced.")

    if len(with_profiles) > 1:
        st.subheader("Runs overlaid at one step")
        steps = steps_of(*(profiles[r.id] for r in with_profiles))
        step = controls.select_slider(
            st, "Step (each run shows its latest profile at or before it)", steps, key="grad_step", default=steps[-1]
        )
        lines = []
        for run in with_profiles:
            record = at_step(profiles[run.id], step)
            if record is not None:
                norms = reader.artifact_array(record.id)
                lines.append(Line(f"{run_label(run)} · step {record.step}", np.arange(norms.size), norms, run.id))
        show(
            lines_figure(lines, x_title="t", y_title=GRADIENT, log_y=log_y, title="the scoRNN paper's Figure 5 view"),
            "grad_overlay",
        )

# ---- hidden-state trajectory --------------------------------------------------------------------
st.header("Hidden-state trajectory of the probe sequence")
trajectories = {run.id: by_step(reader.artifacts(run.id, HIDDEN_TRAJECTORY)) for run in runs}
with_states = [run for run in runs if trajectories[run.id]]
if not with_states:
    st.info(
        "No selected run records hidden-state trajectories ('hidden_trajectory' snapshots): they are off by default; "
        "`--trainer.callbacks+=training.callbacks.HiddenTrajectory --trainer.callbacks.steps '[0, 1000]'` records "
        "them at those steps."
    )
else:
    run_col, step_col = st.columns(2)
    choices = [r.id for r in with_states]
    run_id = controls.selectbox(
        run_col,
        "Run",
        choices,
        key="state_run",
        default=choices[0],
        format_func=lambda i: run_label(reader.summaries([i])[0]),
    )
    records = trajectories[run_id]
    steps = steps_of(records)
    if len(steps) > 1:
        with step_col:
            step = controls.select_slider(st, "Snapshot step", steps, key=f"state_step_{run_id}", default=steps[-1])
    else:
        step = steps[0]
    record = at_step(records, step) or records[-1]
    states = reader.artifact_array(record.id)
    if states.ndim == 1:  # a single unit
        states = states[:, None]
    unshifted = (record.meta or {}).get("unshifted")
    title = f"{run_label(reader.summaries([run_id])[0])} · step {record.step}" + (" · unshifted" if unshifted else "")
    show(
        heatmap_figure(states.T, x_title="t", y_title="hidden unit", title=title + " (the SRNN paper's Figure 5 view)"),
        "states",
    )
    st.caption(f"$h_t$ of one probe sequence, {states.shape[0]} steps × {states.shape[1]} units.")
