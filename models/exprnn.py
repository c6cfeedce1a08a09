"""expRNN: h_t = modReLU(W_in x_t + B h_{t-1}, b) with B = exp(A) base, A = S - S^T skew-symmetric.

Lezcano-Casado and Martinez-Rubio, "Cheap Orthogonal Constraints in Neural Networks" (ICML 2019): the static
trivialisation B = exp(A) (base = I). Lezcano-Casado, "Trivializations for Gradient-Based Optimization on
Manifolds" (NeurIPS 2019): the dynamic one ('dtriv'), where every K optimizer steps the current B becomes the
new base and A restarts from 0, and every M re-basings the base is put back onto O(n) by its polar factor U V^T.
Choices follow the official code (srnn-exprnn-facts section 3): modReLU bias b ~ U(-0.01, 0.01), input weights
Kaiming-normal (ReLU gain) without bias, h0 = 0.

Column convention, as scoRNN here: h_t = ... + B h_{t-1}. The official code (Lezcano/expRNN at 830ec83) multiplies
row vectors by B_code = base_code exp(A_code) (orthogonal.py:34-44), i.e. in column form by
B_code^T = exp(-A_code) base_code^T: the base stands on the right of the exponential. With A = -A_code and
base = base_code^T, base_side 'right' (the default) computes that matrix, and since dL/dA = -dL/dA_code and the
elementwise optimizers are odd in the gradient (RMSprop, Adam, SGD), it follows the code's trajectory step for
step. base_side 'left', B = base exp(A), is the same set of matrices but its gradient is the code's conjugated by
the base (dL/dA = -base dL/dA_code base^T), so RMSprop's per-entry scaling takes other steps. With base = I
(static) both sides coincide and A = -A_code already reproduces the code: no flip is needed there. For one draw
A0 of an initialisation our B0 = exp(A0) is the transpose of the code's; for 'henaff' (angles symmetric about 0)
the distributions agree, for 'cayley' and 'henaff_icml' they are mirror images (same spectrum, and equivalent
under flipping the sign of every second unit, which leaves W_in's and b's distributions unchanged).

The code re-bases inside its B() property (parametrization.py:74-92) after building B = base exp(A) with autograd,
by `base.data.copy_(B)` and `A.data.zero_()` (lines 67-70), which autograd does not see: the product's backward
then reads the new base, so a re-basing step's gradient is Dexp*_{A_old}(B^T G) (G = dL/dB, row form), exp's
derivative at the A before the re-basing applied at the new base: neither the gradient at the old base nor the
one at the new base (Dexp*_0 = identity). rebase_gradient 'code' (default) reproduces that; 'new_base' takes the
derivative at S = 0, the algorithm as the paper writes it (and as geotorch, the author's later library, does by
calling update_base between steps). No issue or comment of the authors about it was found.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from ortholab.models.base import REAL_STATE, ConfigError, RecurrentLayer
from ortholab.models.cayley import skew_from_upper, upper_from_skew
from ortholab.models.choices import checks_choices
from ortholab.models.matrix_exp import SkewInit, initial_skew, skew_matrix_exp
from ortholab.models.recurrence import modrelu_recurrence
from ortholab.models.stiefel import nearest_unitary


def _fill_missing_stale_state(module, state_dict, prefix, *_) -> None:
    """load_state_dict pre-hook for checkpoints written before base_side and rebase_gradient existed: they were
    trained with B = base exp(A), so a dtriv one resumes only under base_side 'left'; nothing is pending."""
    if prefix + "stale_pending" in state_dict:
        return
    if module.trivialization == "dtriv" and module.base_side != "left":
        raise ConfigError(
            "this expRNN checkpoint predates model.family_args.base_side and was trained with "
            "B = base exp(A): resume it with model.family_args.base_side: left"
        )
    state_dict[prefix + "stale_upper"] = torch.zeros_like(module.stale_upper)
    state_dict[prefix + "stale_pending"] = torch.zeros_like(module.stale_pending)


def _optional_positive_int(value, key: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(
            f"model.family_args.{key} = {value!r} must be a positive integer number of steps, or null for never"
        )
    return value


class ExpRNN(RecurrentLayer):
    """Orthogonal RNN with B = exp(S - S^T) base, S the n(n-1)/2 strictly upper entries (expRNN / dtriv).

    trivialization: 'static' (default: the ICML paper's expRNN, base = I for good) or 'dtriv' (the dynamic
        trivialisation, the official code's default mode at HEAD: like the code, the initial exp(A0) becomes
        the base at once and S starts at 0).
    base_side: dtriv only. 'right' (default): B = exp(A) base, the official code's matrix in column form, so
        training follows the code's trajectory (module docstring). 'left': B = base exp(A), OrthoLab's form before
        issue 23; the same matrices, but RMSprop or Adam step differently (the gradient is conjugated by the base).
    rebase_gradient: dtriv only, the gradient of the step right after a re-basing (and of the first step).
        'code' (default): the code's, exp's derivative at the S held before the re-basing (module docstring);
        the forward pass is unchanged. 'new_base': the derivative at S = 0, as the paper writes the algorithm.
        They differ as Dexp at S_old differs from the identity: by a factor of order one on the first step from
        a henaff A0 (2.8-3.8x in norm, n = 190, a quadratic loss, 20 seeds), relatively by about ||S_old||
        (some lr * K) on later re-basings.
    init: the initial A: 'henaff' (angles U(-pi, pi), the code at HEAD), 'henaff_icml' (U(-pi, 0)), 'cayley'
        (-tan(t/2), t ~ U(0, pi/2)) or 'random' (log of a Haar SO(n) matrix); see models/matrix_exp.py.
        The scripts use henaff for copying and TIMIT, cayley for MNIST.
    rebase_every: K, dtriv only: after K, 2K, 3K, ... optimizer steps base <- B and S <- 0, as the code (its
        counter k re-bases at the B() of steps 0, K, 2K, ..., parametrization.py:83-96; step 0's is our initial
        base = exp(A0)). The code's K = 100 in all scripts; null = never again, the code's 'infty'. The
        optimizer's state for S (e.g. RMSprop accumulators) is kept across re-basings, as the code keeps it.
    project_every: M, dtriv only: every M-th re-basing, counting the initial base as the first as the code does
        (parametrization.py:88-92), replaces the base by U V^T from its SVD, removing the round-off drift off
        O(n): with K = 3, M = 2 after steps 3, 9, 15, ...; M = 1 projects the initial base too. Default 100
        (the code's MNIST and TIMIT scripts; its copying script uses 30); null = never. One difference left:
        the code projects after forming that step's B, we before, so its step uses the unprojected base
        (a round-off-sized difference, ||base^T base - I||).
    The step counter is a persistent buffer, so a resumed checkpoint continues the schedule where it stopped.
    Parameter groups: `recurrent` (S), `other` (W_in, b). The papers' rule: the `other` lr is 10x `recurrent`'s.
    """

    keeps_orthogonal = True

    layer_doc = (
        f"expRNN, W = exp(A) (Lezcano-Casado and Martinez-Rubio 2019). {REAL_STATE} "
        "Groups: recurrent (A), other. h0 = 0."
    )

    supports_state_offsets = True
    forms_recurrent_matrix = True

    @checks_choices
    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        trivialization: Literal["static", "dtriv"] = "static",
        init: SkewInit = "henaff",
        rebase_every: int | None = 100,
        project_every: int | None = 100,
        base_side: Literal["right", "left"] = "right",
        rebase_gradient: Literal["code", "new_base"] = "code",
    ):
        super().__init__(input_size, hidden_size)
        self.trivialization = trivialization
        self.rebase_every = _optional_positive_int(rebase_every, "rebase_every")
        self.project_every = _optional_positive_int(project_every, "project_every")
        self.base_side = base_side  # 'right': B = exp(A) base (the code's, in column form); 'left': B = base exp(A)
        self.rebase_gradient = rebase_gradient
        n = hidden_size
        a0 = initial_skew(n, init)
        dynamic = trivialization == "dtriv"
        if dynamic:  # the code's first B() in dynamic mode: base = exp(A0), A = 0, re-based from A0
            base, stale, a0 = torch.linalg.matrix_exp(a0), a0, torch.zeros_like(a0)
        else:
            base, stale = torch.eye(n, dtype=torch.float64), torch.zeros_like(a0)
        self.upper = nn.Parameter(upper_from_skew(a0).float())  # S: A's n(n-1)/2 free entries
        self.register_buffer("base", base.float())  # persistent: a checkpoint keeps dtriv's current base
        # S before the latest re-basing, and whether S is still 0 since it (rebase_gradient 'code'): persistent
        self.register_buffer("stale_upper", upper_from_skew(stale).float())
        self.register_buffer("stale_pending", torch.tensor(dynamic))
        self.register_buffer("optimizer_steps", torch.zeros((), dtype=torch.long))  # persistent: dtriv schedule
        self.register_load_state_dict_pre_hook(_fill_missing_stale_state)
        self.input_weight = nn.Parameter(torch.empty(n, input_size))
        nn.init.kaiming_normal_(self.input_weight, nonlinearity="relu")  # as the code's input_kernel
        self.bias = nn.Parameter(torch.empty(n).uniform_(-0.01, 0.01))  # modReLU bias, as the code
        if dynamic and self._projects_at_rebasing(1):  # M = 1: the code projects its initial base too
            self.project_base_()

    def skew(self) -> torch.Tensor:
        return skew_from_upper(self.upper, self.hidden_size)

    def recurrent_matrix(self) -> torch.Tensor:
        if self.trivialization == "static":  # base = I for good
            return skew_matrix_exp(self.skew())
        return self._with_base(self._exp_for_this_step())

    def _with_base(self, rotation: torch.Tensor) -> torch.Tensor:
        if self.base_side == "right":
            return rotation @ self.base  # B = exp(A) base: the code's h base_code exp(A_code), A = -A_code
        return self.base @ rotation  # B = base exp(A)

    def _exp_for_this_step(self) -> torch.Tensor:
        """exp(A); while S is still 0 after a re-basing under rebase_gradient 'code', its gradient is exp's
        derivative at the S held before (the code's, module docstring): same value, exp(S) to the bit."""
        skew = self.skew()
        if self.rebase_gradient != "code" or not bool(self.stale_pending):
            return skew_matrix_exp(skew)
        at_stale = skew_matrix_exp(skew_from_upper(self.stale_upper, self.hidden_size) + skew)
        return skew_matrix_exp(skew).detach() + (at_stale - at_stale.detach())  # value exp(S), gradient Dexp_stale

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        return {"recurrent": [self.upper], "other": [self.input_weight, self.bias]}

    def nonfinite_hint(self) -> str | None:
        return (
            "B is orthogonal by construction, so a non-finite value comes from the input weights, modReLU "
            "biases or the readout: lower model.optimizers.other.lr (the papers use 10x the recurrent lr)"
        )

    @torch.no_grad()
    def rebase_(self) -> None:
        """base <- B, S <- 0: B, hence the function computed, is unchanged (dtriv's change of base). The S it held
        is kept for the next gradient under rebase_gradient 'code'."""
        self.base.copy_(self._with_base(skew_matrix_exp(self.skew())))
        self.stale_upper.copy_(self.upper)
        self.stale_pending.fill_(True)
        self.upper.zero_()

    @torch.no_grad()
    def project_base_(self) -> None:
        """base <- U V^T from base = U Sigma V^T: the closest orthogonal matrix, undoing round-off drift."""
        self.base.copy_(nearest_unitary(self.base))

    def exact_after_widening_(self) -> None:  # dtriv's base stored in float32 is orthogonal to ~1e-7 only
        if self.trivialization == "dtriv":  # static: the base stays I, exact in any precision
            self.project_base_()

    def _projects_at_rebasing(self, number: int) -> bool:
        """Whether the number-th re-basing, the initial base being the first, projects: the code increments m
        before testing m % M == 0, from its first B() on (parametrization.py:88-90)."""
        return self.project_every is not None and number % self.project_every == 0

    def after_optimizer_step(self) -> None:
        self.optimizer_steps += 1
        self.stale_pending.fill_(False)  # S moved off 0: exp's gradient is taken at the current S again
        if self.trivialization != "dtriv" or self.rebase_every is None:
            return
        steps = int(self.optimizer_steps)
        if steps % self.rebase_every == 0:  # the code's k returns to 0 after K, 2K, ... steps (lines 95-96)
            self.rebase_()
            if self._projects_at_rebasing(steps // self.rebase_every + 1):
                self.project_base_()

    def forward(
        self, x: torch.Tensor, state_offsets: torch.Tensor | None = None, initial_state: torch.Tensor | None = None
    ) -> torch.Tensor:
        b = self.recurrent_matrix()  # formed once per forward pass, not per step
        u = torch.matmul(x.transpose(0, 1), self.input_weight.t())  # (T, B, n): W_in x_t for all steps at once
        h0 = u.new_zeros(x.shape[0], self.hidden_size) if initial_state is None else initial_state  # (B, n)
        offsets = None if state_offsets is None else state_offsets.transpose(0, 1)
        return modrelu_recurrence(u, b, self.bias, h0, offsets).transpose(0, 1)
