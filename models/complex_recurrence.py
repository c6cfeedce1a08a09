"""The complex modReLU recurrence h_t = sigma_eps(u_t + W h_{t-1}, b) over a whole sequence, with a hand-written BPTT.

Complex vectors are real tensors laid out as [Re | Im] (2n features, the layout the readout sees), and the
complex product W h is one real product with the 2n x 2n block matrix [[Re W^T, Im W^T], [-Im W^T, Re W^T]]
(row convention: [Re h | Im h] @ M = [Re(W h) | Im(W h)]). This ran about 1.3x faster than torch's
complex dtypes here (`ortholab bench --suite scurnn-complex`).

sigma_eps (scuRNN eq. 5): h = z s(r), s(r) = relu(r + b) / (r + eps), r = sqrt(|z|^2 + eps). Its real 2x2
Jacobian per unit is s I + s'(r)/r z z^T, with s'(r) = (eps - b) / (r + eps)^2 where r + b > 0, else 0
(the Wirtinger form of the same derivative is Theorem 4); `ModReLU` below generalises the two eps to the EUNN
code's |z| + eps (EURNN's dense path). The forward pass saves z, r and s of every step;
the backward pass forms s'/r once for the whole sequence and loops only over the product with W^T.

`offsets` (optional, (T, B, 2n)) are added to every h_t inside the recurrence; their gradient is the total
dL/dh_t through all later steps, which is what the gradient-norm probe (scoRNN Figure 5) measures.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ortholab.models.backward_limits import refuse_create_graph

MODRELU_EPS = 1e-5  # the eps of scuRNN eq. (5), inside the root and in the denominator


@dataclass(frozen=True)
class ModReLU:
    """The smoothed modReLUs of the unitary-RNN codes: h = z s(m), s(m) = relu(m + numerator_eps + b) /
    (m + denominator_eps), m = sqrt(|z|^2 + root_eps).

    scuRNN eq. (5) is (eps, 0, eps); the EUNN code's z / (|z| + eps) relu(|z| + eps + b) is (0, eps, eps).
    Per unit the real 2x2 Jacobian is s I + s'(m)/m z z^T, s'(m) = (denominator_eps - numerator_eps - b) /
    (m + denominator_eps)^2 where m + numerator_eps + b > 0, else 0; its z z^T part is 0 at z = 0 (its limit).
    """

    root_eps: float
    numerator_eps: float
    denominator_eps: float

    def __post_init__(self):
        if not (self.denominator_eps > 0 and self.root_eps >= 0 and self.numerator_eps >= 0):
            raise ValueError(f"{self}: the eps must be >= 0 and denominator_eps > 0 (s divides by m, 0 at z = 0)")

    def __call__(self, z: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """sigma(z) on a complex tensor with plain autograd: the oracle of the fused recurrences."""
        m = torch.sqrt(z.real.square() + z.imag.square() + self.root_eps)
        return z * (torch.relu(m + self.numerator_eps + b) / (m + self.denominator_eps))


SCURNN_MODRELU = ModReLU(MODRELU_EPS, 0.0, MODRELU_EPS)  # scuRNN eq. (5), the fcurnn and scuRNN codes'


def eunn_modrelu(eps: float) -> ModReLU:
    """The EUNN code's modReLU (jingli9111/EUNN-tensorflow eunn.py:15-19): z / (|z| + eps) relu(|z| + eps + b)."""
    return ModReLU(0.0, eps, eps)


def real_block_matrix(w_real: torch.Tensor, w_imag: torch.Tensor) -> torch.Tensor:
    """M with [Re h | Im h] @ M = [Re(W h) | Im(W h)] for a batch of row vectors h."""
    top = torch.cat([w_real.t(), w_imag.t()], dim=1)
    return torch.cat([top, torch.cat([-w_imag.t(), w_real.t()], dim=1)], dim=0)


