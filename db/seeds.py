"""Several seeds of one paper row: which run is which seed, and the seeds' spread against the published value.

A run's seed is its tag `seed:N` (`ortholab reproduce --seeds` adds it), else its recorded `seed_everything`.
The spread's verdict: the published value inside the seeds' range is `within`; otherwise the seeds' mean lies
above or below it by so many sample standard deviations; one seed has no spread (`1 seed`). For rows judged
against a task's baseline (copying, adding), each seed also says whether its last main-metric value is beyond
the baseline and at which step it first was (beyond: 10% better, as the qualitative verdict reads it).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from ortholab.db.records import RunSummary
from ortholab.db.store import Store

SEED_TAG = "seed:"


@dataclass(frozen=True)
class SeedRun:
    seed: int | None
    fit: RunSummary
    evaluation: RunSummary | None  # its test run, where the row's metric is measured on the test split
    value: float | None  # in the paper's units
    selected: float | None  # the test value at the checkpoint chosen on validation
    crossed_at: int | None = None  # the first step whose main metric was beyond the baseline
    ends_beyond: bool | None = None  # its last main-metric value beyond the baseline (None: no baseline)


@dataclass(frozen=True)
class Spread:
    n: int
    mean: float | None
    std: float | None  # sample standard deviation (n - 1); None for one seed
    low: float | None
    high: float | None
    verdict: str | None  # '1 seed', 'within', 'above by 1.8 sd', 'below by 0.6 sd' (None: no published value)


def seed_of(run: RunSummary, params: dict) -> int | None:
    """The run's seed: its `seed:N` tag, else the `seed_everything` it recorded."""
    for tag in run.tags:
        if tag.startswith(SEED_TAG) and tag[len(SEED_TAG) :].lstrip("-").isdigit():
            return int(tag[len(SEED_TAG) :])
    seed = params.get("seed_everything")
    return int(seed) if isinstance(seed, (int, float)) and not isinstance(seed, bool) else None


def spread(values: list[float], published: float | None) -> Spread:
    """n, mean, sample std, min and max of `values`, and the verdict against `published` (module docstring)."""
    values = [v for v in values if v is not None and math.isfinite(v)]
    if not values:
        return Spread(0, None, None, None, None, None)
    n, mean, low, high = len(values), statistics.fmean(values), min(values), max(values)
    std = statistics.stdev(values) if n > 1 else None
    if published is None:
        verdict = None
    elif n == 1:
        verdict = "1 seed"
    elif low <= published <= high:
        verdict = "within"
    else:
        side = "above" if mean > published else "below"
        verdict = f"{side} by {abs(mean - published) / std:.1f} sd" if std else f"{side} (all seeds equal)"
    return Spread(n, mean, std, low, high, verdict)


def baseline_crossing(store: Store, fit: RunSummary, margin: float) -> tuple[int | None, bool | None]:
    """(the first step the run's main metric was beyond its baseline, whether its last value is), beyond meaning
    `margin` better (0.1: 10%); (None, None) for a run without a baseline."""
    if not fit.baseline or not fit.main_metric:
        return None, None
    bound = (1 - margin) * fit.baseline if fit.main_metric_mode == "min" else (1 + margin) * fit.baseline
    points = [p for p in store.metric_series(fit.id, fit.main_metric) if math.isfinite(p.value)]
    beyond = [(p.value < bound) if fit.main_metric_mode == "min" else (p.value > bound) for p in points]
    first = next((p.step for p, b in zip(points, beyond) if b), None)
    return first, (beyond[-1] if beyond else None)
