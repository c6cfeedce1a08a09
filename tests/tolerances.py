"""Round-off bounds for the numerical tests, derived from the dtype, the size and the conditioning.

A quantity that is exact in exact arithmetic (QᵀQ = I, two formulas for one gradient, a fused loop against the
plain one) is computed with round-off only. Each floating-point operation errs by at most u = eps/2 relative,
and an inner product of length n by at most γ_n = n·u/(1 − n·u) times |x|ᵀ|y| (Higham, *Accuracy and Stability
of Numerical Algorithms*, 2nd ed., §3.1); LAPACK's factorisations are backward stable with a low-degree
polynomial p(n) in place of n. So every bound here reads

    c · n · eps(dtype) · scale

with n the number of operations an entry's error accumulates over (the inner dimension of a product, times
the time steps of a recurrence), `scale` the size of what is computed (a norm) times the conditioning that
amplifies a perturbation of it, and c a small constant for the algorithm's own constant. These are worst-case
rates: rounding errors of random sign grow like √n, so a bound with c = 1 holds with room on any CPU whose
arithmetic is IEEE 754 (the SIMD width, the BLAS's blocking and the thread count change the order of the
additions, never the rate). A test states its n and scale in a one-line comment beside the bound. The
conditioning that enters `scale`: cond(I + A) for a Cayley transform's solve (`cond`), 1 + ||A|| (or its square
where A^2 is formed) for an exponential, ||W||^T for T steps through a non-normal W, cond(V) for the eigenvalues
of a non-normal matrix (Bauer-Fike), and sqrt(n) for an n x n error measured in the Frobenius norm.
"""

from __future__ import annotations

import torch


def eps(dtype: torch.dtype) -> float:
    """Machine epsilon of a real dtype, or of a complex dtype's real part."""
    return torch.finfo(dtype.to_real() if dtype.is_complex else dtype).eps


def roundoff(dtype: torch.dtype, n: float = 1, scale: float = 1.0, c: float = 1.0) -> float:
    """The bound c · n · eps(dtype) · scale (module docstring)."""
    return c * n * eps(dtype) * scale


def close(dtype: torch.dtype, n: float = 1, scale: float = 1.0, c: float = 1.0) -> dict[str, float]:
    """`torch.testing.assert_close` keywords for two computations of one quantity of size `scale`.

    The relative part is c·n·eps; the absolute part is the same times `scale`, for entries that are zero or
    cancel (a gradient entry far below the gradient's norm errs relative to the norm, not to itself).
    """
    bound = roundoff(dtype, n, 1.0, c)
    return {"rtol": bound, "atol": bound * scale}


def norm(t: torch.Tensor) -> float:
    """The Frobenius norm of a tensor as a float (the `scale` of a bound); at least the smallest normal number."""
    value = torch.linalg.vector_norm(t.detach().reshape(-1).to(torch.complex128 if t.is_complex() else torch.float64))
    return max(float(value), torch.finfo(torch.float64).tiny)


def largest(t: torch.Tensor) -> float:
    """The largest entry's modulus as a float: the `scale` of an entry-wise bound on a tensor of many entries, whose
    Frobenius norm would grow with their count; at least the smallest normal number."""
    return max(float(t.detach().abs().max()), torch.finfo(torch.float64).tiny)


def cond(m: torch.Tensor) -> float:
    """The 2-norm condition number of a matrix as a float: how much a solve with it amplifies round-off (for the
    Cayley transform (I + A)^-1 (I - A), cond(I + A) = sqrt(1 + ||A||_2^2) when A is skew)."""
    return float(torch.linalg.cond(m.detach().to(torch.complex128 if m.is_complex() else torch.float64)))
