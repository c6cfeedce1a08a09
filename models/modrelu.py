"""modReLU, sigma(z) = z/|z| * relu(|z| + b) (Arjovsky et al. 2016; scoRNN Section 4.1, real case)."""

from __future__ import annotations

import torch


def modrelu(z: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Real modReLU: sign(z) * relu(|z| + b); sign(0) = 0 as in the official scoRNN code."""
    return torch.sign(z) * torch.relu(z.abs() + b)


def complex_modrelu(z: torch.Tensor, b: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """sigma_eps(z) = z / (zhat + eps) * relu(zhat + b), zhat = sqrt(|z|^2 + eps) (scuRNN eq. 5); eps = 0 gives
    eq. (4)."""
    zhat = torch.sqrt(z.real.square() + z.imag.square() + eps)
    return z * (torch.relu(zhat + b) / (zhat + eps))
