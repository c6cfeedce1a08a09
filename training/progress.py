"""What a training run prints: Lightning's rich progress bar, with the step budget of a run bounded by steps."""
from __future__ import annotations

from lightning.pytorch.callbacks import RichProgressBar


class StepBudgetProgressBar(RichProgressBar):
    """Lightning's rich bar; a run bounded by steps, not epochs, reads 'Epoch 0 · step budget 1000' where
    Lightning would print 'Epoch 0/-2' (max_epochs = -1 minus one)."""

    def _get_train_description(self, current_epoch: int) -> str:
        trainer = self.trainer
        if trainer.max_steps > 0 and (trainer.max_epochs is None or trainer.max_epochs < 0):
            return f"Epoch {current_epoch} · step budget {trainer.max_steps}"
        return super()._get_train_description(current_epoch)
