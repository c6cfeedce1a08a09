"""The restricted uRNN's recurrence on the CPU: per step, torch's batched FFTs and a few compiled kernels (numba)
that each do in one pass over a batch row what torch does in several small ops (reflection, permutation, diagonal,
input, modReLU; and in the backward, the adjoints with the factors' gradients).

The same mathematics as models/operator_recurrence.py with models/urnn.py's `RestrictedUnitary`, which stay the
reference and the path on other devices. Forward, per step (W = D3 R2 F^-1 D2 Pi R1 F D1):
    x1 = F (d1 * h_{t-1});  x3 = Pi (x1 - a1 v1), a1 = c1^T x1;  x4 = F^-1 (d2 * x3)
    z_t = u_t + d3 * (x4 - a2 v2), a2 = c2^T x4;  h_t = sigma_eps(z_t, b)  (scuRNN eq. (5))
The forward keeps x1, a1 and x4 of every step for the factors' gradients when one is wanted (two more (T, B, n)
arrays, in place of two FFTs per step to recompute them); evaluation keeps one step's. The backward writes dL/dz_t
over z_t (so it runs once per forward), pulls dL/dz_t back through W^H (two FFTs) and adds dL/d(factor) per batch row,
in PyTorch's convention for complex gradients (models/operator_recurrence.py): through y = d * x,
dL/dd = conj(x) G; through y = x - (c^T x) v, dL/dv = -conj(a) G, dL/dc = -(v^H G) conj(x), dL/dx = G - conj(c) v^H G.
"""

from __future__ import annotations

import numba
import numpy as np
import torch

from ortholab.models.backward_limits import refuse_create_graph, refuse_second_backward
from ortholab.models.compiled import OPTIONS, as_array, match_torch_threads, real_scalar
from ortholab.models.complex_recurrence import MODRELU_EPS
from ortholab.models.operator_recurrence import gradient_as_complex, parameter_gradients


@numba.njit(**OPTIONS)
def _scale(x, d, out):  # pragma: no cover (compiled)
    for i in numba.prange(x.shape[0]):
        for j in range(x.shape[1]):
            out[i, j] = d[j] * x[i, j]


@numba.njit(**OPTIONS)
def _reflect_permute_scale(x1, v, c, permutation, d, a, out):  # pragma: no cover (compiled)
    """out = d * Pi (x1 - a v) with a = c^T x1 per row, kept in `a`."""
    for i in numba.prange(x1.shape[0]):
        acc = x1[i, 0] * 0
        for k in range(x1.shape[1]):
            acc += c[k] * x1[i, k]
        a[i] = acc
        for j in range(x1.shape[1]):
            p = permutation[j]
            out[i, j] = d[j] * (x1[i, p] - acc * v[p])


@numba.njit(**OPTIONS)
def _reflect_input_modrelu(
    x4, v, c, d, u, t, b, eps, offsets, has_offsets, z_t, h, d_next, next_in
):  # pragma: no cover (compiled)
    """z_t = u_t + d * (x4 - a v), a = c^T x4; h_t = sigma_eps(z_t, b) (+ offsets_t); next_in = d_next * h_t."""
    zero = eps - eps
    for i in numba.prange(x4.shape[0]):
        acc = x4[i, 0] * 0
        for k in range(x4.shape[1]):
            acc += c[k] * x4[i, k]
        for j in range(x4.shape[1]):
            zj = u[t, i, j] + d[j] * (x4[i, j] - acc * v[j])
            r = np.sqrt(zj.real * zj.real + zj.imag * zj.imag + eps)
            s = r + b[j]
            hj = zj * (s / (r + eps) if s > zero else zero)  # eq. (5): z relu(r + b) / (r + eps)
            if has_offsets:
                hj += offsets[t, i, j]
            z_t[i, j] = zj
            h[t, i, j] = hj
            next_in[i, j] = d_next[j] * hj


@numba.njit(**OPTIONS)
def _modrelu_backward(z, t, carry, b, eps, grad_b):  # pragma: no cover (compiled)
    """dL/dz_t over z_t from dL/dh_t (`carry`): sigma_eps's real 2x2 Jacobian s I + s'(r)/r z z^T,
    s'(r) = (eps - b) / (r + eps)^2; dL/db added per row."""
    zero, one = eps - eps, eps / eps
    for i in numba.prange(carry.shape[0]):
        for j in range(carry.shape[1]):
            zj, cj = z[t, i, j], carry[i, j]
            r = np.sqrt(zj.real * zj.real + zj.imag * zj.imag + eps)
            a = r + b[j]
            inverse = one / (r + eps) if a > zero else zero
            along = zj.real * cj.real + zj.imag * cj.imag  # z . dL/dh_t
            grad_b[i, j] += along * inverse
            z[t, i, j] = cj * (a * inverse) + zj * (along * inverse * inverse * (eps - b[j]) / r)


