"""`ortholab bench --suite lru-modes`: the LRU unit's two ways to compute y (models/lru.py), the FFT convolution
with its impulse response K_l = Re(C diag(γ λ^l) B) against the paper's scan of the states, forward and backward,
at several widths H; each ratio's note says which one `mode: auto` picks there (LinearRecurrentUnit.convolves).
Beside them, scoRNN's pixel-MNIST model at `reference_hidden` (n = 170: the 16k budget) on its own (B, T, 1)
input, the reference of issue 51's target for an LRU layer; all of them alternate within each repetition."""

from __future__ import annotations

from dataclasses import asdict
from functools import partial

import torch

from ortholab.bench.families import build, machine
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


class _WithInput(torch.nn.Module):
    """A module timed on its own input, whatever it is called with (the items of one alternation differ in shape)."""

    def __init__(self, module: torch.nn.Module, x: torch.Tensor):
        super().__init__()
        self.module, self.x = module, x

    def forward(self, _ignored) -> torch.Tensor:
        return self.module(self.x)


def run(settings: LruModes) -> SuiteResult:
    device = settings.device
    torch.manual_seed(0)
    result = SuiteResult("lru-modes", machine(), asdict(settings), {}, {})
    items, picked = {}, {}
    for width in widths(settings.widths):
        # the reference's ring initialisation (lru/model.py:46-48); the two modules share every parameter
        convolution = LinearRecurrentUnit(width, settings.state_size, 0.0, 1.0, 6.28, mode="convolution").to(device)
        scan = LinearRecurrentUnit(width, settings.state_size, 0.0, 1.0, 6.28, mode="recurrence").to(device)
        scan.load_state_dict(convolution.state_dict())
        u = torch.randn(settings.batch, settings.seq_len, width, device=device, requires_grad=True)
        items[f"convolution, H={width}"] = _WithInput(_Unit(convolution), u)
        items[f"scan, H={width}"] = _WithInput(_Unit(scan), u)
        auto = LinearRecurrentUnit(width, settings.state_size, 0.0, 1.0, 6.28)
        picked[width] = "convolution" if auto.convolves(settings.batch) else "scan"
    reference = f"scoRNN model, n={settings.reference_hidden}"
    if settings.reference_hidden:
        pixels = torch.rand(settings.batch, settings.seq_len, 1, device=device)
        items[reference] = _WithInput(build("scornn", settings.reference_hidden, device), pixels)
    result.seconds.update(alternating_medians(items, partial(time_fwd_bwd, x=None, device=device), settings.repeats))
    for width, mode in picked.items():
        result.ratio(f"convolution, H={width}", f"scan, H={width}", f"convolution / scan (H={width}; auto: {mode})")
        if settings.reference_hidden:
            result.ratio(f"{mode}, H={width}", reference, f"LRU unit, H={width} ({mode}) / {reference}")
    return result
