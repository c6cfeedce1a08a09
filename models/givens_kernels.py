"""EURNN's rotation-layer recurrence on the CPU as two compiled loops (numba): the whole sequence forward, and its
BPTT, each batch row on a thread of its own (rows never mix: W acts on each row alone).

The same mathematics as models/operator_recurrence.py with models/eurnn.py's `GivensLayers`, which stay the
reference and the path on other devices: per step, F_k x = c1_k * x + c2_k * x[partner_k] for k = 1..L, then
z_t = u_t + d * x and h_t = sigma(z_t, b) (a `ModReLU` of models/complex_recurrence.py). The backward recomputes
the layers' inputs from h_{t-1}, writes dL/dz_t over z_t (so, as there, it runs once per forward), and adds
dL/dc1, dL/dc2, dL/dd per batch row. In torch each step is some twenty small kernels over (B, n) arrays, forward
and backward; here a row's state stays in the cache for all T steps. Measured by `ortholab bench --families
eurnn` (docs/benchmarks.md).
"""

from __future__ import annotations

import numba
import numpy as np
import torch

from ortholab.models.backward_limits import refuse_create_graph, refuse_second_backward
from ortholab.models.compiled import OPTIONS, as_array, match_torch_threads, real_scalar
from ortholab.models.complex_recurrence import SCURNN_MODRELU, ModReLU
from ortholab.models.operator_recurrence import gradient_as_complex, parameter_gradients


@numba.njit(**OPTIONS)
def _forward(
    u, h0, c1, c2, d, partner, b, root, numerator, denominator, offsets, has_offsets, z, h
):  # pragma: no cover (compiled)
    steps, batch, n = u.shape
    zero = root - root
    for i in numba.prange(batch):
        x = h0[i].copy()
        y = np.empty_like(x)
        for t in range(steps):
            for k in range(c1.shape[0]):  # F_k x = c1_k * x + c2_k * x[partner_k]
                for j in range(n):
                    y[j] = c1[k, j] * x[j] + c2[k, j] * x[partner[k, j]]
                x, y = y, x
            for j in range(n):
                zj = u[t, i, j] + d[j] * x[j]  # z_t = u_t + D F_L ... F_1 h_{t-1}
                r = np.sqrt(zj.real * zj.real + zj.imag * zj.imag + root)
                a = r + numerator + b[j]
                hj = zj * (a / (r + denominator) if a > zero else zero)  # z relu(r + num + b) / (r + den)
                if has_offsets:
                    hj += offsets[t, i, j]
                z[t, i, j] = zj
                h[t, i, j] = hj
                x[j] = hj


@numba.njit(**OPTIONS)
def _backward(
    z,
    h,
    h0,
    grad_h,
    c1,
    c2,
    d,
    partner,
    b,
    root,
    numerator,
    denominator,
    want_params,
    want_total,
    grad_b,
    grad_c1,
    grad_c2,
    grad_d,
    total,
    grad_h0,
):  # pragma: no cover (compiled)
    steps, batch, n = z.shape
    layers = c1.shape[0]
    zero, one = root - root, denominator / denominator
    for i in numba.prange(batch):
        carry = grad_h[steps - 1, i].copy()  # dL/dh_t, total
        g = np.empty_like(carry)
        scratch = np.empty_like(carry)
        inputs = np.empty((layers + 1, n), dtype=carry.dtype)  # the layers' inputs at h_{t-1}, then W's last factor's
        for t in range(steps - 1, -1, -1):
            if want_total:
                total[t, i] = carry
            for j in range(n):  # sigma's real 2x2 Jacobian: s I + s'(r)/r z z^T, s'(r) = (den - num - b) / (r + den)^2
                zj, cj = z[t, i, j], carry[j]
                r = np.sqrt(zj.real * zj.real + zj.imag * zj.imag + root)
                a = r + numerator + b[j]
                inverse = one / (r + denominator) if a > zero else zero
                along = zj.real * cj.real + zj.imag * cj.imag  # z . dL/dh_t
                grad_b[i, j] += along * inverse
                radial = along * inverse * inverse * (denominator - numerator - b[j]) / r if r > zero else zero
                z[t, i, j] = cj * (a * inverse) + zj * radial  # dL/dz_t (the z z^T part is 0 at z = 0)
            if want_params:  # the factors' inputs, for dL/dc = conj(input) dL/d(output) per row
                inputs[0] = h[t - 1, i] if t > 0 else h0[i]
                for k in range(layers):
                    for j in range(n):
                        inputs[k + 1, j] = c1[k, j] * inputs[k, j] + c2[k, j] * inputs[k, partner[k, j]]
                for j in range(n):
                    grad_d[i, j] += np.conj(inputs[layers, j]) * z[t, i, j]
            for j in range(n):
                g[j] = z[t, i, j] * np.conj(d[j])  # D^H dL/dz_t
            for k in range(layers - 1, -1, -1):  # F_k^H g = conj(c1_k) g + (conj(c2_k) g)[partner_k]
                if want_params:
                    for j in range(n):
                        grad_c1[k, i, j] += np.conj(inputs[k, j]) * g[j]
                        grad_c2[k, i, j] += np.conj(inputs[k, partner[k, j]]) * g[j]
                for j in range(n):
                    p = partner[k, j]
                    scratch[j] = np.conj(c1[k, j]) * g[j] + np.conj(c2[k, p]) * g[p]
                g, scratch = scratch, g
            for j in range(n):  # dL/dh_{t-1} = direct + W^H dL/dz_t
                carry[j] = g[j] + grad_h[t - 1, i, j] if t > 0 else g[j]
        grad_h0[i] = carry


