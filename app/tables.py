"""The dashboard's tables as pandas DataFrames, built from the store's records; pure, no Streamlit."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

import pandas as pd

from ortholab.app.labels import run_label
from ortholab.db import ArtifactRecord, RunDetail, RunSummary
from ortholab.db.lease import silence
from ortholab.db.progress import duration, steps_of_plan
from ortholab.db.published import PaperTable

RUN_COLUMNS = [
    "id",
    "name",
    "family",
    "task",
    "status",
    "activity",
    "steps",
    "of plan",
    "epoch",
    "ETA",
    "main metric",
    "best",
    "last",
    "baseline",
    "beats baseline",
    "parameters",
    "start",
    "duration (s)",
    "tags",
    "reason",
    "mode",
]


def _seconds(later: datetime | None, earlier: datetime | None) -> float | None:
    if later is None or earlier is None:
        return None
    return (later - earlier).total_seconds()


def activity(run: RunSummary, now: datetime, copied: bool = False) -> str:
    """For a running run, how recently it wrote: 'live (3 s ago)' or 'silent 2.1 h: killed?'; '' otherwise. In an
    export's copy (`copied`, `now` the moment it was made): 'training when copied (3 s before)'."""
    if run.status != "running":
        return ""
    ago = max(0.0, _seconds(now, run.heartbeat_at))
    return silence(run.heartbeat_at, now) or (
        f"training when copied ({ago:.0f} s before)" if copied else f"live ({ago:.0f} s ago)"
    )


def beats_baseline(run: RunSummary) -> bool | None:
    """Whether the best main metric is better than the task's analytic baseline (None when either is missing)."""
    if run.best is None or run.baseline is None:
        return None
    return run.best > run.baseline if run.main_metric_mode == "max" else run.best < run.baseline


def runs_frame(
    runs: Sequence[RunSummary],
    now: datetime | None = None,
    progress: Mapping[int, Mapping[str, Any]] | None = None,
    copied: bool = False,
) -> pd.DataFrame:
    """One row per run with the columns of the Runs page (RUN_COLUMNS), in the order given; `progress` holds the
    running runs' db.progress.run_progress (steps of the plan, epoch, ETA), by run id; `copied`: the store is an
    export's frozen copy and `now` the moment it was made (its running runs were running then)."""
    now = now or datetime.now(timezone.utc)
    progress = progress or {}
    rows = [
        {
            "id": r.id,
            "name": r.name,
            "family": r.family,
            "task": r.task,
            "status": r.status,
            "activity": progress.get(r.id, {}).get("silent") or activity(r, now, copied),  # its process gone: at once
            "steps": r.steps,
            **_progress_cells(r.steps, progress.get(r.id, {})),
            "main metric": r.main_metric,
            "best": r.best,
            "last": r.last,
            "baseline": r.baseline,
            "beats baseline": beats_baseline(r),
            "parameters": r.parameter_count,
            "start": r.created_at,
            "duration (s)": _seconds(r.ended_at or r.heartbeat_at, r.created_at),
            "tags": list(r.tags),
            "reason": r.reason,
            "mode": r.main_metric_mode,
        }
        for r in runs
    ]
    return pd.DataFrame(rows, columns=RUN_COLUMNS)


def _progress_cells(steps: int, progress: Mapping[str, Any]) -> dict[str, str]:
    """'700/10000', '3/70' and '1h26m' for a running run with a plan and a pace; '' where unknown or not running."""
    return {
        "of plan": steps_of_plan(steps, progress["total_steps"]) if progress.get("total_steps") else "",
        "epoch": progress.get("epoch", ""),
        "ETA": duration(progress.get("eta_s")) or "",
    }


SWEEP_TAG = "sweep:"  # `ortholab sweep` tags every trial's run sweep:<name>
STOPPED_TAG = "stopped"  # and a trial's run that Ctrl-C or SIGTERM stopped (the sweep trains its values again)


def sweep_names(frame: pd.DataFrame) -> list[str]:
    """The sweeps whose trials are among the runs, by name."""
    return sorted({tag[len(SWEEP_TAG) :] for tags in frame["tags"] for tag in tags if tag.startswith(SWEEP_TAG)})


def varied_settings(params: dict[int, dict], ids: list[int]) -> list[str]:
    """The config keys (model., data., trainer.) whose values differ between the runs `ids`: a sweep's space."""
    keys = sorted({key for i in ids for key in params.get(i, {}) if key.startswith(("model.", "data.", "trainer."))})
    return [key for key in keys if len({repr(params.get(i, {}).get(key)) for i in ids}) > 1]


def best_run(frame: pd.DataFrame) -> pd.Series | None:
    """The row with the best main metric (min or max per the runs' mode), None when no run has one."""
    scored = frame.dropna(subset=["best"])
    if scored.empty:
        return None
    maximise = (scored["mode"] == "max").all()
    return scored.loc[scored["best"].idxmax() if maximise else scored["best"].idxmin()]


