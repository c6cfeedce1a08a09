"""NRU, the Non-saturating Recurrent Unit (Chandar, Sankar, Vorontsov, Kahou, Bengio, AAAI 2019), as the SRNN
paper's port of the authors' code runs it (rotmanmi/SRNN models/nrucell.py; srnn-exprnn-facts section 2):

    h_t = relu(W_h [x_t, h_{t-1}, m_{t-1}] + b_h)
    alpha_t, beta_t = W_alpha [h_t, m_{t-1}] + b_alpha, W_beta [h_t, m_{t-1}] + b_beta        (k weights each)
    v_alpha, v_beta: a Linear([h_t, m_{t-1}]) of size 2 sqrt(M k), split in halves a, b; the outer product a b^T
                     (sqrt(M k)^2 = k M entries) read as k vectors of length M, each divided by its L5 norm
    m_t = m_{t-1} + 1/k sum_i (alpha_i v_alpha,i - beta_i v_beta,i)

No saturating function acts on the memory m (M = memory_size, k = heads): it can grow without bound, which is
the paper's point. The port's choices are kept: 1 layer, no layer norm, no ReLU on alpha, beta or the vectors,
zero h_0 and m_0, PyTorch's default Linear initialisation. The port's own output head W_h2o is xavier_normal with
zero bias; here the SequenceModel's readout, initialised so (readout_init), reads h_t; the parameter count is the same.
For symbol inputs (copying) the port embeds each symbol into d_h numbers (nn.Embedding(vocab, d_h)); here
they arrive one-hot, so the first Linear reads vocab columns instead of d_h (and the count differs there).

x_t's part of the first Linear is computed for all steps at once; the per-step loop does the rest.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from ortholab.models.base import ConfigError, RecurrentLayer

NORM_ORDER = 5  # the write and erase vectors are L5-normalised (torch.nn.functional.normalize(p=5, eps=1e-12))
NORM_EPS = 1e-12


def _positive_int(value, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"model.family_args.{key} = {value!r} must be a positive integer")
    return value


def memory_update(
    memory: torch.Tensor, vectors: torch.Tensor, alpha: torch.Tensor, beta: torch.Tensor, heads: int
) -> torch.Tensor:
    """m_t = m_{t-1} + mean over heads of (alpha v_alpha - beta v_beta), from the raw head outputs.

    vectors: (B, 4 r) = [a_alpha | b_alpha | a_beta | b_beta], r = sqrt(M k); alpha, beta: (B, k). Head i's
    vector is entries [i M, (i + 1) M) of a b^T (row-major). When r is a multiple of k (M / k a perfect square,
    as M = 256, k = 4) that is r / k whole rows, a_i b^T with a_i the i-th block of a: then ||a_i b^T||_5 =
    ||a_i||_5 ||b||_5 and the sum over heads is the single outer product (sum_i c_i a_i) b^T, so no (k, M)
    tensor is formed. Otherwise the k vectors are formed and normalised as the port does.
    """
    batch, size = memory.shape
    r = vectors.shape[1] // 4
    halves = vectors.view(batch, 2, 2, r)  # (write/erase, first half a / second half b, r)
    a, b = halves[:, :, 0], halves[:, :, 1]
    weights = torch.stack([alpha, -beta], dim=1) / heads  # (B, 2, k): write adds, erase subtracts; mean over heads
    rows = r // heads
    if rows * heads == r:
        a_heads = a.reshape(batch, 2, heads, rows)
        norms = torch.linalg.vector_norm(a_heads, ord=NORM_ORDER, dim=3) * torch.linalg.vector_norm(
            b, ord=NORM_ORDER, dim=2, keepdim=True
        )  # ||a_i b^T||_5 = ||a_i||_5 ||b||_5
        scale = weights / norms.clamp_min(NORM_EPS)  # floored as torch.nn.functional.normalize(p=5, eps=1e-12)
        combined = (scale.unsqueeze(3) * a_heads).sum(2)  # sum_i c_i a_i / (|a_i|_5 |b|_5): (B, 2, r / k)
        return memory + torch.bmm(combined.transpose(1, 2), b).view(batch, size)  # write minus erase outer products
    outer = a.unsqueeze(3) * b.unsqueeze(2)  # a b^T, as the port's bmm
    unit = F.normalize(outer.reshape(batch, 2, heads, size), p=NORM_ORDER, dim=3, eps=NORM_EPS)
    return memory + torch.einsum("bwk,bwkm->bm", weights, unit)


class NRU(RecurrentLayer):
    """Non-saturating recurrent unit: ReLU state h (the readout's features) beside an unbounded memory m.

    memory_size: M (the port: 256). M k must be a perfect square.
    heads: k write/erase heads (the port: 4).
    Parameter groups: `other` (every weight). Its authors train it with Adam 1e-3 and gradient-norm clipping
    at 1 (model.grad_clip_norm: 1.0).
    """

    layer_doc = (
        "Non-saturating recurrent unit (Chandar et al. 2019). output holds h; h0 and h_n are the pair (h, memory). "
        "Groups: other. Zero initial state."
    )

    readout_init = "xavier_normal"  # the port's W_h2o: Xavier-normal, zero bias
    supports_state_offsets = True

    def __init__(self, input_size: int, hidden_size: int, memory_size: int = 256, heads: int = 4):
        super().__init__(input_size, hidden_size)
        self.memory_size = _positive_int(memory_size, "memory_size")
        self.heads = _positive_int(heads, "heads")
        root = math.isqrt(memory_size * heads)
        if root * root != memory_size * heads:
            raise ConfigError(
                f"model.family_args.memory_size * heads = {memory_size} * {heads} must be a perfect "
                f"square (the write vectors are outer products of two sqrt(M k) vectors); e.g. "
                f"memory_size 256 with heads 4"
            )
        d, m = hidden_size, memory_size
        # the port's Linears, in its column order: [x_t, h_{t-1}, m_{t-1}] and [h_t, m_{t-1}]
        self.state_layer = nn.Linear(input_size + d + m, d)  # hmi2h
        self.write_vectors = nn.Linear(d + m, 2 * root)  # hm2v_alpha
        self.erase_vectors = nn.Linear(d + m, 2 * root)  # hm2v_beta
        self.write_weights = nn.Linear(d + m, heads)  # hm2alpha
        self.erase_weights = nn.Linear(d + m, heads)  # hm2beta

    def nonfinite_hint(self) -> str | None:
        return (
            "NRU's memory is not bounded (no saturating function): set model.grad_clip_norm: 1.0 as its "
            "authors, or lower model.optimizers.other.lr"
        )

    def recurrent_matrix(self) -> torch.Tensor:
        """W_hh: the (n, n) block of the state Linear acting on h_{t-1} in h_t = relu(W_h [x_t, h_{t-1}, m_{t-1}] + b).

        A view of state_layer.weight (its columns input_size .. input_size + n), not a copy: the forward reads it.
        """
        m_in = self.input_size
        return self.state_layer.weight[:, m_in : m_in + self.hidden_size]

    def _head_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """All four heads as one Linear of [h_t, m_{t-1}]: weight (4 r + 2 k, d + M), bias; order as memory_update."""
        heads = (self.write_vectors, self.erase_vectors, self.write_weights, self.erase_weights)
        return torch.cat([head.weight for head in heads]), torch.cat([head.bias for head in heads])

    def forward(
        self,
        x: torch.Tensor,
        state_offsets: torch.Tensor | None = None,
        initial_state: tuple[torch.Tensor, torch.Tensor] | None = None,
        return_state: bool = False,
    ):
        """The states h_t (B, T, n); initial_state: (h_0, m_0), else zeros; return_state: also (h_T, m_T)."""
        d, m_in = self.hidden_size, self.input_size
        # formed once per forward pass: the split of the state Linear and the stacked heads
        w_state = self.state_layer.weight
        w_x, w_hh, w_hm = w_state[:, :m_in], self.recurrent_matrix(), w_state[:, m_in + d :]
        w_heads, b_heads = self._head_weights()
        w_head_h, w_head_m = w_heads[:, :d], w_heads[:, d:]
        w_from_memory = torch.cat([w_hm, w_head_m]).t()  # m_{t-1} feeds both h_t and the heads: one product
        r4 = 4 * math.isqrt(self.memory_size * self.heads)
        u = torch.matmul(x.transpose(0, 1), w_x.t()) + self.state_layer.bias  # (T, B, d): W_x x_t + b for all t
        offsets = [None] * u.shape[0] if state_offsets is None else state_offsets.transpose(0, 1).unbind(0)
        batch = x.shape[0]
        h, memory = (
            (u.new_zeros(batch, d), u.new_zeros(batch, self.memory_size)) if initial_state is None else initial_state
        )
        states = []
        for u_t, offset_t in zip(u.unbind(0), offsets):
            from_memory = memory @ w_from_memory
            h = torch.relu(torch.addmm(u_t + from_memory[:, :d], h, w_hh.t()))  # h_t = relu(W_h [x, h, m] + b)
            if offset_t is not None:
                h = h + offset_t
            heads = torch.addmm(from_memory[:, d:] + b_heads, h, w_head_h.t())  # every head of [h_t, m_{t-1}]
            memory = memory_update(
                memory, heads[:, :r4], heads[:, r4 : r4 + self.heads], heads[:, r4 + self.heads :], self.heads
            )
            states.append(h)
        return (torch.stack(states, dim=1), (h, memory)) if return_state else torch.stack(states, dim=1)
