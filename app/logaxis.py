"""Log axes that show every point and label every tick with its full value. Pure numpy.

A log axis cannot place 0 (or a negative value): such points are drawn at a floor one decade below the
smallest positive value shown, with their own marker, and the page says so. Plotly labels the minor ticks of
a short log axis with their mantissa alone ('2', '5' for 2e-6, 5e-6); the ticks here are set explicitly: the
powers of ten when the axis spans three decades or more, else 1, 2 and 5 times them, each labelled in full.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

MAX_DECADE_LABELS = 8  # more decades than this: label every 2nd (3rd, ...) power of ten


@dataclass(frozen=True)
class LogScale:
    """Where a log axis starts and ends (data units) and how many non-positive values it puts at its floor."""

    floor: float  # where values <= 0 are drawn
    low: float  # the axis' lower end: the floor when something is drawn there, else the smallest value
    top: float
    at_floor: int


def log_scale(arrays: Iterable[np.ndarray]) -> LogScale:
    """The floor (a decade below the smallest positive value; 1 when nothing is positive) and the top of
    the values, and how many finite values are <= 0 and so drawn at the floor."""
    values = [np.asarray(a, dtype=float) for a in arrays]
    finite = np.concatenate([v[np.isfinite(v)] for v in values]) if values else np.array([])
    positive = finite[finite > 0]
    if positive.size:
        floor = 10.0 ** (math.floor(math.log10(positive.min())) - 1)
        smallest, top = float(positive.min()), float(positive.max())
    else:
        floor, smallest, top = 1.0, 1.0, 10.0
    at_floor = int(np.count_nonzero(finite <= 0))
    return LogScale(floor, floor if at_floor else smallest, top, at_floor)


def lift(y: np.ndarray, floor: float) -> tuple[np.ndarray, np.ndarray]:
    """(y with every finite value <= 0 replaced by `floor`, the mask of those points)."""
    y = np.asarray(y, dtype=float)
    low = np.isfinite(y) & (y <= 0)
    return np.where(low, floor, y), low


def tick_text(value: float) -> str:
    """A tick's full value to 4 significant digits: '0.001', '250', '2e-6', '2.5e-6', '1e8'."""
    text = f"{value:.4g}"
    if "e" not in text:
        return text
    mantissa, exponent = text.split("e")
    return f"{mantissa}e{int(exponent)}"


def log_ticks(low: float, high: float) -> tuple[list[float], list[str]]:
    """Tick values and their labels for a log axis over [low, high] (both > 0)."""
    if not (low > 0 and high > 0):
        raise ValueError(f"a log axis needs positive bounds, got [{low}, {high}]")
    low, high = min(low, high), max(low, high)
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    if last - first >= 3:
        stride = max(1, math.ceil((last - first + 1) / MAX_DECADE_LABELS))
        values = [10.0**k for k in range(first, last + 1, stride)]
    else:  # up to two decades: 1, 2, 5 times each power of ten; within one: every digit
        mantissas = range(1, 10) if last - first <= 1 else (1, 2, 5)
        candidates = [m * 10.0**k for k in range(first, last + 1) for m in mantissas]
        values = [v for v in candidates if low / 1.0001 <= v <= high * 1.0001]
        if len(values) < 2:  # a narrow range between two of them: its ends
            values = [low, high] if low != high else [low]
    values = [float(f"{v:.4g}") for v in values]  # each label then reads exactly its tick's value
    return values, [tick_text(v) for v in values]


def log_axis_layout(scale: LogScale) -> dict:
    """Plotly axis settings: type log, the range of the values (from the floor when values sit there), explicit
    full-value ticks; the floor's tick reads '0' when values <= 0 are drawn there."""
    low, high = scale.low, max(scale.top, scale.low * 1.0001)
    values, texts = log_ticks(low, high)
    if scale.at_floor:  # the floor's tick stands for the values drawn there
        kept = [(v, t) for v, t in zip(values, texts, strict=True) if v > scale.floor]
        values, texts = [scale.floor, *(v for v, _ in kept)], ["0", *(t for _, t in kept)]
    pad = 0.05 * (math.log10(high) - math.log10(low))
    return dict(
        type="log",
        range=[math.log10(low) - pad, math.log10(high) + pad],
        tickmode="array",
        tickvals=values,
        ticktext=texts,
    )
