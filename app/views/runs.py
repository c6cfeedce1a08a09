"""Runs page: every run in a filterable, sortable, paged table whose checkboxes edit the shared selection, any
param or metric as a column (kept in the URL), a filter expression (app/filter_expr.py); one run's details."""

import difflib
import hashlib

import pandas as pd
import streamlit as st
import yaml

from ortholab.app import data, filter_expr, state, table_fit, tables
from ortholab.app.labels import run_label
from ortholab.app.metric_names import split_per_clip
from ortholab.db import provenance

PAGE_SIZES = [25, 50, 100, 200]

reader = data.reader()
runs = reader.runs()
st.title("Runs")
if not runs:
    st.info(
        f"No runs recorded in `{reader.display_url}` yet. Train one with "
        "`ortholab fit --config configs/demo/copying_scornn.yaml` (add `--db URL` for another store)."
    )
    st.stop()

frame = tables.runs_frame(runs, now=reader.clock(), progress=reader.progress(), copied=reader.copied is not None)
family_col, task_col, status_col, text_col = st.columns([1, 1, 1, 2])
families = family_col.multiselect(
    "Family", sorted(frame["family"].dropna().unique()), key="filter_family", persist_state="session"
)
tasks = task_col.multiselect(
    "Task", sorted(frame["task"].dropna().unique()), key="filter_task", persist_state="session"
)
statuses = status_col.multiselect(
    "Status", sorted(frame["status"].unique()), key="filter_status", persist_state="session"
)
text = text_col.text_input(
    "Search", key="filter_text", placeholder="name, #id, family, task or tag", persist_state="session"
)
sweeps = tables.sweep_names(frame)
sweep = None
if sweeps:
    sweep = st.selectbox(
        "Sweep",
        [None, *sweeps],
        format_func=lambda s: "all runs" if s is None else s,
        key="filter_sweep",
        help="the trials of one `ortholab sweep`",
        persist_state="session",
    )
shown = tables.filter_runs(frame, families=families, tasks=tasks, statuses=statuses, text=text, sweep=sweep)

# ---- params and metrics: as columns, in the filter expression --------------------------------------------
all_ids = [run.id for run in runs]
params = reader.params_of(all_ids)
param_keys = sorted({key for values in params.values() for key in values})
metric_keys = split_per_clip({key for keys in reader.metric_keys_of(all_ids).values() for key in keys})[0]
run_fields = [c for c in frame.columns if c not in ("activity", "of plan", "epoch", "ETA", "start")]
known = list(dict.fromkeys([*run_fields, *param_keys, *metric_keys]))


def column_values(name: str, rows: pd.DataFrame) -> pd.Series:
    """A run field, param or metric (its last value) for the rows' runs, aligned with them."""
    if name in rows.columns and name in run_fields:
        return rows[name]
    ids = rows["id"].astype(int)
    if name in param_keys:
        values = [params[i].get(name) for i in ids]
    else:
        last = reader.last_values(all_ids, name)
        values = [last.get(i) for i in ids]
    return pd.Series(values, index=rows.index, dtype=object)


expression = st.text_input(
    "Filter expression",
    key="where",
    bind="query-params",
    persist_state="session",
    placeholder='family = "scornn" and rho > 0.3 and val/acc > 0.9',
    help="Compare run fields (family, task, status, steps, best, ...), params (full dotted name or its last part: "
    "rho) and metrics (their last value: val/acc) with = != < <= > >= ~ (contains), `in (...)`, joined by and, "
    "or, not and brackets; text in quotes, names with spaces in backticks; null for a missing value.",
)
if expression.strip():
    try:
        tree = filter_expr.parse(expression)
        shown = shown[filter_expr.evaluate(tree, shown, known, lambda name: column_values(name, shown))]
    except filter_expr.FilterError as error:
        said = str(error).rstrip(".")
        st.error(
            f"Filter expression not applied: {said}{'' if said.endswith('?') else '.'}",
            icon=":material/filter_alt_off:",
        )

if sweep:  # the sweep's best over all its trials, whatever the other filters hide (as `ortholab sweep` says it)
    trials = tables.filter_runs(frame, sweep=sweep)
    best = tables.best_run(trials[~trials["tags"].map(lambda tags: tables.STOPPED_TAG in tags)])  # Optuna's FAIL
    hidden = f"; the filters show {len(shown)} of them" if len(shown) < len(trials) else ""
    if best is None:
        st.info(f"No trial of sweep {sweep!r} has recorded its main metric yet{hidden}.")
    else:
        pruned = int(trials["tags"].map(lambda tags: "pruned" in tags).sum())  # `ortholab sweep --pruner median`
        stopped = int(trials["tags"].map(lambda tags: tables.STOPPED_TAG in tags).sum())
        counted = len(trials) - stopped  # as `ortholab sweep` counts: a stopped trial's values train again
        st.success(
            f"Best of sweep {sweep!r}: #{best['id']} {best['name']}, {best['main metric']} = {best['best']:.4g} "
            f"({counted} trial{'s' * (counted != 1)}"
            + (f", {pruned} pruned: stopped early, tagged 'pruned'" if pruned else "")
            + (
                f"; {stopped} more stopped by Ctrl-C or SIGTERM, tagged 'stopped': their values train again"
                if stopped
                else ""
            )
            + f"{hidden})"
        )

