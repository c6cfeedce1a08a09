"""Compare page: the selected runs side by side (headline numbers, last value of every metric, config
params with differences highlighted), exportable as CSV, and parallel coordinates over any mix of runs."""

import pandas as pd
import streamlit as st

from ortholab.app import controls, table_fit, tables
from ortholab.app.charts import show
from ortholab.app.figures import parallel_figure, parallel_lines_figure
from ortholab.app.labels import run_label
from ortholab.app.metric_names import split_per_clip
from ortholab.app.page import selected_runs_page
from ortholab.app.parallel import differing_fields, parallel_axes

DEFAULT_AXES = 10  # axes shown before the user picks

reader, runs = selected_runs_page("Compare")
if len(runs) == 1:
    st.info("Only one run selected: select two or more to see what differs between them.")

details = [reader.detail(run.id) for run in runs]
ids = [run.id for run in runs]
keys = {run.id: split_per_clip(reader.metric_keys(run.id))[0] for run in runs}  # per-clip keys left out
last_by_key = {key: reader.last_values(ids, key) for key in sorted({k for run_keys in keys.values() for k in run_keys})}
last_values = {run.id: {key: last_by_key[key].get(run.id) for key in keys[run.id]} for run in runs}
summary = tables.summary_compare_frame(details, last_values)
st.subheader("Results")
st.dataframe(summary, column_config=table_fit.sized(summary, index=True), placeholder="—")  # nothing cut

st.subheader("Config")
only_differing = controls.toggle(st, "Only params that differ", key="compare_only_diff", default=True)
params = tables.params_compare_frame(details, only_differing=only_differing and len(runs) > 1)
if params.empty:
    st.info("The selected runs have identical params." if only_differing else "No params recorded for these runs.")
else:
    differs = params["differs"]
    shown = params.drop(columns="differs")
    st.dataframe(
        shown.style.apply(lambda row: ["background-color: #fff3b0" if differs[row.name] else ""] * len(row), axis=1),
        column_config=table_fit.sized(shown, index=True),
    )
    st.caption(
        f"{int(differs.sum())} of {len(differs)} params shown differ (highlighted); "
        f"'{tables.ABSENT}': not set in that run."
    )

export = pd.concat([summary, params.drop(columns="differs")])
st.download_button(
    "Download CSV",
    export.to_csv(index_label="field").encode(),
    file_name="ortholab-compare.csv",
    mime="text/csv",
    on_click="ignore",
)

st.subheader("Parallel coordinates")
fields = {run.id: reader.fields(run.id) for run in runs}
candidates = differing_fields(fields)
metrics = sorted({key for run in runs for key in keys[run.id]})
if len(runs) < 2 or not candidates or not metrics:
    st.info("Parallel coordinates need two or more runs that differ in some field and report a metric.")
    st.stop()
axis_col, colour_col, brush_col = st.columns([3, 1, 1])
chosen = controls.multiselect(
    axis_col,
    "Axes",
    candidates,
    key="parallel_axes",
    default=candidates[:DEFAULT_AXES],
    help="Any field that differs between the selected runs: family, task and every param (numbers on numeric "
    "axes, anything else as categories, '(missing)' where a run lacks it).",
)
default_metric = next((run.main_metric for run in runs if run.main_metric in metrics), metrics[0])
colour = controls.selectbox(
    colour_col,
    "Colour by",
    metrics,
    key="parallel_colour",
    default=default_metric,
    help="The metric's last value; only runs that report it are drawn.",
)
brushing = controls.toggle(
    brush_col,
    "Brushing (WebGL)",
    key="parallel_webgl",
    default=False,
    help="Plotly's parcoords: drag along an axis to keep only the runs inside the range. Drawn by WebGL, which "
    "takes a second or more where the browser has no GPU; the default lines draw fast and name a run on hover.",
)
reporting = [run for run in runs if last_values[run.id].get(colour) is not None]
left_out = [run_label(run) for run in runs if run not in reporting]
if not chosen:
    st.info("Choose at least one axis.")
elif len(reporting) < 2:
    st.info(f"Fewer than two selected runs report `{colour}`; choose another metric to colour by.")
else:
    drawn = [run.id for run in reporting]
    axes = parallel_axes(fields, chosen, drawn)
    values = [last_values[i][colour] for i in drawn]
    if brushing:
        figure = parallel_figure(axes, values, colour)
    else:
        figure = parallel_lines_figure(axes, values, colour, [run_label(run) for run in reporting], drawn)
    show(figure, "parallel", export_height=520)
    st.caption(
        f"One line per run ({len(reporting)}), coloured by the last `{colour}`."
        + (f" Left out (no `{colour}`): {', '.join(left_out)}." if left_out else "")
    )