@numba.njit(**OPTIONS)
def _last_factors_adjoint(g, t, x4, v, c, d, grad_d, grad_v, grad_c, out):  # pragma: no cover (compiled)
    """out = R2^H D3^H g for g = dL/dz_t, adding dL/dd3, dL/dv2, dL/dc2 (per row) from x4 = x4_t."""
    for i in numba.prange(x4.shape[0]):
        n = x4.shape[1]
        a = x4[i, 0] * 0
        for k in range(n):
            a += c[k] * x4[i, k]
        q = a * 0
        for j in range(n):
            gj = g[t, i, j]
            grad_d[i, j] += np.conj(x4[i, j] - a * v[j]) * gj
            gj = gj * np.conj(d[j])
            out[i, j] = gj
            q += np.conj(v[j]) * gj
        conj_a = np.conj(a)
        for j in range(n):
            o = out[i, j]
            grad_v[i, j] -= conj_a * o
            grad_c[i, j] -= q * np.conj(x4[i, j])
            out[i, j] = o - q * np.conj(c[j])


@numba.njit(**OPTIONS)
def _middle_factors_adjoint(
    g, x1, a, v, c, permutation, inverse, d, grad_d, grad_v, grad_c, out
):  # pragma: no cover (compiled)
    """out = R1^H Pi^T D2^H g for g = dL/d(D2 x3) (dL/dx4 pulled back through F^-1), adding dL/dd2, dL/dv1,
    dL/dc1 per row, from x1 = x1_t and a = a1_t."""
    for i in numba.prange(g.shape[0]):
        n = g.shape[1]
        for j in range(n):  # x3 = Pi (x1 - a v)
            p = permutation[j]
            grad_d[i, j] += np.conj(x1[i, p] - a[i] * v[p]) * g[i, j]
        q = g[i, 0] * 0
        for j in range(n):
            p = inverse[j]
            gj = g[i, p] * np.conj(d[p])  # Pi^T D2^H
            out[i, j] = gj
            q += np.conj(v[j]) * gj
        conj_a = np.conj(a[i])
        for j in range(n):
            o = out[i, j]
            grad_v[i, j] -= conj_a * o
            grad_c[i, j] -= q * np.conj(x1[i, j])
            out[i, j] = o - q * np.conj(c[j])


@numba.njit(**OPTIONS)
def _first_factor_adjoint(g, previous, d, grad_d, grad_h, t, carry):  # pragma: no cover (compiled)
    """dL/dh_{t-1} = D1^H g + direct, adding dL/dd1 per row."""
    for i in numba.prange(g.shape[0]):
        for j in range(g.shape[1]):
            gj = g[i, j]
            grad_d[i, j] += np.conj(previous[i, j]) * gj
            carry[i, j] = gj * np.conj(d[j]) + grad_h[t - 1, i, j] if t > 0 else gj * np.conj(d[j])


def _factors(operator, params) -> list[np.ndarray]:
    d, v, c = operator.prepare(*params)[:3]
    return [as_array(f) for f in (d, v, c)]


