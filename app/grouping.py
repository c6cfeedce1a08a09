"""Runs grouped by parameters (seeds of a sweep or of a reproduction) and their curves aggregated: the mean
with a min–max or ±1 standard deviation band, as W&B's grouped line plots. Pure numpy/pandas.

Runs of a group rarely log at exactly the same steps (a resumed run, a different validation interval): each
run's curve is interpolated linearly onto the union of the group's x values, only inside its own x range,
and each statistic at an x is over the runs that cover it (n is reported per point).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ortholab.app.smoothing import decimate
from ortholab.app.tables import ABSENT, display_value

SPREADS = ("min–max", "±1 std")


@dataclass(frozen=True)
class Aggregate:
    """One group's curve: mean, the band's lower and upper edges, and how many runs each point averages."""

    label: str
    x: np.ndarray
    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray
    n: np.ndarray
    runs: tuple[int, ...]


def short_names(fields: Sequence[str]) -> dict[str, str]:
    """Each dotted param by its last part (model.family_args.rho -> rho) unless two fields share it."""
    tails = {f: re.split(r"[./]", f)[-1] for f in fields}
    return {f: t if list(tails.values()).count(t) == 1 else f for f, t in tails.items()}


def group_runs(params: Mapping[int, Mapping[str, Any]], fields: Sequence[str]) -> dict[str, list[int]]:
    """Run ids by group label ('family=scornn · hidden_size=64'): runs equal in every field share a group; the
    fields not chosen (e.g. the seed) are ignored. Groups in the order of their first run."""
    names = short_names(fields)
    groups: dict[str, list[int]] = {}
    for run_id, values in params.items():
        shown = [f"{names[f]}={display_value(values[f]) if f in values else ABSENT}" for f in fields]
        groups.setdefault(" · ".join(shown) or "all runs", []).append(run_id)
    return groups


def _on_grid(x: np.ndarray, y: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """y interpolated onto `grid` inside [min x, max x], NaN outside; non-finite points and repeated x (the
    last value logged wins) left out first."""
    frame = pd.DataFrame({"x": x, "y": y}).replace([np.inf, -np.inf], np.nan).dropna()
    frame = frame.groupby("x", sort=True)["y"].last()
    if frame.empty:
        return np.full(grid.shape, np.nan)
    xs, ys = frame.index.to_numpy(dtype=float), frame.to_numpy(dtype=float)
    out = np.interp(grid, xs, ys)
    out[(grid < xs[0]) | (grid > xs[-1])] = np.nan
    return out


def aggregate(label: str, curves: Mapping[int, tuple[np.ndarray, np.ndarray]], spread: str) -> Aggregate:
    """The group's mean over its runs' curves {run id: (x, y)} and the band: min to max, or mean ± the sample
    standard deviation (0 where one run covers the point)."""
    if spread not in SPREADS:
        raise ValueError(f"spread {spread!r}; choose one of {SPREADS}")
    grid = np.unique(np.concatenate([np.asarray(x, dtype=float) for x, _ in curves.values()]))
    grid = grid[np.isfinite(grid)]
    stack = np.vstack([_on_grid(np.asarray(x, float), np.asarray(y, float), grid) for x, y in curves.values()])
    n = np.sum(~np.isnan(stack), axis=0)
    keep = n > 0
    stack, grid, n = stack[:, keep], grid[keep], n[keep]
    mean = np.nanmean(stack, axis=0)
    if spread == "min–max":
        low, high = np.nanmin(stack, axis=0), np.nanmax(stack, axis=0)
    else:
        squares = np.nansum((stack - mean) ** 2, axis=0)
        std = np.sqrt(np.divide(squares, n - 1, out=np.zeros_like(squares), where=n > 1))
        low, high = mean - std, mean + std
    return Aggregate(label, grid, mean, low, high, n, tuple(curves))


def decimated(group: Aggregate, max_points: int) -> Aggregate:
    """The group's curve with at most about `max_points` points to draw: the min-max decimation
    (app/smoothing.py) of its mean, lower and upper edge together, so the band's extremes stay drawn."""
    if group.x.size <= max_points:
        return group
    index = np.union1d(
        decimate(group.mean, max_points // 2),
        np.union1d(decimate(group.low, max_points // 4), decimate(group.high, max_points // 4)),
    )
    return Aggregate(
        group.label, group.x[index], group.mean[index], group.low[index], group.high[index], group.n[index], group.runs
    )
