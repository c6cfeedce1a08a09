"""Parallel coordinates over runs of different kinds: an axis per field (family, task, any param) present in
some run, numbers on numeric axes, everything else (text, booleans, lists, mixed) as categories, and a run
that lacks a field at a '(missing)' position of that axis. Pure; the figure is app/figures.parallel_figure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ortholab.app.figures import Axis
from ortholab.app.tables import display_value

MISSING = "(missing)"
# params that name files, folders and bookkeeping: they differ between any two runs and explain nothing
BOOKKEEPING = re.compile(
    r"^(name|db|runs_dir|ckpt_path|resume|tags|weights_only)$|(^|\.)(path|mirrors|default_root_dir|"
    r"permutation_file|num_workers|download|memory_map)$|^trainer\.(callbacks|logger|enable_\w+)$"
)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and np.isfinite(value)


def differing_fields(rows: Mapping[int, Mapping[str, Any]]) -> list[str]:
    """The fields whose value (or presence) differs between the runs, bookkeeping left out, in a stable order:
    family and task first, then the params alphabetically."""
    fields = sorted({f for row in rows.values() for f in row})
    differing = []
    for field in fields:
        shown = {display_value(row[field]) if field in row else MISSING for row in rows.values()}
        if len(shown) > 1 and not BOOKKEEPING.search(field):
            differing.append(field)
    first = [f for f in ("family", "task") if f in differing]
    return first + [f for f in differing if f not in first]


def _nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    if low == high:
        return [low]
    return [float(f"{v:.3g}") for v in np.linspace(low, high, count)]


def axis_for(label: str, values: Sequence[Any]) -> Axis:
    """One axis over the runs' values (None where a run lacks the field)."""
    present = [v for v in values if v is not None]
    if present and all(_number(v) for v in present):
        numbers = np.array([float(v) if v is not None else np.nan for v in values])
        low, high = float(np.nanmin(numbers)), float(np.nanmax(numbers))
        ticks = _nice_ticks(low, high)
        texts = [f"{t:.3g}" for t in ticks]
        if np.isnan(numbers).any():  # below the smallest value, labelled
            missing = low - 0.15 * ((high - low) or abs(low) or 1.0)
            numbers = np.where(np.isnan(numbers), missing, numbers)
            ticks, texts, low = [missing, *ticks], [MISSING, *texts], missing
        return Axis(label, numbers, ticks, texts, (low, high) if high > low else (low - 0.5, high + 0.5))
    shown = [display_value(v) if v is not None else MISSING for v in values]
    categories = sorted(set(shown) - {MISSING}) + ([MISSING] if MISSING in shown else [])
    position = {c: float(i) for i, c in enumerate(categories)}
    span = (-0.5, len(categories) - 0.5) if len(categories) == 1 else (0.0, len(categories) - 1.0)
    return Axis(label, np.array([position[s] for s in shown]), list(position.values()), categories, span)


def parallel_axes(rows: Mapping[int, Mapping[str, Any]], fields: Sequence[str], run_ids: Sequence[int]) -> list[Axis]:
    """An axis per field over the runs `run_ids` (in that order)."""
    return [axis_for(field, [rows[i].get(field) for i in run_ids]) for field in fields]