columns_col, sort_col, order_col, size_col = st.columns([4, 2, 1.5, 1.5])  # 'Descending' whole
asked = st.query_params.get_all("cols")  # `cols=a,b` as `runs --columns` takes them, and `cols=a&cols=b`
named = [part.strip() for value in asked for part in value.split(",") if part.strip()]
if unknown := [name for name in named if name not in (*param_keys, *metric_keys)]:
    close = difflib.get_close_matches(unknown[0], [*param_keys, *metric_keys], n=1)
    st.warning(
        f"The address's cols= names {', '.join(unknown)}, which no listed run records as a param or metric"
        + (f" (did you mean {close[0]}?)" if close else "")
        + "; the others are shown.",
        icon=":material/view_column:",
    )
if named != asked:  # the widget bound to the address reads each column as one value
    st.query_params["cols"] = st.session_state["cols"] = [name for name in named if name not in unknown]
extra = columns_col.multiselect(
    "Columns",
    [*param_keys, *metric_keys],
    key="cols",
    bind="query-params",
    persist_state="session",
    placeholder="add params or metrics as columns",  # no format_func: the URL keeps what a bound widget shows
    help="Any recorded param, or any metric's last value (the value at its highest step); kept in the URL.",
)
if sweep:  # the settings the sweep varies, as columns: its trials compared without picking them by hand
    trial_ids = [int(i) for i in tables.filter_runs(frame, sweep=sweep)["id"]]
    extra = [*extra, *[key for key in tables.varied_settings(params, trial_ids) if key not in extra]]
added = {
    name if name not in run_fields else f"param {name}": tables.typed_column(list(column_values(name, shown))).set_axis(
        shown.index
    )
    for name in extra
}
if added:  # right after the run's identity, where they are seen without scrolling
    front = ["id", "name", "family", "task"]
    shown = pd.concat([shown[front], pd.DataFrame(added, index=shown.index), shown.drop(columns=front)], axis=1)
sortable = [c for c in shown.columns if c not in ("tags",)]
if st.session_state.get("sort", "id") not in sortable:  # its column was removed: back to the newest first
    st.session_state["sort"] = "id"
