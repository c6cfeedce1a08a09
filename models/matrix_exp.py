"""The exponential map onto SO(n), B = exp(A) with A = S - S^T skew-symmetric, and the initialisations of A.

expRNN (Lezcano-Casado and Martinez-Rubio, "Cheap Orthogonal Constraints in Neural Networks", ICML 2019)
trains B = exp(A) through the strictly upper entries S of A; the nnRNN (Kerg et al., NeurIPS 2019) uses the
same map for its orthogonal basis P. Only S is stored (n(n-1)/2 numbers), as models/cayley.py stores scoRNN's A.

The exponential and its exact gradient come from one eigendecomposition. A is skew, so iA is Hermitian:
iA = V diag(lam) V^H with V unitary and lam real, exp(A) = V diag(e^{-i lam}) V^H. For a normal matrix the
Frechet derivative of exp is diagonal in V's basis (Daleckii and Krein), which gives the gradient
dL/dA = Re V [(V^H G V) o conj(Phi)] V^H, Phi_jk = e^{-i(lam_j + lam_k)/2} sinc((lam_j - lam_k)/2),
the divided differences of e^{-i lam} written without a division, so equal eigenvalues need no special case.
This is the gradient torch.linalg.matrix_exp's backward computes (the Frechet derivative of exp at A^T applied
to dL/dB, the top-right block of a 2n x 2n exponential) and the official code computes with its own Pade
approximant (srnn-exprnn-facts 3.1), at a quarter to a third of the cost on the CPU, and nearer float64 in
float32 (tests/test_exprnn.py). On a GPU, matrix_exp's products are cheap and the eigensolver waits on the host,
so there skew_matrix_exp keeps torch.linalg.matrix_exp (not measured: no GPU was available).

Initialisations of A (the official expRNN code's initialization.py, srnn-exprnn-facts 3.2): 2x2 blocks on the
diagonal, i.e. the value s_i at the first-superdiagonal positions (0, 1), (2, 3), ... and -s_i below:
- 'henaff': s_i ~ U(-pi, pi), the rotation angles of B's blocks (the code at HEAD);
- 'henaff_icml': s_i ~ U(-pi, 0) (the ICML-era code, copied into the nnRNN and SRNN repositories);
- 'cayley': s_i = -tan(t_i / 2), t_i ~ U(0, pi/2) (the entries whose Cayley transform has angles t_i);
- 'random': A = log(Q) for a Haar-random Q in SO(n) (the nnRNN code's random_orthogonal_init).
"""
from __future__ import annotations

import math

import torch

from models.cayley import skew_from_upper

SKEW_INITS = ("henaff", "henaff_icml", "cayley", "random")


def _real_times(real: torch.Tensor, vectors: torch.Tensor) -> torch.Tensor:
    """G V for a real G and a contiguous complex V, as one real product with V's interleaved real view."""
    n = vectors.shape[1]
    product = real @ torch.view_as_real(vectors).reshape(vectors.shape[0], 2 * n)
    return torch.view_as_complex(product.reshape(real.shape[0], n, 2))


def _real_part_of_product(left: torch.Tensor, vectors: torch.Tensor) -> torch.Tensor:
    """Re(P V^H) for contiguous complex P, V: sum_k Re P_ik Re V_jk + Im P_ik Im V_jk, one real product."""
    rows, n = left.shape
    interleaved = torch.view_as_real(vectors).reshape(vectors.shape[0], 2 * n)
    return torch.view_as_real(left).reshape(rows, 2 * n) @ interleaved.t()


class _SkewExponential(torch.autograd.Function):
    """exp(A) for a real skew-symmetric A, forward and backward from the eigendecomposition of iA."""

    @staticmethod
    def forward(ctx, skew: torch.Tensor) -> torch.Tensor:
        with torch.autocast(skew.device.type, enabled=False):  # bf16 autocast would round the products below
            eigenvalues, vectors = torch.linalg.eigh(torch.complex(torch.zeros_like(skew), skew))  # iA = V lam V^H
            vectors = vectors.contiguous()
            ctx.save_for_backward(eigenvalues, vectors)
            # exp(A) = I + Re V diag(e^{-i lam} - 1) V^H: V's round-off scales with |e^{-i lam} - 1|, so a small A
            # (dtriv's, right after a re-basing) gives a B as orthogonal as a Pade approximant's
            expm1 = torch.complex(-2 * torch.sin(eigenvalues / 2) ** 2, -torch.sin(eigenvalues))  # e^{-i lam} - 1
            b = _real_part_of_product(vectors * expm1, vectors)
            b.diagonal().add_(1)
            return b

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        with torch.autocast(grad.device.type, enabled=False):
            return _exp_gradient(*ctx.saved_tensors, grad)


