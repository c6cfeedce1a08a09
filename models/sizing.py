"""The hidden size that gives a family a parameter budget on a task, as the papers size their comparisons.

Parameters are counted by building the family's layer and the SequenceModel's readout on PyTorch's meta
device (shapes only, no memory, no initialisation arithmetic), so every family is counted exactly as it
trains, options included, without a formula to keep in step with its code.
"""

from __future__ import annotations

from typing import Any

import torch

from ortholab.models import FAMILIES
from ortholab.models.base import ConfigError
from ortholab.models.stack import build_layers


def parameter_count(
    family: str,
    hidden_size: int,
    input_size: int,
    output_size: int,
    family_args: dict[str, Any] | None = None,
    num_layers: int = 1,
) -> int:
    """Trainable parameters of `family` at `hidden_size`: the recurrent layer(s) plus the linear readout, counted
    as the papers count them (degrees of freedom: see RecurrentLayer.redundant_parameter_count)."""
    if family not in FAMILIES:
        raise ConfigError(f"model.family = {family!r} is not a registered family; choose one of {sorted(FAMILIES)}")
    with torch.device("meta"):
        layer = build_layers(FAMILIES[family], input_size, hidden_size, dict(family_args or {}), num_layers)
        readout = torch.nn.Linear(layer.output_size, output_size)
    stored = sum(p.numel() for module in (layer, readout) for p in module.parameters())
    return stored - layer.redundant_parameter_count()


def hidden_size_for_budget(
    family: str,
    budget: int,
    input_size: int,
    output_size: int,
    family_args: dict[str, Any] | None = None,
    max_hidden_size: int = 1 << 16,
    num_layers: int = 1,
) -> int:
    """The hidden size whose parameter count (layer + readout) is closest to `budget` (the smaller on a tie).

    Assumes the count grows with the hidden size (true of every family here). Sizes the family rejects
    (e.g. fewer units than a fixed `num_reflections` or `rho`) count as too small. Bisection: about
    2 log2(n) layers are built, on the meta device.
    """
    if budget < 1:
        raise ConfigError(f"model.param_budget = {budget} must be a positive number of parameters")

    def count(n: int) -> int | None:
        try:
            return parameter_count(family, n, input_size, output_size, family_args, num_layers)
        except ConfigError:
            return None  # this size is invalid for the family's options

    smallest = smallest_valid_size(count, max_hidden_size)
    if smallest is not None and budget < count(smallest):  # even the smallest model is over the budget
        raise ConfigError(
            f"model.param_budget = {budget} is below the smallest {family!r} model on this task: "
            f"hidden_size {smallest} already has {count(smallest)} parameters (layer and readout); "
            f"give model.param_budget >= {count(smallest)}"
        )
    low, high, valid_seen = 0, 1, False  # once found: count(low) < budget <= count(high), low invalid or below
    while (c := count(high)) is None or c < budget:
        valid_seen |= c is not None
        low, high = high, high * 2
        if high > max_hidden_size:
            if not valid_seen:  # no size works: let the options' own error name the key
                parameter_count(family, low, input_size, output_size, family_args, num_layers)
            raise ConfigError(
                f"model.param_budget = {budget} needs more than {max_hidden_size} hidden units "
                f"for family {family!r}; lower the budget"
            )
    while high - low > 1:
        mid = (low + high) // 2
        c = count(mid)
        if c is None or c < budget:
            low = mid
        else:
            high = mid
    below = count(low) if low > 0 else None
    if below is not None and budget - below <= count(high) - budget:
        return low
    return high


def smallest_valid_size(count, max_hidden_size: int) -> int | None:
    """The smallest hidden size the family accepts (`count` is None below it), or None if none up to the maximum.
    Doubling, then bisection: sizes a family refuses lie below those it accepts (a fixed rho or reflections)."""
    high = 1
    while count(high) is None:
        high *= 2
        if high > max_hidden_size:
            return None
    low = high // 2  # invalid (or 0)
    while high - low > 1:
        mid = (low + high) // 2
        if count(mid) is None:
            low = mid
        else:
            high = mid
    return high
