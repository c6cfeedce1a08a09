"""scuRNN: h_t = sigma_eps(U x_t + W h_{t-1}, b) with unitary W built from (I + A)^-1 (I - A) and diag(e^{i theta})
(Maduranga, Helfrich, Ye 2019): by default W = D K^T, the official code's row-vector W = K D on column vectors."""

from __future__ import annotations

import torch
from torch import nn

from ortholab.models.base import PLANAR_STATE, ConfigError, RecurrentLayer
from ortholab.models.choices import checks_choices
from ortholab.models.complex_recurrence import complex_modrelu_recurrence
from ortholab.models.unitary import CayleyGradient, ComplexScaledCayley, DSide, UnitaryInit


def _refuse_the_other_side(module, state_dict, prefix, *_) -> None:
    """load_state_dict pre-hook: weights trained with D on one side are another function on the other."""
    trained_left = state_dict.get(prefix + "d_on_left")
    if trained_left is not None and bool(trained_left) != bool(module.d_on_left):
        side = "left" if bool(trained_left) else "right"
        raise ConfigError(
            f"these scuRNN weights were trained with D on the {side} ({prefix}d_on_left), a layer with "
            f"d_side={module.cayley.d_side!r} would compute another function with them: build it with "
            f"d_side={side!r} (model.family_args.d_side: {side})"
        )


class ScuRNN(RecurrentLayer):
    """Scaled Cayley unitary RNN: complex hidden state, real readout of [Re h, Im h] (output_size = 2n).

    init: 'henaff' (Re A in 2x2 blocks, t_j ~ U[0, pi/2]: the paper, and the copying/MNIST code), 'henaff_2pi'
        (t_j ~ U[0, 2 pi], as scuRNN_adding.py) or 'zeros'; Im A = 0 and theta ~ U[0, 2 pi) in every case.
    a_gradient: 'theorem2' (A is stepped by Theorem 2's dL/dconj(A), as the paper and the official code) or
        'coordinates' (by the plain gradient of A's free real coordinates, twice as large off the diagonal).
    d_side: 'left' (W = D K^T, K = (I + A)^-1 (I - A): the official code's h_t = h_{t-1} K D in row vectors, so A
        and theta get the code's gradients and steps) or 'right' (W = K D: eq. (2) read literally, the same
        functions after relabelling the units by D^H, but other theta gradients).
    Parameter groups: `recurrent` (A's n^2 real coordinates), `scaling` (theta), `other` (U, b, h0).
    """

    keeps_orthogonal = True

    layout = "planar"
    layer_doc = (
        "scuRNN, W from (I + A)^-1 (I - A) and diag(e^(i theta)) (Maduranga et al. 2019). "
        f"{PLANAR_STATE} Groups: recurrent (A), scaling (theta), other (with the trained h0)."
    )

    supports_state_offsets = True
    forms_recurrent_matrix = True

    @checks_choices
    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        init: UnitaryInit = "henaff",
        a_gradient: CayleyGradient = "theorem2",
        d_side: DSide = "left",
    ):
        super().__init__(input_size, hidden_size)
        n = hidden_size
        self.output_size = 2 * n
        self.cayley = ComplexScaledCayley(n, init=init, gradient=a_gradient, d_side=d_side)
        # complex U as the real [Re U; Im U] (2n, m), Glorot-uniform over that shape as the code's [m, 2n] variable
        self.input_weight = nn.Parameter(nn.init.xavier_uniform_(torch.empty(2 * n, input_size)))
        self.bias = nn.Parameter(torch.empty(n).uniform_(-0.01, 0.01))  # modReLU bias, one per complex unit
        self.h0 = nn.Parameter(torch.empty(2 * n).uniform_(-0.01, 0.01))  # [Re h0 | Im h0], trainable (paper Sec. 4)
        # which side D was applied on when these weights were trained: a checkpoint is read the same way
        # (RecurrentModule.on_load_checkpoint; a checkpoint without it predates d_side: D on the right)
        self.register_buffer("d_on_left", torch.tensor(d_side == "left"))
        self.register_load_state_dict_pre_hook(_refuse_the_other_side)

    def recurrent_matrix(self) -> torch.Tensor:
        return self.cayley()

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        return {
            "recurrent": [self.cayley.real_upper, self.cayley.imag_upper],
            "scaling": [self.cayley.theta],
            "other": [self.input_weight, self.bias, self.h0],
        }

    def nonfinite_hint(self) -> str | None:
        if bool((self.bias > 0).any()):
            return (
                "modReLU biases b > 0 with small |z| give derivatives up to ~b / sqrt(eps) (scuRNN Theorem 4, "
                "the paper's NaNs on MNIST): lower model.optimizers.other.lr, or model.optimizers.recurrent.lr"
            )
        return None

    def snapshot_arrays(self) -> dict[str, torch.Tensor]:
        """D's phases theta, stored by the eigenvalue callback as a `phases` artifact."""
        return {"phases": self.cayley.theta}

    def forward(
        self, x: torch.Tensor, state_offsets: torch.Tensor | None = None, initial_state: torch.Tensor | None = None
    ) -> torch.Tensor:
        w = self.cayley()  # formed once per forward pass, not per step
        u = torch.matmul(x.transpose(0, 1), self.input_weight.t())  # (T, B, 2n): U x_t for all steps at once
        h0 = self.h0.expand(x.shape[0], -1) if initial_state is None else initial_state  # (B, 2n) [Re | Im]
        offsets = None if state_offsets is None else state_offsets.transpose(0, 1)
        return complex_modrelu_recurrence(u, w.real, w.imag, self.bias, h0, offsets).transpose(0, 1)