class _ComplexModReLURecurrence(torch.autograd.Function):
    @staticmethod
    def forward(ctx, u, w_real, w_imag, b, h0, offsets, modrelu, top_blocks_only):
        # u: (T, B, 2n) input projections [Re | Im]; w_real, w_imag: (n, n); b: (n,); h0: (B, 2n); offsets: like u
        steps, batch, width = u.shape
        n = width // 2
        m = real_block_matrix(w_real, w_imag)
        eps = torch.full((), modrelu.root_eps, dtype=u.dtype, device=u.device)  # on the device: no host copy
        z, h = torch.empty_like(u), torch.empty_like(u)
        r, s = u.new_empty(steps, batch, n), u.new_empty(steps, batch, n)  # r and s(r) of every step, for backward
        prev = h0
        for t, (u_t, z_t, h_t, r_t, s_t) in enumerate(
            zip(u.unbind(0), z.unbind(0), h.unbind(0), r.unbind(0), s.unbind(0))
        ):
            torch.addmm(u_t, prev, m, out=z_t)  # z_t = u_t + W h_{t-1}
            pair = z_t.view(batch, 2, n)
            re, im = pair.unbind(1)
            torch.sqrt(torch.addcmul(eps, re, re).addcmul_(im, im), out=r_t)  # r = sqrt(|z|^2 + eps)
            numerator = torch.add(r_t, b)
            if modrelu.numerator_eps:  # the EUNN code's relu(|z| + eps + b)
                numerator.add_(modrelu.numerator_eps)
            torch.div(numerator.relu_(), torch.add(r_t, modrelu.denominator_eps), out=s_t)  # relu(r + b) / (r + eps)
            torch.mul(pair, s_t.unsqueeze(1), out=h_t.view(batch, 2, n))
            if offsets is not None:
                h_t.add_(offsets[t])
            prev = h_t
        ctx.save_for_backward(m, b, h0, z, h, r, s)
        ctx.modrelu, ctx.top_blocks_only = modrelu, top_blocks_only
        return h

    @staticmethod
    def backward(ctx, grad_h):
        refuse_create_graph("complex modReLU recurrence of scuRNN, fcuRNN, EURNN", "models/complex_recurrence.py")
        m, b, h0, z, h, r, s = ctx.saved_tensors
        steps, batch, width = z.shape
        n = width // 2
        # for all steps at once: s'(r)/r = (eps - b) / ((r + eps)^2 r) where r + b > 0 (i.e. s > 0), else 0
        modrelu = ctx.modrelu
        active = s > 0
        denominator = r + modrelu.denominator_eps
        numerator = modrelu.denominator_eps - modrelu.numerator_eps - b
        slope = torch.where(active & (r > 0), numerator / (denominator.square() * r), 0.0)  # r = 0 only at z = 0
        pairs = z.view(steps, batch, 2, n)
        radial = pairs * slope.unsqueeze(2)  # s'(r)/r z: the z z^T part of the Jacobian
        grad_h = grad_h.contiguous()  # one copy instead of a strided read per step
        grad_z = torch.empty_like(z)
        along = torch.empty_like(r)  # z . dL/dh_t per complex unit, kept for dL/db
        # dL/dh_t through all later steps: every step's when the offsets need it, else two alternating buffers
        total = torch.empty_like(z) if ctx.needs_input_grad[5] else h0.new_empty(2, batch, width)
        mt = m.t()
        carry = grad_h[-1]
        if ctx.needs_input_grad[5]:
            total[-1].copy_(carry)
        for t in range(steps - 1, -1, -1):
            # dL/dz_t = s dL/dh_t + s'(r)/r z (z . dL/dh_t)
            gz, g = grad_z[t].view(batch, 2, n), carry.view(batch, 2, n)
            torch.sum(torch.mul(pairs[t], g, out=gz), dim=1, out=along[t])
            torch.mul(g, s[t].unsqueeze(1), out=gz).addcmul_(radial[t], along[t].unsqueeze(1))
            if t:  # dL/dh_{t-1}: direct + through z_t = u_t + W h_{t-1}
                carry = torch.addmm(
                    grad_h[t - 1], grad_z[t], mt, out=total[t - 1] if ctx.needs_input_grad[5] else total[t % 2]
                )
        grad_h0 = grad_z[0] @ mt
        grad_m = h[:-1].reshape(-1, width).t() @ grad_z[1:].reshape(-1, width)  # sum_t h_{t-1}^T dL/dz_t
        grad_m.addmm_(h0.t(), grad_z[0])
        if ctx.top_blocks_only:  # the rows of Re h_{t-1} only, as stwisdom/urnn custom_optimizers.py:63-67 reads them
            grad_w_real, grad_w_imag = grad_m[:n, :n].t(), grad_m[:n, n:].t()
        else:
            grad_w_real = (grad_m[:n, :n] + grad_m[n:, n:]).t()
            grad_w_imag = (grad_m[:n, n:] - grad_m[n:, :n]).t()
        grad_b = torch.where(active, along / denominator, 0.0).sum(dim=(0, 1))  # d s/d b = 1 / (r + eps) where active
        return (
            grad_z,
            grad_w_real,
            grad_w_imag,
            grad_b,
            grad_h0,
            (total if ctx.needs_input_grad[5] else None),
            None,
            None,
        )


def complex_modrelu_recurrence(
    u: torch.Tensor,
    w_real: torch.Tensor,
    w_imag: torch.Tensor,
    b: torch.Tensor,
    h0: torch.Tensor,
    offsets: torch.Tensor | None = None,
    modrelu: ModReLU = SCURNN_MODRELU,
    top_blocks_only: bool = False,
) -> torch.Tensor:
    """All hidden states (T, B, 2n) = [Re h_t | Im h_t] of h_t = sigma_eps(u_t + W h_{t-1}, b) [+ offsets_t],
    W = w_real + i w_imag, sigma_eps = `modrelu`. top_blocks_only: w_real and w_imag receive, in place of dL/dW,
    the top blocks of dL/dM (M the block matrix above): the part of dL/dW that flows through Re h_{t-1}, the
    gradient the full-capacity uRNN's code steps W by (models/fcurnn.py)."""
    return _ComplexModReLURecurrence.apply(u, w_real, w_imag, b, h0, offsets, modrelu, top_blocks_only)


def complex_modrelu_recurrence_reference(u, w_real, w_imag, b, h0, offsets=None, modrelu=SCURNN_MODRELU):
    """The same recurrence in torch's complex dtype with plain autograd: the oracle for the fused version."""
    n = w_real.shape[0]
    w = torch.complex(w_real, w_imag)
    prev, out = torch.complex(h0[:, :n], h0[:, n:]), []
    for t, u_t in enumerate(u.unbind(0)):
        prev = modrelu(torch.complex(u_t[:, :n], u_t[:, n:]) + prev @ w.transpose(0, 1), b)
        if offsets is not None:
            prev = prev + torch.complex(offsets[t][:, :n], offsets[t][:, n:])
        out.append(torch.cat([prev.real, prev.imag], dim=1))
    return torch.stack(out)
