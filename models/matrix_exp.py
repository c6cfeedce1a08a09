"""The exponential map onto SO(n), B = exp(A) with A = S - S^T skew-symmetric, and the initialisations of A.

expRNN (Lezcano-Casado and Martinez-Rubio, "Cheap Orthogonal Constraints in Neural Networks", ICML 2019)
trains B = exp(A) through the strictly upper entries S of A; the nnRNN (Kerg et al., NeurIPS 2019) uses the
same map for its orthogonal basis P. Only S is stored (n(n-1)/2 numbers), as models/cayley.py stores scoRNN's A.

The exponential and its exact gradient come from one real symmetric eigendecomposition. A is skew, so
M = A^2 = -A^T A is symmetric with eigenvalues -theta^2 <= 0 (+-i theta are A's), and for any square A
    exp(A) = f(A^2) + A g(A^2),  f(mu) = sum_k mu^k/(2k)! = cos(theta),  g(mu) = sum_k mu^k/(2k+1)! = sin(theta)/theta.
With M = V diag(mu) V^T (V real orthogonal): exp(A) = I + [V diag(cos theta - 1) + (A V) diag(sinc theta)] V^T,
three real products besides the eigensolver. Its gradient, G = dL/dexp(A) and A^T = -A:
    dL/dA = G g(M) - H A - A H,  H = V [(V^T G V) o F + ((A V)^T G V) o K] V^T,
where F and K hold the divided differences of f and g over the eigenvalues mu (the Daleckii-Krein formula for a
function of a symmetric matrix, which needs no care at repeated eigenvalues: each theta is an eigenvalue of M
twice). They are evaluated in float64 as differences of values where eigenvalues are apart, and, where they are
close, as F = sinc(s) sinc(d)/2 and K = (sinc(s) cos(d) - cos(s) sinc(d)) / (2 theta_j theta_k) with
s, d = (theta_j +- theta_k)/2, or g's power series when both are near zero. The official code computes the same
gradient with its own Pade approximant (srnn-exprnn-facts 3.1), torch.linalg.matrix_exp's backward with a
2n x 2n block exponential. On the CPU this costs less than either, and less than the complex Hermitian
eigendecomposition of iA it replaced (n = 360: ~13 ms forward+backward against ~20; docs/families/exprnn.md). A float32
eigendecomposition of A^2 errs by about eps ||A||^2, which beyond one turn (||A||_2 > 2 pi) loses to the Pade
approximant: there M is formed and decomposed again in float64.
On a GPU, matrix_exp's products are cheap and the eigensolver waits on the host, so there skew_matrix_exp keeps
torch.linalg.matrix_exp (not measured: no GPU was available).

Initialisations of A (the official expRNN code's initialization.py, srnn-exprnn-facts 3.2): 2x2 blocks on the
diagonal, i.e. the value s_i at the first-superdiagonal positions (0, 1), (2, 3), ... and -s_i below:
- 'henaff': s_i ~ U(-pi, pi), the rotation angles of B's blocks (the code at HEAD);
- 'henaff_icml': s_i ~ U(-pi, 0) (the ICML-era code, copied into the nnRNN and SRNN repositories);
- 'cayley': s_i = -tan(t_i / 2), t_i ~ U(0, pi/2) (the entries whose Cayley transform has angles t_i);
- 'random': A = log(Q) for a Haar-random Q in SO(n) (the nnRNN code's random_orthogonal_init).
"""

from __future__ import annotations

import math
from typing import Literal

import torch

from ortholab.models.backward_limits import refuse_create_graph
from ortholab.models.cayley import skew_from_upper
from ortholab.models.choices import checks_choices

SkewInit = Literal["henaff", "henaff_icml", "cayley", "random"]  # expRNN's and nnRNN's `init` options


# beyond this spectral norm a float32 eigendecomposition of A^2 is less accurate than a Pade approximant
FLOAT32_LIMIT = 2 * math.pi
# eigenvalues mu of A^2 closer than this take the divided differences' stable forms, not a difference quotient
NEAR = 1e-2


def _sinc(x: torch.Tensor) -> torch.Tensor:
    """sin(x) / x, 1 at 0 (torch.sinc is sin(pi x) / (pi x))."""
    return torch.sinc(x / math.pi)


