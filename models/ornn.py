"""oRNN: h_t = sigma(V x_t + W h_{t-1} + b) with W = H(u_1) ... H(u_m) a product of Householder reflections.

Mhammedi, Hellicar, Rahman, Bailey (ICML 2017), with the official code's choices (reference-impl-facts
section 3): leaky ReLU with slope 0.1, trainable h0 ~ U(+-sqrt(3 / (2n))), Glorot input weights, zero bias,
reflection vectors initialised as the tril of N(0, 0.01^2) with unit-norm columns.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ortholab.models.base import REAL_STATE, ConfigError, RecurrentLayer, count_from_fraction
from ortholab.models.choices import checks_choices
from ortholab.models.householder import entries_from_tril, householder_product, tril_from_entries
from ortholab.models.pointwise_recurrence import Activation, pointwise_recurrence


class ORNN(RecurrentLayer):
    """Orthogonal RNN parametrised by Householder reflections.

    num_reflections: m, as a count in [1, n] (int) or a fraction of hidden_size (float); None is m = n, where
        the last factor is the paper's scalar +-1 (the sign of its single stored entry; fixed in practice).
    activation: 'leaky_relu' (the paper's and code's default) or 'tanh'.
    leaky_slope: the leaky ReLU's slope for negative inputs.
    renormalize: False (the default) keeps the paper's plain parametrisation; True rescales every reflection
        vector to unit norm at the start of each training forward pass, i.e. after each optimizer step, as the
        official code does after its Adam step (the papers' configs under configs/papers/ set it). H(u) only
        depends on u's direction either way, so W is the same; what changes is the size of later optimizer
        steps relative to |u|.
    W is formed once per forward pass from the compact WY form (no loop over the reflections) and shared by
    the whole batch; the paper's per-step, per-sequence algorithm (O(nm) a step) is for batch size 1.
    Parameter groups: `recurrent` (the reflection vectors' n*m - m(m-1)/2 free entries), `other` (V, b, h0).
    The official code trains every parameter with one Adam.
    """

    keeps_orthogonal = True

    layer_doc = (
        f"oRNN, W a product of Householder reflections (Mhammedi et al. 2017). {REAL_STATE} "
        "Groups: recurrent, other (with the trained h0)."
    )

    supports_state_offsets = True
    forms_recurrent_matrix = True

    @checks_choices
    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_reflections: int | float | None = None,
        activation: Activation = "leaky_relu",
        leaky_slope: float = 0.1,
        renormalize: bool = False,
    ):
        super().__init__(input_size, hidden_size)
        n = hidden_size
        m = n if num_reflections is None else count_from_fraction(num_reflections, n, "num_reflections")
        if m < 1:
            raise ConfigError(
                f"model.family_args.num_reflections = {num_reflections} gives no reflection; "
                f"use between 1 and hidden_size = {n}"
            )
        if not 0 <= leaky_slope < 1:
            raise ConfigError(f"model.family_args.leaky_slope = {leaky_slope} must lie in [0, 1)")
        self.num_reflections = m
        self.scalar_last = m == n  # the paper's H_1 in {+1, -1} completes the group O(n) (Theorem 1)
        self.activation, self.leaky_slope, self.renormalize = activation, leaky_slope, renormalize
        u = torch.randn(n, m).mul_(0.01).tril_()  # code: tril of N(0, 0.01^2), then unit columns
        self.reflections = nn.Parameter(entries_from_tril(u / u.norm(dim=0)))
        glorot = math.sqrt(6.0 / (input_size + n))
        self.input_weight = nn.Parameter(torch.empty(n, input_size).uniform_(-glorot, glorot))
        self.bias = nn.Parameter(torch.zeros(n))  # inside the activation: sigma(V x + W h + b)
        h0_range = math.sqrt(3.0 / (2 * n))
        self.h0 = nn.Parameter(torch.empty(n).uniform_(-h0_range, h0_range))
        # the column of each stored entry, for the per-column renormalisation
        self.register_buffer("entry_columns", torch.tril_indices(n, m)[1], persistent=False)

    def reflection_vectors(self) -> torch.Tensor:
        """U (n, m): column k is the k-th reflection vector, zero above row k."""
        return tril_from_entries(self.reflections, self.hidden_size, self.num_reflections)

    def recurrent_matrix(self) -> torch.Tensor:
        return householder_product(self.reflection_vectors(), self.scalar_last)

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        return {"recurrent": [self.reflections], "other": [self.input_weight, self.bias, self.h0]}

    @torch.no_grad()
    def normalize_reflections_(self) -> None:
        """Rescale every column of U to unit norm in place (the code's post-step projection; W is unchanged)."""
        squares = torch.zeros(self.num_reflections, dtype=self.reflections.dtype, device=self.reflections.device)
        squares.index_add_(0, self.entry_columns, self.reflections.square())
        self.reflections.div_(squares.sqrt()[self.entry_columns])

    def forward(
        self, x: torch.Tensor, state_offsets: torch.Tensor | None = None, initial_state: torch.Tensor | None = None
    ) -> torch.Tensor:
        if self.training and self.renormalize:
            self.normalize_reflections_()  # the previous optimizer step moved |u_k| off 1
        w = self.recurrent_matrix()  # formed once per forward pass for the whole batch, not per step
        u = torch.matmul(x.transpose(0, 1), self.input_weight.t()) + self.bias  # (T, B, n) for all steps at once
        h0 = self.h0.expand(x.shape[0], -1) if initial_state is None else initial_state  # (B, n)
        offsets = None if state_offsets is None else state_offsets.transpose(0, 1)
        return pointwise_recurrence(u, w, h0, self.activation, self.leaky_slope, offsets).transpose(0, 1)
