"""The LightningDataModule every task derives from: seeded in-memory tensors served in fixed order."""

from __future__ import annotations

from typing import Callable, Literal

import lightning.pytorch as pl
import numpy as np
import torch
from torch.utils.data import DataLoader, Sampler, TensorDataset

from ortholab.datamodules.sharding import EvaluationShard
from ortholab.datamodules.spec import TaskSpec
from ortholab.errors import ConfigError

MAX_BATCH_SIZE = 2**20  # sequences in one batch: far above any paper's (1000), far below what memory refuses


def require_positive(value: int, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"data.{key} must be a positive integer, got {value!r}; set --data.{key} to 1 or more")
    return value


def require_batch_size(value: int, key: str, split_size: int | None = None, split_key: str = "") -> int:
    """A positive batch size no larger than MAX_BATCH_SIZE nor (when known) the split it is drawn from."""
    require_positive(value, key)
    if value > MAX_BATCH_SIZE:
        raise ConfigError(
            f"data.{key} = {value} sequences in one batch is beyond any memory; set --data.{key} to at "
            f"most {MAX_BATCH_SIZE} (the papers use 20 to 1000)"
        )
    if split_size is not None and value > split_size:
        raise ConfigError(
            f"data.{key} = {value} is larger than the split it batches (data.{split_key} = "
            f"{split_size}); set --data.{key} to at most {split_size}, or raise --data.{split_key}"
        )
    return value


def require_split_memory(sizes: dict[str, int], bytes_each: int) -> None:
    """Each split built in memory (data.<key> sequences of `bytes_each` bytes) fits in this machine's memory; else
    one line naming the key, before anything is built or recorded."""
    import os

    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # not a POSIX system: no bound known
        return
    for key, size in sizes.items():
        if size * bytes_each > memory:
            raise ConfigError(
                f"data.{key} = {size} sequences need {size * bytes_each / 2**30:.3g} GiB of memory "
                f"({bytes_each} bytes each), more than this machine's {memory / 2**30:.3g} GiB; lower "
                f"--data.{key} to at most {memory // bytes_each}"
            )


