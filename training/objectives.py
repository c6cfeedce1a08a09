"""What a task's loss is and which metrics go with it, by the TaskSpec's `loss` name.

An objective turns model outputs, targets and an optional mask (B, T) of valid steps into the loss and
updates its torchmetrics. A new kind of loss is one class here plus one line in OBJECTIVES; a loss of your own,
outside this package, is registered with register_objective from a module named by $ORTHOLAB_CONFIG_MODULES.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
import torchmetrics
from torch import nn

from ortholab.datamodules.spec import TaskSpec


class Objective(nn.Module):
    averages_valid_steps = False  # True: the loss is a mean over the batch's valid steps (its mask)
    classes = False  # True: the outputs are one score per class (at least 2), the targets class ids
    prediction_kind = "values"  # what `ortholab predict` writes, from `predictions(outputs)`

    def __init__(self, spec: TaskSpec):
        super().__init__()
        self.spec = spec

    def loss(self, outputs: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """The batch's loss, a scalar tensor that training backpropagates: the mean over the terms loss_weight counts.
        outputs are (B, T, output_size) for `readout: every_step`, (B, output_size) for `last_step`; the targets as
        make_split returns them; mask the (B, T) bool valid steps, or None."""
        raise NotImplementedError

    def loss_weight(self, targets: torch.Tensor, mask: torch.Tensor | None = None) -> int | torch.Tensor:
        """The weight of a batch's loss in its split's loss: how many terms the loss averages, so that a split's
        loss is the mean over all its terms (its valid steps, or its sequences when every one counts alike)."""
        return _valid_steps(targets, mask) if self.averages_valid_steps else targets.shape[0]

    def metrics(self) -> dict[str, torchmetrics.Metric]:
        """Fresh metrics logged as `<stage>/<name>` next to `<stage>/loss`."""
        return {}

    def update(self, metrics: dict[str, torchmetrics.Metric], outputs, targets, mask=None) -> None:
        """Call each metric on the batch (its forward: accumulates and keeps the batch value for step logging)."""

    @classmethod
    def predictions(cls, outputs: torch.Tensor) -> torch.Tensor:
        """What `ortholab predict` records of the outputs (`prediction_kind`): class scores for a classifier (the
        softmax of the cross-entropy's model), else the outputs as they are."""
        return outputs.float().softmax(dim=-1) if cls.classes else outputs.float()


class CrossEntropy(Objective):
    """Softmax cross-entropy averaged over every predicted step (and sequence); accuracy alongside."""

    classes = True
    prediction_kind = "class_scores"

    def loss(self, outputs, targets, mask=None):
        return F.cross_entropy(outputs.reshape(-1, outputs.shape[-1]), targets.reshape(-1))

    def metrics(self):
        return {"acc": torchmetrics.classification.MulticlassAccuracy(self.spec.output_size, average="micro")}

    def update(self, metrics, outputs, targets, mask=None):
        metrics["acc"](outputs.reshape(-1, outputs.shape[-1]), targets.reshape(-1))


class MeanSquaredError(Objective):
    """Mean squared error over every output entry."""

    def loss(self, outputs, targets, mask=None):
        return F.mse_loss(outputs, targets)


def _valid(values: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """The entries of per-step values (B, T, ...) at valid steps (mask (B, T)), or all of them."""
    return values[mask] if mask is not None else values.reshape(-1, *values.shape[2:])


def _valid_steps(targets: torch.Tensor, mask: torch.Tensor | None) -> int | torch.Tensor:
    """How many steps of a batch are valid: the terms a loss averaged over valid steps has (a tensor: no sync)."""
    return mask.sum() if mask is not None else targets.shape[0] * targets.shape[1]


class FrameNLL(Objective):
    """Binary piano-roll frames: NLL per time step = sum over the keys of the Bernoulli NLL, mean over valid steps.

    `nll` is the same quantity over a whole split (every valid step weighs the same), as Bai et al.'s evaluation.
    """

    averages_valid_steps = True
    prediction_kind = "key_probabilities"

    @classmethod
    def predictions(cls, outputs):
        return outputs.float().sigmoid()  # each key's probability, from its Bernoulli logit

    def step_nll(self, outputs, targets):
        return F.binary_cross_entropy_with_logits(outputs, targets, reduction="none").sum(dim=-1)

    def loss(self, outputs, targets, mask=None):
        return _valid(self.step_nll(outputs, targets), mask).mean()

    def metrics(self):
        return {"nll": torchmetrics.MeanMetric()}

    def update(self, metrics, outputs, targets, mask=None):
        metrics["nll"](_valid(self.step_nll(outputs, targets), mask))


class CrossEntropyBits(Objective):
    """Symbol prediction at every valid step: cross-entropy in bits (CE / ln 2), the loss and `bpc` over a split."""

    averages_valid_steps = True
    classes = True
    prediction_kind = "class_scores"

    def step_bits(self, outputs, targets):
        return F.cross_entropy(outputs.transpose(1, -1), targets, reduction="none") / math.log(2)

    def loss(self, outputs, targets, mask=None):
        return _valid(self.step_bits(outputs, targets), mask).mean()

    def metrics(self):
        return {
            "bpc": torchmetrics.MeanMetric(),
            "acc": torchmetrics.classification.MulticlassAccuracy(self.spec.output_size, average="micro"),
        }

    def update(self, metrics, outputs, targets, mask=None):
        metrics["bpc"](_valid(self.step_bits(outputs, targets), mask))
        metrics["acc"](_valid(outputs, mask), _valid(targets, mask))


class NormalizedMSE(Objective):
    """Regression trained on MSE (over valid steps); `nmse` = MSE / variance of the targets over a whole split,
    so predicting the targets' mean scores 1 (torchmetrics' RelativeSquaredError)."""

    averages_valid_steps = True

    def loss(self, outputs, targets, mask=None):
        return F.mse_loss(_valid(outputs, mask), _valid(targets, mask))

    def metrics(self):
        return {"nmse": torchmetrics.regression.RelativeSquaredError()}

    def update(self, metrics, outputs, targets, mask=None):
        metrics["nmse"](_valid(outputs, mask).reshape(-1), _valid(targets, mask).reshape(-1))


class FrameMSE(Objective):
    """Spectral frames at every valid step (speech): squared error summed over valid frames x bins / their count
    (expRNN's corrected masked MSE); the loss and `mse_valid_frames`."""

    averages_valid_steps = True

    def loss(self, outputs, targets, mask=None):
        return F.mse_loss(_valid(outputs, mask), _valid(targets, mask))

    def metrics(self):
        return {"mse_valid_frames": torchmetrics.MeanSquaredError()}

    def update(self, metrics, outputs, targets, mask=None):
        metrics["mse_valid_frames"](_valid(outputs, mask).reshape(-1), _valid(targets, mask).reshape(-1))


class PaddedFrameMSE(FrameMSE):
    """Wisdom et al.'s (and scuRNN's) frame MSE: masked squared error averaged over ALL entries of the padded batch,
    padded steps counting as zero error (the datamodule pads every batch to the split's longest utterance, so
    `mse_with_padding` over a split is their number); `mse_valid_frames` alongside."""

    averages_valid_steps = False  # every padded step counts, and every batch has the split's length

    def padded_errors(self, outputs, targets, mask):
        errors = (outputs - targets) ** 2
        return errors if mask is None else errors * mask[..., None]

    def loss(self, outputs, targets, mask=None):
        return self.padded_errors(outputs, targets, mask).mean()

    def metrics(self):
        return {**super().metrics(), "mse_with_padding": torchmetrics.MeanMetric()}

    def update(self, metrics, outputs, targets, mask=None):
        super().update(metrics, outputs, targets, mask)
        metrics["mse_with_padding"](self.padded_errors(outputs, targets, mask).reshape(-1))


OBJECTIVES: dict[str, type[Objective]] = {
    "cross_entropy": CrossEntropy,
    "mse": MeanSquaredError,
    "frame_nll": FrameNLL,
    "cross_entropy_bits": CrossEntropyBits,
    "nmse": NormalizedMSE,
    "frame_mse": FrameMSE,
    "frame_mse_padded": PaddedFrameMSE,
}


def register_objective(name: str, cls: type[Objective]) -> None:
    """Train a task whose TaskSpec says `loss=name` with `cls`, as OrthoLab's own losses (call it in a module named by
    $ORTHOLAB_CONFIG_MODULES, which every training and listing command imports first)."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"name must be a short identifier such as 'mean_abs_error', not {name!r}")
    if not (isinstance(cls, type) and issubclass(cls, Objective)):
        raise TypeError(
            f"cls must be a subclass of ortholab.training.objectives.Objective, as every loss is; got {cls!r}"
        )
    if OBJECTIVES.get(name, cls) is not cls:
        raise ValueError(f"name {name!r} is OrthoLab's {OBJECTIVES[name].__name__} already; choose another")
    OBJECTIVES[name] = cls


__all__ = ["OBJECTIVES", "Objective", "register_objective"]
