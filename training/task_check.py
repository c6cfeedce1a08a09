"""A task's first batch checked against its TaskSpec before a run is recorded, and its symbol and class ids over the
whole split: a task of one's own that returns inputs, targets or a mask of the wrong shape or kind, or an id out of
range, is one line naming the split, the tensor and the fix, not a traceback from inside the model or the loss
(docs/tasks.md#a-task-of-your-own)."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader

from ortholab.datamodules.base import TaskDataModule
from ortholab.datamodules.spec import TaskSpec
from ortholab.errors import ConfigError
from ortholab.training.objectives import OBJECTIVES

FIX = "docs/tasks.md#a-task-of-your-own"


LOADERS = {"train": "train_dataloader", "val": "val_dataloader", "test": "test_dataloader"}


def splits_checked(datamodule, stage: str | None, predict_split: str = "test") -> list[str]:
    """The splits a command reads (training: train and val), less those the task serves through a loader of its own
    (CopyingTask's fresh batches, a user's streamed data): what such a loader yields is the task's to say."""
    splits = {"fit": ["train", "val"], "validate": ["val"], "test": ["test"], "predict": [predict_split]}
    loaders = {**LOADERS, **({predict_split: "predict_dataloader"} if stage == "predict" else {})}
    return [
        split
        for split in splits.get(stage or "", [])
        if getattr(type(datamodule), loaders[split]) is getattr(TaskDataModule, loaders[split])
    ]


def check_task(datamodule, stage: str | None, predict_split: str = "test") -> None:
    """ConfigError (one line) when the task's main metric is one no objective logs, or the first batch of a split
    `stage` reads does not match its TaskSpec."""
    spec, task = datamodule.spec, type(datamodule).__name__
    if isinstance(datamodule, TaskDataModule) and not hasattr(datamodule, "_splits"):  # set by TaskDataModule.__init__
        raise ConfigError(
            f"{task}.__init__ does not call super().__init__(batch_size): the task's own set-up (its splits and "
            f"loaders) never ran; call it first in {task}.__init__ ({FIX})"
        )
    check_main_metric(spec, task)
    for split in splits_checked(datamodule, stage, predict_split):
        check_batch(first_batch(datamodule, split, task), spec, f"{task} ({split} split)")
        check_id_ranges(datamodule.dataset(split), spec, f"{task} ({split} split)")


def check_main_metric(spec: TaskSpec, task: str) -> None:
    """The main metric (the best checkpoint's monitor) is `val/loss` or a metric the task's objective logs."""
    objective = OBJECTIVES.get(spec.loss)
    if objective is None:  # an unknown loss: the model refuses it in one line of its own
        return
    logged = ["val/loss", *(f"val/{name}" for name in objective(spec).metrics())]
    if spec.main_metric not in logged:
        raise ConfigError(
            f"{task}: TaskSpec main_metric = {spec.main_metric!r} is not logged by loss {spec.loss!r}; "
            f"choose one of {logged} ({FIX})"
        )


def first_batch(datamodule, split: str, task: str):
    """The first two sequences of `split`, batched as the split's loaders batch them."""
    try:
        data = datamodule.dataset(split)
    except NotImplementedError:
        raise ConfigError(
            f"{task} does not define make_split(split): return the split's (inputs, targets) tensors from it, or "
            f"its Dataset from make_dataset(split) ({FIX})"
        ) from None
    if len(data) == 0:
        raise ConfigError(f"{task} ({split} split) holds no sequences; make_split must return at least one")
    loader = DataLoader(data, batch_size=min(2, len(data)), collate_fn=getattr(data, "collate", None))
    return next(iter(loader))


def check_id_ranges(data, spec: TaskSpec, where: str) -> None:
    """Symbol and class ids of the whole split (a TensorDataset of make_split's tensors, its first batch already
    checked) within the vocabulary and the classes, at the steps its mask keeps: an id out of range further into a
    split otherwise reaches torch's embedding or cross_entropy as an index error mid-training."""
    tensors = getattr(data, "tensors", None)
    if not isinstance(tensors, tuple) or len(tensors) not in (2, 3):
        return
    if not all(isinstance(tensor, torch.Tensor) for tensor in tensors):  # rows finished on demand (batching.py)
        return
    inputs, targets, mask = (*tensors, None)[:3]
    for name, ids, size, key in (
        ("input ids", inputs, spec.input_size if spec.symbolic else None, "input_size"),
        ("target classes", targets, spec.output_size if _classes(spec) else None, "output_size"),
    ):
        if size is None or ids.is_floating_point() or ids.is_complex() or ids.numel() == 0:
            continue
        out = (ids < 0) | (ids >= size)
        masked = mask is not None and tuple(mask.shape) == tuple(ids.shape)
        out, kept = (out & mask, ids[mask]) if masked else (out, ids)  # padding past the mask may hold any id
        if bool(out.any()):
            sequence = int(out.reshape(len(ids), -1).any(dim=1).nonzero()[0])
            low, high = int(kept.min()), int(kept.max())
            _refuse(
                where,
                f"the {name} run from {low} to {high} ({int(out.sum())} out of range, first in sequence {sequence})",
                f"ids in 0..{size - 1} ({key} = {size})",
                f"set {key} = {max(high + 1, size)} or map the ids into that range",
            )