def _exp_gradient(eigenvalues: torch.Tensor, vectors: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """dL/dA = Re V [(V^H G V) o conj(Phi)] V^H from iA = V diag(lam) V^H and G = dL/dexp(A)."""
    half_phase = torch.polar(torch.ones_like(eigenvalues), eigenvalues / 2)  # conj(e^{-i lam/2})
    half_gap = (eigenvalues[:, None] - eigenvalues[None, :]) / 2
    # conj(Phi)_jk = conj(e^{-i lam_j/2} e^{-i lam_k/2}) sinc((lam_j - lam_k)/2); torch.sinc(x) = sin(pi x)/(pi x)
    conj_phi = half_phase[:, None] * half_phase[None, :] * torch.sinc(half_gap / math.pi)
    projected = vectors.mH @ _real_times(grad.to(eigenvalues.dtype), vectors)  # V^H G V
    return _real_part_of_product(vectors @ (projected * conj_phi), vectors)


def skew_matrix_exp(skew: torch.Tensor) -> torch.Tensor:
    """exp(A) in SO(n) for a real skew-symmetric (n, n) A, differentiable in A (see the module docstring)."""
    if skew.dim() != 2 or skew.shape[0] != skew.shape[1] or skew.is_complex():
        raise ValueError(f"skew_matrix_exp takes one real square matrix, got shape {tuple(skew.shape)} "
                         f"and dtype {skew.dtype}")
    if skew.device.type != "cpu":  # on a GPU: matrix products, no eigensolver (it syncs with the host); unmeasured
        return torch.linalg.matrix_exp(skew)
    return _SkewExponential.apply(skew)


def exp_skew(upper: torch.Tensor, n: int) -> torch.Tensor:
    """B = exp(S - S^T) in SO(n) from the strict upper triangle S (row-major), as expRNN's B = exp(A)."""
    return skew_matrix_exp(skew_from_upper(upper, n))


def skew_from_superdiagonal_blocks(values: torch.Tensor, n: int) -> torch.Tensor:
    """A with A[2i, 2i+1] = values_i, A[2i+1, 2i] = -values_i for the floor(n/2) 2x2 blocks, zero elsewhere."""
    a = values.new_zeros(n, n)
    idx = torch.arange(0, 2 * values.numel(), 2, device=values.device)
    a[idx, idx + 1] = values
    a[idx + 1, idx] = -values
    return a


def haar_special_orthogonal(n: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """A Haar-distributed Q in SO(n), float64: QR of a Gaussian matrix with R's signs moved into Q (Mezzadri 2007),
    then the first column negated when det Q = -1 (a right translation, so the measure stays Haar)."""
    q, r = torch.linalg.qr(torch.randn(n, n, generator=generator, dtype=torch.float64))
    q = q * torch.sign(torch.diagonal(r))
    flip = torch.ones(n, dtype=torch.float64)
    flip[0] = torch.sign(torch.linalg.det(q))
    return q * flip


def log_special_orthogonal(q: torch.Tensor) -> torch.Tensor:
    """The real skew-symmetric log of Q in SO(n) without eigenvalue -1: Q = V diag(e^{i phi}) V^H (Q is normal,
    so V is unitary for distinct eigenvalues) gives log Q = Re(V diag(i phi) V^H)."""
    eigenvalues, v = torch.linalg.eig(q)
    a = (v * torch.log(eigenvalues)) @ v.mH
    a = a.real
    return (a - a.transpose(0, 1)) / 2  # exactly skew, removing round-off


def initial_skew(n: int, init: str, generator: torch.Generator | None = None) -> torch.Tensor:
    """The (n, n) float64 skew-symmetric A0 of an initialisation in SKEW_INITS (see the module docstring)."""
    blocks = n // 2
    if init == "henaff":
        values = (torch.rand(blocks, generator=generator, dtype=torch.float64) * 2 - 1) * math.pi
    elif init == "henaff_icml":
        values = -torch.rand(blocks, generator=generator, dtype=torch.float64) * math.pi
    elif init == "cayley":
        angles = torch.rand(blocks, generator=generator, dtype=torch.float64) * (math.pi / 2)
        values = -torch.tan(angles / 2)  # the code's -sqrt((1 - cos t) / (1 + cos t))
    elif init == "random":
        return log_special_orthogonal(haar_special_orthogonal(n, generator))
    else:
        raise ValueError(f"unknown initialisation {init!r}; choose one of {list(SKEW_INITS)}")
    return skew_from_superdiagonal_blocks(values, n)
