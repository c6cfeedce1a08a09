"""`checkpoints/last.ckpt`: the weights a resume continues from, kept at every validation and when training ends."""

from __future__ import annotations

from lightning.pytorch.callbacks import ModelCheckpoint


class LastCheckpoint(ModelCheckpoint):
    """`last.ckpt` in the run folder at every validation, improved or not (Lightning's save_last writes it only beside
    a new best, so a run whose metric plateaus would resume from its last best, hours back), and once more when
    training ends after steps no validation followed: a fit shorter than its validation interval keeps its weights."""

    def __init__(self) -> None:
        super().__init__(filename="last", enable_version_counter=False)

    def on_train_end(self, trainer, pl_module) -> None:
        super().on_train_end(trainer, pl_module)
        if trainer.global_step > self._last_global_step_saved:  # (an interrupt's own save set it: none twice)
            self._save_checkpoint(trainer, self.format_checkpoint_name({}))
