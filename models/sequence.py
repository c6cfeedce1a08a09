"""A recurrent layer between the input adapter and the readout a task needs."""
from __future__ import annotations

import torch
from torch import nn

from models.base import RecurrentLayer


class SequenceModel(nn.Module):
    """inputs -> adapter -> recurrent layer -> linear readout at every step or at the last step.

    vocab_size: set for symbol inputs (B, T) of integer ids, fed one-hot (the papers' layout); None for real
    inputs (B, T, input_size).
    """

    def __init__(self, layer: RecurrentLayer, output_size: int, readout: str = "every_step",
                 vocab_size: int | None = None):
        super().__init__()
        if readout not in ("every_step", "last_step"):
            raise ValueError(f"readout must be 'every_step' or 'last_step', got {readout!r}")
        self.vocab_size = vocab_size
        self.layer = layer
        self.readout_at = readout
        self.readout = nn.Linear(layer.output_size, output_size)
        nn.init.xavier_uniform_(self.readout.weight)  # Glorot kernel, zero bias, as tf.layers.dense
        nn.init.zeros_(self.readout.bias)

    def encode(self, inputs: torch.Tensor) -> torch.Tensor:
        """What the recurrent layer reads: one-hot vectors for symbol ids (unless the family embeds them)."""
        if self.vocab_size is not None and not self.layer.embeds_symbols:
            return nn.functional.one_hot(inputs, self.vocab_size).to(self.readout.weight.dtype)
        return inputs

    def read_out(self, features: torch.Tensor) -> torch.Tensor:
        """Outputs from all hidden features (B, T, F): at every step, or at the last step only."""
        if self.readout_at == "last_step":
            features = features[:, -1]
        return self.readout(features)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.read_out(self.layer(self.encode(inputs)))
