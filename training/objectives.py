"""What a task's loss is and which metrics go with it, by the TaskSpec's `loss` name.

An objective turns model outputs, targets and an optional mask (B, T) of valid steps into the loss and
updates its torchmetrics. A new kind of loss is one class here plus one line in OBJECTIVES.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
import torchmetrics
from torch import nn

from datamodules.spec import TaskSpec


class Objective(nn.Module):
    def __init__(self, spec: TaskSpec):
        super().__init__()
        self.spec = spec

    def loss(self, outputs: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        raise NotImplementedError

    def metrics(self) -> dict[str, torchmetrics.Metric]:
        """Fresh metrics logged as `<stage>/<name>` next to `<stage>/loss`."""
        return {}

    def update(self, metrics: dict[str, torchmetrics.Metric], outputs, targets, mask=None) -> None:
        """Call each metric on the batch (its forward: accumulates and keeps the batch value for step logging)."""


class CrossEntropy(Objective):
    """Softmax cross-entropy averaged over every predicted step (and sequence); accuracy alongside."""

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


OBJECTIVES: dict[str, type[Objective]] = {
    "cross_entropy": CrossEntropy,
    "mse": MeanSquaredError,
}