def filter_runs(
    frame: pd.DataFrame,
    *,
    families: Iterable[str] = (),
    tasks: Iterable[str] = (),
    statuses: Iterable[str] = (),
    text: str = "",
    sweep: str | None = None,
) -> pd.DataFrame:
    """Rows matching every given filter; an empty filter keeps all. `text` matches id, name, family, task
    or a tag, case-insensitively (several words: all must match); `sweep` keeps that sweep's trials."""
    keep = pd.Series(True, index=frame.index)
    if sweep:
        keep &= frame["tags"].map(lambda tags: f"{SWEEP_TAG}{sweep}" in tags)
    for column, allowed in (("family", families), ("task", tasks), ("status", statuses)):
        allowed = list(allowed)
        if allowed:
            keep &= frame[column].isin(allowed)
    words = text.lower().split()
    if words:
        haystack = (
            "#"
            + frame["id"].astype(str)
            + " "
            + frame["name"].fillna("")
            + " "
            + frame["family"].fillna("")
            + " "
            + frame["task"].fillna("")
            + " "
            + frame["tags"].map(" ".join)
        ).str.lower()
        for word in words:
            keep &= haystack.str.contains(word, regex=False)
    return frame[keep]


def typed_column(values: Sequence[Any]) -> pd.Series:
    """A param or metric as one table column: numbers as floats (missing: NaN), anything else as display text
    (missing: None), so a column never mixes types (which Arrow, behind st.dataframe, refuses)."""
    present = [v for v in values if v is not None]
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        return pd.Series([float("nan") if v is None else float(v) for v in values], dtype=float)
    return pd.Series([None if v is None else display_value(v) for v in values], dtype=object)


def sort_runs(frame: pd.DataFrame, column: str, descending: bool) -> pd.DataFrame:
    """Rows sorted by `column`, missing values last either way; lists (tags) by their text; ties by id."""
    if column not in frame:
        return frame
    values = frame[column]
    if values.map(lambda v: isinstance(v, (list, tuple))).any():
        values = values.map(lambda v: " ".join(v) if isinstance(v, (list, tuple)) else v)
    key = (
        values
        if pd.api.types.is_numeric_dtype(values) or pd.api.types.is_datetime64_any_dtype(values)
        else values.map(lambda v: None if v is None or (isinstance(v, float) and pd.isna(v)) else str(v).lower())
    )
    order = pd.DataFrame({"key": key.to_numpy(), "id": frame["id"].to_numpy()}, index=frame.index)
    order = order.sort_values(["key", "id"], ascending=[not descending, not descending], na_position="last")
    return frame.loc[order.index]


