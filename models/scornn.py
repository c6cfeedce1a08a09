"""scoRNN: h_t = modReLU(U x_t + W h_{t-1}, b) with W = (I + A)^-1 (I - A) D (Helfrich, Willmott, Ye 2018)."""

from __future__ import annotations

import math

import torch
from torch import nn

from ortholab.models.base import REAL_STATE, ConfigError, RecurrentLayer, count_from_fraction
from ortholab.models.cayley import CayleyInit, ScaledCayley
from ortholab.models.choices import checks_choices
from ortholab.models.recurrence import modrelu_recurrence


class ScoRNN(RecurrentLayer):
    """Scaled Cayley orthogonal RNN.

    rho: number of -1 entries of D, as a count (int) or a fraction of hidden_size (float in [0, 1]).
    init: 'henaff' (2x2 blocks, t_j ~ U[0, pi/2], the paper's Section 4.2) or 'zeros' (W = D).
    input_init_range: U's entries start ~ U(-r, r) (the official code's 0.01).
    Parameter groups: `recurrent` (A's n(n-1)/2 free entries), `other` (U, b).
    """

    keeps_orthogonal = True

    layer_doc = (
        f"scoRNN, W = (I + A)^-1 (I - A) D (Helfrich et al. 2018). {REAL_STATE} Groups: recurrent (A), other. h0 = 0."
    )

    supports_state_offsets = True
    forms_recurrent_matrix = True

    @checks_choices
    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        rho: int | float = 0.5,
        init: CayleyInit = "henaff",
        input_init_range: float = 0.01,
    ):
        super().__init__(input_size, hidden_size)
        self.rho = count_from_fraction(rho, hidden_size, "rho")
        self.cayley = ScaledCayley(hidden_size, self.rho, init=init)
        if isinstance(input_init_range, bool) or not isinstance(input_init_range, (int, float)):
            raise ConfigError(f"model.family_args.input_init_range = {input_init_range!r} must be a number (0.01)")
        if not (math.isfinite(input_init_range) and input_init_range >= 0):
            raise ConfigError(
                f"model.family_args.input_init_range = {input_init_range!r} must be a finite number >= 0: U's "
                f"entries start ~ U(-r, r) (the official code's 0.01)"
            )
        self.input_weight = nn.Parameter(
            torch.empty(hidden_size, input_size).uniform_(-input_init_range, input_init_range)
        )
        self.bias = nn.Parameter(torch.zeros(hidden_size))  # modReLU bias, 0 so modReLU starts as the identity
        self.register_buffer("h0", torch.zeros(hidden_size))  # fixed zero initial state, as the official code

    def recurrent_matrix(self) -> torch.Tensor:
        return self.cayley()

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        return {"recurrent": [self.cayley.upper], "other": [self.input_weight, self.bias]}

    def nonfinite_hint(self) -> str | None:
        if bool((self.bias > 0).any()):
            return (
                "modReLU biases b > 0 lift every unit off zero; a non-finite value then usually means "
                "exploding inputs: lower model.optimizers.other.lr"
            )
        return None

    def forward(
        self, x: torch.Tensor, state_offsets: torch.Tensor | None = None, initial_state: torch.Tensor | None = None
    ) -> torch.Tensor:
        w = self.cayley()  # formed once per forward pass, not per step
        u = torch.matmul(x.transpose(0, 1), self.input_weight.t())  # (T, B, n): U x_t for all steps at once
        h0 = self.h0.expand(x.shape[0], -1) if initial_state is None else initial_state  # (B, n)
        offsets = None if state_offsets is None else state_offsets.transpose(0, 1)
        return modrelu_recurrence(u, w, self.bias, h0, offsets).transpose(0, 1)
