"""Writing analysis results to the run's loggers at an exact training step (rank zero only).

One step convention for everything a run records: a point, an artifact or a checkpoint at step s is of the weights
after s optimizer steps (trainer.global_step then). So `train/loss` at s is the loss of the batch that step s + 1
trains on; fit's `val/*` after that step, the analyses at the batch's end and `best-step{s+1}.ckpt` are at s + 1.
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch import Trainer


def record_metrics(trainer: Trainer, metrics: dict[str, float], step: int) -> None:
    """Metric points at `step` (the number of optimizer steps taken), bypassing Lightning's log_every_n_steps."""
    if not trainer.is_global_zero:
        return
    for logger in trainer.loggers:
        logger.log_metrics({**metrics, "epoch": trainer.current_epoch}, step=step)


def record_artifact(trainer: Trainer, kind: str, name: str, step: int, **fields: Any) -> None:
    """An artifact for loggers that store them (db.SQLLogger); others are skipped."""
    if not trainer.is_global_zero:
        return
    for logger in trainer.loggers:
        if hasattr(logger, "log_artifact"):
            logger.log_artifact(kind, name, step=step, epoch=trainer.current_epoch, **fields)


def is_due(step: int, every_n_steps: int | None) -> bool:
    """Whether a callback running every N optimizer steps (and at step 0) runs at `step`; 0/None is off."""
    return bool(every_n_steps) and step % every_n_steps == 0
