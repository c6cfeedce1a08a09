"""The two loops every h_t = sigma(u_t + W h_{t-1}) recurrence shares, for a sigma whose derivative its output gives.

Forward runs the sequential part once per step (u, the input terms, are computed for all steps before); backward
is BPTT from the saved hidden states alone, with dL/dW one matrix product over all steps after its loop.
`offsets` (T, B, n), when given, are added to every h_t inside the recurrence; their gradient is the total dL/dh_t
through all later steps, which the gradient-norm probe (scoRNN Figure 5) records.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def forward_through_time(
    u: torch.Tensor,
    w: torch.Tensor,
    h0: torch.Tensor,
    offsets: torch.Tensor | None,
    activate_: Callable[[torch.Tensor], object],
) -> torch.Tensor:
    """All h_t (T, B, n): each z_t = u_t + W h_{t-1} is written into h_t, which `activate_` turns into sigma(z_t)."""
    wt = w.t()
    h = torch.empty_like(u)
    prev = h0
    for t, (u_t, h_t) in enumerate(zip(u.unbind(0), h.unbind(0))):
        activate_(torch.addmm(u_t, prev, wt, out=h_t))  # h_t = sigma(u_t + W h_{t-1})
        if offsets is not None:
            h_t.add_(offsets[t])
        prev = h_t
    return h


def backward_through_time(
    grad_h: torch.Tensor,
    w: torch.Tensor,
    h0: torch.Tensor,
    h: torch.Tensor,
    slopes: torch.Tensor,
    want_total: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """dL/dz_t (T, B, n), dL/dW, dL/dh0 and (`want_total`) dL/dh_t through later steps, from `slopes` sigma'(z_t)."""
    grad_h = grad_h.contiguous()  # one copy instead of a strided read per step
    grad_z = torch.empty_like(h)
    total = torch.empty_like(h) if want_total else grad_z  # without the probe, dL/dh_t is formed where dL/dz_t goes
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
    return grad_z, grad_w, grad_h0, (total if want_total else None)
