"""Snapshots of the recurrent matrix: orthogonality drift (scoRNN Figure 4) and eigenvalues."""

from __future__ import annotations

import torch
from lightning.pytorch import Callback

from ortholab.db.artifacts import EIGENVALUES, NPY_MEDIA_TYPE, array_to_bytes
from ortholab.training.callbacks.record import is_due, record_artifact, record_metrics


def orthogonality_error(w: torch.Tensor) -> float:
    """||W^H W - I||_F in W's own precision: the loss of orthogonality/unitarity the papers plot."""
    eye = torch.eye(w.shape[-1], dtype=w.dtype, device=w.device)
    return torch.linalg.matrix_norm(w.mH @ w - eye).item()


class _MatrixCallback(Callback):
    """Runs `snapshot(trainer, layer, step)` at the start of training and every N optimizer steps."""

    def __init__(self, every_n_steps: int | None):
        self.every_n_steps = every_n_steps

    def snapshot(self, trainer, layer, step: int) -> None:
        raise NotImplementedError

    def _maybe(self, trainer, pl_module, step: int) -> None:
        if trainer.is_global_zero and is_due(step, self.every_n_steps):
            with torch.no_grad():
                self.snapshot(trainer, pl_module.model.layer, step)

    def on_train_start(self, trainer, pl_module) -> None:
        self._maybe(trainer, pl_module, trainer.global_step)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._maybe(trainer, pl_module, trainer.global_step)


class OrthogonalityDrift(_MatrixCallback):
    """Logs `analysis/orthogonality` = ||W^H W - I||_F every `every_n_steps` optimizer steps and at the end of
    training (0: off).

    Families without a recurrent matrix (LSTM, GRU) are skipped.
    """

    def __init__(self, every_n_steps: int | None = 100):
        super().__init__(every_n_steps)

    def snapshot(self, trainer, layer, step: int) -> None:
        w = layer.recurrent_matrix()
        if w is not None:
            record_metrics(trainer, {"analysis/orthogonality": orthogonality_error(w)}, step)

    def on_train_end(self, trainer, pl_module) -> None:
        # the weights training ended with: a run shorter than every_n_steps has more than its step-0 point
        step = trainer.global_step
        if trainer.is_global_zero and self.every_n_steps and not is_due(step, self.every_n_steps):
            with torch.no_grad():
                self.snapshot(trainer, pl_module.model.layer, step)


class EigenvalueSnapshots(_MatrixCallback):
    """Stores eig(W) (an `eigenvalues` artifact) at the start, every epoch and every `every_n_steps` steps; for a
    diagonal recurrence (LRU, S4D) its diagonal, the layer's `eigenvalues()`.

    meta["near_minus_one"] counts eigenvalues within `tolerance` of -1 (scoRNN's D puts some there); a family's
    `snapshot_arrays()` (e.g. scuRNN's phases theta) is stored alongside, one artifact per entry.
    """

    def __init__(self, every_n_steps: int | None = None, every_epoch: bool = True, tolerance: float = 1e-2):
        super().__init__(every_n_steps)
        self.every_epoch = every_epoch
        self.tolerance = tolerance
        self._last_step: int | None = None  # the step last stored: one both due and ending an epoch is stored once

    def on_train_start(self, trainer, pl_module) -> None:
        self._last_step = None
        # the initial spectrum is the reference every later one is read against; a resumed run has it already, and
        # one more at the restart step would be a snapshot an uninterrupted run never took
        if trainer.is_global_zero and trainer.global_step == 0:
            with torch.no_grad():
                self.snapshot(trainer, pl_module.model.layer, trainer.global_step)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        if self.every_epoch and trainer.is_global_zero:
            with torch.no_grad():
                self.snapshot(trainer, pl_module.model.layer, trainer.global_step)

    def snapshot(self, trainer, layer, step: int) -> None:
        if step == self._last_step:
            return
        eig = layer.eigenvalues()  # eig(W), or a diagonal recurrence's diagonal (LRU, S4D) read without forming W
        if eig is None:
            return
        self._last_step = step
        eig = eig.detach().to(torch.complex128).cpu()
        near = int(((eig + 1).abs() < self.tolerance).sum())
        record_artifact(
            trainer,
            EIGENVALUES,
            "W",
            step,
            data=array_to_bytes(eig.numpy()),
            media_type=NPY_MEDIA_TYPE,
            meta={"near_minus_one": near, "tolerance": self.tolerance, "n": int(eig.numel())},
        )
        for kind, values in getattr(layer, "snapshot_arrays", dict)().items():
            record_artifact(
                trainer,
                kind,
                kind,
                step,
                data=array_to_bytes(values.detach().cpu().double().numpy()),
                media_type=NPY_MEDIA_TYPE,
                meta={},
            )
