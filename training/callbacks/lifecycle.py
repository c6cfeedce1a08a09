"""A run's life across interruptions: continue a recorded run after a resume; stop cleanly on SIGTERM/Ctrl-C."""
from __future__ import annotations

import os
import signal

from lightning.pytorch import Callback

from datamodules.base import ResumableLoader


class ContinueRun(Callback):
    """On a resumed fit: tell the loggers the step training restarts from, so re-run steps replace their points."""

    def on_train_start(self, trainer, pl_module) -> None:
        for logger in trainer.loggers:
            if hasattr(logger, "continue_from"):
                logger.continue_from(trainer.global_step)


class GracefulInterrupt(Callback):
    """SIGTERM (a scheduler's preemption) or a first Ctrl-C stop training at the end of the current batch, write
    `checkpoints/last.ckpt` and leave the run `interrupted`; a second Ctrl-C interrupts at once."""

    def __init__(self):
        self.requested: str | None = None
        self._previous = {}

    def _request(self, signum, frame) -> None:
        self.requested = signal.Signals(signum).name
        signal.signal(signal.SIGINT, signal.default_int_handler)  # a second Ctrl-C is not graceful

    def on_train_start(self, trainer, pl_module) -> None:
        self.requested = None
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                self._previous[sig] = signal.signal(sig, self._request)
            except ValueError:  # not the main thread: leave signals to Lightning
                return

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        requested = trainer.strategy.broadcast(self.requested)  # every rank stops at the same batch
        if requested is None:
            return
        folder = trainer.loggers[0].log_dir if trainer.loggers else trainer.default_root_dir
        trainer.save_checkpoint(os.path.join(folder, "checkpoints", "last.ckpt"))
        for logger in trainer.loggers:
            if hasattr(logger, "mark_interrupted"):
                logger.mark_interrupted(f"{requested} at step {trainer.global_step}; resume with "
                                        f"`ortholab fit --resume {getattr(logger, 'run_id', '<run id>')}`")
        trainer.should_stop = True

    def on_save_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        """Checkpoints written once a stop is requested (ours in on_train_batch_end, ModelCheckpoint's as the epoch
        is cut short) must say exactly where training stands, or a resumed run repeats or skips a batch: Lightning
        counts a batch as completed only after on_train_batch_end, and drops the loader state at a cut-short epoch.
        The weights hold every processed batch's update, so the loop state is set to match them."""
        if self.requested is None:
            return
        loop = checkpoint["loops"]["fit_loop"]
        progress = loop["epoch_loop.batch_progress"]
        for counts in (progress["current"], progress["total"]):
            counts["ready"] = counts["started"] = counts["completed"] = counts["processed"]
        loop["epoch_loop.state_dict"]["_batches_that_stepped"] = trainer.global_step  # one counted step per batch
        if isinstance(trainer.train_dataloader, ResumableLoader):  # batches of this pass already trained on
            loop["combined_loader"] = [{"completed": progress["current"]["completed"] % len(trainer.train_dataloader)}]

    def teardown(self, trainer, pl_module, stage: str) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}
