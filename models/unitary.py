"""The complex scaled Cayley transform W = (I + A)^-1 (I - A) D (scuRNN paper, Section 3).

A is skew-Hermitian (A^H = -A) and D = diag(e^{i theta}). A is stored as n^2 free real numbers: the real
parts of its strict upper triangle (x) and the imaginary parts of its upper triangle with the diagonal
(y, z), so A_jk = x + iy, A_kj = -x + iy (j < k), A_jj = iz, and an optimizer steps real and imaginary
parts separately, as the paper requires for RMSProp, Adam and Adagrad.

Theorem 2 gives the steepest-descent direction Gamma = dL/dconj(A) = C^T - conj(C). It is the gradient of L
on skew-Hermitian matrices for the real inner product Re tr(X^H Y): dL = Re tr(Gamma^H dA). So for the free
coordinates dL/dx = 2 Re Gamma_jk, dL/dy = 2 Im Gamma_jk (j < k) and dL/dz = Im Gamma_jj. The paper and the
official code step A by Gamma itself, i.e. half the coordinate gradient off the diagonal
(`gradient="theorem2"`, the default); `gradient="coordinates"` steps by the plain coordinate gradient.

Which side D multiplies (`d_side`): the official code multiplies row vectors, h_t = h_{t-1} W with W = K D
(scuRNN.py:71, scuRNN_copying.py:199), K = (I + A)^-1 (I - A). A layer that multiplies column vectors applies
W^T = D K^T: 'left' (the default) forms that, so the stored A and theta receive the code's gradients and an
optimizer step on them is the code's step. 'right' forms K D, the paper's eq. (2) read literally: the same set
of functions after relabelling the units by D^H, but with other theta (and A) gradients. Theorem 2 is about
L(W) for W = K D either way: with 'left' its dL/dW is the transpose of dL/d(the applied matrix).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import nn

from ortholab.models.cayley import block_angles, skew_from_block_angles
from ortholab.models.choices import checks_choices


def skew_hermitian(real_upper: torch.Tensor, imag_upper: torch.Tensor, n: int) -> torch.Tensor:
    """A = X + iY: X skew-symmetric from its strict upper triangle, Y symmetric from its upper triangle (row-major)."""
    rows, cols = torch.triu_indices(n, n, offset=1, device=real_upper.device)
    x = real_upper.new_zeros(n, n).index_put((rows, cols), real_upper)
    rows, cols = torch.triu_indices(n, n, offset=0, device=imag_upper.device)
    y = imag_upper.new_zeros(n, n).index_put((rows, cols), imag_upper)
    return torch.complex(x - x.transpose(0, 1), y + y.triu(1).transpose(0, 1))


def skew_hermitian_coordinates(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Inverse of `skew_hermitian`: (Re A over the strict upper triangle, Im A over the upper triangle)."""
    n = a.shape[-1]
    strict, upper = torch.triu_indices(n, n, offset=1), torch.triu_indices(n, n, offset=0)
    return a.real[strict[0], strict[1]], a.imag[upper[0], upper[1]]


