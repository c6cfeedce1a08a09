"""The gated and vanilla baselines: PyTorch's fused nn.LSTM, nn.GRU and nn.RNN as recurrent layers."""
from __future__ import annotations

import torch
from torch import nn

from models.base import ConfigError, RecurrentLayer


class LSTM(RecurrentLayer):
    """nn.LSTM. forget_bias: initial forget-gate bias (the papers tune it in [-4, 4]); None keeps PyTorch's init."""

    def __init__(self, input_size: int, hidden_size: int, forget_bias: float | None = 1.0):
        super().__init__(input_size, hidden_size)
        self.rnn = nn.LSTM(input_size, hidden_size, batch_first=True)
        if forget_bias is not None:
            with torch.no_grad():  # gates are ordered (input, forget, cell, output); the two biases add up
                self.rnn.bias_ih_l0[hidden_size:2 * hidden_size].fill_(forget_bias)
                self.rnn.bias_hh_l0[hidden_size:2 * hidden_size].zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.rnn(x)[0]


class GRU(RecurrentLayer):
    """nn.GRU with PyTorch's initialisation."""

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__(input_size, hidden_size)
        self.rnn = nn.GRU(input_size, hidden_size, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.rnn(x)[0]


class RNN(RecurrentLayer):
    """nn.RNN, h_t = f(W_ih x_t + W_hh h_{t-1} + b); nonlinearity 'tanh' or 'relu'."""

    def __init__(self, input_size: int, hidden_size: int, nonlinearity: str = "tanh"):
        super().__init__(input_size, hidden_size)
        if nonlinearity not in ("tanh", "relu"):
            raise ConfigError(f"model.family_args.nonlinearity = {nonlinearity!r}; choose 'tanh' or 'relu'")
        self.rnn = nn.RNN(input_size, hidden_size, nonlinearity=nonlinearity, batch_first=True)

    def recurrent_matrix(self) -> torch.Tensor:
        return self.rnn.weight_hh_l0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.rnn(x)[0]
