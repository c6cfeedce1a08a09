"""nnRNN: h_t = modReLU(U x_t + W h_{t-1}, b) with the non-normal W = P (Lambda + T) P^T.

Kerg, Goyette, Touzel, Gidel, Vorontsov, Bengio, Lajoie, "Non-normal Recurrent Neural Network (nnRNN):
learning long time dependencies while improving expressivity with transient dynamics" (NeurIPS 2019), the
real Schur form of W: P orthogonal, Lambda block-diagonal with 2x2 blocks alpha_i R(theta_i) (the normal
part: eigenvalues alpha_i e^{+-i theta_i}), T strictly upper triangular (the non-normal part). P = exp(L - L^T)
from the strictly upper entries L (models/matrix_exp.py), formed once per forward pass with W.

Choices follow the official code (KyleGoyette/nnRNN RNN_Cell.py, also in the SRNN repository; srnn-exprnn-facts
section 2): theta_i ~ U(0, 2 pi), alpha_i = 1, T = 0, U without bias and Glorot-normal, modReLU bias
b ~ U(-0.01, 0.01), h0 = 0; T's mask is the element-wise strict upper triangle, so T also reaches the
(2i, 2i+1) entry inside each 2x2 block (that entry does change the block's eigenvalues), as the code's mask.
The code's initialisation is broken in the SRNN copy (P = exp of an uninitialised buffer); here L starts from
the chosen skew initialisation as the paper intends. The code's P gradient (Frechet derivative of exp through
a block exponential) is exact; models/matrix_exp.py's eigendecomposition gives the same gradient.

Column convention: the paper's h_t = ... + W h_{t-1}. The code multiplies row vectors, h_{t-1} W, so its
column-form matrix is W^T = P (Lambda^T + T^T) P^T. For even n (the code's only case) that is again of the
form P' (Lambda' + T') P'^T (reverse the order of the units, negate one; absorbed by P, theta and T), so both
parametrise the same set of matrices.

The code adds delta * sum_i (alpha_i - 1)^2 to the loss (delta = 1e-4 in the SRNN code and the nnRNN copy task).
Here `alpha_penalty` = delta adds that term's gradient 2 delta (alpha_i - 1) to alpha's gradient inside the layer
(an identity on alpha whose backward adds it), so the training loop needs no change and the logged loss stays
the task's loss, comparable across families. `alpha_penalty_term()` returns the term's value, for monitoring.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ortholab.models.base import REAL_STATE, ConfigError, RecurrentLayer
from ortholab.models.cayley import upper_from_skew
from ortholab.models.choices import checks_choices
from ortholab.models.matrix_exp import SkewInit, exp_skew, initial_skew
from ortholab.models.recurrence import modrelu_recurrence


def strictly_upper(entries: torch.Tensor, n: int) -> torch.Tensor:
    """The strictly upper triangular (n, n) matrix with the given entries, row-major."""
    rows, cols = torch.triu_indices(n, n, offset=1, device=entries.device)
    return entries.new_zeros(n, n).index_put((rows, cols), entries)


def scaled_rotation_blocks(theta: torch.Tensor, alpha: torch.Tensor, n: int) -> torch.Tensor:
    """Lambda: 2x2 blocks alpha_i [[cos theta_i, -sin theta_i], [sin theta_i, cos theta_i]] down the diagonal;
    for odd n a last 1x1 block alpha_last (eigenvalue alpha_last, which the paper's even n never needs)."""
    k = theta.numel()
    i = torch.arange(0, 2 * k, 2, device=theta.device)
    odd = torch.arange(2 * k, n, device=theta.device)  # empty for even n
    rows = torch.cat([i, i, i + 1, i + 1, odd])
    cols = torch.cat([i, i + 1, i, i + 1, odd])
    a, c, s = alpha[:k], torch.cos(theta), torch.sin(theta)
    values = torch.cat([a * c, -a * s, a * s, a * c, alpha[k:]])
    return theta.new_zeros(n, n).index_put((rows, cols), values)


class _AddPenaltyGradient(torch.autograd.Function):
    """Identity on alpha; backward adds d/dalpha of weight * sum (alpha - 1)^2 = 2 weight (alpha - 1)."""

    @staticmethod
    def forward(ctx, alpha, weight):
        ctx.save_for_backward(alpha)
        ctx.weight = weight
        return alpha.clone()

    @staticmethod
    def backward(ctx, grad):
        (alpha,) = ctx.saved_tensors
        return grad + 2 * ctx.weight * (alpha - 1), None


class NNRNN(RecurrentLayer):
    """Non-normal RNN: W = P (Lambda + T) P^T, P = exp(L - L^T), Lambda = blocks alpha_i R(theta_i).

    init: the initial skew L - L^T of P: 'cayley' (default, the code's default and every nnRNN row of that
        code's README), 'henaff' (U(-pi, pi)), 'henaff_icml' (U(-pi, 0), the nnRNN code's henaff) or 'random' (log of
        a Haar SO(n) matrix); see models/matrix_exp.py. Block-diagonal P (cayley, henaff) commutes with Lambda,
        so the initial W = Lambda there.
    alpha_penalty: delta of the code's loss term delta * sum_i (alpha_i - 1)^2, applied to alpha's gradient
        inside the layer (see the module docstring); 0 turns it off. The code uses 1e-4 (0.1 on sMNIST).
    Parameter groups (each its own optimizer, as the code's two optimizers, with T's weight decay as an option):
        `orthogonal`: L (P's n(n-1)/2 free entries; the code's lr_orth, 1e-6 on the copy task);
        `spectrum`: theta (n//2 angles) and alpha (ceil(n/2) scales), i.e. Lambda;
        `non_normal`: T's n(n-1)/2 entries; give it weight_decay (the code's Tdecay: 1e-4 in the SRNN code);
        `other`: U and b. The code trains spectrum, non_normal and other with one optimizer and lr.
    """

    keeps_orthogonal = True

    layer_doc = (
        f"nnRNN, W = P (Lambda + T) P^T (Kerg et al. 2019). {REAL_STATE} Groups: orthogonal, spectrum, non_normal, "
        "other. h0 = 0."
    )

    supports_state_offsets = True
    forms_recurrent_matrix = True
    readout_init = "torch"  # the SRNN repository's nnRNN end_fc and the nnRNN code's sMNIST head: a default nn.Linear

    @checks_choices
    def __init__(self, input_size: int, hidden_size: int, init: SkewInit = "cayley", alpha_penalty: float = 1e-4):
        super().__init__(input_size, hidden_size)
        if isinstance(alpha_penalty, bool) or not isinstance(alpha_penalty, (int, float)) or alpha_penalty < 0:
            raise ConfigError(
                f"model.family_args.alpha_penalty = {alpha_penalty!r} must be a number >= 0 "
                f"(the code's delta, 1e-4; 0 turns the penalty off)"
            )
        n = hidden_size
        self.alpha_penalty = float(alpha_penalty)
        self.log_basis = nn.Parameter(upper_from_skew(initial_skew(n, init)).float())  # L: P = exp(L - L^T)
        self.theta = nn.Parameter(torch.rand(n // 2) * (2 * math.pi))  # U(0, 2 pi) as the code
        self.alpha = nn.Parameter(torch.ones((n + 1) // 2))
        self.non_normal = nn.Parameter(torch.zeros(n * (n - 1) // 2))  # T starts at 0: W starts normal
        self.input_weight = nn.Parameter(torch.empty(n, input_size))
        nn.init.xavier_normal_(self.input_weight)  # the code's default input initialiser
        self.bias = nn.Parameter(torch.empty(n).uniform_(-0.01, 0.01))  # modReLU bias, as the code

    # the factors of W ---------------------------------------------------------------------------------
    def basis(self) -> torch.Tensor:
        """P = exp(L - L^T), orthogonal."""
        return exp_skew(self.log_basis, self.hidden_size)

    def normal_part(self, alpha: torch.Tensor | None = None) -> torch.Tensor:
        """Lambda, the block-diagonal 2x2 scaled rotations."""
        return scaled_rotation_blocks(self.theta, self.alpha if alpha is None else alpha, self.hidden_size)

    def non_normal_part(self) -> torch.Tensor:
        """T, strictly upper triangular."""
        return strictly_upper(self.non_normal, self.hidden_size)

    def _matrix(self, alpha: torch.Tensor) -> torch.Tensor:
        p = self.basis()
        return p @ (self.normal_part(alpha) + self.non_normal_part()) @ p.t()  # W = P (Lambda + T) P^T

    def orthogonal_map(self) -> torch.Tensor:  # P; W = P (Lambda + T) P^T is non-normal, not orthogonal
        return self.basis()

    def recurrent_matrix(self) -> torch.Tensor:
        return self._matrix(self.alpha)

    def alpha_penalty_term(self) -> torch.Tensor:
        """delta * sum_i (alpha_i - 1)^2: the code's loss term, whose gradient forward() already adds to alpha's."""
        return self.alpha_penalty * (self.alpha - 1).square().sum()

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        return {
            "orthogonal": [self.log_basis],
            "spectrum": [self.theta, self.alpha],
            "non_normal": [self.non_normal],
            "other": [self.input_weight, self.bias],
        }

    def nonfinite_hint(self) -> str | None:
        with torch.no_grad():
            scale = float(self.alpha.abs().max()) if self.alpha.numel() else 1.0
            t_norm = float(self.non_normal.norm())
        return (
            f"W = P (Lambda + T) P^T is not orthogonal once alpha != 1 or T != 0 (now max |alpha| = "
            f"{scale:.3g}, ||T||_F = {t_norm:.3g}): hidden states can grow over the sequence; lower "
            f"model.optimizers.spectrum.lr / non_normal.lr, raise model.optimizers.non_normal.weight_decay or "
            f"model.family_args.alpha_penalty"
        )

    def forward(
        self, x: torch.Tensor, state_offsets: torch.Tensor | None = None, initial_state: torch.Tensor | None = None
    ) -> torch.Tensor:
        alpha = self.alpha
        if self.alpha_penalty > 0 and torch.is_grad_enabled() and alpha.requires_grad:
            alpha = _AddPenaltyGradient.apply(alpha, self.alpha_penalty)  # the code's delta sum (alpha - 1)^2
        w = self._matrix(alpha)  # formed once per forward pass, not per step
        u = torch.matmul(x.transpose(0, 1), self.input_weight.t())  # (T, B, n): U x_t for all steps at once
        h0 = u.new_zeros(x.shape[0], self.hidden_size) if initial_state is None else initial_state  # (B, n)
        offsets = None if state_offsets is None else state_offsets.transpose(0, 1)
        return modrelu_recurrence(u, w, self.bias, h0, offsets).transpose(0, 1)
