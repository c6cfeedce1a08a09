"""Papers page: each paper table's published numbers beside the runs that reproduce them (`ortholab reproduce`)."""

import pandas as pd
import streamlit as st

from ortholab.app import data
from ortholab.app.tables import default_table
from ortholab.db import published

reader = data.reader()
st.title("Papers")
tables = data.paper_tables()
if not tables:
    st.info(f"No published tables under `{published.PUBLISHED_DIR}`.")
    st.stop()

labels = {key: f"{t.paper} · {t.table}: {t.title}" for key, t in tables.items()}
chosen = st.selectbox(
    "Table",
    list(tables),
    index=list(tables).index(default_table(tables, reader.runs())),
    format_func=labels.get,
    key="paper_table",
    bind="query-params",
    persist_state="session",
)
table = tables[chosen]
st.caption(
    f"Metric `{table.metric}` ({'higher' if table.mode == 'max' else 'lower'} is better); published = "
    f"{table.scale:g} × OrthoLab value. Run the missing rows with `ortholab reproduce {table.id}` "
    f"(`--scale cpu-smoke` for a few minutes per row on CPU). A reproduced value marked (val/…) was read from "
    "validation because the run has no test evaluation yet."
)
frame = pd.DataFrame(data.paper_comparison(reader.url, chosen))
frame["run"] = [f"curves?run={int(i)}" if pd.notna(i) else None for i in frame["run"]]
st.dataframe(
    frame,
    hide_index=True,
    placeholder="—",
    column_config={
        "run": st.column_config.LinkColumn("run", display_text=r"run=(\d+)", help="open the run's curves"),
        "test_run": st.column_config.NumberColumn("test run", format="%d"),
        "n": st.column_config.NumberColumn("n", format="%d"),
        "params": st.column_config.NumberColumn("params", format="%d"),
        "seeds": st.column_config.TextColumn(
            "seeds",
            help="the row's seeds: n, mean ± sample sd (min–max) and the "
            "published value against that spread (`reproduce --seeds`)",
        ),
    },
)
missing = int((frame["status"] == "not yet run").sum())
if missing:
    st.caption(f"{missing} of {len(frame)} rows not yet run.")
