"""Full-capacity uRNN: h_t = sigma_eps(U x_t + W h_{t-1}, b) with a dense unitary W
(Wisdom, Powers, Hershey, Le Roux, Atlas, NeurIPS 2016).

W is any unitary matrix, stored as its real and imaginary parts, and is trained by the multiplicative Cayley
step on the Stiefel manifold (models/stiefel.py, optimizer `stiefel_cayley`), not through a parametrisation.
The hidden state is complex, laid out [Re h | Im h] (2n features for the readout), with the modReLU of their
code, relu(r + b) / (r + 1e-5) z, r = sqrt(|z|^2 + 1e-5): scuRNN's eq. (5), so the fused recurrence of
models/complex_recurrence.py serves both families.

Initialisation from the paper's code (stwisdom/urnn models.py): b ~ U[-0.01, 0.01], trainable
h0 ~ U[+-sqrt(3 / (2n))], input weights Glorot-uniform over the real [m, 2n] shape. W: 'haar' draws a
Haar-random unitary from torch's RNG (QR of a complex Gaussian, with R's diagonal phases moved into Q, Mezzadri
2007), 'identity' is the code's `identity` option. The code's default (`rand`) is a random product of
Arjovsky's restricted-capacity factors, which is not reproduced here.

Which gradient W receives (`w_gradient`). The code trains the real 2n x 2n matrix M = [[Re W^T, Im W^T],
[-Im W^T, Re W^T]] ([Re h | Im h] @ M = [Re(W h) | Im(W h)]) and its optimizer builds G = C + iD from the top
blocks of dL/dM only (C, D: their transposes; stwisdom/urnn custom_optimizers.py:63-67, optimizations.py:37-41),
i.e. from the part of dL/dW that flows through Re h_{t-1}: G = sum_t delta_t Re(h_{t-1})^T with
delta_t = dL/dRe z_t + i dL/dIm z_t, where dL/dW = sum_t delta_t h_{t-1}^H. 'top_blocks' (default) hands W that
G, so that the Stiefel step is the code's; 'full' hands it dL/dW. G is (dL/dW + sum_t delta_t h_{t-1}^T) / 2,
another direction and a shorter one: at initialisation (copying T = 100, n = 128; adding T = 200, n = 120) the
Stiefel directions B of the two had cosine 0.69 / 0.79, and dL/dW's was 1.6x as long, so at one lr 'full' takes
larger steps than the code. W's .grad is then not dL/dW (a gradient check of W needs 'full').
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import nn

from ortholab.models.base import PLANAR_STATE, RecurrentLayer
from ortholab.models.choices import checks_choices
from ortholab.models.complex_recurrence import complex_modrelu_recurrence
from ortholab.models.stiefel import nearest_unitary

DRIFT_HINT_THRESHOLD = 1e-2  # ||W^H W - I||_F beyond this: the multiplicative updates have left the manifold


def haar_unitary(n: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """A Haar-distributed (n, n) unitary in complex128: Q of a complex Gaussian's QR times diag(R_jj / |R_jj|)."""
    z = torch.complex(
        torch.randn(n, n, generator=generator, dtype=torch.float64),
        torch.randn(n, n, generator=generator, dtype=torch.float64),
    )
    q, r = torch.linalg.qr(z)
    d = torch.diagonal(r)
    return q * (d / d.abs())  # fixes the phases, so that Q is Haar and not biased by the QR convention


