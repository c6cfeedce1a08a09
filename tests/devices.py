"""The CUDA cases of the suite: each carries the `cuda` marker, so `pytest -m cuda` selects every one of them (the GPU
check's first stage, tools/gpu_check.py), and skips, saying so, on a machine without a GPU."""

import pytest
import torch

CUDA_MARKS = (
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine"),
)
DEVICES = ["cpu", pytest.param("cuda", marks=CUDA_MARKS)]  # a test parametrized over both


def needs_cuda(test):
    """A test that runs on CUDA only."""
    for mark in CUDA_MARKS:
        test = mark(test)
    return test
