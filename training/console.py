"""What a training run prints: Lightning's rich progress bar with the step budget, and none of the noise that
is not ours (a third-party logging tip, a deprecation inside Lightning itself)."""
from __future__ import annotations

import logging
import warnings

from lightning.pytorch.callbacks import RichProgressBar


class StepBudgetProgressBar(RichProgressBar):
    """Lightning's rich bar; a run bounded by steps, not epochs, reads 'Epoch 0 · step budget 1000' where
    Lightning would print 'Epoch 0/-2' (max_epochs = -1 minus one)."""

    def _get_train_description(self, current_epoch: int) -> str:
        trainer = self.trainer
        if trainer.max_steps > 0 and (trainer.max_epochs is None or trainer.max_epochs < 0):
            return f"Epoch {current_epoch} · step budget {trainer.max_steps}"
        return super()._get_train_description(current_epoch)


class _DropMessages(logging.Filter):
    def __init__(self, *fragments: str):
        super().__init__()
        self.fragments = fragments

    def filter(self, record: logging.LogRecord) -> bool:
        return not any(fragment in record.getMessage() for fragment in self.fragments)


def quiet_third_party_noise() -> None:
    """Drop Lightning's advertisement for its cloud logger and the deprecation warning its own pytree helper
    raises under newer torch (neither is actionable for an OrthoLab user)."""
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero"):
        logging.getLogger(name).addFilter(_DropMessages("litlogger"))
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)` is deprecated")
