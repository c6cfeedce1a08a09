"""The exponential map onto SO(n), B = exp(A) with A = S - S^T skew-symmetric, and the initialisations of A.

expRNN (Lezcano-Casado and Martinez-Rubio, "Cheap Orthogonal Constraints in Neural Networks", ICML 2019)
trains B = exp(A) through the strictly upper entries S of A; the nnRNN (Kerg et al., NeurIPS 2019) uses the
same map for its orthogonal basis P. Only S is stored (n(n-1)/2 numbers), as models/cayley.py stores scoRNN's A.

torch.linalg.matrix_exp differentiates exactly: its backward applies the Frechet derivative of exp at A^T to
dL/dB, which is the gradient the official code computes with its own Pade approximant (srnn-exprnn-facts 3.1).

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


def exp_skew(upper: torch.Tensor, n: int) -> torch.Tensor:
    """B = exp(S - S^T) in SO(n) from the strict upper triangle S (row-major), as expRNN's B = exp(A)."""
    return torch.linalg.matrix_exp(skew_from_upper(upper, n))


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
