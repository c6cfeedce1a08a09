"""The gated and vanilla baselines: PyTorch's fused nn.LSTM, nn.GRU and nn.RNN as recurrent layers.

With `state_offsets` (only the gradient-norm probe passes them) the same weights run step by step through
PyTorch's cell functions, adding offsets_t to h_t, so that their gradient is the total dL/dh_t.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from ortholab.errors import ConfigError
from ortholab.models.base import RecurrentLayer
from ortholab.models.choices import checks_choices


def _stepwise(cell, rnn: nn.RNNBase, x: torch.Tensor, offsets: torch.Tensor, with_cell_state: bool) -> torch.Tensor:
    """nn.LSTM/GRU/RNN's first layer run step by step with offsets_t added to h_t (probe passes only)."""
    weights = (rnn.weight_ih_l0, rnn.weight_hh_l0, rnn.bias_ih_l0, rnn.bias_hh_l0)
    h = x.new_zeros(x.shape[0], rnn.hidden_size)
    c = h.clone()
    states = []
    for x_t, offset_t in zip(x.unbind(1), offsets.unbind(1)):
        if with_cell_state:
            h, c = cell(x_t, (h, c), *weights)
        else:
            h = cell(x_t, h, *weights)
        h = h + offset_t
        states.append(h)
    return torch.stack(states, dim=1)


class LSTM(RecurrentLayer):
    """Long short-term memory (nn.LSTM), with the papers' forget-gate bias.

    forget_bias: initial forget-gate bias (the papers tune it in [-4, 4]); None keeps PyTorch's init.
    zero_biases: the other gates' biases start at zero (the oRNN paper: "the biases of all models were set to
        zero, except for the forget bias of the LSTM"); False keeps PyTorch's uniform init.
    """

    layer_doc = (
        "nn.LSTM with the papers' forget-gate bias 1 (forget_bias). h0 and h_n are the pair (h, c), as nn.LSTM. "
        "Groups: other."
    )

    def __init__(self, input_size: int, hidden_size: int, forget_bias: float | None = 1.0, zero_biases: bool = False):
        super().__init__(input_size, hidden_size)
        self.rnn = nn.LSTM(input_size, hidden_size, batch_first=True)
        if not isinstance(zero_biases, bool):
            raise ConfigError(f"model.family_args.zero_biases = {zero_biases!r}: true or false")
        if zero_biases:
            with torch.no_grad():  # the forget gate's is set below (or kept as PyTorch drew it)
                forget = slice(hidden_size, 2 * hidden_size)
                for bias in (self.rnn.bias_ih_l0, self.rnn.bias_hh_l0):
                    kept = bias[forget].clone()
                    bias.zero_()
                    bias[forget] = kept
        if forget_bias is not None:
            with torch.no_grad():  # gates are ordered (input, forget, cell, output); the two biases add up
                self.rnn.bias_ih_l0[hidden_size : 2 * hidden_size].fill_(forget_bias)
                self.rnn.bias_hh_l0[hidden_size : 2 * hidden_size].zero_()

    supports_state_offsets = True
    autocast_devices = ("cuda",)  # cuDNN's; oneDNN's bfloat16 LSTM raised on a CPU without AVX-512 BF16

    def forward(
        self,
        x: torch.Tensor,
        state_offsets: torch.Tensor | None = None,
        initial_state: tuple[torch.Tensor, torch.Tensor] | None = None,
        return_state: bool = False,
    ):
        """h_t (B, T, n); initial_state: (h_0, c_0) (B, n) each, else zeros; return_state: also (h_T, c_T)."""
        if state_offsets is not None:
            return _stepwise(torch.lstm_cell, self.rnn, x, state_offsets, with_cell_state=True)
        hx = None if initial_state is None else tuple(part.unsqueeze(0) for part in initial_state)
        out, (h, c) = self.rnn(x, hx)
        return (out, (h[0], c[0])) if return_state else out


class GRU(RecurrentLayer):
    """nn.GRU with PyTorch's initialisation."""

    layer_doc = "nn.GRU. Groups: other."

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__(input_size, hidden_size)
        self.rnn = nn.GRU(input_size, hidden_size, batch_first=True)

    supports_state_offsets = True
    autocast_devices = ("cpu", "cuda")  # PyTorch's fused layer under torch.autocast (bf16-mixed, 16-mixed)

    def forward(
        self, x: torch.Tensor, state_offsets: torch.Tensor | None = None, initial_state: torch.Tensor | None = None
    ) -> torch.Tensor:
        if state_offsets is not None:
            return _stepwise(torch.gru_cell, self.rnn, x, state_offsets, with_cell_state=False)
        return self.rnn(x, None if initial_state is None else initial_state.unsqueeze(0))[0]  # h_0 (B, n) or zeros


class RNN(RecurrentLayer):
    """nn.RNN, h_t = f(W_ih x_t + W_hh h_{t-1} + b).

    nonlinearity: f, 'tanh' or 'relu'.
    """

    layer_doc = "nn.RNN (nonlinearity 'tanh' or 'relu'). Groups: other."

    @checks_choices
    def __init__(self, input_size: int, hidden_size: int, nonlinearity: Literal["tanh", "relu"] = "tanh"):
        super().__init__(input_size, hidden_size)
        self.rnn = nn.RNN(input_size, hidden_size, nonlinearity=nonlinearity, batch_first=True)

    supports_state_offsets = True
    autocast_devices = ("cpu", "cuda")  # PyTorch's fused layer under torch.autocast (bf16-mixed, 16-mixed)

    def recurrent_matrix(self) -> torch.Tensor:
        return self.rnn.weight_hh_l0

    def forward(
        self, x: torch.Tensor, state_offsets: torch.Tensor | None = None, initial_state: torch.Tensor | None = None
    ) -> torch.Tensor:
        if state_offsets is not None:
            cell = torch.rnn_relu_cell if self.rnn.nonlinearity == "relu" else torch.rnn_tanh_cell
            return _stepwise(cell, self.rnn, x, state_offsets, with_cell_state=False)
        return self.rnn(x, None if initial_state is None else initial_state.unsqueeze(0))[0]  # h_0 (B, n) or zeros
