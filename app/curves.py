"""Metric curves for the Curves page: x-axis choices, smoothing, decimation and the analytic baselines.
Pure functions of the store's records and metric frames (columns step, epoch, value, wall_time)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ortholab.app.smoothing import debiased_ema, decimate
from ortholab.db import RunSummary

BATCH_SIZE_PARAM = "data.init_args.batch_size"
# per trace drawn (about one per pixel of a chart's width): each stretch's min and max are kept (min-max decimation,
# app/smoothing.py); smoothing runs on every point first, and the CSV download keeps every point
MAX_POINTS = 1000
# Curves with fewer points are drawn unsmoothed: an EMA over a few validation points lags far behind them (expRNN
# copying: 0.02 drawn against a last value of 0.0004), and TensorBoard's users smooth dense training curves.
SMOOTH_MIN_POINTS = 100

# x-axis choice -> axis title
X_AXES = {
    "step": "step (optimizer steps taken)",
    "epoch": "epoch",
    "wall time": "wall time since run start (s)",
    "examples seen": "examples seen = step × batch size",
}


@dataclass(frozen=True)
class Curve:
    """One run's metric ready to draw: raw points, and the smoothed line when smoothing is on."""

    label: str
    x: np.ndarray
    y: np.ndarray
    smoothed: np.ndarray | None
    total_points: int  # before decimation
    run_id: int = 0  # picks the run's colour, dash and marker (app/style.py)
    smoothing: float = 0.0  # the weight applied (0: drawn raw)
    every_x: np.ndarray | None = field(default=None, repr=False, compare=False)  # every raw point, undecimated:
    every_y: np.ndarray | None = field(default=None, repr=False, compare=False)
    # every point as drawn (every_y smoothed at `smoothing`, or every_y itself): what group means are taken over
    every_drawn: np.ndarray | None = field(default=None, repr=False, compare=False)

    @property
    def last(self) -> tuple[float, float]:
        """The last raw point (x, y): decimation keeps it, smoothing never moves it."""
        return float(self.x[-1]), float(self.y[-1])


@dataclass(frozen=True)
class Baseline:
    """A task's analytic baseline drawn as a dashed horizontal line."""

    label: str
    value: float


def batch_size(params: Mapping[str, Any]) -> int | None:
    """The training batch size from the flattened config, if recorded as a positive integer."""
    value = params.get(BATCH_SIZE_PARAM)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def steps_per_epoch(info: Mapping[str, Any] | None) -> int | None:
    """The batches per epoch the run planned at its start (info['plan'], see db.Store.run_plan), if recorded."""
    value = ((info or {}).get("plan") or {}).get("steps_per_epoch")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def one_epoch_note(label: str, frame: pd.DataFrame) -> str | None:
    """When a run without a recorded plan logged every point in one epoch (a step-bounded run shorter than an
    epoch), say so: on the epoch axis its curve is a vertical line."""
    epochs = pd.to_numeric(frame["epoch"], errors="coerce").dropna().unique()
    if len(frame) > 1 and len(epochs) == 1:
        return (
            f"{label}: all {len(frame)} points were logged in epoch {int(epochs[0])} (it stopped within one epoch "
            "and recorded no steps per epoch), so they share one x; choose step or examples seen."
        )
    return None


def x_values(
    frame: pd.DataFrame,
    axis: str,
    *,
    start: float | None = None,
    batch: int | None = None,
    per_epoch: int | None = None,
) -> np.ndarray | None:
    """The x coordinate of every point for the chosen axis, or None when the run lacks what it needs
    (no epochs recorded, no batch size). Epochs are step / `per_epoch` (fractional, as W&B draws them) when the
    run recorded its steps per epoch, else the epoch logged with each point. Wall time is relative to `start`
    (the run's creation, unix seconds) unless that comes after the first point, else to the first point."""
    if axis == "step":
        return frame["step"].to_numpy(dtype=float)
    if axis == "epoch":
        if per_epoch:
            return frame["step"].to_numpy(dtype=float) / per_epoch  # the weights at step s have seen s batches
        epochs = pd.to_numeric(frame["epoch"], errors="coerce")
        return None if epochs.isna().all() else epochs.to_numpy(dtype=float, na_value=np.nan)  # <NA>: NaN
    if axis == "wall time":
        wall = frame["wall_time"].to_numpy(dtype=float)
        first = wall.min() if wall.size else 0.0
        origin = start if start is not None and start <= first else first  # clocks disagree: first point
        return wall - origin
    if axis == "examples seen":
        return (
            None if batch is None else frame["step"].to_numpy(dtype=float) * batch
        )  # the weights at step s saw s batches
    raise ValueError(f"unknown x-axis {axis!r}; choose one of {list(X_AXES)}")