def _divided_differences(theta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """F, K: the divided differences of f(mu) = cos(theta) and g(mu) = sinc(theta) over mu = -theta^2, float64."""
    t = theta.double()
    mu = -t * t
    gap = mu[:, None] - mu[None, :]
    cosine, sinc = torch.cos(t), _sinc(t)
    f = (cosine[:, None] - cosine[None, :]) / gap  # apart: round-off at most 2 eps / NEAR
    k = (sinc[:, None] - sinc[None, :]) / gap
    rows, cols = (gap.abs() < NEAR).nonzero(as_tuple=True)  # close (the diagonal, each theta's twin, clusters)
    a, b = t[rows], t[cols]
    s, d = (a + b) / 2, (a - b) / 2
    f[rows, cols] = _sinc(s) * _sinc(d) / 2  # (cos a - cos b) / (b^2 - a^2) without the division
    product = a * b
    stable = (_sinc(s) * torch.cos(d) - torch.cos(s) * _sinc(d)) / (2 * product)
    x, y = mu[rows], mu[cols]
    series, h, y_power = torch.zeros_like(x), torch.ones_like(x), torch.ones_like(x)
    for m in range(1, 7):  # g[x, y] = sum_m h_{m-1}(x, y) / (2m+1)!, h the complete symmetric polynomials
        series += h / math.factorial(2 * m + 1)
        y_power = y_power * y
        h = x * h + y_power
    k[rows, cols] = torch.where(product >= NEAR, stable, series)  # series: both |mu| < 2 NEAR, error < 1e-17
    return f, k


class _SkewExponential(torch.autograd.Function):
    """exp(A) for a real skew-symmetric A, forward and backward from the eigendecomposition of A^2."""

    @staticmethod
    def forward(ctx, skew: torch.Tensor) -> torch.Tensor:
        with torch.autocast(skew.device.type, enabled=False):  # bf16 autocast would round the products below
            mu, vectors = torch.linalg.eigh(skew @ skew)  # A^2 = V diag(-theta^2) V^T, ascending
            if skew.dtype != torch.float64 and -mu[0].item() > FLOAT32_LIMIT**2:
                wide = skew.double()
                mu, vectors = (x.to(skew.dtype) for x in torch.linalg.eigh(wide @ wide))
            theta = torch.sqrt(torch.clamp(-mu, min=0))
            moved = skew @ vectors  # A V
            # exp(A) - I = [V diag(cos - 1) + A V diag(sinc)] V^T; cos - 1 = -2 sin^2(theta/2) keeps a small A exact
            b = (vectors * (-2 * torch.sin(theta / 2) ** 2) + moved * _sinc(theta)) @ vectors.t()
            b.diagonal().add_(1)
            ctx.save_for_backward(theta, vectors, moved)
            return b

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        refuse_create_graph("expRNN/nnRNN matrix exponential", "models/matrix_exp.py")
        with torch.autocast(grad.device.type, enabled=False):
            return _exp_gradient(*ctx.saved_tensors, grad)


def _exp_gradient(theta: torch.Tensor, vectors: torch.Tensor, moved: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """dL/dA = G g(M) - H A - A H, H = V [(V^T G V) o F + ((A V)^T G V) o K] V^T (the module docstring),
    from A^2 = V diag(-theta^2) V^T, A V and G = dL/dexp(A), as two products with [V | A V]."""
    n = vectors.shape[0]
    f, k = (x.to(vectors.dtype) for x in _divided_differences(theta))
    both = torch.cat([vectors, moved], dim=1)  # [V | A V]
    gv = grad.to(vectors.dtype) @ vectors
    projected = both.t() @ gv  # [V^T G V; (A V)^T G V]
    inner = projected[:n] * f + projected[n:] * k  # V^T H V
    # G g(M) - H A - A H = (G V diag(sinc) - A V inner) V^T + (V inner) (A V)^T, with H A = -V inner (A V)^T
    left = torch.cat([gv * _sinc(theta) - moved @ inner, vectors @ inner], dim=1)
    return left @ both.t()


def skew_matrix_exp(skew: torch.Tensor) -> torch.Tensor:
    """exp(A) in SO(n) for a real skew-symmetric (n, n) A, differentiable in A (see the module docstring)."""
    if skew.dim() != 2 or skew.shape[0] != skew.shape[1] or skew.is_complex():
        raise ValueError(
            f"skew_matrix_exp takes one real square matrix, got shape {tuple(skew.shape)} and dtype {skew.dtype}"
        )
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


@checks_choices(key_prefix="initial_skew: ")
def initial_skew(n: int, init: SkewInit, generator: torch.Generator | None = None) -> torch.Tensor:
    """The (n, n) float64 skew-symmetric A0 of an initialisation in SkewInit (see the module docstring)."""
    blocks = n // 2
    if init == "henaff":
        values = (torch.rand(blocks, generator=generator, dtype=torch.float64) * 2 - 1) * math.pi
    elif init == "henaff_icml":
        values = -torch.rand(blocks, generator=generator, dtype=torch.float64) * math.pi
    elif init == "cayley":
        angles = torch.rand(blocks, generator=generator, dtype=torch.float64) * (math.pi / 2)
        values = -torch.tan(angles / 2)  # the code's -sqrt((1 - cos t) / (1 + cos t))
    else:  # "random"
        return log_special_orthogonal(haar_special_orthogonal(n, generator))
    return skew_from_superdiagonal_blocks(values, n)
