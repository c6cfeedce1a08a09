"""Products of Householder reflections, W = H(u_1) ... H(u_m) (oRNN paper, Section 4; Mhammedi et al. 2017).

H(u) = I - 2 u u^T / |u|^2 reflects about the hyperplane orthogonal to u. The oRNN stores the m reflection
vectors as the columns of a lower-triangular n x m matrix U: column k is zero above row k, so it acts on
the last n - k coordinates only (the paper's u_{n-k} in R^{n-k}). With m = n the last column has a single
entry and stands for the paper's scalar factor H_1 = diag(1, ..., 1, +-1), not for a reflection.
"""

from __future__ import annotations

import torch


def tril_from_entries(entries: torch.Tensor, n: int, m: int) -> torch.Tensor:
    """The (n, m) lower-triangular U whose on-and-below-diagonal entries are `entries` (row-major)."""
    rows, cols = torch.tril_indices(n, m, device=entries.device)
    return entries.new_zeros(n, m).index_put((rows, cols), entries)


def entries_from_tril(u: torch.Tensor) -> torch.Tensor:
    """Inverse of `tril_from_entries`: the n*m - m(m-1)/2 entries on and below U's diagonal, row-major."""
    rows, cols = torch.tril_indices(u.shape[0], u.shape[1], device=u.device)
    return u[rows, cols]


def last_factor_sign(u: torch.Tensor) -> torch.Tensor:
    """The paper's scalar H_1 for m = n: +1 if U[n-1, n-1] >= 0 else -1 (its derivative is zero)."""
    return torch.where(u[-1, -1] >= 0, 1.0, -1.0).to(u.dtype)


def compact_wy(u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(U, S^-1 U^T) with H(u_1) ... H(u_m) = I - U S^-1 U^T, S = striu(U^T U) + diag(U^T U) / 2 (oRNN Proposition 1).

    u: (n, m), one reflection vector per column (any nonzero norms: H(u) depends on u's direction only).
    """
    gram = u.t() @ u
    s = torch.triu(gram, diagonal=1) + torch.diag_embed(gram.diagonal() / 2)
    return u, torch.linalg.solve_triangular(s, u.t(), upper=True)


def householder_product(u: torch.Tensor, scalar_last: bool = False) -> torch.Tensor:
    """W = H(u_1) ... H(u_m) from its compact WY form, in O(n^2 m) without a loop over the reflections.

    scalar_last: the last column is the scalar factor diag(1, ..., 1, sign U[n-1, n-1]) instead of a reflection.
    """
    v, c = compact_wy(u[:, :-1] if scalar_last else u)
    w = torch.eye(u.shape[0], dtype=u.dtype, device=u.device) - v @ c
    if scalar_last:  # the right factor diag(1, ..., 1, +-1) scales W's last column
        w = torch.cat([w[:, :-1], w[:, -1:] * last_factor_sign(u)], dim=1)
    return w


def householder_product_sequential(u: torch.Tensor, scalar_last: bool = False) -> torch.Tensor:
    """The same W built one reflection at a time, W <- H(u_k) W from the last factor to the first (reference)."""
    n, m = u.shape
    w = torch.eye(n, dtype=u.dtype, device=u.device)
    if scalar_last:
        w = torch.cat([w[:, :-1], w[:, -1:] * last_factor_sign(u)], dim=1)
        m -= 1
    for k in range(m - 1, -1, -1):
        v = u[:, k] / u[:, k].norm()
        w = w - 2 * torch.outer(v, v @ w)
    return w


@torch.no_grad()
def householder_factors(q: torch.Tensor) -> torch.Tensor:
    """Lower-triangular (n, n) U with householder_product(U, scalar_last=True) == q for an orthogonal q (Theorem 1).

    The constructive proof: u_k = q_k - e_k maps the k-th column q_k of the partially reduced matrix onto e_k,
    so that H(u_k) ... H(u_1) q = diag(I_{k+1}, Q'); after n - 1 reflections a scalar +-1 remains.
    """
    n = q.shape[0]
    reduced = q.clone()
    u = torch.zeros_like(q)
    for k in range(n - 1):
        v = reduced[:, k].clone()
        v[k] -= 1.0
        v[:k] = 0.0  # zero already up to round-off: the top-left block is the identity
        if v.norm() < 1e-12:  # column already e_k: any reflection fixing e_k keeps the block structure
            v = torch.zeros_like(v)
            v[k + 1] = 1.0
        u[:, k] = v
        reduced = reduced - 2 * torch.outer(v, v @ reduced) / (v @ v)
    u[n - 1, n - 1] = torch.sign(reduced[n - 1, n - 1])
    return u
