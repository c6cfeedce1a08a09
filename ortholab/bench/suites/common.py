"""What every `ortholab bench --suite` shares: alternating medians, and the result it prints (or writes as JSON)."""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable


@dataclass
class SuiteResult:
    suite: str
    machine: str
    settings: dict
    seconds: dict[str, float]  # what was timed -> the median over repetitions
    ratios: dict[str, float]  # "a / b" -> median(a) / median(b)
    notes: list[str] = field(default_factory=list)

    def ratio(self, numerator: str, denominator: str, label: str | None = None) -> None:
        self.ratios[label or f"{numerator} / {denominator}"] = self.seconds[numerator] / self.seconds[denominator]


def alternating_medians(items: dict[str, Any], run: Callable[[Any], float], repeats: int) -> dict[str, float]:
    """The median of `repeats` calls of `run(item)` (seconds) for every item. Each item runs once untimed first;
    then the items alternate within every repetition, so a noisy machine slows them alike."""
    for item in items.values():
        run(item)
    times: dict[str, list[float]] = {name: [] for name in items}
    for _ in range(repeats):
        for name, item in items.items():
            times[name].append(run(item))
    return {name: statistics.median(t) for name, t in times.items()}


def time_fwd_bwd(model, x, device: str) -> float:
    """Seconds of one forward and backward (of the output's sum) of a layer or model, the device synchronised."""
    from ortholab.bench.families import sync

    sync(device)
    start = time.perf_counter()
    out = model(x)
    (out[0] if isinstance(out, tuple) else out).sum().backward()
    sync(device)
    return time.perf_counter() - start


def _duration(seconds: float) -> str:
    return f"{seconds:8.2f} s " if seconds >= 10 else f"{seconds * 1000:8.1f} ms"


def render(result: SuiteResult, as_json: bool) -> str:
    """The result as text (settings and machine, the medians, then the ratios) or as JSON."""
    if as_json:
        return json.dumps(asdict(result), indent=2)
    settings = ", ".join(f"{key} {value}" for key, value in result.settings.items())
    width = max(map(len, result.seconds), default=0)
    lines = [f"{result.suite}: {settings}; {result.machine}"]
    lines += [f"  {name:{width}s} {_duration(value)}" for name, value in result.seconds.items()]
    lines += [f"  ratio {name}: {value:.3f}" for name, value in result.ratios.items()]
    lines += [f"  {note}" for note in result.notes]
    return "\n".join(lines)
