"""`ortholab bench --suite lru-modes`: the LRU unit's two ways to compute y (models/lru.py), the FFT convolution
with its impulse response K_l = Re(C diag(γ λ^l) B) against the paper's scan of the states, forward and backward,
at several widths H; each ratio's note says which one `mode: auto` picks there (LinearRecurrentUnit.convolves)."""

from __future__ import annotations

from dataclasses import asdict
from functools import partial

import torch

from ortholab.bench.families import machine
from ortholab.bench.suites.common import SuiteResult, alternating_medians, time_fwd_bwd
from ortholab.bench.suites.settings import LruModes
from ortholab.errors import ConfigError
from ortholab.models.lru import LinearRecurrentUnit


def widths(text: str) -> list[int]:
    """'27,45' -> [27, 45]: the unit's widths H to time."""
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise ConfigError(f"--param widths={text}: give positive widths H separated by commas, e.g. 27,45,95")
    return values


class _Unit(torch.nn.Module):
    """The unit with no state in or out, as a block trains it: y only."""

    def __init__(self, unit: LinearRecurrentUnit):
        super().__init__()
        self.unit = unit

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        return self.unit(u, want_final=False)[0]


def run(settings: LruModes) -> SuiteResult:
    device = settings.device
    torch.manual_seed(0)
    result = SuiteResult("lru-modes", machine(), asdict(settings), {}, {})
    for width in widths(settings.widths):
        # the reference's ring initialisation (lru/model.py:46-48); the two modules share every parameter
        convolution = LinearRecurrentUnit(width, settings.state_size, 0.0, 1.0, 6.28, mode="convolution").to(device)
        scan = LinearRecurrentUnit(width, settings.state_size, 0.0, 1.0, 6.28, mode="recurrence").to(device)
        scan.load_state_dict(convolution.state_dict())
        u = torch.randn(settings.batch, settings.seq_len, width, device=device, requires_grad=True)
        names = {f"convolution, H={width}": _Unit(convolution), f"scan, H={width}": _Unit(scan)}
        result.seconds.update(alternating_medians(names, partial(time_fwd_bwd, x=u, device=device), settings.repeats))
        picked = (
            "convolution"
            if LinearRecurrentUnit(width, settings.state_size, 0.0, 1.0, 6.28).convolves(settings.batch)
            else "scan"
        )
        result.ratio(f"convolution, H={width}", f"scan, H={width}", f"convolution / scan (H={width}; auto: {picked})")
    return result
