"""Log axes that show every point and label every tick with its full value. Pure numpy.

A log axis cannot place 0 (or a negative value): such points are drawn at a floor one decade below the
smallest positive value shown, with their own marker, and the page says so. Plotly labels the minor ticks of
a short log axis with their mantissa alone ('2', '5' for 2e-6, 5e-6); the ticks here are set explicitly, each
labelled in full, as many as fit without their labels touching on a chart's y axis (AXIS_PX tall): every digit
times each power of ten, else 1, 2, 3 and 5 times them, 1, 2 and 5, 1 and 3, the powers of ten alone, every 2nd,
3rd, ... of them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

AXIS_PX = 260  # the shortest y axis a log chart draws (450 px tall, its title and two legend rows off)
LABEL_GAP_PX = 18  # between two tick labels' centres: 12 px text and some air
PAD = 0.05  # of the axis' span in decades, above and below the values


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


def log_ticks(low: float, high: float, length_px: float = AXIS_PX) -> tuple[list[float], list[str]]:
    """Tick values and their labels for a log axis over [low, high] (both > 0) drawn `length_px` tall: the densest
    of the tick sets (module docstring) with two ticks or more in range whose labels stay LABEL_GAP_PX apart;
    the range's ends when none has two ticks there."""
    if not (low > 0 and high > 0):
        raise ValueError(f"a log axis needs positive bounds, got [{low}, {high}]")
    low, high = min(low, high), max(low, high)
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    decades = max(math.log10(high) - math.log10(low), 1e-9) * (1 + 2 * PAD)
    px_per_decade = length_px / decades
    candidates = [
        [m * 10.0**k for k in range(first, last + 1) for m in mantissas]
        for mantissas in (range(1, 10), (1, 2, 3, 5), (1, 2, 5), (1, 3))
    ]
    candidates += [[10.0**k for k in range(first, last + 1, stride)] for stride in range(1, last - first + 2)]
    for candidate in candidates:
        values = [float(f"{v:.4g}") for v in candidate if low / 1.0001 <= v <= high * 1.0001]
        gaps = [math.log10(b / a) for a, b in zip(values, values[1:])]
        if len(values) >= 2 and min(gaps) * px_per_decade >= LABEL_GAP_PX:
            break
    else:  # a narrow range between two ticks: its ends ('%.4g' makes each label read its tick's value), or one
        values = sorted({float(f"{low:.4g}"), float(f"{high:.4g}")})
    return values, [tick_text(v) for v in values]


def log_axis_layout(scale: LogScale) -> dict:
    """Plotly axis settings: type log, the range of the values (from the floor when values sit there; widened to
    the enclosing decades where it would show fewer than two ticks, e.g. one value), explicit full-value ticks; the
    floor's tick reads '0' when values <= 0 are drawn there."""
    low, high = scale.low, max(scale.top, scale.low * 1.0001)
    values, texts = log_ticks(low, high)
    if len(values) < 2:  # a single value, or values within a decade that holds no tick: the enclosing decades
        low, high = 10.0 ** math.floor(math.log10(low)), 10.0 ** (math.floor(math.log10(high)) + 1)
        values, texts = log_ticks(low, high)
    if scale.at_floor:  # the floor's tick stands for the values drawn there
        kept = [(v, t) for v, t in zip(values, texts, strict=True) if v > scale.floor]
        values, texts = [scale.floor, *(v for v, _ in kept)], ["0", *(t for _, t in kept)]
    pad = PAD * (math.log10(high) - math.log10(low))
    return dict(
        type="log",
        range=[math.log10(low) - pad, math.log10(high) + pad],
        tickmode="array",
        tickvals=values,
        ticktext=texts,
    )
