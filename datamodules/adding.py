"""The adding problem, laid out as the official scoRNN code (scoRNN paper Section 5.2).

Two input channels over T steps: values from U[0, 1) and a marker channel with two ones, the first
uniform in {0..h-1} and the second in {h..T-1}, h = floor((T - 1) / 2). The target is the sum of the two
marked values, predicted at the last step; predicting 1 always gives MSE 1/6 = 0.167, the baseline.
markers="srnn" places them as the SRNN code: the first in {0..h-1}, the second in {h..2h-1}, h = floor(T / 2).
"""

from __future__ import annotations

from typing import Literal

import torch

from ortholab.datamodules.base import TaskDataModule, require_batch_size, require_positive, require_split_memory
from ortholab.datamodules.spec import TaskSpec
from ortholab.errors import ConfigError

ADDING_BASELINE = 1.0 / 6.0  # Var(X + Y) for X, Y ~ U[0, 1): the MSE of always answering 1


MARKER_LAYOUTS = ("scornn", "srnn")  # where the two marked steps may fall: each paper's code


def adding_batch(
    size: int, seq_len: int, generator: torch.Generator, markers: str = "scornn"
) -> tuple[torch.Tensor, torch.Tensor]:
    """`size` sequences: inputs (size, T, 2) = [value, marker], targets (size, 1)."""
    half = (seq_len - 1) // 2 if markers == "scornn" else seq_len // 2
    end = seq_len if markers == "scornn" else 2 * half
    values = torch.rand(size, seq_len, generator=generator)
    first = torch.randint(0, half, (size,), generator=generator)
    second = torch.randint(half, end, (size,), generator=generator)
    markers = torch.zeros(size, seq_len)
    rows = torch.arange(size)
    markers[rows, first] = 1.0
    markers[rows, second] = 1.0
    targets = (values[rows, first] + values[rows, second]).unsqueeze(1)
    return torch.stack([values, markers], dim=2), targets


class AddingTask(TaskDataModule):
    """seq_len is T (at least 3). Sets are drawn once from seeds seed (train), seed + 1 (val), seed + 2 (test).
    markers: 'scornn' (default) or 'srnn', where each paper's code places the two marked steps (module docstring)."""

    generated_splits = True

    def __init__(
        self,
        seq_len: int = 200,
        train_size: int = 100_000,
        val_size: int = 10_000,
        test_size: int = 10_000,
        seed: int = 5544,
        batch_size: int = 50,
        eval_batch_size: int | None = 1_000,
        shuffle: bool = False,
        num_workers: int = 0,
        markers: Literal["scornn", "srnn"] = "scornn",
    ):
        super().__init__(batch_size, eval_batch_size, shuffle, num_workers)
        if markers not in MARKER_LAYOUTS:
            raise ConfigError(f"data.markers = {markers!r}; choose one of {list(MARKER_LAYOUTS)}")
        self.markers = markers
        self.seq_len = require_positive(seq_len, "seq_len")
        if seq_len < 3:
            raise ConfigError(f"data.seq_len = {seq_len}; the adding task needs T >= 3 (one marker in each half)")
        self.train_size = require_positive(train_size, "train_size")
        self.val_size = require_positive(val_size, "val_size")
        self.test_size = require_positive(test_size, "test_size")
        require_batch_size(batch_size, "batch_size", train_size, "train_size")
        require_split_memory(
            {"train_size": train_size, "val_size": val_size, "test_size": test_size}, 16 * seq_len + 4
        )  # values, markers and their stack (float32), the target
        self.seed = seed
        self.spec = TaskSpec(
            name="adding",
            input_size=2,
            output_size=1,
            readout="last_step",
            loss="mse",
            baseline=ADDING_BASELINE,
            description=f"sum of two marked values among T={seq_len} ({markers} code layout)",
        )

    def make_split(self, split: str) -> tuple[torch.Tensor, torch.Tensor]:
        size, offset = {"train": (self.train_size, 0), "val": (self.val_size, 1), "test": (self.test_size, 2)}[split]
        gen = torch.Generator().manual_seed(self.seed + offset)
        return adding_batch(size, self.seq_len, gen, self.markers)