class FullCapacityURNN(RecurrentLayer):
    """Full-capacity unitary RNN: complex state, dense unitary W stepped on the Stiefel manifold (output_size 2n).

    init: 'haar' (a Haar-random unitary) or 'identity' (W = I).
    w_gradient: 'top_blocks' (W's .grad is the code's G, through Re h only: the code's step) or 'full' (dL/dW).
    Parameter groups: `recurrent` ([W_re, W_im], for optimizer `stiefel_cayley`), `other` (U, b, h0).
    The papers count W as n^2 parameters (the dimension of U(n)); it is stored as 2n^2 real numbers, and
    `param_budget` sizing counts n^2. Unless the config names an optimizer for `recurrent`, W gets the Stiefel
    step at Wisdom et al.'s rate 1e-3 (a `default` entry in the config does not replace it).
    """

    keeps_orthogonal = True

    layout = "planar"
    layer_doc = (
        "Full-capacity uRNN, dense unitary W stepped on the Stiefel manifold (Wisdom et al. 2016). "
        f"{PLANAR_STATE} Groups: recurrent (W, Stiefel step by default), other (with the trained h0)."
    )

    supports_state_offsets = True
    default_optimizers = {"recurrent": {"name": "stiefel_cayley", "lr": 1e-3}}

    @checks_choices
    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        init: Literal["haar", "identity"] = "haar",
        w_gradient: Literal["top_blocks", "full"] = "top_blocks",
    ):
        super().__init__(input_size, hidden_size)
        self.w_gradient = w_gradient  # what W's .grad holds: the code's G (see above) or dL/dW
        n = hidden_size
        self.output_size = 2 * n
        w = haar_unitary(n) if init == "haar" else torch.eye(n, dtype=torch.complex128)
        self.w_real = nn.Parameter(w.real.float())
        self.w_imag = nn.Parameter(w.imag.float())
        # complex U as the real [Re U; Im U] (2n, m), Glorot-uniform over the code's [m, 2n] variable
        self.input_weight = nn.Parameter(nn.init.xavier_uniform_(torch.empty(2 * n, input_size)))
        self.bias = nn.Parameter(torch.empty(n).uniform_(-0.01, 0.01))  # modReLU bias, one per complex unit
        h0_range = math.sqrt(3.0 / (2 * n))
        self.h0 = nn.Parameter(torch.empty(2 * n).uniform_(-h0_range, h0_range))  # [Re h0 | Im h0], trainable

    def recurrent_matrix(self) -> torch.Tensor:
        return torch.complex(self.w_real, self.w_imag)

    def exact_after_widening_(self) -> None:  # W stored in float32 is unitary to ~1e-7: float64's own W from it
        w = nearest_unitary(self.recurrent_matrix())
        self.w_real.copy_(w.real)
        self.w_imag.copy_(w.imag)

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        return {"recurrent": [self.w_real, self.w_imag], "other": [self.input_weight, self.bias, self.h0]}

    def redundant_parameter_count(self) -> int:
        return self.hidden_size**2  # 2n^2 stored reals for the n^2-dimensional unitary group

    def nonfinite_hint(self) -> str | None:
        w = self.recurrent_matrix().detach()
        drift = torch.linalg.matrix_norm(w.mH @ w - torch.eye(w.shape[0], dtype=w.dtype, device=w.device))
        if not bool(drift <= DRIFT_HINT_THRESHOLD):
            return (
                f"W is no longer unitary (||W^H W - I||_F = {float(drift):.3g}): W must be trained by the "
                f"Stiefel step, model.optimizers.recurrent: {{name: stiefel_cayley, lr: ...}}; with it, "
                f"lower that lr"
            )
        if bool((self.bias > 0).any()):
            return (
                "modReLU biases b > 0 with small |z| give derivatives up to ~b / sqrt(eps) (scuRNN Theorem 4): "
                "lower model.optimizers.other.lr"
            )
        return None

    def forward(
        self, x: torch.Tensor, state_offsets: torch.Tensor | None = None, initial_state: torch.Tensor | None = None
    ) -> torch.Tensor:
        u = torch.matmul(x.transpose(0, 1), self.input_weight.t())  # (T, B, 2n): U x_t for all steps at once
        h0 = self.h0.expand(x.shape[0], -1) if initial_state is None else initial_state  # (B, 2n) [Re | Im]
        offsets = None if state_offsets is None else state_offsets.transpose(0, 1)
        top_blocks_only = self.w_gradient == "top_blocks"
        return complex_modrelu_recurrence(
            u, self.w_real, self.w_imag, self.bias, h0, offsets, top_blocks_only=top_blocks_only
        ).transpose(0, 1)