def page_of(frame: pd.DataFrame, page: int, size: int) -> pd.DataFrame:
    """Rows of the 1-based `page` of `size` rows (the last page when `page` is past the end)."""
    pages = max(1, -(-len(frame) // size))
    page = min(max(1, page), pages)
    return frame.iloc[(page - 1) * size : page * size]


def merge_selection(selected: Sequence[int], displayed: Sequence[int], chosen: Sequence[int]) -> list[int]:
    """The new selection after the user picked `chosen` among the `displayed` rows: runs hidden by the
    filters stay selected, displayed runs are selected exactly when chosen. Order: kept runs first."""
    shown = set(displayed)
    kept = [run_id for run_id in selected if run_id not in shown]
    return kept + [run_id for run_id in chosen if run_id not in kept]


def parameter_groups_frame(info: Mapping[str, Any] | None) -> pd.DataFrame:
    """Parameter groups with their sizes and optimizers, from the run's info['parameter_counts'] and
    info['optimizers'] (a group not named there uses the 'default' entry)."""
    info = info or {}
    counts: Mapping[str, int] = info.get("parameter_counts") or {}
    optimizers: Mapping[str, Mapping[str, Any]] = info.get("optimizers") or {}
    groups = list(counts) + [g for g in optimizers if g not in counts and g != "default"]
    rows = []
    for group in groups:
        source = group if group in optimizers else ("default" if "default" in optimizers else None)
        spec = dict(optimizers.get(source) or {}) if source else {}
        rows.append(
            {
                "group": group,
                "parameters": counts.get(group),
                "optimizer": spec.pop("name", None),
                "lr": spec.pop("lr", None),
                "other options": json.dumps(spec, sort_keys=True) if spec else "",
                "optimizer entry": source,
            }
        )
    columns = ["group", "parameters", "optimizer", "lr", "other options", "optimizer entry"]
    return pd.DataFrame(rows, columns=columns)


def artifacts_frame(records: Sequence[ArtifactRecord]) -> pd.DataFrame:
    """The run's artifacts, one row each, meta as JSON text."""
    rows = [
        {
            "id": a.id,
            "kind": a.kind,
            "name": a.name,
            "step": a.step,
            "epoch": a.epoch,
            "created": a.created_at,
            "media type": a.media_type,
            "meta": json.dumps(a.meta, sort_keys=True) if a.meta else "",
        }
        for a in records
    ]
    return pd.DataFrame(rows, columns=["id", "kind", "name", "step", "epoch", "created", "media type", "meta"])


def display_value(value: Any) -> str:
    """A parameter value as one comparable string: strings as they are, everything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


ABSENT = "(absent)"


def _short(value: Any) -> str | None:
    """A result for reading: floats to 6 significant digits, other values as display_value."""
    if value is None:
        return None
    return f"{value:.6g}" if isinstance(value, float) else display_value(value)


BY_DEFAULT = " (default)"  # after an optimizer option the run's config left out, shown with the value it took
OPTIMIZER_NAME = re.compile(r"(model\.optimizers\.[^.]+)\.name")  # a group's optimizer among a run's dotted params


def with_optimizer_defaults(params: Mapping[str, Any]) -> dict[str, Any]:
    """A run's params with each optimizer option its config left out filled in with the optimizer's default (this
    OrthoLab's): a config that names only `lr` and one that lists every option (a `--print_config` copy) trained
    alike and compare alike. torch is imported only where a run names an optimizer."""
    filled = dict(params)
    for key, name in params.items():
        if (group := OPTIMIZER_NAME.fullmatch(key)) and isinstance(name, str):
            from ortholab.models.optimizers import OPTIMIZERS, optimizer_defaults

            for option, value in optimizer_defaults(name).items() if name in OPTIMIZERS else ():
                filled.setdefault(f"{group[1]}.{option}", value)
    return filled


def _same_number(value: Any) -> Any:
    """1 and 1.0 (an int default, a float given) as one value; other values as they are."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value


def params_compare_frame(details: Sequence[RunDetail], *, only_differing: bool) -> pd.DataFrame:
    """Params (dotted keys) as rows, one column per run, values as display strings, plus a boolean column
    'differs'. An optimizer option the run's config left out shows the default it took (marked BY_DEFAULT, equal
    to the same value given); any other key that a run lacks shows ABSENT and counts as a difference."""
    labels = [run_label(d) for d in details]
    filled = [with_optimizer_defaults(d.params) for d in details]
    keys = sorted(set().union(*filled)) if details else []
    values = {
        label: [display_value(f[k]) if k in f else ABSENT for k in keys]
        for label, f in zip(labels, filled, strict=True)
    }
    compared = {  # momentum 0 (a default) and 0.0 (given) are one value
        label: [display_value(_same_number(f[k])) if k in f else ABSENT for k in keys]
        for label, f in zip(labels, filled, strict=True)
    }
    differs = pd.DataFrame(compared, index=keys, columns=labels).nunique(axis=1) > 1 if labels else []
    data = {
        label: [v + BY_DEFAULT if k not in d.params and v != ABSENT else v for k, v in zip(keys, values[label])]
        for label, d in zip(labels, details, strict=True)
    }
    frame = pd.DataFrame(data, index=pd.Index(keys, name="param"), columns=labels)
    frame["differs"] = pd.Series(list(differs), index=frame.index, dtype=bool)  # bool even when empty: a mask
    return frame[frame["differs"]] if only_differing else frame


def summary_compare_frame(
    details: Sequence[RunDetail], last_values: Mapping[int, Mapping[str, float]] | None = None
) -> pd.DataFrame:
    """The runs' headline numbers side by side: rows family, task, status, steps, main metric, best, last,
    baseline, parameters, then 'last <metric>' for every metric in `last_values` (run id -> key -> value)."""
    last_values = last_values or {}
    metric_keys = sorted(set().union(*(last_values.get(d.id, {}) for d in details))) if details else []
    columns = {}
    for d in details:
        column: dict[str, Any] = {
            "family": d.family,
            "task": d.task,
            "status": d.status,
            "steps": d.steps,
            "main metric": d.main_metric,
            "best": d.best,
            "last": d.last,
            "baseline": d.baseline,
            "parameters": d.parameter_count,
        }
        for key in metric_keys:
            column[f"last {key}"] = last_values.get(d.id, {}).get(key)
        columns[run_label(d)] = {k: _short(v) for k, v in column.items()}
    frame = pd.DataFrame(columns)
    frame.index.name = "field"
    return frame


def default_table(tables: Mapping[str, PaperTable], runs: Sequence[RunSummary]) -> str:
    """The paper table the Papers page opens on: the one with the most reproduced rows (runs tagged
    paper:<table>/<row>), else the first whose published values are numbers (not statements), else the first."""
    reproduced = {key: sum(any(tag.startswith(f"paper:{key}/") for tag in run.tags) for run in runs) for key in tables}
    best = max(tables, key=lambda key: reproduced[key])
    if reproduced[best]:
        return best
    return next(
        (key for key, table in tables.items() if any(row.value is not None for row in table.rows)), next(iter(tables))
    )
