"""Papers page: each paper table's published numbers beside the runs that reproduce them (`ortholab reproduce`)."""

import pandas as pd
import streamlit as st

from ortholab.app import data, table_fit
from ortholab.app.tables import default_table
from ortholab.db import published

READING = ["row", "published", "reproduced", "verdict", "seeds", "status", "run"]
WRAPPED = ("published", "reproduced", "seeds", "status")
DETAILS = [
    *("row", "setting", "family", "n", "params", "selected_on_val", "length", "scale", "recorded_for", "test_run"),
    "config",
]
ROOM_PX = 900  # the page's width for a table in a 1400 px window with the sidebar open (the screenshots')
HEADER_PX = ROW_PX = 35  # Streamlit's header and one-line rows
ROWS_SHOWN = 12  # rows in view; more scroll
TABLE = "paper_table"  # session-state key and URL query parameter: a file stem under configs/papers/published

reader = data.reader()
st.title("Papers")
tables = data.paper_tables()
if not tables:
    st.info(f"No published tables under `{published.PUBLISHED_DIR}`.")
    st.stop()

labels = {key: f"{t.paper} · {t.table}: {t.title}" for key, t in tables.items()}
# The address names the table by its file stem (?paper_table=scornn_table1). Not bind="query-params": a bound
# widget keeps what it shows in the URL, here the long label, so a stem in a bookmark would be dropped.
asked = st.query_params.get(TABLE)
unknown = None
if st.session_state.get(TABLE) not in tables:  # a new session (or a table since removed): the URL's, else default
    unknown = asked if asked and asked not in tables else None
    st.session_state[TABLE] = asked if asked in tables else default_table(tables, reader.runs())
chosen = st.selectbox("Table", list(tables), format_func=labels.get, key=TABLE, persist_state="session")
if unknown is not None:
    st.error(
        f"Table from the address not shown: no published table is called {unknown!r}; showing {chosen}.",
        icon=":material/table_chart:",
    )
st.query_params[TABLE] = chosen  # the address bar names the view's table
table = tables[chosen]
st.caption(
    f"Metric `{table.metric}` ({'higher' if table.mode == 'max' else 'lower'} is better)"
    + (f"; published = {table.scale:g} × OrthoLab value" if table.scale != 1 else "")
    + f". Run the missing rows with `ortholab reproduce {table.id}` "
    "(`--scale cpu-smoke` for a few minutes per row on CPU)."
    + (  # only where the paper's metric is a test one: a table measured on validation has nothing to fall back from
        " A reproduced value marked (val/…) was read from validation because the run has no test evaluation yet."
        if table.metric.startswith("test/")
        else ""
    )
    + f" A run is beyond the baseline at a validation {published.BEYOND_BASELINE:.0%} or more better than it."
)
frame = pd.DataFrame(data.paper_comparison(reader.url, chosen))
reduced = frame[frame["scale"].notna() & (frame["scale"] != "full")]
if len(reduced):  # a smoke run's number beside the paper's reads as a reproduction unless said (walk-through 9)
    st.warning(
        f"{', '.join(reduced['row'])}: trained at --scale {', '.join(sorted(set(reduced['scale'])))}, a check that "
        "the row runs, not a reproduction of the paper's number (`ortholab reproduce` without --scale trains it "
        "as the paper does).",
        icon=":material/science:",
    )
# the row's run and, with several seeds, every seed's run beside it: their curves side by side
frame["run"] = [
    "curves?" + "&".join(f"run={r}" for r in dict.fromkeys([int(i), *seeds])) if pd.notna(i) else None
    for i, seeds in zip(frame["run"], frame["seed_runs"])
]
# What a reader compares, fitted to the page (long claims wrapped over a few lines, nothing cut); the sizes, runs and
# configs behind the rows in a second table below.
fit = table_fit.fit_columns(
    {name: [table_fit.shown_text(v) for v in frame[name]] for name in READING if name != "run"}
    | {"run": [link.removeprefix("curves?") for link in frame["run"] if isinstance(link, str)] or ["—"]},
    ROOM_PX,
    wrap=WRAPPED,
)
st.dataframe(
    frame,
    hide_index=True,
    placeholder="—",
    column_order=READING,
    row_height=fit.row_height,
    height=HEADER_PX + min(len(frame), ROWS_SHOWN) * (fit.row_height or ROW_PX) + 3,
    column_config={
        "run": st.column_config.LinkColumn(
            "run",
            display_text=r"curves\?(.+)",
            help="open the row's curves: its run's, and with several seeds every seed's",
            width=fit.widths["run"],
        ),
        "seeds": st.column_config.TextColumn(
            "seeds",
            help="the row's seeds: n, mean ± sample sd (min–max) and the "
            "published value against that spread (`reproduce --seeds`)",
            width=fit.widths["seeds"],
        ),
        **{
            name: st.column_config.TextColumn(name, width=fit.widths[name])
            for name in READING
            if name not in ("run", "seeds")
        },
    },
)
with st.expander("Sizes, runs and configs behind the rows"):
    st.dataframe(
        frame,
        hide_index=True,
        placeholder="—",
        column_order=DETAILS,
        column_config={
            "test_run": st.column_config.NumberColumn("test run", format="%d"),
            "n": st.column_config.NumberColumn("n", format="%d"),
            "params": st.column_config.NumberColumn("params", format="%d"),
            "selected_on_val": st.column_config.TextColumn(
                "selected on val", help="the test value at the validation-selected checkpoint"
            ),
            "recorded_for": st.column_config.TextColumn(
                "recorded for", help="the twin row (same config, same flags) whose runs this row shows"
            ),
        },
    )
missing = int((frame["status"] == "not yet run").sum())
if missing:
    st.caption(f"{missing} of {len(frame)} rows not yet run.")
