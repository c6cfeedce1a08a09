"""The Shuffling RNN recurrence h_t = ReLU(roll(h_{t-1}, shift) + b_t) over a whole sequence, with a hand-written BPTT.

roll(h, 1)[i] = h[i - 1] (torch.roll(h, 1, -1), the official SRNN code's W_p); shift = -1 is the paper's eq. (4)
matrix. The input terms b_t = beta(x_t) are computed for all steps before; only the shift-add-ReLU loops. The
backward pass is the "diagonal walk" of the official CUDA kernel (srnn-exprnn-facts 1.3):
dL/dz_t = (dL/dh_t + roll(dL/dz_{t+1}, -shift)) * 1[h_t > 0], with dL/db_t = dL/dz_t and
dL/dh_0 = roll(dL/dz_1, -shift). Only the hidden states are saved (ReLU's derivative is 1[h > 0]).
"""

from __future__ import annotations

from typing import Literal

import torch

from ortholab.models.backward_limits import refuse_create_graph
from ortholab.models.choices import checks_choices

Shift = Literal[1, -1]  # +1: the official code's roll; -1: the paper's eq. 4 (SRNN's `shift` option)


def _shift_add_(out: torch.Tensor, h: torch.Tensor, b: torch.Tensor, shift: int) -> torch.Tensor:
    """out = roll(h, shift, -1) + b, written into `out` without a temporary (shift is +1 or -1)."""
    if shift == 1:
        torch.add(h[:, :-1], b[:, 1:], out=out[:, 1:])
        torch.add(h[:, -1:], b[:, :1], out=out[:, :1])
    else:
        torch.add(h[:, 1:], b[:, :-1], out=out[:, :-1])
        torch.add(h[:, :1], b[:, -1:], out=out[:, -1:])
    return out


class _ShiftReLURecurrence(torch.autograd.Function):
    @staticmethod
    def forward(ctx, b, h0, offsets, shift: int):
        # b: (T, B, n) input terms beta(x_t); h0: (B, n) initial state; offsets: (T, B, n) or None
        h = torch.empty_like(b)
        prev = h0
        for t, (b_t, h_t) in enumerate(zip(b.unbind(0), h.unbind(0))):
            _shift_add_(h_t, prev, b_t, shift).relu_()  # h_t = ReLU(W_p h_{t-1} + beta(x_t)), eq. (3)
            if offsets is not None:
                h_t.add_(offsets[t])
            prev = h_t
        ctx.shift = shift
        ctx.save_for_backward(h, offsets)
        return h

    @staticmethod
    def backward(ctx, grad_h):
        refuse_create_graph("SRNN recurrence", "models/shift_recurrence.py")
        h, offsets = ctx.saved_tensors
        grad_h = grad_h.contiguous()
        active = ((h if offsets is None else h - offsets) > 0).to(h.dtype)  # ReLU' for every step at once
        grad_z = torch.empty_like(h)
        want_total = ctx.needs_input_grad[2]
        total = torch.empty_like(h) if want_total else grad_z  # dL/dh_t through all later steps
        last = h.shape[0] - 1
        total[last].copy_(grad_h[last])
        torch.mul(total[last], active[last], out=grad_z[last])
        for t in range(last, 0, -1):
            # dL/dh_{t-1} = direct + W_p^T dL/dz_t (W_p^T: roll by -shift); dL/dz_{t-1} keeps it where active
            _shift_add_(total[t - 1], grad_z[t], grad_h[t - 1], -ctx.shift)
            torch.mul(total[t - 1], active[t - 1], out=grad_z[t - 1])
        grad_h0 = torch.roll(grad_z[0], -ctx.shift, -1)
        return grad_z, grad_h0, (total if want_total else None), None


@checks_choices(key_prefix="shift_relu_recurrence: ")
def shift_relu_recurrence(
    b: torch.Tensor, h0: torch.Tensor, shift: Shift = 1, offsets: torch.Tensor | None = None
) -> torch.Tensor:
    """All hidden states (T, B, n) of h_t = ReLU(roll(h_{t-1}, shift) + b_t) [+ offsets_t] from b (T, B, n), h0 (B, n).

    `offsets` are added to every h_t inside the recurrence: their gradient is the total dL/dh_t through all
    later steps, which the gradient-norm probe records.
    """
    return _ShiftReLURecurrence.apply(b, h0, offsets, shift)


def shift_relu_recurrence_reference(b, h0, shift: int = 1, offsets=None):
    """The same recurrence with plain autograd and torch.roll: the oracle the fused version is tested against."""
    prev, out = h0, []
    for t, b_t in enumerate(b.unbind(0)):
        prev = torch.relu(torch.roll(prev, shift, -1) + b_t)
        if offsets is not None:
            prev = prev + offsets[t]
        out.append(prev)
    return torch.stack(out)