class _URNNRecurrence(torch.autograd.Function):
    @staticmethod
    def forward(ctx, operator, keep_tape, u, b, h0, offsets, *params):
        match_torch_threads()
        d, v, c = _factors(operator, params)
        permutation = as_array(operator.permutation)
        eps = real_scalar(as_array(b), MODRELU_EPS)
        h = torch.empty_like(u)
        # z, x1, x4 (and a1) of every step for the backward; without one (evaluation), one step's, reused
        steps = u.shape if keep_tape else (1, *u.shape[1:])
        z, x1, x4 = (u.new_empty(steps) for _ in range(3))
        h0 = h0.contiguous()
        step_in, x3 = torch.empty_like(h0), torch.empty_like(h0)
        a1 = u.new_empty(steps[:2])
        arrays = [as_array(x) for x in (u, z, h, step_in, x1, x3, x4, a1, b)]
        u_, z_, h_, step_in_, x1_, x3_, x4_, a1_, b_ = arrays
        offsets_ = as_array(u.new_zeros(1, 1, 1) if offsets is None else offsets)
        _scale(as_array(h0), d[0], step_in_)
        for t in range(u.shape[0]):
            k = t if keep_tape else 0
            torch.fft.fft(step_in, norm="ortho", out=x1[k])  # F D1 h_{t-1}
            _reflect_permute_scale(x1_[k], v[0], c[0], permutation, d[1], a1_[k], x3_)  # D2 Pi R1
            torch.fft.ifft(x3, norm="ortho", out=x4[k])  # F^-1
            _reflect_input_modrelu(
                x4_[k], v[1], c[1], d[2], u_, t, b_, eps, offsets_, offsets is not None, z_[k], h_, d[0], step_in_
            )  # D3 R2, + U x_t, modReLU, and D1 h_t for the next step
        if keep_tape:
            ctx.operator = operator
            ctx.save_for_backward(b, h0, z, h, x1, a1, x4, *params)
        return torch.view_as_real(h).flatten(-2)

    @staticmethod
    def backward(ctx, grad_features):
        refuse_create_graph("uRNN recurrence", "models/urnn_kernels.py")
        refuse_second_backward(ctx, "uRNN", "models/urnn_kernels.py")
        match_torch_threads()
        operator = ctx.operator
        b, h0, z, h, x1, a1, x4, *params = ctx.saved_tensors
        d, v, c = _factors(operator, params)
        permutation, inverse = as_array(operator.permutation), as_array(operator.inverse)
        eps = real_scalar(as_array(b), MODRELU_EPS)
        grad_h = gradient_as_complex(grad_features)
        wanted = [i for i in range(len(params)) if ctx.needs_input_grad[6 + i]]
        want_total = ctx.needs_input_grad[5]
        steps, batch, n = z.shape
        grad_b = torch.zeros_like(z.real[0])
        grad_d, grad_v, grad_c = (z.new_zeros(k, batch, n) for k in (3, 2, 2))  # per batch row
        total = torch.empty_like(z) if want_total else None
        carry = grad_h[-1].clone()
        g, g2 = torch.empty_like(carry), torch.empty_like(carry)
        z_, h_, h0_, x1_, a1_, x4_, grad_h_, grad_b_, b_ = (
            as_array(x) for x in (z, h, h0, x1, a1, x4, grad_h, grad_b, b)
        )
        grad_d_, grad_v_, grad_c_ = (as_array(x) for x in (grad_d, grad_v, grad_c))
        carry_, g_, g2_ = (as_array(x) for x in (carry, g, g2))
        for t in range(steps - 1, -1, -1):
            if want_total:
                total[t] = carry
            _modrelu_backward(z_, t, carry_, b_, eps, grad_b_)  # dL/dz_t in z_t's place
            _last_factors_adjoint(z_, t, x4_[t], v[1], c[1], d[2], grad_d_[2], grad_v_[1], grad_c_[1], g_)
            torch.fft.fft(g, norm="ortho", out=g2)  # (F^-1)^H = F
            _middle_factors_adjoint(
                g2_, x1_[t], a1_[t], v[0], c[0], permutation, inverse, d[1], grad_d_[1], grad_v_[0], grad_c_[0], g_
            )
            torch.fft.ifft(g, norm="ortho", out=g2)  # F^H = F^-1
            _first_factor_adjoint(g2_, h_[t - 1] if t else h0_, d[0], grad_d_[0], grad_h_, t, carry_)
        factor_grads = [x.sum(dim=1) for x in (grad_d, grad_v, grad_c)]  # summed over the rows
        grad_params = parameter_gradients(operator, params, wanted, factor_grads)  # through `prepare`, once
        return None, None, z, grad_b.sum(dim=0), carry, total, *grad_params


def urnn_recurrence_features(
    operator,
    u: torch.Tensor,
    b: torch.Tensor,
    h0: torch.Tensor,
    params: tuple[torch.Tensor, ...],
    offsets: torch.Tensor | None = None,
) -> torch.Tensor:
    """The uRNN recurrence's states as interleaved real features (T, B, 2n), by the compiled kernels;
    `operator` a `RestrictedUnitary`, the other arguments as `operator_recurrence_features`. Where no gradient is
    wanted (evaluation), the forward keeps one step's intermediates instead of every step's: 2 (T, B, n) arrays
    (u and h) in place of 5."""
    keep_tape = torch.is_grad_enabled() and any(x.requires_grad for x in (u, b, h0, offsets, *params) if x is not None)
    return _URNNRecurrence.apply(operator, keep_tape, u, b, h0, offsets, *params)
