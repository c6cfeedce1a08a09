"""`trainer.precision` settings checked before training, with the one-line fix (models/precision.py says how the
families run under bf16-mixed and 16-mixed)."""

from __future__ import annotations

import torch

from ortholab.errors import ConfigError

FLOAT16_MIXED = ("16-mixed", "16", 16)  # Lightning reads the last two as 16-mixed


def runs_on_cpu(accelerator) -> bool:
    """Whether Lightning's `trainer.accelerator` resolves to the CPU on this machine."""
    if accelerator is None or accelerator == "auto":
        mps = getattr(torch.backends, "mps", None)
        return not torch.cuda.is_available() and not (mps is not None and mps.is_available())
    return accelerator == "cpu"


def check_precision(precision, accelerator, family: str | None) -> None:
    """Refuse what would silently train otherwise than asked: 16-mixed on the CPU (Lightning switches it to
    bf16-mixed there) and 16-bit parameters for a family whose orthogonal/unitary map needs float32."""
    if precision in FLOAT16_MIXED and runs_on_cpu(accelerator):
        raise ConfigError(
            f"trainer.precision = {precision}: float16 mixed precision runs on CUDA GPUs only (on the "
            f"CPU Lightning would quietly train in bf16-mixed instead); use --trainer.precision "
            f"bf16-mixed on the CPU, or --trainer.accelerator gpu on a machine with one"
        )
    if precision in ("16-true", "bf16-true"):
        from ortholab.models import FAMILIES

        cls = FAMILIES.get(family)
        if cls is not None and not cls.autocast_devices:
            raise ConfigError(
                f"trainer.precision = {precision} stores the parameters themselves in 16 bits, in "
                f"which the recurrence and orthogonal/unitary map of family {family!r} lose float32's "
                f"accuracy; use --trainer.precision {precision.replace('-true', '-mixed')} (the map "
                f"and the recurrence stay float32, the rest runs under autocast)"
            )
