"""The diagonal linear recurrence h_t = a_t * h_{t-1} + b_t over a whole sequence at once, by a parallel scan.

Steps compose associatively, (a, b) then (a', b') = (a' a, a' b + b'), so every prefix is found in ceil(log2 T)
doubling rounds (Hillis and Steele 1986): after the round with shift d, h_t sums the last 2d inputs. Python loops
over the rounds, never over time steps. A decay that is the same at every step (one per state, as in the LRU and
S4D) needs no products over time: round k multiplies by a^(2^k).

The backward pass is the same scan run backwards in time with conj(a): dL/db_t = G_t, G_t = dL/dh_t +
conj(a_{t+1}) G_{t+1}, and dL/da_t = G_t conj(h_{t-1}) (PyTorch's convention for complex gradients). Only the
states are saved, and the backward pass calls the scan itself, so it is differentiable again.

Time is dimension -2 and the states dimension -1: b (..., T, S); a (..., T, S), or (..., 1, S) or (S,) when the
same at every step.
"""

from __future__ import annotations

import torch


def _doubling_rounds(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """All h_t of h_t = a_t h_{t-1} + b_t from h_{-1} = 0 (no autograd): Hillis-Steele doubling over time."""
    steps, constant = b.shape[-2], a.shape[-2] == 1
    b = b.clone(memory_format=torch.contiguous_format)  # written in place below; the caller's b is left alone
    shift = 1
    while shift < steps:  # ceil(log2 T) rounds
        # h_t += (a_t ... a_{t-d+1}) h_{t-d}: the product is formed from the previous round's values before the add
        b[..., shift:, :].add_((a if constant else a[..., shift:, :]) * b[..., :-shift, :])
        if constant:
            a = a * a  # a^(2d): every step's product over the next round's window
        else:  # the products over the last 2d steps (those reaching before t = 0 multiply zeros)
            a = torch.cat([a[..., :shift, :], a[..., shift:, :] * a[..., :-shift, :]], dim=-2)
        shift *= 2
    return b


class _LinearScan(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        h = _doubling_rounds(a, b)
        ctx.save_for_backward(a, h)
        return h

    @staticmethod
    def backward(ctx, grad_h):
        a, h = ctx.saved_tensors
        if a.shape[-2] == 1:  # the same decay at every step: the reversed recurrence has conj(a) too
            backwards = a.conj()
        else:  # reversed time s = T-1-t: G'_s = g'_s + conj(a_{T-s}) G'_{s-1}; the factor at s = 0 meets zeros
            backwards = torch.cat([a[..., 1:, :], torch.ones_like(a[..., :1, :])], dim=-2).conj().flip(-2)
        grad_b = linear_scan(backwards, grad_h.flip(-2)).flip(-2)
        grad_a = None
        if ctx.needs_input_grad[0]:
            previous = torch.cat([torch.zeros_like(h[..., :1, :]), h[..., :-1, :]], dim=-2)  # h_{t-1}, h_{-1} = 0
            grad_a = (grad_b * previous.conj()).sum_to_size(a.shape)
        return grad_a, grad_b


def linear_scan(a: torch.Tensor, b: torch.Tensor, initial: torch.Tensor | None = None) -> torch.Tensor:
    """All states h_t (..., T, S) of h_t = a_t * h_{t-1} + b_t, from h_{-1} = `initial` (..., S) or zeros.

    a: the decays, (..., T, S), or (..., 1, S) or (S,) when the same at every step; b: the inputs (..., T, S).
    Real or complex; a and b are promoted to a common dtype.
    """
    dtype = torch.promote_types(a.dtype, b.dtype)
    a, b = a.to(dtype), b.to(dtype)
    if a.dim() == 1:
        a = a.unsqueeze(0)  # (1, S): the same decay at every step
    b = b.expand(torch.broadcast_shapes(a.shape, b.shape))  # one input per state and step
    if initial is not None:  # h_0 = a_0 h_{-1} + b_0: the initial state enters as part of the first input
        first = b[..., :1, :] + a[..., :1, :] * initial.to(dtype).unsqueeze(-2)
        b = torch.cat([first, b[..., 1:, :]], dim=-2)
    return _LinearScan.apply(a, b)


def linear_recurrence_loop(a: torch.Tensor, b: torch.Tensor, initial: torch.Tensor | None = None) -> torch.Tensor:
    """The same states, one step at a time with plain autograd: the oracle the scan is tested against."""
    dtype = torch.promote_types(a.dtype, b.dtype)
    a, b = a.to(dtype), b.to(dtype)
    if a.dim() == 1:
        a = a.unsqueeze(0)
    h = torch.zeros_like(b[..., 0, :]) if initial is None else initial.to(dtype)
    states = []
    for t in range(b.shape[-2]):
        h = a[..., 0 if a.shape[-2] == 1 else t, :] * h + b[..., t, :]
        states.append(h)
    return torch.stack(states, dim=-2)
