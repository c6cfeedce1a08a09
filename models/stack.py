"""Stacked recurrent layers of one family with dropout between them, as `nn.LSTM(num_layers, dropout)` stacks.

Layer 1 reads the task's inputs; layer k > 1 reads layer k-1's hidden features (2n for complex families).
Dropout acts on the features passed between layers, never on the last layer's (the readout's input), as
PyTorch's stacked RNNs and the SRNN paper's 3-layer Nottingham model (dropout 0.3 between layers).
"""

from __future__ import annotations

import torch
from torch import nn

from ortholab.models.base import ConfigError, RecurrentLayer


class StackedLayers(RecurrentLayer):
    """`layers` applied in turn; parameter groups merged by name, so one optimizer trains a group across layers.

    The analyses look at the first layer: `recurrent_matrix()`, `eigenvalues()` and `snapshot_arrays()` are layer
    1's. The gradient-norm probe's offsets go to the last layer, whose states the readout sees.
    """

    def __init__(self, layers: list[RecurrentLayer], dropout: float = 0.0):
        first, last = layers[0], layers[-1]
        super().__init__(first.input_size, first.hidden_size)
        self.layers = nn.ModuleList(layers)
        self.dropout = nn.Dropout(dropout)
        self.output_size = last.output_size
        self.embeds_symbols = first.embeds_symbols  # only layer 1 sees symbol ids
        self.supports_state_offsets = last.supports_state_offsets
        self.default_optimizers = first.default_optimizers
        self.autocast_devices = first.autocast_devices  # each inner layer still decides for itself
        self.readout_init = last.readout_init

    def recurrent_matrix(self) -> torch.Tensor | None:
        return self.layers[0].recurrent_matrix()

    def eigenvalues(self) -> torch.Tensor | None:
        return self.layers[0].eigenvalues()

    def snapshot_arrays(self) -> dict[str, torch.Tensor]:
        return getattr(self.layers[0], "snapshot_arrays", dict)()

    def nonfinite_hint(self) -> str | None:
        return next((hint for layer in self.layers if (hint := layer.nonfinite_hint())), None)

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        groups: dict[str, list[nn.Parameter]] = {}
        for layer in self.layers:
            for name, params in layer.parameter_groups().items():
                groups.setdefault(name, []).extend(params)
        return groups

    def redundant_parameter_count(self) -> int:
        return sum(layer.redundant_parameter_count() for layer in self.layers)

    def after_optimizer_step(self) -> None:
        for layer in self.layers:
            layer.after_optimizer_step()

    def forward(self, x: torch.Tensor, state_offsets: torch.Tensor | None = None) -> torch.Tensor:
        *lower, top = self.layers
        for layer in lower:
            x = self.dropout(layer(x))
        return top(x) if state_offsets is None else top(x, state_offsets=state_offsets)


def build_layers(
    cls: type[RecurrentLayer],
    input_size: int,
    hidden_size: int,
    family_args: dict,
    num_layers: int = 1,
    dropout: float = 0.0,
) -> RecurrentLayer:
    """One layer of `cls`, or `num_layers` of them stacked with `dropout` between them."""
    if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 1:
        raise ConfigError(f"model.num_layers = {num_layers!r} must be a positive integer (1: no stacking)")
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0.0 <= dropout < 1.0:
        raise ConfigError(f"model.dropout = {dropout!r} must be a probability in [0, 1)")
    if num_layers == 1:
        if dropout:
            raise ConfigError(
                f"model.dropout = {dropout} acts between stacked layers, but model.num_layers is 1; "
                f"raise model.num_layers or set model.dropout to 0"
            )
        return cls(input_size, hidden_size, **family_args)
    layers = [cls(input_size, hidden_size, **family_args)]
    upper_args = {key: value for key, value in family_args.items() if key not in cls.first_layer_options}
    for _ in range(num_layers - 1):
        layers.append(cls(layers[-1].output_size, hidden_size, **upper_args))
    return StackedLayers(layers, dropout)
