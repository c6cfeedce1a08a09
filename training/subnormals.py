"""Flush subnormal floats to zero on the CPU, as TensorFlow and XLA do by default.

A float below the smallest normal number (2^-126 in float32) is subnormal; on many x86 CPUs every operation that
produces or reads one takes a microcode assist, tens to hundreds of times slower than a normal one. Linear
recurrences make them as a matter of course: an LRU initialised on the ring down to |λ| = 0 (the reference code's
default) has powers λ^l and, with a last-step readout, backward states conj(λ)^(T-1-t) g that decay through the
subnormal range; PyTorch's own nn.LSTM makes them in its backward. On the Intel Xeon VM of docs/benchmarks.md a step
of nn.LSTM at 16k took 764 ms with them and 68 ms flushed (benchmarks/results/subnormals-2026-11-28.json).
`flush_subnormals()` sets the CPU's flush-to-zero and denormals-are-zero modes for the training process
(`torch.set_flush_denormal`); values under 2^-126 then read and write as 0, which changes no sum that holds a
normal number by more than its round-off. Set ORTHOLAB_SUBNORMALS=keep to keep IEEE subnormals.
"""

from __future__ import annotations

import os


def flush_subnormals() -> bool:
    """Flush subnormals to zero in this process's CPU arithmetic; True when the CPU supports it and it took effect."""
    if os.environ.get("ORTHOLAB_SUBNORMALS") == "keep":
        return False
    import torch  # here: the command line imports this module for every command, most of which need no torch

    return torch.set_flush_denormal(True)


def subnormals_flushed() -> bool:
    """Whether this thread's CPU arithmetic flushes subnormals now: the smallest float32 subnormal, halved by an
    operation, reads as 0 under denormals-are-zero and flush-to-zero and as a subnormal otherwise."""
    import torch

    tiny = torch.tensor([2.0**-148], dtype=torch.float32)  # 4 * 2^-150: a subnormal
    return bool((tiny * 0.5).item() == 0.0)
