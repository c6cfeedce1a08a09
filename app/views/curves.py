"""Curves page: the selected runs' metrics overlaid, with x-axis, smoothing, log scale and task baselines."""

import streamlit as st

from ortholab.app import data, state
from ortholab.app.curves import X_AXES, baselines_for, batch_size, build_curve
from ortholab.app.figures import curves_figure
from ortholab.app.labels import run_label
from ortholab.app.smoothing import MAX_WEIGHT
from ortholab.app.smoothing import NAME as SMOOTHING_NAME

REFRESH_S = 5

reader = data.reader()
runs = reader.summaries(state.selected_ids())
st.title("Curves")
if not runs:
    st.info("No runs selected: pick runs in the sidebar or tick them on the Runs page.")
    st.stop()

keys = sorted({key for run in runs for key in reader.metric_keys(run.id)})
if not keys:
    st.info("The selected runs have no metric points yet.")
    st.stop()

default = next((run.main_metric for run in runs if run.main_metric in keys), keys[0])
metric_col, axis_col = st.columns([2, 3])
metrics = metric_col.multiselect("Metrics (one chart each)", keys, default=[default], key="curve_metrics")
axis = axis_col.segmented_control("x-axis", list(X_AXES), default="step", key="curve_axis") or "step"
smooth_col, log_col, live_col = st.columns([3, 1, 2])
weight = smooth_col.slider(
    "Smoothing", 0.0, MAX_WEIGHT, 0.6, step=0.001, format="%.3f", key="curve_smoothing",
    help=f"{SMOOTHING_NAME} (as TensorBoard's slider); 0 turns it off. The raw curve stays visible, faded.",
)  # fmt: skip
log_y = log_col.toggle("Log scale", key="curve_log")
live = any(run.status == "running" for run in runs)
auto = live_col.toggle(
    f"Auto-refresh every {REFRESH_S} s", value=live, disabled=not live, key="curve_refresh",
    help="Redraws the charts while a selected run is still running.",
)  # fmt: skip
if weight > 0:
    st.caption(f"Smoothing: {SMOOTHING_NAME}, weight {weight:.3f}; faded lines are the raw points.")
if not metrics:
    st.info("Choose at least one metric.")
    st.stop()


@st.fragment(run_every=REFRESH_S if auto and live else None)
def charts() -> None:
    fresh = data.reader()  # re-reads the runs list when its cache expires, so live runs grow
    shown = fresh.summaries([run.id for run in runs])
    for metric in metrics:
        curves, notes = [], []
        for run in shown:
            if metric not in fresh.metric_keys(run.id):
                notes.append(f"{run_label(run)} has no `{metric}` points.")
                continue
            batch = batch_size(fresh.detail(run.id).params) if axis == "examples seen" else None
            curve = build_curve(
                run_label(run), fresh.metric(run.id, metric), axis,
                start=run.created_at.timestamp(), batch=batch, weight=weight,
            )  # fmt: skip
            if curve is None:
                why = (
                    "no batch size (data.init_args.batch_size) recorded"
                    if axis == "examples seen"
                    else "no epochs recorded"
                )
                notes.append(f"{run_label(run)} is left out: {why}.")
            else:
                curves.append(curve)
                if len(curve.x) < curve.total_points:
                    notes.append(
                        f"{run_label(run)}: drawing {len(curve.x):,} of {curve.total_points:,} points (evenly strided)."
                    )
        baselines = baselines_for(shown, metric)
        figure = curves_figure(
            curves, x_title=X_AXES[axis], y_title=metric, log_y=log_y, baselines=baselines, title=metric
        )
        st.plotly_chart(figure, key=f"curve_{metric}")
        if baselines:
            st.caption(
                "Dashed: the task's analytic baseline (copying 10 ln 8 / (T + 20), adding 1/6), "
                "as in the papers' figures."
            )
        for note in notes:
            st.caption(note)


charts()
