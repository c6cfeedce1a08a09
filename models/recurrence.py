"""The modReLU recurrence h_t = modReLU(u_t + W h_{t-1}, b) over a whole sequence, with a hand-written BPTT.

Only the sequential part loops in Python: the input projection u = U x is computed for all steps before,
and dL/dW, dL/db are one matrix product / reduction over all steps after the backward loop. Only the hidden
states are saved: modReLU passes z exactly where its output is nonzero, and there sign(z) = sign(output), so
the outputs alone give the derivatives (d h/d z = 1 and d h/d b = sign(z) where active, 0 elsewhere). The loops
are models/through_time.py's.

`offsets` (optional, (T, B, n)) are added to every h_t inside the recurrence; their gradient is the total
dL/dh_t through all later steps, which is what the gradient-norm probe (scoRNN Figure 5) measures.
"""

from __future__ import annotations

import torch

from ortholab.models.backward_limits import refuse_create_graph
from ortholab.models.modrelu import modrelu
from ortholab.models.through_time import backward_through_time, forward_through_time
from ortholab.models.triton_recurrence import fused_available, fused_modrelu_recurrence


class _ModReLURecurrence(torch.autograd.Function):
    @staticmethod
    def forward(ctx, u, w, b, h0, offsets):
        # u: (T, B, n) input projections; w: (n, n) recurrent matrix; b: (n,) modReLU bias; h0: (B, n)
        def modrelu_(z):  # modReLU(z, b) = sign(z) relu(|z| + b), written over z
            torch.mul(torch.sign(z), z.abs().add_(b).relu_(), out=z)

        h = forward_through_time(u, w, h0, offsets, modrelu_)
        ctx.save_for_backward(w, h0, h, offsets)
        return h

    @staticmethod
    def backward(ctx, grad_h):
        refuse_create_graph("modReLU recurrence of scoRNN, expRNN, nnRNN", "models/recurrence.py")
        w, h0, h, offsets = ctx.saved_tensors
        activation = h if offsets is None else h - offsets  # modReLU's own output
        slopes = activation.ne(0).to(h.dtype)  # d h/d z = 1 where modReLU is active, 0 where it cut z off
        grad_z, grad_w, grad_h0, total = backward_through_time(grad_h, w, h0, h, slopes, ctx.needs_input_grad[4])
        grad_b = torch.sign(activation).mul_(grad_z).sum(dim=(0, 1))  # d h/d b = sign(z) where active
        return grad_z, grad_w, grad_b, grad_h0, total


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