def build_curve(
    label: str,
    frame: pd.DataFrame,
    axis: str,
    *,
    start: float | None = None,
    batch: int | None = None,
    per_epoch: int | None = None,
    weight: float = 0.0,
    max_points: int = MAX_POINTS,
    run_id: int = 0,
) -> Curve | None:
    """The run's curve on `axis`, smoothed with TensorBoard's debiased EMA when weight > 0 and the curve has
    SMOOTH_MIN_POINTS points or more, decimated to about `max_points` keeping the first, last, smallest and largest
    point of every stretch of the raw values (app/smoothing.py); None when the axis is unavailable."""
    x = x_values(frame, axis, start=start, batch=batch, per_epoch=per_epoch)
    if x is None:
        return None
    y = frame["value"].to_numpy(dtype=float)
    keep = ~np.isnan(x)
    x, y = x[keep], y[keep]
    applied = weight if len(y) >= SMOOTH_MIN_POINTS else 0.0
    smoothed = debiased_ema(y, applied) if applied > 0 else None
    index = decimate(y, max_points)
    drawn = y if smoothed is None else smoothed
    return Curve(
        label, x[index], y[index], None if smoothed is None else smoothed[index], len(y), run_id, applied, x, y, drawn
    )


def metric_name(key: str) -> str:
    """'val/loss' -> 'loss': the quantity, without the split it was measured on."""
    return key.rsplit("/", 1)[-1]


def baselines_for(runs: Sequence[RunSummary], metric: str) -> list[Baseline]:
    """The analytic baselines that apply to `metric`: a run's baseline is for its main metric, so it is
    drawn on any split of the same quantity (val/loss's baseline also on train/loss). Runs sharing a
    baseline value share one line."""
    lines: dict[str, tuple[float, list[str]]] = {}  # printed value -> (exact value, tasks): alike prints, one line
    ids: dict[str, list[int]] = {}  # printed value -> the runs drawn against it
    for run in runs:
        if run.baseline is None or not run.main_metric or metric_name(run.main_metric) != metric_name(metric):
            continue
        _, tasks = lines.setdefault(f"{run.baseline:.4g}", (run.baseline, []))
        ids.setdefault(f"{run.baseline:.4g}", []).append(run.id)
        task = run.task or "task"
        if task not in tasks:
            tasks.append(task)
    lines_of = Counter(task for _, tasks in lines.values() for task in tasks)
    out = []
    for shown, (value, tasks) in lines.items():
        runs_of = ids[shown]  # a task with lines at several values (copying at T = 20 and 100) says whose each is
        whose = (
            f"; run{'s' * (len(runs_of) > 1)} {', '.join(map(str, runs_of))}"
            if max(map(lines_of.get, tasks)) > 1
            else ""
        )
        out.append(Baseline(f"baseline ({', '.join(tasks)}{whose}) {shown}", value))
    return out


BASELINE_FORMULAS = {  # the papers' analytic baselines, said beside the dashed line
    "copying": "copying 10 ln 8 / (T + 20)",
    "adding": "adding 1/6",
}


def baselines_caption(runs: Sequence[RunSummary], metric: str) -> str | None:
    """The caption under a chart with dashed baselines: the formula of each drawn task the papers give one for."""
    tasks = sorted(
        {
            run.task or "task"
            for run in runs
            if run.baseline is not None and run.main_metric and metric_name(run.main_metric) == metric_name(metric)
        }
    )
    if not tasks:
        return None
    said = [BASELINE_FORMULAS.get(task, f"{task}: its task's baseline (`ortholab list tasks`)") for task in tasks]
    papers = ", as in the papers' figures" if set(tasks) & set(BASELINE_FORMULAS) else ""
    return f"Dashed: the task's analytic baseline ({'; '.join(said)}){papers}."


CSV_COLUMNS = ["run", "name", "metric", "step", "epoch", "wall_time", "value"]


def series_csv(series: Iterable[tuple[int, str, str, pd.DataFrame]]) -> bytes:
    """(run id, run name, metric, its points) as one long CSV: every point logged, neither smoothed nor thinned."""
    frames = [points.assign(run=run_id, name=name, metric=metric) for run_id, name, metric, points in series]
    table = pd.concat(frames)[CSV_COLUMNS] if frames else pd.DataFrame(columns=CSV_COLUMNS)
    return table.to_csv(index=False).encode()