def complex_scaled_cayley(a: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    """W = (I + A)^-1 (I - A) D, D = diag(e^{i theta}); a solve, not an explicit inverse (scuRNN Theorem 1)."""
    eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
    # I + A is invertible for skew-Hermitian A: solve_ex skips the check, a host sync on a GPU
    return torch.linalg.solve_ex(eye + a, eye - a).result * torch.polar(torch.ones_like(theta), theta)


def theorem2_gradients(a: torch.Tensor, theta: torch.Tensor, grad_w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(dL/dconj(A), dL/dtheta) from the Wirtinger derivative grad_w = dL/dW = (dL/dRe W - i dL/dIm W) / 2.

    dL/dconj(A) = C^T - conj(C), C = (I + A)^-T dL/dW (D + W^T);
    dL/dtheta = 2 Re(i diag(dL/dW^T K) * d), K = (I + A)^-1 (I - A), d = e^{i theta} (scuRNN Theorem 2).
    """
    eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
    d = torch.polar(torch.ones_like(theta), theta)
    k = torch.linalg.solve(eye + a, eye - a)
    w = k * d
    c = torch.linalg.solve((eye + a).transpose(0, 1), grad_w @ (torch.diag(d) + w.transpose(0, 1)))
    grad_theta = 2 * (1j * (grad_w * k).sum(dim=0) * d).real  # diag(G^T K)_j = sum_k G_kj K_kj
    return c.transpose(0, 1) - c.conj(), grad_theta


class _ScaleGradient(torch.autograd.Function):
    """The identity, whose backward multiplies the gradient by a fixed `scale`."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(scale)
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (scale,) = ctx.saved_tensors
        return grad * scale, None


# the choices of scuRNN's `init`, `a_gradient` and `d_side` options (models/scurnn.py), checked where they are taken
UnitaryInit = Literal["henaff", "henaff_2pi", "zeros"]
CayleyGradient = Literal["theorem2", "coordinates"]
DSide = Literal["left", "right"]  # D K^T (the official code's row-vector W = K D, transposed) or K D (paper eq. 2)
HENAFF_SPANS = {"henaff": math.pi / 2, "henaff_2pi": 2 * math.pi}  # t_j ~ U[0, span] of each henaff init


class ComplexScaledCayley(nn.Module):
    """Unitary W = (I + A)^-1 (I - A) diag(e^{i theta}) from A's n^2 free real numbers and the n phases theta.

    init: 'henaff' (Re A in 2x2 blocks with t_j ~ U[0, pi/2], the paper and the copying/MNIST code),
    'henaff_2pi' (t_j ~ U[0, 2 pi], as scuRNN_adding.py) or 'zeros'; Im A = 0; theta ~ U[0, 2 pi).
    gradient: 'theorem2' (A's parameters receive Theorem 2's dL/dconj(A) entries, the step of the paper and
    the official code) or 'coordinates' (the plain gradient of the free coordinates: 2x off the diagonal).
    d_side: 'left' (forward returns D K^T, the code's row-vector W = K D as a matrix on column vectors) or
    'right' (K D); see the module's docstring.
    """

    @checks_choices(key_prefix="ComplexScaledCayley: ")
    def __init__(
        self,
        n: int,
        init: UnitaryInit = "henaff",
        gradient: CayleyGradient = "theorem2",
        generator: torch.Generator | None = None,
        d_side: DSide = "left",
    ):
        super().__init__()
        self.n = n
        self.gradient = gradient
        self.d_side = d_side
        real = torch.zeros(n, n, dtype=torch.float64)
        if init in HENAFF_SPANS:  # else 'zeros'
            real = skew_from_block_angles(block_angles(n, HENAFF_SPANS[init], generator), n)
        real_upper, imag_upper = skew_hermitian_coordinates(torch.complex(real, torch.zeros_like(real)))
        self.real_upper = nn.Parameter(real_upper.float())
        self.imag_upper = nn.Parameter(imag_upper.float())
        self.theta = nn.Parameter(torch.rand(n, generator=generator, dtype=torch.float64).mul(2 * math.pi).float())
        on_diagonal = torch.triu_indices(n, n, offset=0)
        # dL/dx = 2 Re Gamma_jk, dL/dy = 2 Im Gamma_jk (j < k), dL/dz = Im Gamma_jj: see the module's docstring
        self.register_buffer(
            "imag_gradient_scale", torch.where(on_diagonal[0] == on_diagonal[1], 1.0, 0.5), persistent=False
        )

    def skew(self) -> torch.Tensor:
        real, imag = self.real_upper, self.imag_upper
        if self.gradient == "theorem2":
            real = _ScaleGradient.apply(real, torch.full((), 0.5, dtype=real.dtype, device=real.device))
            imag = _ScaleGradient.apply(imag, self.imag_gradient_scale.to(imag.dtype))
        return skew_hermitian(real, imag, self.n)

    def forward(self) -> torch.Tensor:
        """The matrix applied to column vectors h (D K^T for 'left', K D for 'right'), formed in complex128 as the
        official code forms W in numpy, then returned in the parameters' precision."""
        a = self.skew()
        w = complex_scaled_cayley(a.to(torch.complex128), self.theta.double())
        if self.d_side == "left":
            w = w.transpose(0, 1)  # the code's z = h W (scuRNN.py:71) is W^T h for a column vector h
        return w.to(a.dtype)
