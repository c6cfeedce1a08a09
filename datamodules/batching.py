"""Batches gathered with one indexing operation per stored tensor, then finished per batch (no per-sample Python).

A split is kept in compact storage (uint8 pixels, int32 symbol ids, bool piano rolls, variable-length
sequences end to end). The DataLoader's sampler picks a batch's indices; the dataset's `__getitems__` gathers
them all at once and its `collate` (the DataLoader's collate_fn) finishes the gathered tensors into the batch
the model sees (uint8 -> scaled float, ids -> int64). Lightning's distributed sampler replaces the sampler
as usual; the gather and the finishing stay the same.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch.utils.data import Dataset

from ortholab.datamodules.base import TaskDataModule

Batch = tuple[torch.Tensor, ...]


def _unchanged(batch: Batch) -> Batch:
    return batch


class BatchedDataset(Dataset):
    """A dataset that gathers whole batches (`__getitems__`) and finishes them in `collate`."""

    finish: Callable[[Batch], Batch]

    def __getitems__(self, indices: Sequence[int]) -> Batch:
        raise NotImplementedError

    def collate(self, gathered: Batch) -> Batch:
        return self.finish(gathered)

    def batch(self, indices: Sequence[int]) -> Batch:
        """The finished batch of these rows, as the DataLoader would serve it."""
        return self.collate(self.__getitems__(indices))

    def __getitem__(self, index: int) -> Batch:
        """Row `index` as a batch of one (loaders use __getitems__)."""
        return self.batch([index])

    @property
    def tensors(self) -> tuple[FinishedRows, ...]:
        """Row-indexable fields of the finished split, like TensorDataset.tensors: `tensors[i][:n]` is field i of
        the first n rows, finished on demand (nothing is materialised for the whole split)."""
        return tuple(FinishedRows(self, field) for field in range(len(self.batch([0]))))


class FinishedRows:
    """Field `field` of a BatchedDataset's finished rows: `rows[a:b]` or `rows[list]` gathers just those rows."""

    def __init__(self, dataset: BatchedDataset, field: int):
        self.dataset, self.field = dataset, field

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, rows) -> torch.Tensor:
        indices = range(len(self.dataset))[rows] if isinstance(rows, slice) else rows
        return self.dataset.batch(indices)[self.field]


class GatheredTensors(BatchedDataset):
    """Stored tensors of equal first dimension; a batch is one gather per tensor, then `finish`."""

    def __init__(self, *stored: torch.Tensor, finish: Callable[[Batch], Batch] = _unchanged):
        if len({len(t) for t in stored}) != 1:
            raise ValueError("all tensors of a split need the same number of rows")
        self.stored = stored
        self.finish = finish

    def __len__(self) -> int:
        return len(self.stored[0])

    def __getitems__(self, indices: Sequence[int]) -> Batch:
        rows = torch.as_tensor(indices, dtype=torch.long)
        return tuple(t[rows] for t in self.stored)


class RaggedSequences(BatchedDataset):
    """Sequences of different lengths stored end to end, predicting the step `shift` ahead.

    steps: (total steps, ...) all sequences one after the other; starts, lengths: (N,) where each begins and
    how many steps it has. Row i yields inputs steps[s : s + l - shift] and targets steps[s + shift : s + l].
    A batch is zero-padded to its longest member by one gather, with a (B, T) bool mask of valid steps.
    """

    def __init__(
        self,
        steps: torch.Tensor,
        starts: torch.Tensor,
        lengths: torch.Tensor,
        shift: int = 1,
        finish: Callable[[Batch], Batch] = _unchanged,
    ):
        if bool((lengths <= shift).any()):
            raise ValueError(f"every sequence needs more than shift = {shift} steps")
        self.steps, self.starts, self.lengths, self.shift = steps, starts, lengths, shift
        self.finish = finish

    def __len__(self) -> int:
        return len(self.starts)

    def __getitems__(self, indices: Sequence[int]) -> Batch:
        rows = torch.as_tensor(indices, dtype=torch.long)
        starts, predicted = self.starts[rows], self.lengths[rows] - self.shift
        time = torch.arange(int(predicted.max()) if len(rows) else 0)
        mask = time < predicted[:, None]
        positions = starts[:, None] + torch.minimum(time, predicted[:, None] - 1)  # padding repeats a valid step
        inputs, targets = self.steps[positions], self.steps[positions + self.shift]
        pad = ~mask.reshape(*mask.shape, *([1] * (inputs.dim() - 2)))
        return inputs.masked_fill(pad, 0), targets.masked_fill(pad, 0), mask

    @staticmethod
    def concatenate(sequences: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(steps, starts, lengths) for a list of (length, ...) tensors."""
        lengths = torch.tensor([len(s) for s in sequences], dtype=torch.long)
        starts = torch.cumsum(lengths, 0) - lengths
        return torch.cat(list(sequences)), starts, lengths


class GatheredTaskDataModule(TaskDataModule):
    """A TaskDataModule whose splits are BatchedDatasets: `GatheredTensors` over `make_split`'s tensors by
    default (`make_dataset` may return another); subclasses may override `finish_batch`."""

    def finish_batch(self, gathered: Batch) -> Batch:
        """The batch the model sees, from the gathered stored tensors (default: unchanged)."""
        return gathered

    def make_dataset(self, split: str) -> BatchedDataset:
        return GatheredTensors(*self.make_split(split), finish=self.finish_batch)
