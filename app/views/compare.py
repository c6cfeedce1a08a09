"""Compare page: the selected runs side by side (headline numbers, last value of every metric, config
params with differences highlighted), exportable as CSV, and parallel coordinates over numeric params."""

import pandas as pd
import streamlit as st

from ortholab.app import data, state, tables
from ortholab.app.figures import parallel_figure

reader = data.reader()
runs = reader.summaries(state.selected_ids())
st.title("Compare")
if not runs:
    st.info("No runs selected: pick runs in the sidebar or tick them on the Runs page.")
    st.stop()
if len(runs) == 1:
    st.info("Only one run selected: select two or more to see what differs between them.")

details = [reader.detail(run.id) for run in runs]
last_values = {
    run.id: {key: float(reader.metric(run.id, key)["value"].iloc[-1]) for key in reader.metric_keys(run.id)}
    for run in runs
}
summary = tables.summary_compare_frame(details, last_values)
st.subheader("Results")
st.dataframe(summary, column_config={"_index": st.column_config.Column(width="medium")}, placeholder="—")

st.subheader("Config")
only_differing = st.toggle("Only params that differ", value=len(runs) > 1, key="compare_only_diff")
params = tables.params_compare_frame(details, only_differing=only_differing)
if params.empty:
    st.info("The selected runs have identical params." if only_differing else "No params recorded for these runs.")
else:
    differs = params["differs"]
    shown = params.drop(columns="differs")
    st.dataframe(
        shown.style.apply(lambda row: ["background-color: #fff3b0" if differs[row.name] else ""] * len(row), axis=1)
    )
    st.caption(
        f"{int(differs.sum())} of {len(differs)} params shown differ (highlighted); "
        f"'{tables.ABSENT}': not set in that run."
    )

export = pd.concat([summary, params.drop(columns="differs")])
st.download_button(
    "Download CSV", export.to_csv(index_label="field").encode(), file_name="ortholab-compare.csv", mime="text/csv"
)

with st.expander("Parallel coordinates", expanded=len(runs) > 2):
    differing = tables.params_compare_frame(details, only_differing=True).index
    numeric = tables.numeric_params_frame(details, differing)
    if len(runs) < 2 or numeric.drop(columns="best", errors="ignore").empty or numeric.shape[1] < 2:
        st.info("Parallel coordinates need two or more runs that differ in at least one numeric param.")
    else:
        st.plotly_chart(parallel_figure(numeric), key="parallel")
        st.caption("One line per run across the numeric params that differ, coloured by the best main metric.")
