"""expRNN: h_t = modReLU(W_in x_t + B h_{t-1}, b) with B = base exp(A), A = S - S^T skew-symmetric.

Lezcano-Casado and Martinez-Rubio, "Cheap Orthogonal Constraints in Neural Networks" (ICML 2019): the static
trivialisation B = exp(A) (base = I). Lezcano-Casado, "Trivializations for Gradient-Based Optimization on
Manifolds" (NeurIPS 2019): the dynamic one ('dtriv'), where every K optimizer steps the current B becomes the
new base and A restarts from 0, and every M re-basings the base is put back onto O(n) by its polar factor U V^T.
Choices follow the official code (srnn-exprnn-facts section 3): modReLU bias b ~ U(-0.01, 0.01), input weights
Kaiming-normal (ReLU gain) without bias, h0 = 0.

Column convention, as scoRNN here: h_t = ... + B h_{t-1}. The official code multiplies row vectors, h_{t-1} B,
i.e. its column-form matrix is our B transposed, exp(A)^T = exp(-A); both parametrise the same matrices and B,
B^T have the same spectrum, so the initialisations give the same eigenvalue distributions.
"""
from __future__ import annotations

import torch
from torch import nn

from models.base import ConfigError, RecurrentLayer
from models.cayley import skew_from_upper, upper_from_skew
from models.matrix_exp import SKEW_INITS, initial_skew, skew_matrix_exp
from models.recurrence import modrelu_recurrence

TRIVIALIZATIONS = ("static", "dtriv")


def _optional_positive_int(value, key: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"model.family_args.{key} = {value!r} must be a positive integer number of steps, "
                          f"or null for never")
    return value


class ExpRNN(RecurrentLayer):
    """Orthogonal RNN with B = base exp(S - S^T), S the n(n-1)/2 strictly upper entries (expRNN / dtriv).

    trivialization: 'static' (default: the ICML paper's expRNN, base = I for good) or 'dtriv' (the dynamic
        trivialisation, the official code's default mode at HEAD: like the code, the initial exp(A0) becomes
        the base at once and S starts at 0).
    init: the initial A: 'henaff' (angles U(-pi, pi), the code at HEAD), 'henaff_icml' (U(-pi, 0)), 'cayley'
        (-tan(t/2), t ~ U(0, pi/2)) or 'random' (log of a Haar SO(n) matrix); see models/matrix_exp.py.
        The scripts use henaff for copying and TIMIT, cayley for MNIST.
    rebase_every: K, dtriv only: after every K optimizer steps base <- base exp(A) and S <- 0 (the code's
        K = 100 in all scripts; null = never, the code's 'infty'; the code's first re-basing comes one step
        earlier, after K - 1 steps). The optimizer's state for S (e.g. RMSprop accumulators) is kept across
        re-basings, as the code keeps it.
    project_every: M, dtriv only: every M re-basings the base is replaced by U V^T from its SVD, removing the
        round-off drift off O(n). Default 100 (the code's MNIST and TIMIT scripts; its copying script uses 30);
        null = never.
    The step counter is a persistent buffer, so a resumed checkpoint continues the schedule where it stopped.
    Parameter groups: `recurrent` (S), `other` (W_in, b). The papers' rule: the `other` lr is 10x `recurrent`'s.
    """

    supports_state_offsets = True
    forms_recurrent_matrix = True

    def __init__(self, input_size: int, hidden_size: int, trivialization: str = "static", init: str = "henaff",
                 rebase_every: int | None = 100, project_every: int | None = 100):
        super().__init__(input_size, hidden_size)
        if trivialization not in TRIVIALIZATIONS:
            raise ConfigError(f"model.family_args.trivialization = {trivialization!r}; choose 'static' (expRNN, "
                              f"ICML 2019) or 'dtriv' (dynamic trivialisation, NeurIPS 2019)")
        if init not in SKEW_INITS:
            raise ConfigError(f"model.family_args.init = {init!r}; choose one of {list(SKEW_INITS)}")
        self.trivialization = trivialization
        self.rebase_every = _optional_positive_int(rebase_every, "rebase_every")
        self.project_every = _optional_positive_int(project_every, "project_every")
        n = hidden_size
        a0 = initial_skew(n, init)
        if trivialization == "dtriv":  # the code's first B() in dynamic mode: base = exp(A0), A = 0
            base, a0 = torch.linalg.matrix_exp(a0), torch.zeros_like(a0)
        else:
            base = torch.eye(n, dtype=torch.float64)
        self.upper = nn.Parameter(upper_from_skew(a0).float())  # S: A's n(n-1)/2 free entries
        self.register_buffer("base", base.float())  # persistent: a checkpoint keeps dtriv's current base
        self.register_buffer("optimizer_steps", torch.zeros((), dtype=torch.long))  # persistent: dtriv schedule
        self.input_weight = nn.Parameter(torch.empty(n, input_size))
        nn.init.kaiming_normal_(self.input_weight, nonlinearity="relu")  # as the code's input_kernel
        self.bias = nn.Parameter(torch.empty(n).uniform_(-0.01, 0.01))  # modReLU bias, as the code

    def skew(self) -> torch.Tensor:
        return skew_from_upper(self.upper, self.hidden_size)

    def recurrent_matrix(self) -> torch.Tensor:
        if self.trivialization == "static":  # base = I for good
            return skew_matrix_exp(self.skew())
        return self.base @ skew_matrix_exp(self.skew())  # B = base exp(A)

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        return {"recurrent": [self.upper], "other": [self.input_weight, self.bias]}

    def nonfinite_hint(self) -> str | None:
        return ("B is orthogonal by construction, so a non-finite value comes from the input weights, modReLU "
                "biases or the readout: lower model.optimizers.other.lr (the papers use 10x the recurrent lr)")

    @torch.no_grad()
    def rebase_(self) -> None:
        """base <- base exp(A), S <- 0: B, hence the function computed, is unchanged (dtriv's change of base)."""
        self.base.copy_(self.recurrent_matrix())
        self.upper.zero_()

    @torch.no_grad()
    def project_base_(self) -> None:
        """base <- U V^T from base = U Sigma V^T: the closest orthogonal matrix, undoing round-off drift."""
        u, _, vh = torch.linalg.svd(self.base)
        self.base.copy_(u @ vh)

    def after_optimizer_step(self) -> None:
        self.optimizer_steps += 1
        if self.trivialization != "dtriv" or self.rebase_every is None:
            return
        steps = int(self.optimizer_steps)
        if steps % self.rebase_every == 0:
            self.rebase_()
            if self.project_every is not None and (steps // self.rebase_every) % self.project_every == 0:
                self.project_base_()

    def forward(self, x: torch.Tensor, state_offsets: torch.Tensor | None = None) -> torch.Tensor:
        b = self.recurrent_matrix()  # formed once per forward pass, not per step
        u = torch.matmul(x.transpose(0, 1), self.input_weight.t())  # (T, B, n): W_in x_t for all steps at once
        h0 = u.new_zeros(x.shape[0], self.hidden_size)
        offsets = None if state_offsets is None else state_offsets.transpose(0, 1)
        return modrelu_recurrence(u, b, self.bias, h0, offsets).transpose(0, 1)
