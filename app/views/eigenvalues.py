"""Eigenvalues page: eig(W) in the complex plane per snapshot step, side by side across runs; scoRNN's
count of eigenvalues near −1, scuRNN's phases, and the orthogonality drift (the scoRNN paper's Figure 4)."""

import numpy as np
import pandas as pd
import streamlit as st

from ortholab.app import controls, table_fit
from ortholab.app.charts import EXPORT_WIDTH, show
from ortholab.app.curves import MAX_POINTS
from ortholab.app.figures import EigenPanel, Line, eigenvalue_figure, lines_figure, phases_figure
from ortholab.app.labels import run_label
from ortholab.app.page import selected_runs_page
from ortholab.app.smoothing import decimate
from ortholab.app.snapshots import at_step, by_step, no_snapshot_note, steps_of
from ortholab.db.artifacts import EIGENVALUES, PHASES

ORTHOGONALITY = "analysis/orthogonality"
DRIFT = "‖WᴴW − I‖<sub>F</sub>"  # plotly text: HTML subscripts

reader, runs = selected_runs_page("Eigenvalues")


def step_picker(label: str, steps: list[int], key: str) -> int:
    """A slider over the snapshot steps (the latest by default); just the step when there is one."""
    if len(steps) == 1:
        st.caption(f"One snapshot, at step {steps[0]}.")
        return steps[0]
    return controls.select_slider(st, label, steps, key=key, default=steps[-1])


# ---- eig(W) in the complex plane ---------------------------------------------------------------
snapshots = {run.id: by_step(reader.artifacts(run.id, EIGENVALUES)) for run in runs}
with_eigs = [run for run in runs if snapshots[run.id]]
for run in runs:
    if not snapshots[run.id]:
        st.info(no_snapshot_note(run, "eigenvalue snapshots", reader.analyses_left_out))

if with_eigs:
    step = step_picker(
        "Snapshot step (each run shows its latest snapshot at or before it)",
        steps_of(*(snapshots[r.id] for r in with_eigs)),
        "eig_step",
    )
    panels, rows = [], []
    for run in with_eigs:
        record = at_step(snapshots[run.id], step)
        if record is None:
            st.caption(f"{run_label(run)}: no snapshot yet at step {step} (first at step {snapshots[run.id][0].step}).")
            continue
        values = reader.artifact_array(record.id)
        meta = record.meta or {}
        near = meta.get("near_minus_one")
        title = f"{run_label(run)} · step {record.step}" + (f" · {near} near −1" if near is not None else "")
        panels.append(EigenPanel(title, values, run.id))
        rows.append(
            {
                "run": run_label(run),
                "family": run.family,
                "step": record.step,
                "n": values.size,
                "max ||λ| − 1|": float(np.max(np.abs(np.abs(values) - 1.0))) if values.size else None,
                "near −1": near,
                "tolerance": meta.get("tolerance"),
            }
        )
    if panels:
        columns = min(3, len(panels))
        rows_of_panels = -(-len(panels) // columns)
        show(
            eigenvalue_figure(panels, columns=columns),
            "eig_plane",
            export_height=int(EXPORT_WIDTH / columns * rows_of_panels) + 60,
        )  # square panels when saved
        drift = pd.DataFrame(rows)
        st.dataframe(
            drift,
            hide_index=True,
            column_config=table_fit.sized(
                drift,
                {"max ||λ| − 1|": st.column_config.NumberColumn(format="%.2e")},
                formats={"max ||λ| − 1|": "%.2e"},
            ),
        )
        st.caption(
            "An orthogonal/unitary W has every eigenvalue on the unit circle; max ||λ| − 1| measures the drift. "
            "The Cayley transform cannot reach −1, which scoRNN's ρ entries of −1 in D provide."
        )

    counts = []
    for run in with_eigs:
        points = [
            (r.step, r.meta["near_minus_one"])
            for r in snapshots[run.id]
            if (r.meta or {}).get("near_minus_one") is not None
        ]
        if points:
            steps_, values_ = zip(*points, strict=True)
            counts.append(Line(run_label(run), np.array(steps_), np.array(values_), run.id))
    st.subheader("Eigenvalues near −1")
    if counts:
        show(lines_figure(counts, x_title="step", y_title="eigenvalues near −1"), "eig_near")
    else:
        st.info("No snapshot of the selected runs records a count of eigenvalues near −1 (scoRNN records it).")

# ---- scuRNN phases ----------------------------------------------------------------------------
st.subheader("scuRNN phases θ of D")
phases = {run.id: by_step(reader.artifacts(run.id, PHASES)) for run in runs}
with_phases = [run for run in runs if phases[run.id]]
if with_phases:
    step = step_picker("Phases at step", steps_of(*(phases[r.id] for r in with_phases)), "phase_step")
    panels = []
    for run in with_phases:
        record = at_step(phases[run.id], step)
        if record is not None:
            panels.append((f"{run_label(run)} · step {record.step}", reader.artifact_array(record.id), run.id))
    show(phases_figure(panels), "phases")
    st.caption("θ wrapped to [0, 2π), the convention scuRNN stores it in; every phase falls in one of the bins.")
else:
    st.info("No selected run records phases (scuRNN stores its diagonal phases θ as 'phases' snapshots).")

# ---- orthogonality drift ----------------------------------------------------------------------
st.subheader(r"Orthogonality drift $\lVert W^H W - I \rVert_F$")
drift = []
for run in runs:
    if ORTHOGONALITY in reader.metric_keys(run.id):
        points = reader.metric(run.id, ORTHOGONALITY)
        values = points["value"].to_numpy(dtype=float)
        index = decimate(values, MAX_POINTS)  # each stretch's min and max drawn (app/smoothing.py)
        drift.append(Line(run_label(run), points["step"].to_numpy()[index], values[index], run.id))
if drift:
    figure = lines_figure(drift, x_title="step", y_title=DRIFT, log_y=True, title="the scoRNN paper's Figure 4 view")
    show(figure, "orthogonality")
    zeros = [line.label for line in drift if (line.y <= 0).any()]
    if zeros:
        st.caption(
            f"Log scale; values of exactly 0 (exactly orthogonal: {', '.join(zeros)}) are drawn at the floor "
            f"{figure.layout.meta['floor']:.0e}, where the axis reads 0, marked ▽."
        )
else:
    st.info(f"No selected run has the metric `{ORTHOGONALITY}` (‖WᴴW − I‖ during training) yet.")
