"""The recurrence h_t = sigma(u_t + W h_{t-1}) over a whole sequence, for a pointwise sigma, with a hand-written BPTT.

sigma is leaky ReLU (slope a) or tanh; both have a derivative that is a function of the output h alone
(leaky ReLU: 1 where h > 0, a elsewhere; tanh: 1 - h^2), so only the hidden states are saved. As in
models/recurrence.py, only the sequential part loops in Python: u (input projection plus bias) is computed
for all steps before, and dL/dW is one matrix product over all steps after the backward loop.
"""

from __future__ import annotations

from typing import Literal

import torch

from ortholab.models.backward_limits import refuse_create_graph
from ortholab.models.choices import checks_choices
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
        wt = w.t()
        h = torch.empty_like(u)
        prev = h0
        for t, (u_t, h_t) in enumerate(zip(u.unbind(0), h.unbind(0))):
            _activate_(torch.addmm(u_t, prev, wt, out=h_t), activation, slope)  # h_t = sigma(u_t + W h_{t-1})
            if offsets is not None:
                h_t.add_(offsets[t])
            prev = h_t
        ctx.activation, ctx.slope = activation, slope
        ctx.save_for_backward(w, h0, h, offsets)
        return h

    @staticmethod
    def backward(ctx, grad_h):
        refuse_create_graph("oRNN recurrence", "models/pointwise_recurrence.py")
        w, h0, h, offsets = ctx.saved_tensors
        grad_h = grad_h.contiguous()
        output = h if offsets is None else h - offsets  # sigma's own output
        slopes = _derivative(output, ctx.activation, ctx.slope)  # sigma'(z_t) for every step at once
        grad_z = torch.empty_like(h)
        want_total = ctx.needs_input_grad[3]
        total = torch.empty_like(h) if want_total else grad_z  # dL/dh_t through all later steps
        last = h.shape[0] - 1
        total[last].copy_(grad_h[last])
        torch.mul(total[last], slopes[last], out=grad_z[last])
        for t in range(last, 0, -1):
            # dL/dh_{t-1} = direct + W^T dL/dz_t since z_t = u_t + W h_{t-1}; dL/dz_{t-1} = that * sigma'(z_{t-1})
            torch.addmm(grad_h[t - 1], grad_z[t], w, out=total[t - 1])
            torch.mul(total[t - 1], slopes[t - 1], out=grad_z[t - 1])
        n = w.shape[0]
        grad_w = grad_z[1:].reshape(-1, n).t() @ h[:-1].reshape(-1, n)  # sum_t dz_t h_{t-1}^T
        grad_w.addmm_(grad_z[0].t(), h0)
        grad_h0 = grad_z[0] @ w
        return grad_z, grad_w, grad_h0, (total if want_total else None), None, None


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
