"""The modReLU recurrence h_t = modReLU(u_t + W h_{t-1}, b) over a whole sequence, with a hand-written BPTT.

Only the sequential part loops in Python: the input projection u = U x is computed for all steps before,
and dL/dW, dL/db are one matrix product / reduction over all steps after the backward loop. Only the hidden
states are saved: modReLU passes z exactly where its output is nonzero, and there sign(z) = sign(output), so
the outputs alone give the derivatives (d h/d z = 1 and d h/d b = sign(z) where active, 0 elsewhere).

`offsets` (optional, (T, B, n)) are added to every h_t inside the recurrence; their gradient is the total
dL/dh_t through all later steps, which is what the gradient-norm probe (scoRNN Figure 5) measures.
"""

from __future__ import annotations

import torch

from ortholab.models.backward_limits import refuse_create_graph
from ortholab.models.modrelu import modrelu
from ortholab.models.triton_recurrence import fused_available, fused_modrelu_recurrence


class _ModReLURecurrence(torch.autograd.Function):
    @staticmethod
    def forward(ctx, u, w, b, h0, offsets):
        # u: (T, B, n) input projections; w: (n, n) recurrent matrix; b: (n,) modReLU bias; h0: (B, n)
        wt = w.t()
        h = torch.empty_like(u)
        prev = h0
        for t, (u_t, h_t) in enumerate(zip(u.unbind(0), h.unbind(0))):
            z = torch.addmm(u_t, prev, wt)  # z_t = u_t + W h_{t-1}
            torch.mul(torch.sign(z), z.abs().add_(b).relu_(), out=h_t)  # modReLU, written in place
            if offsets is not None:
                h_t.add_(offsets[t])
            prev = h_t
        ctx.save_for_backward(w, h0, h, offsets)
        return h

    @staticmethod
    def backward(ctx, grad_h):
        refuse_create_graph("modReLU recurrence of scoRNN, expRNN, nnRNN", "models/recurrence.py")
        w, h0, h, offsets = ctx.saved_tensors
        grad_h = grad_h.contiguous()  # one copy instead of a strided read per step
        activation = h if offsets is None else h - offsets  # modReLU's own output
        inactive = activation == 0  # where modReLU cut z off, for every step at once
        grad_z = torch.empty_like(h)
        want_total = ctx.needs_input_grad[4]
        total = torch.empty_like(h) if want_total else grad_z  # dL/dh_t through all later steps
        last = h.shape[0] - 1
        total[last].copy_(grad_h[last])
        torch.mul(total[last], inactive[last].logical_not(), out=grad_z[last]) if want_total else grad_z[
            last
        ].masked_fill_(inactive[last], 0.0)
        for t in range(last, 0, -1):
            # dL/dh_{t-1} = direct + W^T dL/dz_t, since z_t = u_t + W h_{t-1}; dL/dz_{t-1} keeps it where active
            torch.addmm(grad_h[t - 1], grad_z[t], w, out=total[t - 1])
            if want_total:
                torch.mul(total[t - 1], inactive[t - 1].logical_not(), out=grad_z[t - 1])
            else:
                grad_z[t - 1].masked_fill_(inactive[t - 1], 0.0)
        grad_h0 = grad_z[0] @ w
        n = w.shape[0]
        grad_w = grad_z[1:].reshape(-1, n).t() @ h[:-1].reshape(-1, n)  # sum_t dz_t h_{t-1}^T
        grad_w.addmm_(grad_z[0].t(), h0)
        grad_b = torch.sign(activation).mul_(grad_z).sum(dim=(0, 1))  # d h/d b = sign(z) where active
        return grad_z, grad_w, grad_b, grad_h0, (total if want_total else None)


def modrelu_recurrence(
    u: torch.Tensor, w: torch.Tensor, b: torch.Tensor, h0: torch.Tensor, offsets: torch.Tensor | None = None
) -> torch.Tensor:
    """All hidden states (T, B, n) of h_t = modReLU(u_t + W h_{t-1}, b) [+ offsets_t] from u (T, B, n), h0 (B, n)."""
    if fused_available(u):  # CUDA with Triton: one kernel launch per pass (models/triton_recurrence.py)
        return fused_modrelu_recurrence(u, w, b, h0, offsets)
    return _ModReLURecurrence.apply(u, w, b, h0, offsets)


def modrelu_recurrence_reference(u, w, b, h0, offsets=None):
    """The same recurrence with plain autograd: the oracle the fused version is tested against."""
    prev, out = h0, []
    for t, u_t in enumerate(u.unbind(0)):
        prev = modrelu(u_t + prev @ w.t(), b)
        if offsets is not None:
            prev = prev + offsets[t]
        out.append(prev)
    return torch.stack(out)