class _GivensRecurrence(torch.autograd.Function):
    @staticmethod
    def forward(ctx, operator, modrelu, u, b, h0, offsets, *params):
        match_torch_threads()
        c1, c2, d = operator.prepare(*params)[:3]
        z, h = torch.empty_like(u), torch.empty_like(u)
        h0 = h0.contiguous()
        offsets_ = as_array(u.new_zeros(1, 1, 1) if offsets is None else offsets)
        _forward(
            *map(as_array, (u, h0, c1, c2, d, operator.partner, b)),
            *_constants(modrelu, b),
            offsets_,
            offsets is not None,
            as_array(z),
            as_array(h),
        )
        ctx.operator, ctx.modrelu = operator, modrelu
        ctx.save_for_backward(b, h0, z, h, *params)
        return torch.view_as_real(h).flatten(-2)

    @staticmethod
    def backward(ctx, grad_features):
        refuse_create_graph("EURNN recurrence", "models/givens_kernels.py")
        refuse_second_backward(ctx, "EURNN", "models/givens_kernels.py")
        match_torch_threads()
        operator = ctx.operator
        b, h0, z, h, *params = ctx.saved_tensors
        c1, c2, d = operator.prepare(*params)[:3]
        grad_h = gradient_as_complex(grad_features)
        wanted = [i for i in range(len(params)) if ctx.needs_input_grad[6 + i]]
        want_total = ctx.needs_input_grad[5]
        batch = z.shape[1]
        grad_b = torch.zeros_like(z.real[0])
        grad_c1, grad_c2 = (c.new_zeros(c.shape[0], batch, c.shape[1]) for c in (c1, c2))
        grad_d = d.new_zeros(batch, d.shape[0])
        total = torch.empty_like(z) if want_total else z.new_zeros(1, 1, 1)
        grad_h0 = torch.empty_like(h0)
        _backward(
            *map(as_array, (z, h, h0, grad_h, c1, c2, d, operator.partner, b)),
            *_constants(ctx.modrelu, b),
            bool(wanted),
            want_total,
            *map(as_array, (grad_b, grad_c1, grad_c2, grad_d, total, grad_h0)),
        )
        factor_grads = operator.factor_gradients([grad_c1, grad_c2, grad_d])  # summed over the rows
        grad_params = parameter_gradients(operator, params, wanted, factor_grads)  # through `prepare`, once
        return None, None, z, grad_b.sum(dim=0), grad_h0, total if want_total else None, *grad_params


def _constants(modrelu: ModReLU, b: torch.Tensor) -> tuple:
    """The modReLU's (root, numerator, denominator) eps in b's precision, as the kernels take them."""
    array = as_array(b)
    return tuple(real_scalar(array, eps) for eps in (modrelu.root_eps, modrelu.numerator_eps, modrelu.denominator_eps))


def givens_recurrence_features(
    operator,
    u: torch.Tensor,
    b: torch.Tensor,
    h0: torch.Tensor,
    params: tuple[torch.Tensor, ...],
    offsets: torch.Tensor | None = None,
    modrelu: ModReLU = SCURNN_MODRELU,
) -> torch.Tensor:
    """The rotation-layer recurrence's states as interleaved real features (T, B, 2n), by the compiled loops;
    `operator` a `GivensLayers`, the other arguments as `operator_recurrence_features`."""
    return _GivensRecurrence.apply(operator, modrelu, u, b, h0, offsets, *params)
