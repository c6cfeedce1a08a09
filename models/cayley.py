"""The scaled Cayley transform W = (I + A)^-1 (I - A) D (scoRNN paper, Section 3)."""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import nn

from ortholab.models.choices import checks_choices

CayleyInit = Literal["henaff", "zeros"]  # A's start: 2x2 blocks (the paper's Section 4.2) or A = 0 (scoRNN's `init`)


def skew_from_upper(upper: torch.Tensor, n: int) -> torch.Tensor:
    """Skew-symmetric A with A[i, j] = upper_k, A[j, i] = -upper_k over the strict upper triangle (row-major)."""
    rows, cols = torch.triu_indices(n, n, offset=1, device=upper.device)
    a = upper.new_zeros(n, n)
    a = a.index_put((rows, cols), upper)
    return a - a.transpose(0, 1)


def upper_from_skew(a: torch.Tensor) -> torch.Tensor:
    """Inverse of `skew_from_upper`: the strict upper triangle of A, row-major."""
    n = a.shape[-1]
    rows, cols = torch.triu_indices(n, n, offset=1, device=a.device)
    return a[rows, cols]


def scaled_cayley(a: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """W = (I + A)^-1 (I - A) D, with D = diag(d); a solve, not an explicit inverse (scoRNN eq. 3.1)."""
    eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
    # I + A is invertible for skew A (eigenvalues 1 + i lambda): solve_ex skips the check, a host sync on a GPU
    return torch.linalg.solve_ex(eye + a, eye - a).result * d


def inverse_scaled_cayley(w: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """A = (I + W D)^-1 (I - W D): the skew matrix whose scaled Cayley transform with D is W (needs WD without -1
    eigenvalues)."""
    eye = torch.eye(w.shape[-1], dtype=w.dtype, device=w.device)
    wd = w * d  # W D (D is its own inverse)
    return torch.linalg.solve(eye + wd, eye - wd)


def scaling_diagonal(n: int, num_negative: int, dtype=torch.float32) -> torch.Tensor:
    """D's diagonal: +1 then `num_negative` entries of -1 at the end, as the official scoRNN code."""
    d = torch.ones(n, dtype=dtype)
    if num_negative:
        d[n - num_negative :] = -1.0
    return d


def block_angles(n: int, max_angle: float = math.pi / 2, generator: torch.Generator | None = None) -> torch.Tensor:
    """t_j ~ U[0, max_angle] for the floor(n/2) 2x2 blocks of the initial A (scoRNN Section 4.2: pi/2)."""
    return torch.rand(n // 2, generator=generator, dtype=torch.float64) * max_angle


def skew_from_block_angles(angles: torch.Tensor, n: int) -> torch.Tensor:
    """Real skew A with 2x2 blocks [[0, s], [-s, 0]], s = sqrt((1 - cos t)/(1 + cos t)) = tan(t/2).

    Cayley(A) = (I + A)^-1 (I - A) then has the eigenvalues e^{+-i t_j} (and 1 for odd n).
    """
    s = torch.sqrt((1 - torch.cos(angles)) / (1 + torch.cos(angles)))
    a = torch.zeros(n, n, dtype=torch.float64)
    idx = torch.arange(0, 2 * angles.numel(), 2)
    a[idx, idx + 1] = s
    a[idx + 1, idx] = -s
    return a


class ScaledCayley(nn.Module):
    """Orthogonal W = (I + A)^-1 (I - A) D from the n(n-1)/2 free entries of a skew-symmetric A.

    Storing only the strict upper triangle makes an optimizer step on A the size the official code takes
    (reference-impl-facts 1.3) and makes the parameter count n(n-1)/2 honestly.
    """

    @checks_choices(key_prefix="ScaledCayley: ")
    def __init__(
        self, n: int, num_negative: int, init: CayleyInit = "henaff", generator: torch.Generator | None = None
    ):
        super().__init__()
        if init == "henaff":
            a0 = skew_from_block_angles(block_angles(n, generator=generator), n)
        else:  # "zeros"
            a0 = torch.zeros(n, n, dtype=torch.float64)
        self.n = n
        self.upper = nn.Parameter(upper_from_skew(a0).float())
        self.register_buffer("d", scaling_diagonal(n, num_negative))

    def skew(self) -> torch.Tensor:
        return skew_from_upper(self.upper, self.n)

    def forward(self) -> torch.Tensor:
        return scaled_cayley(self.skew(), self.d.to(self.upper.dtype))

    @torch.no_grad()
    def set_matrix(self, w: torch.Tensor) -> None:
        """Set A so that the transform gives the orthogonal `w` (right inverse of `forward`)."""
        a = inverse_scaled_cayley(w.to(torch.float64), self.d.to(torch.float64))
        self.upper.copy_(upper_from_skew(a).to(self.upper.dtype))


def cayley_gradient(a: torch.Tensor, w: torch.Tensor, d: torch.Tensor, grad_w: torch.Tensor) -> torch.Tensor:
    """dL/dA = V^T - V with V = (I + A)^-T dL/dW (D + W^T) (scoRNN Theorem 3.2)."""
    eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
    v = torch.linalg.solve((eye + a).transpose(0, 1), grad_w @ (torch.diag(d) + w.transpose(0, 1)))
    return v.transpose(0, 1) - v
