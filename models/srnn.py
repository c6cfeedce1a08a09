"""Shuffling RNN: h_t = ReLU(W_p h_{t-1} + beta(x_t)) with W_p a fixed cyclic shift (Rotman & Wolf, AAAI 2021).

beta(x) = f_r(x) * sigmoid(W_g x + b_g) (eq. 5): f_r an MLP with `n_layers` hidden ReLU layers of width
`hyper` and a linear last layer to d_h. beta depends on x_t alone, so it is computed for all steps at once;
only the shift-add-ReLU is sequential (models/shift_recurrence.py). Follows the official code
(srnn-exprnn-facts section 1): zero initial state, PyTorch's default initialisation, symbol ids embedded
to `hyper` features.
"""

from __future__ import annotations

import torch
from torch import nn

from ortholab.models.base import REAL_STATE, ConfigError, RecurrentLayer
from ortholab.models.choices import checks_choices
from ortholab.models.shift_recurrence import Shift, shift_relu_recurrence


class SRNN(RecurrentLayer):
    """Shuffling RNN layer.

    hyper: width of f_r's hidden layers (the paper's f_r = 8 on copying/adding, 32 on pMNIST/TIMIT; code default 64).
    n_layers: number of hidden layers of f_r (at least 1).
    gate: multiply f_r(x) by the sigmoid gate of eq. (5) (True); False is the paper's no-gating ablation.
    shift: +1 shifts as the official code, roll(h, 1)[i] = h[i - 1] (the default); -1 is the paper's eq. (4)
        matrix (ones above the diagonal and bottom-left). The two are the same model up to relabelling units.
    embed_symbols: for tasks of symbol ids, embed them to `hyper` features (the paper's choice for one-hot
        tasks: nn.Embedding(vocab, hyper)); False feeds them one-hot. Must be False for real-valued inputs.
    The code's unused Embedding(1, 1) on real-valued tasks (one parameter in its counts) is not created.
    """

    keeps_orthogonal = True

    layer_doc = f"Shuffling RNN, W a fixed cyclic shift (Rotman and Wolf 2021). {REAL_STATE} Groups: other. h0 = 0."

    embeds_symbols = True  # receives symbol ids for symbolic tasks; embeds or one-hots them itself
    readout_init = "torch"  # the official end_fc is a default nn.Linear(d_h, d_out) (srnn-exprnn-facts 1.2)
    supports_state_offsets = True
    first_layer_options = ("embed_symbols",)

    @checks_choices
    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        hyper: int = 64,
        n_layers: int = 1,
        gate: bool = True,
        shift: Shift = 1,
        embed_symbols: bool = False,
    ):
        super().__init__(input_size, hidden_size)
        if hyper < 1:
            raise ConfigError(f"model.family_args.hyper = {hyper} must be a positive width")
        if n_layers < 1:
            raise ConfigError(f"model.family_args.n_layers = {n_layers}; f_r needs at least 1 hidden layer")
        self.shift, self.embed_symbols = shift, embed_symbols
        features = hyper if embed_symbols else input_size
        self.embedding = nn.Embedding(input_size, hyper) if embed_symbols else None
        widths = [features] + [hyper] * n_layers
        layers: list[nn.Module] = []
        for fan_in, fan_out in zip(widths[:-1], widths[1:]):
            layers += [nn.Linear(fan_in, fan_out), nn.ReLU()]
        self.f_r = nn.Sequential(*layers, nn.Linear(hyper, hidden_size))
        self.gate = nn.Linear(features, hidden_size) if gate else None
        self.register_buffer("h0", torch.zeros(hidden_size))  # the code starts every sequence from zero

    def recurrent_matrix(self) -> torch.Tensor:
        """W_p, the permutation with W_p h = roll(h, shift)."""
        eye = torch.eye(self.hidden_size, dtype=self.h0.dtype, device=self.h0.device)
        return torch.roll(eye, self.shift, 0)

    def unshift_trajectory(self, states: torch.Tensor) -> torch.Tensor:
        """h_t (T, n) with the shift of every step undone, roll(h_t, -shift * t), as the paper's Figure 5 shows them."""
        steps = torch.arange(1, states.shape[0] + 1, device=states.device).unsqueeze(1)
        units = torch.arange(self.hidden_size, device=states.device)
        return states.gather(1, (units + self.shift * steps) % self.hidden_size)

    def beta(self, x: torch.Tensor) -> torch.Tensor:
        """beta(x) = f_r(x) * sigmoid(W_g x + b_g) for every step at once, eq. (5); f_r(x) alone without the gate."""
        out = self.f_r(x)
        return out if self.gate is None else out * torch.sigmoid(self.gate(x))

    def _features(self, x: torch.Tensor) -> torch.Tensor:
        """The network's input features: embedded or one-hot symbol ids, or the real-valued inputs as they are."""
        symbolic = not torch.is_floating_point(x)
        if symbolic and self.embed_symbols:
            return self.embedding(x)
        if symbolic:
            return nn.functional.one_hot(x, self.input_size).to(self.f_r[0].weight.dtype)
        if self.embed_symbols:
            raise ConfigError(
                "model.family_args.embed_symbols is true but the task's inputs are real-valued; set it to false"
            )
        return x

    def forward(
        self, x: torch.Tensor, state_offsets: torch.Tensor | None = None, initial_state: torch.Tensor | None = None
    ) -> torch.Tensor:
        b = self.beta(self._features(x).transpose(0, 1).contiguous())  # (T, B, n), all steps at once
        h0 = self.h0.expand(b.shape[1], -1) if initial_state is None else initial_state  # (B, n)
        offsets = None if state_offsets is None else state_offsets.transpose(0, 1)
        return shift_relu_recurrence(b, h0, self.shift, offsets).transpose(0, 1)