sort_by = sort_col.selectbox(
    "Sort by", sortable, index=sortable.index("id"), key="sort", bind="query-params", persist_state="session"
)
descending = order_col.toggle("Descending", value=True, key="desc", bind="query-params", persist_state="session")
size = size_col.selectbox(
    "Rows per page", PAGE_SIZES, index=PAGE_SIZES.index(50), key="page_size", persist_state="session"
)
shown = tables.sort_runs(shown, sort_by, descending)
pages = max(1, -(-len(shown) // size))
if st.session_state.get("page", 1) > pages:
    st.session_state["page"] = pages
page = st.pagination(pages, key="page", persist_state="session") if pages > 1 else 1
rows = tables.page_of(shown, page, size)

displayed = [int(i) for i in rows["id"]]
selected = state.selected_ids()
first_row = (page - 1) * size + 1
shown_rows = f"rows {first_row}–{first_row + len(rows) - 1} shown" if len(rows) else "none shown"
st.caption(
    f"{len(shown)} of {len(frame)} runs match · {shown_rows} · {len(selected)} selected. Tick rows to select runs "
    "for the other pages; runs hidden by the filters or on other pages stay selected. 'Sort by' orders all matching "
    "runs; a click on a column header sorts this page."
)
# a fresh table whenever rows or selection change, so its ticks always mirror the shared selection
table_key = "runs_table_" + hashlib.sha1(repr((displayed, selected, list(rows.columns))).encode()).hexdigest()[:12]


def _on_select() -> None:
    picked = st.session_state[table_key].selection.rows
    state.apply_table_choice(displayed, [displayed[r] for r in picked])


extra_config = {
    name: st.column_config.NumberColumn(
        name, format="%.4g", help="last value (at the highest step)" if name in metric_keys else "param"
    )
    for name in rows.columns
    if name not in tables.RUN_COLUMNS and pd.api.types.is_float_dtype(rows[name])
}
# every column as wide as its header and its longest value on this page (the grid's own sizing left run names and
# 'beats baseline' cut); the table scrolls sideways past the page's edge
formats = {"best": "%.4g", "last": "%.4g", "baseline": "%.4g", "duration (s)": "%.1f", "parameters": "localized"}
widths = table_fit.natural_widths(rows, formats | {name: "%.4g" for name in extra_config}, skip=("id", "start", "tags"))
st.dataframe(
    rows,
    key=table_key,
    on_select=_on_select,
    selection_mode="multi-row",
    placeholder="—",
    selection_default={"selection": {"rows": [pos for pos, i in enumerate(displayed) if i in selected]}},
    hide_index=True,
    column_config=table_fit.with_widths(
        {
            "id": st.column_config.NumberColumn("id", format="%d", width="small"),
            "best": st.column_config.NumberColumn(
                "best", format="%.4g", help="best main metric (min or max per its mode)"
            ),
            "last": st.column_config.NumberColumn("last", format="%.4g", help="main metric at the highest step"),
            "baseline": st.column_config.NumberColumn("baseline", format="%.4g", help="the task's analytic baseline"),
            "beats baseline": st.column_config.CheckboxColumn(
                "beats baseline", help="best main metric better than the baseline"
            ),
            "parameters": st.column_config.NumberColumn("parameters", format="localized"),
            "start": st.column_config.DatetimeColumn("start", format="YYYY-MM-DD HH:mm:ss"),
            "duration (s)": st.column_config.NumberColumn("duration (s)", format="%.1f"),
            "activity": st.column_config.TextColumn("activity", help="running runs: time since their last write"),
            "of plan": st.column_config.TextColumn("of plan", help="running runs: steps done of the steps planned"),
            "epoch": st.column_config.TextColumn("epoch", help="running runs: the epoch, of the epochs planned"),
            "ETA": st.column_config.TextColumn(
                "ETA", help="running runs: time left at the median pace of their last 5 steps (none once silent)"
            ),
            "tags": st.column_config.ListColumn("tags"),
            "reason": st.column_config.TextColumn("reason", help="why the run failed or stopped, when known"),
            "mode": st.column_config.TextColumn(
                "mode", help="whether the main metric is better low (min) or high (max)"
            ),
            **extra_config,
        },
        widths,
    ),
)

st.header("Run details")
options = [run.id for run in runs]
first = next((i for i in selected if i in options), options[0])
run_id = st.selectbox(
    "Run",
    options,
    index=options.index(first),
    format_func=lambda i: run_label(reader.summaries([i])[0]),
    key="detail_run",
)
detail = reader.detail(run_id)
overview, config_tab, groups_tab, artifacts_tab, metrics_tab = st.tabs(
    ["Overview", "Config", "Parameter groups", "Artifacts", "Metrics"]
)

with overview:
    cols = st.columns(4)
    cols[0].metric("status", detail.status)
    cols[1].metric("steps", detail.steps)
    cols[2].metric(f"best {detail.main_metric or 'main metric'}", "—" if detail.best is None else f"{detail.best:.4g}")
    cols[3].metric("task baseline", "—" if detail.baseline is None else f"{detail.baseline:.4g}")
    if detail.reason:
        st.warning(f"Reason recorded: {detail.reason}")
    task_spec = (detail.info or {}).get("task_spec") or {}
    if task_spec.get("description"):
        st.write(f"Task: {task_spec['description']}")
    st.write(
        f"Family `{detail.family}`, task `{detail.task}`, stage `{detail.stage}`, "
        f"{detail.parameter_count if detail.parameter_count is not None else 'unknown number of'} parameters, "
        f"world size {detail.world_size}, host `{detail.hostname}`"
        + (f", run folder `{detail.run_dir}`." if detail.run_dir else ".")
    )
    for note in provenance.restore_notes(detail.info) + provenance.resume_notes(detail.info):
        st.write(note + ".")
    codes = (detail.info or {}).get("code") or []
    st.write(
        "Code: "
        + (
            "; resumed by ".join(provenance.details(code) for code in codes)
            if codes
            else "not recorded (a run of OrthoLab before it recorded its commit)"
        )
        + "."
    )

with config_tab:
    if detail.config:
        st.code(yaml.safe_dump(detail.config, sort_keys=False), language="yaml")
    else:
        st.info("No config recorded for this run (it may still be starting).")

with groups_tab:
    groups = tables.parameter_groups_frame(detail.info)
    if groups.empty:
        st.info("No parameter groups recorded for this run (the run's info has no parameter_counts/optimizers).")
    else:
        st.dataframe(groups, hide_index=True)

with artifacts_tab:
    artifacts = tables.artifacts_frame(reader.artifacts(run_id))
    if artifacts.empty:
        st.info("No artifacts recorded for this run.")
    else:
        st.dataframe(artifacts, hide_index=True)

with metrics_tab:
    rows = []
    for key in reader.metric_keys(run_id):
        points = reader.metric(run_id, key)
        rows.append(
            {
                "metric": key,
                "points": len(points),
                "first step": points["step"].iloc[0],
                "last step": points["step"].iloc[-1],
                "last": points["value"].iloc[-1],
                "min": points["value"].min(),
                "max": points["value"].max(),
            }
        )
    if rows:  # four significant digits, as the CLI prints them (a 7.83e-13 loss read '0.0000000000007')
        values = {name: st.column_config.NumberColumn(name, format="%.4g") for name in ("last", "min", "max")}
        st.dataframe(pd.DataFrame(rows), hide_index=True, column_config=values)
    else:
        st.info("No metric points recorded for this run yet.")
