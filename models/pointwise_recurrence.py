"""The recurrence h_t = sigma(u_t + W h_{t-1}) over a whole sequence, for a pointwise sigma, with a hand-written BPTT.

sigma is leaky ReLU (slope a) or tanh; both have a derivative that is a function of the output h alone
(leaky ReLU: 1 where h > 0, a elsewhere; tanh: 1 - h^2), so only the hidden states are saved; the forward and
backward loops are models/through_time.py's, shared with the modReLU recurrence.
"""

from __future__ import annotations

from typing import Literal

import torch

from ortholab.models.backward_limits import refuse_create_graph
from ortholab.models.choices import checks_choices
from ortholab.models.through_time import backward_through_time, forward_through_time
from ortholab.models.triton_recurrence import fused_available, fused_leaky_relu_recurrence

Activation = Literal["leaky_relu", "tanh"]  # sigma: oRNN's `activation` option takes its choices from here


def _activate_(z: torch.Tensor, activation: str, slope: float) -> torch.Tensor:
    """sigma(z) in place."""
    if activation == "leaky_relu":
        return torch.nn.functional.leaky_relu_(z, slope)
    return z.tanh_()


def _derivative(h: torch.Tensor, activation: str, slope: float) -> torch.Tensor:
    """sigma'(z) from h = sigma(z), for every step at once."""
    if activation == "leaky_relu":
        return torch.full_like(h, slope).masked_fill_(h > 0, 1.0)  # in h's dtype: 0.1 exact to float64
    return 1 - h * h


class _PointwiseRecurrence(torch.autograd.Function):
    @staticmethod
    def forward(ctx, u, w, h0, offsets, activation: str, slope: float):
        # u: (T, B, n) input terms; w: (n, n) recurrent matrix; h0: (B, n); offsets: (T, B, n) or None
        h = forward_through_time(u, w, h0, offsets, lambda z: _activate_(z, activation, slope))
        ctx.activation, ctx.slope = activation, slope
        ctx.save_for_backward(w, h0, h, offsets)
        return h

    @staticmethod
    def backward(ctx, grad_h):
        refuse_create_graph("oRNN recurrence", "models/pointwise_recurrence.py")
        w, h0, h, offsets = ctx.saved_tensors
        output = h if offsets is None else h - offsets  # sigma's own output
        slopes = _derivative(output, ctx.activation, ctx.slope)  # sigma'(z_t) for every step at once
        grad_z, grad_w, grad_h0, total = backward_through_time(grad_h, w, h0, h, slopes, ctx.needs_input_grad[3])
        return grad_z, grad_w, grad_h0, total, None, None


@checks_choices(key_prefix="pointwise_recurrence: ")
def pointwise_recurrence(
    u: torch.Tensor,
    w: torch.Tensor,
    h0: torch.Tensor,
    activation: Activation = "leaky_relu",
    slope: float = 0.1,
    offsets: torch.Tensor | None = None,
) -> torch.Tensor:
    """All hidden states (T, B, n) of h_t = sigma(u_t + W h_{t-1}) [+ offsets_t] from u (T, B, n) and h0 (B, n).

    `offsets` are added to every h_t inside the recurrence: their gradient is the total dL/dh_t through all
    later steps, which the gradient-norm probe (scoRNN Figure 5) records.
    """
    if fused_available(u, activation):  # CUDA with Triton: one kernel launch per pass (models/triton_recurrence.py)
        return fused_leaky_relu_recurrence(u, w, h0, slope, offsets)
    return _PointwiseRecurrence.apply(u, w, h0, offsets, activation, slope)


def pointwise_recurrence_reference(u, w, h0, activation: str = "leaky_relu", slope: float = 0.1, offsets=None):
    """The same recurrence with plain autograd: the oracle the fused version is tested against."""
    sigma = (lambda z: torch.nn.functional.leaky_relu(z, slope)) if activation == "leaky_relu" else torch.tanh
    prev, out = h0, []
    for t, u_t in enumerate(u.unbind(0)):
        prev = sigma(u_t + prev @ w.t())
        if offsets is not None:
            prev = prev + offsets[t]
        out.append(prev)
    return torch.stack(out)
