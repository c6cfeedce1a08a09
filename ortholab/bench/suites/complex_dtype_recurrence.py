"""scuRNN's recurrence written in torch's complex dtypes: the design alternative to the [Re | Im] real layout of
models/complex_recurrence.py, kept to time against it (`ortholab bench --suite scurnn-complex`).

The same algorithm as `complex_modrelu_recurrence` (h_t = modReLU(W h_{t-1} + U x_t), scuRNN paper Eq. 1, with the
modReLU of its Eq. 6 and the fused backward), with torch's complex gradient convention.
"""

from __future__ import annotations

import torch
from torch import nn

from ortholab.models.complex_recurrence import MODRELU_EPS
from ortholab.models.scurnn import ScuRNN


class ComplexDtypeRecurrence(torch.autograd.Function):
    """models/complex_recurrence.py's algorithm in complex dtypes: u (T, B, n) complex, w (n, n) complex,
    b (n,) real, h0 (B, n) complex."""

    @staticmethod
    def forward(ctx, u, w, b, h0):
        wt, eps = w.t(), b.new_tensor(MODRELU_EPS)
        z, h = torch.empty_like(u), torch.empty_like(u)
        r, s = b.new_empty(u.shape), b.new_empty(u.shape)
        prev = h0
        for u_t, z_t, h_t, r_t, s_t in zip(u.unbind(0), z.unbind(0), h.unbind(0), r.unbind(0), s.unbind(0)):
            torch.addmm(u_t, prev, wt, out=z_t)
            re, im = z_t.real, z_t.imag
            torch.sqrt(torch.addcmul(eps, re, re).addcmul_(im, im), out=r_t)  # r = sqrt(|z|^2 + eps)
            torch.div(torch.add(r_t, b).relu_(), torch.add(r_t, eps), out=s_t)  # modReLU's scale (Eq. 6)
            torch.mul(z_t, s_t, out=h_t)
            prev = h_t
        ctx.save_for_backward(w, b, h0, z, h, r, s)
        return h

    @staticmethod
    def backward(ctx, grad_h):
        w, b, h0, z, h, r, s = ctx.saved_tensors
        active, denominator = s > 0, r + MODRELU_EPS
        radial = z * torch.where(active, (MODRELU_EPS - b) / (denominator.square() * r), 0.0)
        grad_h, grad_z, along, wc = grad_h.contiguous(), torch.empty_like(z), torch.empty_like(r), w.conj()
        carry = grad_h[-1]
        for t in range(z.shape[0] - 1, -1, -1):  # Re(conj(z) g) = z . g in real terms
            torch.sum(
                torch.mul(torch.view_as_real(z[t]), torch.view_as_real(carry), out=torch.view_as_real(grad_z[t])),
                dim=-1,
                out=along[t],
            )
            torch.mul(carry, s[t], out=grad_z[t]).addcmul_(radial[t], along[t])
            if t:
                carry = torch.addmm(grad_h[t - 1], grad_z[t], wc)
        n = w.shape[0]
        grad_w = grad_z[1:].reshape(-1, n).t() @ h[:-1].reshape(-1, n).conj() + grad_z[0].t() @ h0.conj()
        return grad_z, grad_w, torch.where(active, along / denominator, 0.0).sum((0, 1)), grad_z[0] @ wc


class ComplexDtypeScuRNN(nn.Module):
    """`layer`'s own parameters run through the complex-dtype recurrence; the output in the layer's [Re | Im]
    layout, (B, T, 2n), so it compares with `layer(x)` entry by entry."""

    def __init__(self, layer: ScuRNN):
        super().__init__()
        self.layer = layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        layer, n = self.layer, self.layer.hidden_size
        w = layer.cayley()
        weight = torch.complex(layer.input_weight[:n], layer.input_weight[n:])
        u = torch.matmul(x.transpose(0, 1).to(weight.dtype), weight.t())
        h0 = torch.complex(layer.h0[:n], layer.h0[n:]).expand(x.shape[0], -1)
        h = ComplexDtypeRecurrence.apply(u, w, layer.bias, h0)
        return torch.cat([h.real, h.imag], dim=-1).transpose(0, 1)