def require_workers(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(
            f"data.num_workers must be 0 (load in the training process) or a positive number of loader "
            f"processes, got {value!r}; set --data.num_workers 0"
        )
    return value


class ResumableLoader(DataLoader):
    """A DataLoader that Lightning can resume mid-epoch (it saves `state_dict()` in checkpoints).

    Its state is how many batches of the current pass were trained on; the first pass after
    `load_state_dict` skips those, so a resumed run sees the batches an uninterrupted one would. With
    shuffling, each epoch's order comes from a generator seeded with seed + epoch, so it is reproducible too.
    """

    def __init__(self, *args, progress: Callable[[], tuple[int, int]] | None = None, seed: int = 0, **kwargs):
        if kwargs.get("shuffle"):
            kwargs.setdefault("generator", torch.Generator())
        super().__init__(*args, **kwargs)
        self.progress = progress  # () -> (epoch, batches of this epoch completed)
        self.seed = seed
        self._skip = 0

    def state_dict(self) -> dict:
        completed = self.progress()[1] if self.progress else 0
        return {"completed": completed % len(self)}  # a whole epoch done means the next one starts afresh

    def load_state_dict(self, state: dict) -> None:
        self._skip = state["completed"]

    def __iter__(self):
        if self.generator is not None and self.progress is not None:
            self.generator.manual_seed(self.seed + self.progress()[0])
        skip, self._skip = self._skip, 0
        iterator = super().__iter__()
        for _ in range(skip):
            next(iterator)
        return iterator


class NumpyScriptOrder(Sampler[int]):
    """Epoch e's order as a script that calls `np.random.seed(seed)` once and `np.random.shuffle(np.arange(n))` at
    the start of every epoch, drawing nothing else from numpy (the R-Transformer music script, audio/experiment.py
    lines 32 and 104). numpy's legacy RandomState stream is frozen (NEP 19): the same order on any numpy and CPU.
    The epoch comes from `progress`, so a resumed run replays the shuffles before it."""

    def __init__(self, size: int, seed: int, progress: Callable[[], tuple[int, int]]):
        self.size, self.seed, self.progress = size, seed, progress

    def __len__(self) -> int:
        return self.size

    def __iter__(self):
        rng, order = np.random.RandomState(self.seed), None
        for _ in range(self.progress()[0] + 1):  # the script's shuffles of epochs 0..e, each of a fresh arange
            order = np.arange(self.size, dtype="int32")
            rng.shuffle(order)
        return iter(order.tolist())


def check_finite(dataset, where: str):
    """The dataset, once its tensors are known to hold no NaN or infinity (checked once per split, not per batch)."""
    names = ("inputs", "targets", "mask")
    if isinstance(getattr(dataset, "stored", None), tuple):  # gathered per batch (datamodules/batching.py)
        tensors = dataset.stored
    elif isinstance(getattr(dataset, "steps", None), torch.Tensor):  # ragged sequences end to end
        names, tensors = ("sequences",), (dataset.steps,)
    else:
        tensors = getattr(dataset, "tensors", ())
    for name, tensor in zip(names, tensors):
        if isinstance(tensor, torch.Tensor) and tensor.is_floating_point() and not bool(tensor.isfinite().all()):
            bad = ~torch.isfinite(tensor)
            first = int(bad.reshape(len(tensor), -1).any(dim=1).nonzero()[0])
            raise ConfigError(
                f"{where}: the {name} hold {int(bad.sum())} NaN/infinite values (first in sample "
                f"{first}); clean or impute the data source before training"
            )
    return dataset


class TaskDataModule(pl.LightningDataModule):
    """Base of every task. Subclasses set `spec` and build the train/val/test tensors in `make_split`."""

    spec: TaskSpec
    generated_splits: bool = False  # the splits are drawn to any size (train_size, val_size, test_size): a smoke run
    # of a paper's row (`reproduce --scale cpu-smoke`) shrinks them
    no_baseline: str | None = None  # why the task has no baseline at all (its `-` in `ortholab list tasks` is not one
    # its data decides)

    def __init__(
        self,
        batch_size: int,
        eval_batch_size: int | None = None,
        shuffle: bool | Literal["numpy"] = False,
        num_workers: int = 0,
    ):
        super().__init__()
        self.batch_size = require_batch_size(batch_size, "batch_size")
        self.eval_batch_size = require_batch_size(eval_batch_size or batch_size, "eval_batch_size")
        if not (isinstance(shuffle, bool) or shuffle == "numpy"):
            raise ConfigError(
                f"data.shuffle = {shuffle!r}; choose true (a torch generator seeded with seed + epoch), "
                f"false (the stored order) or numpy (a script's np.random.seed(seed) and one "
                f"np.random.shuffle per epoch)"
            )
        self.shuffle = shuffle
        self.num_workers = require_workers(num_workers)
        self._splits: dict[str, TensorDataset] = {}

    def check_data(self) -> None:
        """A ConfigError when the task's data is not there (cheap: nothing is read); the CLI calls it before the
        run is recorded, so a missing corpus records nothing. Tasks whose data is read when built need none."""

    def make_split(self, split: str) -> tuple[torch.Tensor, ...]:
        """(inputs, targets) of one split: 'train', 'val' or 'test'."""
        raise NotImplementedError

    def make_dataset(self, split: str):
        """The Dataset of one split (a TensorDataset of `make_split`'s tensors unless a subclass says otherwise)."""
        tensors = self.make_split(split)
        if not isinstance(tensors, (tuple, list)):  # a bare tensor would be unpacked into one tensor per sequence
            raise ConfigError(
                f"{type(self).__name__} ({split} split): make_split returned a {type(tensors).__name__}, not a "
                f"tuple; return (inputs, targets) or (inputs, targets, mask) (docs/tasks.md#a-task-of-your-own)"
            )
        return TensorDataset(*tensors)

    def dataset(self, split: str):
        if split not in self._splits:
            self._splits[split] = check_finite(self.make_dataset(split), f"{type(self).__name__} ({split} split)")
        return self._splits[split]

    # evaluate sequences of different lengths in batches of similar length (val and test; predict keeps the stored
    # order its outputs are indexed by): a batch pads to its longest, so the split's order sets the padded work and
    # leaves the metrics, means over every valid step of the split, unchanged
    evaluate_by_length = False

    def _loader(
        self, split: str, batch_size: int, shuffle: bool, by_length: bool = False, shard: bool = False
    ) -> DataLoader:
        data = self.dataset(split)
        order = data.lengths.argsort(stable=True).tolist() if by_length and self.evaluate_by_length else None
        world_size = getattr(self.trainer, "world_size", 1) if self.trainer is not None else 1
        if shard and world_size > 1:  # each sequence on one process, none repeated (datamodules/sharding.py)
            positions = order if order is not None else range(len(data))
            order = EvaluationShard(positions, self.trainer.global_rank, world_size, split)
        return DataLoader(
            data,
            batch_size=batch_size,
            shuffle=shuffle,
            sampler=order,
            collate_fn=getattr(data, "collate", None),
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
        )

    def fit_progress(self) -> tuple[int, int]:
        """(current epoch, batches of it trained on) of the trainer this datamodule serves. `processed`, not
        `completed`: a checkpoint written in on_train_batch_end (Lightning counts the batch completed only after it)
        has trained on the batch, and a resume must not train on it again."""
        if self.trainer is None:
            return 0, 0
        return self.trainer.current_epoch, self.trainer.fit_loop.epoch_loop.batch_progress.current.processed

    def train_dataloader(self) -> DataLoader:
        data = self.dataset("train")  # a dataset may finish its batches itself (`collate`, datamodules/batching.py)
        seed = getattr(self, "seed", 0)
        order = (
            dict(sampler=NumpyScriptOrder(len(data), seed, self.fit_progress))
            if self.shuffle == "numpy"
            else dict(shuffle=self.shuffle, seed=seed)
        )
        return ResumableLoader(
            data,
            batch_size=self.batch_size,
            collate_fn=getattr(data, "collate", None),
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            progress=self.fit_progress,
            **order,
        )

    # set by `ortholab fit --test_every_validation`: the test split is evaluated with every validation, as the
    # scoRNN/scuRNN papers report the best test figure over the epoch ends (logged as test/*)
    test_every_validation = False

    def check_evaluation_shards(self, world_size: int, stage: str | None) -> None:
        """ConfigError when a split `stage` evaluates holds fewer sequences than the run has processes (each
        process evaluates its own share, datamodules/sharding.py); the CLI asks before the run is recorded."""
        evaluated = {"fit": ["val", *(["test"] if self.test_every_validation else [])], "validate": ["val"]}
        for split in {**evaluated, "test": ["test"]}.get(stage or "", []):
            EvaluationShard(range(len(self.dataset(split))), 0, world_size, split)  # refuses an idle process

    def val_dataloader(self) -> DataLoader | list[DataLoader]:
        val = self._loader("val", self.eval_batch_size, False, by_length=True, shard=True)
        return [val, self.test_dataloader()] if self.test_every_validation else val

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", self.eval_batch_size, False, by_length=True, shard=True)

    predict_split = "test"  # set by `ortholab predict --predict_split` (training/callbacks/predictions.py)

    def predict_dataloader(self) -> DataLoader:
        return self._loader(self.predict_split, self.eval_batch_size, False)