def _shape(tensor: torch.Tensor) -> str:
    return str(tuple(tensor.shape))  # (2,) (2, 50, 1)


def _refuse(where: str, what: str, expected: str, fix: str) -> None:
    raise ConfigError(f"{where}: {what}; the TaskSpec expects {expected}; {fix} ({FIX})")


def check_batch(batch, spec: TaskSpec, where: str) -> None:
    """(inputs, targets) or (inputs, targets, mask) as the model and the loss the TaskSpec names read them."""
    if not isinstance(batch, (tuple, list)) or len(batch) not in (2, 3):
        kind = f"{len(batch)} items" if isinstance(batch, (tuple, list)) else type(batch).__name__
        raise ConfigError(f"{where}: a batch is (inputs, targets) or (inputs, targets, mask), got {kind} ({FIX})")
    for name, tensor in zip(("inputs", "targets", "mask"), batch):
        if not isinstance(tensor, torch.Tensor):
            raise ConfigError(f"{where}: the {name} are a {type(tensor).__name__}, not a torch.Tensor ({FIX})")
    check_inputs(batch[0], spec, where)
    steps = batch[0].shape[1]
    check_targets(batch[1], spec, where, steps)
    if len(batch) == 3:
        mask = batch[2]
        if mask.dtype != torch.bool or tuple(mask.shape) != tuple(batch[0].shape[:2]):
            _refuse(
                where,
                f"the mask is {mask.dtype} {_shape(mask)}",
                f"a bool (batch, steps) = {tuple(batch[0].shape[:2])} mask, True at valid steps",
                "return mask.bool() of that shape from make_split, or no mask",
            )


def check_inputs(inputs: torch.Tensor, spec: TaskSpec, where: str) -> None:
    """Symbol ids (batch, steps) below input_size, or real values (batch, steps, input_size)."""
    if spec.symbolic:
        if inputs.dim() != 2 or inputs.is_floating_point() or inputs.is_complex():
            _refuse(
                where,
                f"the inputs are {inputs.dtype} {_shape(inputs)}",
                "symbol ids: an integer (batch, steps) tensor (symbolic = True)",
                "return .long() ids of that shape, or set symbolic = False for real inputs",
            )
        low, high = int(inputs.min()), int(inputs.max())
        if low < 0 or high >= spec.input_size:
            _refuse(
                where,
                f"the input ids run from {low} to {high}",
                f"ids in 0..{spec.input_size - 1} (input_size = {spec.input_size}, the vocabulary's size)",
                f"set input_size = {max(high + 1, spec.input_size)} or map the ids into that range",
            )
        return
    if inputs.dim() != 3 or inputs.shape[-1] != spec.input_size or not inputs.is_floating_point():
        channels = f"set input_size = {inputs.shape[-1]}, or " if inputs.dim() == 3 else "add the channel axis: "
        _refuse(
            where,
            f"the inputs are {inputs.dtype} {_shape(inputs)}",
            f"real values (batch, steps, {spec.input_size}) (input_size = {spec.input_size})",
            f"{channels}return float inputs of that shape (symbolic = True for integer ids (batch, steps))",
        )


def _classes(spec: TaskSpec) -> bool:
    """Whether the task's loss takes class ids as targets (its objective says so)."""
    objective = OBJECTIVES.get(spec.loss)
    return bool(objective and objective.classes)


def check_targets(targets: torch.Tensor, spec: TaskSpec, where: str, steps: int) -> None:
    """Class ids (cross-entropy) or values (every other loss), one per sequence or one per step as the readout."""
    per_step = spec.readout == "every_step"
    if _classes(spec):
        expected = (len(targets), steps) if per_step else (len(targets),)
        if targets.is_floating_point() or targets.is_complex() or tuple(targets.shape) != expected:
            _refuse(
                where,
                f"the targets are {targets.dtype} {_shape(targets)}",
                f"class ids for loss {spec.loss!r} and readout {spec.readout!r}: an integer "
                f"{'(batch, steps)' if per_step else '(batch,)'} = {expected} tensor",
                "return .long() class ids of that shape from make_split",
            )
        low, high = int(targets.min()), int(targets.max())
        if low < 0 or high >= spec.output_size:
            _refuse(
                where,
                f"the target classes run from {low} to {high}",
                f"classes 0..{spec.output_size - 1} (output_size = {spec.output_size})",
                f"set output_size = {max(high + 1, spec.output_size)} or number the classes from 0",
            )
        return
    expected = (len(targets), *((steps,) if per_step else ()), spec.output_size)
    if not targets.is_floating_point() or tuple(targets.shape) != expected:
        layout = "(batch, steps, output_size)" if per_step else "(batch, output_size)"
        _refuse(
            where,
            f"the targets are {targets.dtype} {_shape(targets)}",
            f"real values for loss {spec.loss!r} and readout {spec.readout!r}: {layout} = {expected}",
            "return float targets of that shape from make_split (a last-step target keeps its channel axis: "
            "y[:, None] for one value)",
        )
