"""What the compiled CPU loops (models/*_kernels.py, numba) share: their compile options, the tensors they take,
their thread count, and their import at first use."""

from __future__ import annotations

import importlib

import numpy as np
import torch

from ortholab.threads import size_numba_pool

# parallel: batch rows over threads; cache: compiled once, then loaded from __pycache__ (or numba's user cache);
# fastmath without "nnan"/"ninf": sums may be reordered, but non-finite values still propagate for the NaN guard
OPTIONS = {
    "parallel": True,
    "cache": True,
    "error_model": "numpy",
    "nogil": True,
    "fastmath": {"reassoc", "contract", "arcp", "nsz"},
}


def supported(u: torch.Tensor) -> bool:
    """Whether the kernels take these inputs: complex64/128 on the CPU."""
    return u.device.type == "cpu" and u.dtype in (torch.complex64, torch.complex128)


def as_array(x: torch.Tensor) -> np.ndarray:
    """A numpy view (no copy) of a CPU tensor, for the kernels."""
    return x.detach().resolve_conj().resolve_neg().numpy()


def real_scalar(x: np.ndarray, value: float):
    """`value` in x's precision (a float64 constant would promote a float32 kernel's arithmetic)."""
    return x.dtype.type(value)


def kernel(module: str, name: str):
    """`name` from models/`module`.py, imported (with numba) at first use, after sizing numba's pool by this process's
    OMP_NUM_THREADS: numba fixes its pool size when it is imported, and a DDP rank on the CPU gets its share of the
    cores from Lightning only after the model registry is imported (at 2 ranks on 2 cores, a pool of 2 per rank made
    a uRNN copying run 5x slower: docs/benchmarks.md)."""
    size_numba_pool()
    return getattr(importlib.import_module(f"ortholab.models.{module}"), name)


def match_torch_threads() -> None:
    """Run the kernels on as many threads as torch ops (a DDP process on the CPU has its share, not every core)."""
    import numba  # here, not at the top: only the kernel modules call this, after numba is imported (see `kernel`)

    numba.set_num_threads(max(1, min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS)))
