"""The copying memory task, laid out as the official scoRNN code (scoRNN paper Section 5.1).

Input (T + 20 steps): 10 symbols from {1..8}, T - 1 blanks (0), the marker 9, 10 blanks.
Target: T + 10 blanks, then the 10 symbols. Cross-entropy is averaged over all T + 20 steps, so the
strategy "blank until the marker, then guess" scores 10 ln 8 / (T + 20): the task's baseline.
"""

from __future__ import annotations

import math

import torch
from torch.utils.data import DataLoader, IterableDataset

from ortholab.datamodules.base import (
    ResumableLoader,
    TaskDataModule,
    require_batch_size,
    require_positive,
    require_split_memory,
)
from ortholab.datamodules.spec import TaskSpec
from ortholab.errors import ConfigError

BLANK, MARKER = 0, 9


def copying_batch(
    size: int, delay: int, generator: torch.Generator, copy_len: int = 10, num_symbols: int = 8
) -> tuple[torch.Tensor, torch.Tensor]:
    """`size` sequences (inputs, targets), each (size, delay + 2 * copy_len) of symbol ids."""
    length = delay + 2 * copy_len
    data = torch.randint(1, num_symbols + 1, (size, copy_len), generator=generator)
    inputs = torch.full((size, length), BLANK, dtype=torch.long)
    inputs[:, :copy_len] = data
    inputs[:, delay + copy_len - 1] = MARKER
    targets = torch.full((size, length), BLANK, dtype=torch.long)
    targets[:, -copy_len:] = data
    return inputs, targets


def copying_baseline(delay: int, copy_len: int = 10, num_symbols: int = 8) -> float:
    """Cross-entropy of outputting blanks until the marker, then uniform guesses: 10 ln 8 / (T + 20)."""
    return copy_len * math.log(num_symbols) / (delay + 2 * copy_len)


class _FreshBatches(IterableDataset):
    """A new random batch every step, from a generator seeded per epoch and per data-parallel rank."""

    def __init__(self, task: CopyingTask):
        self.task = task

    def __len__(self) -> int:
        return self.task.train_size // self.task.batch_size

    def __iter__(self):
        t = self.task
        epoch = t.fit_progress()[0]
        rank = t.trainer.global_rank if t.trainer is not None else 0
        gen = torch.Generator().manual_seed(t.seed + 1_000_003 * (epoch + 1) + 7919 * rank)
        for _ in range(len(self)):
            yield copying_batch(t.batch_size, t.seq_len, gen, t.copy_len, t.num_symbols)


class CopyingTask(TaskDataModule):
    """seq_len is T, the number of steps between the end of the data and the marker's output window.

    train_size/val_size/test_size sequences are drawn once from seeds seed, seed + 1, seed + 2 (train
    batches taken in order, as the official code); fresh_batches draws a new training batch every step
    instead, train_size // batch_size batches per epoch. output_classes: 9 (the scoRNN code: blank and the 8
    symbols) or 10 (the SRNN code, whose logits include the marker's id, never a target).
    """

    generated_splits = True

    def __init__(
        self,
        seq_len: int = 100,
        copy_len: int = 10,
        num_symbols: int = 8,
        train_size: int = 20_000,
        val_size: int = 1_000,
        test_size: int = 1_000,
        fresh_batches: bool = False,
        seed: int = 5544,
        batch_size: int = 20,
        eval_batch_size: int | None = 100,
        shuffle: bool = False,
        num_workers: int = 0,
        output_classes: int = 9,
    ):
        super().__init__(batch_size, eval_batch_size, shuffle, num_workers)
        if isinstance(output_classes, bool) or output_classes not in (9, 10):
            raise ConfigError(
                f"data.output_classes = {output_classes!r}; 9 (blank and the 8 symbols, the scoRNN code) or 10 "
                f"(with the marker's id, the SRNN code)"
            )
        self.seq_len = require_positive(seq_len, "seq_len")
        self.copy_len = require_positive(copy_len, "copy_len")
        self.num_symbols = require_positive(num_symbols, "num_symbols")
        if num_symbols > 8:
            raise ConfigError(f"data.num_symbols = {num_symbols}; at most 8 (ids 1-8 are data, 9 is the marker)")
        self.train_size = require_positive(train_size, "train_size")
        self.val_size = require_positive(val_size, "val_size")
        self.test_size = require_positive(test_size, "test_size")
        require_batch_size(batch_size, "batch_size", train_size, "train_size")
        built = {"val_size": val_size, "test_size": test_size, **({} if fresh_batches else {"train_size": train_size})}
        require_split_memory(built, 16 * (seq_len + 2 * copy_len) + 8 * copy_len)  # inputs and targets, int64
        self.fresh_batches = fresh_batches
        self.seed = seed
        self.spec = TaskSpec(
            name="copying",
            input_size=10,
            output_size=output_classes,
            readout="every_step",
            loss="cross_entropy",
            symbolic=True,
            baseline=copying_baseline(seq_len, copy_len, num_symbols),
            description=f"copy {copy_len} symbols after a delay of T={seq_len} (scoRNN code layout)",
        )

    def make_split(self, split: str) -> tuple[torch.Tensor, torch.Tensor]:
        size, offset = {"train": (self.train_size, 0), "val": (self.val_size, 1), "test": (self.test_size, 2)}[split]
        gen = torch.Generator().manual_seed(self.seed + offset)
        return copying_batch(size, self.seq_len, gen, self.copy_len, self.num_symbols)

    def train_dataloader(self) -> DataLoader:
        if self.fresh_batches:
            return ResumableLoader(_FreshBatches(self), batch_size=None, progress=self.fit_progress)
        return super().train_dataloader()
