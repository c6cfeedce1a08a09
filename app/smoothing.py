"""Curve smoothing and thinning for display; pure numpy/pandas, no Streamlit.

Smoothing is TensorBoard's scalar smoothing, a *debiased* exponential moving average
(tensorflow/tensorboard PR #639): with weight w,

    last_k = w * last_{k-1} + (1 - w) * x_k,   last_0 = 0,   smoothed_k = last_k / (1 - w**k)

counting only finite points (NaN and infinities are shown as they are and do not enter the average),
and a constant series is returned unchanged. The debiasing makes the first points equal the data
instead of being pulled towards 0. It equals pandas' `ewm(alpha=1 - w, adjust=True, ignore_na=True)`,
which is how it is computed here.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

MAX_WEIGHT = 0.999  # TensorBoard's slider stops here; w = 1 would freeze the curve at its first value

NAME = "TensorBoard's debiased exponential moving average"


def debiased_ema(values: np.ndarray | list[float], weight: float) -> np.ndarray:
    """TensorBoard-compatible smoothing of `values` with weight in [0, MAX_WEIGHT]; weight 0 returns a copy."""
    if not 0.0 <= weight <= MAX_WEIGHT:
        raise ValueError(f"smoothing weight {weight} must lie in [0, {MAX_WEIGHT}]")
    raw = np.asarray(values, dtype=float)
    if weight == 0.0 or raw.size == 0:
        return raw.copy()
    finite = np.isfinite(raw)
    if np.all(raw == raw[0]):
        return raw.copy()
    averaged = (
        pd.Series(np.where(finite, raw, np.nan)).ewm(alpha=1.0 - weight, adjust=True, ignore_na=True).mean().to_numpy()
    )
    return np.where(finite, averaged, raw)


def decimate(y: np.ndarray, max_points: int) -> np.ndarray:
    """Indices of at most `max_points` + 2 points of `y` to draw in its place (min-max decimation): `y` is cut into
    max_points // 2 runs of consecutive points and each run's smallest and largest value are kept, in order, with
    the first and last point; so every spike, the global minimum and maximum and both ends survive, which an even
    stride can step over. NaN points are never chosen over a number of their run (a run of NaN keeps its first)."""
    y = np.asarray(y, dtype=float)
    n = y.size
    if n <= max_points:
        return np.arange(n)
    buckets = max(1, max_points // 2)
    starts = np.linspace(0, n, buckets + 1).astype(int)[:-1]  # runs of n // buckets or one more points
    up, down = np.where(np.isnan(y), np.inf, y), np.where(np.isnan(y), -np.inf, y)  # NaN loses to any number
    low, high = np.minimum.reduceat(up, starts), np.maximum.reduceat(down, starts)
    run_of = np.repeat(np.arange(buckets), np.diff(np.append(starts, n)))
    first_low = _first_where(up == low[run_of], run_of, starts)
    first_high = _first_where(down == high[run_of], run_of, starts)
    return np.unique(np.concatenate([[0, n - 1], first_low, first_high]))


def _first_where(hit: np.ndarray, run_of: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Per run, the index of its first hit (its start when it has none)."""
    first = starts.copy()
    index = np.flatnonzero(hit)
    runs, where = np.unique(run_of[index], return_index=True)
    first[runs] = index[where]
    return first


def thin(n: int, max_points: int) -> np.ndarray:
    """Indices of at most about `max_points` evenly strided points out of n, always keeping the last one."""
    if n <= max_points:
        return np.arange(n)
    stride = math.ceil(n / max_points)
    index = np.arange(0, n, stride)
    return index if index[-1] == n - 1 else np.append(index, n - 1)
