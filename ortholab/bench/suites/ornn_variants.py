"""`ortholab bench --suite ornn-variants`: how the oRNN's W = H_1 ... H_m is formed (its compact WY
form W = I - U S^-1 U^T, oRNN paper Proposition 1, against m reflections one at a time; forward and backward)
and, where m < n, applied at each step (a dense W against its WY factors)."""

from __future__ import annotations

import time
from dataclasses import asdict
from functools import partial

import torch

from ortholab.bench.families import machine, sync
from ortholab.bench.suites.common import SuiteResult, alternating_medians
from ortholab.bench.suites.settings import OrnnVariants
from ortholab.errors import ConfigError
from ortholab.models.householder import compact_wy, householder_product, householder_product_sequential
from ortholab.models.ornn import ORNN

LEAKY_SLOPE = 0.1  # the oRNN's default leaky ReLU


def shapes(text: str) -> list[tuple[int, int]]:
    """'128x16,170x170' -> [(128, 16), (170, 170)]: hidden sizes n and reflections 1 <= m <= n."""
    try:
        pairs = [tuple(int(v) for v in part.split("x")) for part in text.split(",")]
    except ValueError:
        pairs = []
    if not pairs or any(len(p) != 2 or not 1 <= p[1] <= p[0] for p in pairs):
        raise ConfigError(f"--param shapes={text}: give n x m pairs with 1 <= m <= n, e.g. 128x16,170x170")
    return pairs


def step_maps(u: torch.Tensor) -> dict:
    """h -> h W^T with W = I - V C (compact WY, V = U, C = S^-1 U^T) as a dense matrix, and through V and C."""
    v, c = compact_wy(u)
    w = torch.eye(u.shape[0], dtype=u.dtype, device=u.device) - v @ c
    ct, vt = c.t().contiguous(), v.t().contiguous()
    return {"dense W per step": lambda h: h @ w.t(), "WY factors per step": lambda h: h - (h @ ct) @ vt}


def _time_forming(build, u: torch.Tensor, scalar_last, device: str) -> float:
    sync(device)
    start = time.perf_counter()
    build(u, scalar_last).sum().backward()
    sync(device)
    return time.perf_counter() - start


def _time_steps(apply, h: torch.Tensor, steps: int, device: str) -> float:
    sync(device)
    start = time.perf_counter()
    with torch.no_grad():
        for _ in range(steps):
            h = torch.nn.functional.leaky_relu(apply(h), LEAKY_SLOPE)
    sync(device)
    return time.perf_counter() - start


def run(settings: OrnnVariants) -> SuiteResult:
    device = settings.device
    torch.manual_seed(0)
    result = SuiteResult("ornn-variants", machine(), asdict(settings), {}, {})
    for n, m in shapes(settings.shapes):
        layer = ORNN(1, n, num_reflections=m).to(device)
        u = layer.reflection_vectors().detach().requires_grad_()
        wy, sequential = f"W by compact WY, n={n} m={m}", f"W by {m} reflections, n={n} m={m}"
        builders = {wy: householder_product, sequential: householder_product_sequential}
        result.seconds.update(
            alternating_medians(
                builders, partial(_time_forming, u=u, scalar_last=layer.scalar_last, device=device), settings.repeats
            )
        )
        result.ratio(wy, sequential, f"forming W, compact WY / one reflection at a time (n={n}, m={m})")
        if m < n:
            h = torch.randn(settings.batch, n, device=device)
            maps = {f"{name}, n={n} m={m}": apply for name, apply in step_maps(u.detach()).items()}
            result.seconds.update(
                alternating_medians(
                    maps, partial(_time_steps, h=h, steps=settings.seq_len, device=device), settings.repeats
                )
            )
            result.ratio(
                f"WY factors per step, n={n} m={m}",
                f"dense W per step, n={n} m={m}",
                f"{settings.seq_len} steps, WY factors / dense W (n={n}, m={m})",
            )
    return result
