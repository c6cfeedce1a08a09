"""The LightningDataModule every task derives from: seeded in-memory tensors served in fixed order."""
from __future__ import annotations

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, TensorDataset

from datamodules.spec import TaskSpec
from models.base import ConfigError


def require_positive(value: int, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"data.{key} must be a positive integer, got {value!r}; set --data.{key} to 1 or more")
    return value


class TaskDataModule(pl.LightningDataModule):
    """Base of every task. Subclasses set `spec` and build the train/val/test tensors in `make_split`."""

    spec: TaskSpec

    def __init__(self, batch_size: int, eval_batch_size: int | None = None, shuffle: bool = False,
                 num_workers: int = 0):
        super().__init__()
        self.batch_size = require_positive(batch_size, "batch_size")
        self.eval_batch_size = require_positive(eval_batch_size or batch_size, "eval_batch_size")
        self.shuffle = shuffle
        self.num_workers = num_workers
        self._splits: dict[str, TensorDataset] = {}

    def make_split(self, split: str) -> tuple[torch.Tensor, ...]:
        """(inputs, targets) of one split: 'train', 'val' or 'test'."""
        raise NotImplementedError

    def dataset(self, split: str) -> TensorDataset:
        if split not in self._splits:
            self._splits[split] = TensorDataset(*self.make_split(split))
        return self._splits[split]

    def _loader(self, split: str, batch_size: int, shuffle: bool) -> DataLoader:
        return DataLoader(self.dataset(split), batch_size=batch_size, shuffle=shuffle,
                          num_workers=self.num_workers, persistent_workers=self.num_workers > 0)

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", self.batch_size, self.shuffle)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", self.eval_batch_size, False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", self.eval_batch_size, False)
