"""A run's life across interruptions: continue a recorded run after a resume; stop cleanly on SIGTERM/Ctrl-C."""
from __future__ import annotations

import os
import signal
from typing import Any

from lightning.pytorch import Callback

from ortholab.datamodules.base import ResumableLoader


EVALUATION_PREFIXES = ("val/", "test/")  # fit's evaluations, recorded at the step of the weights they measured


def evaluation_points(logger, step: int) -> list[tuple[str, Any]]:
    """(key, point) of the evaluation metrics a store-backed logger holds at `step`."""
    store, run_id = logger.store, logger.run_id
    return [(key, point) for key in store.metric_keys(run_id) if key.startswith(EVALUATION_PREFIXES)
            for point in store.metric_series(run_id, key) if point.step == step]


def restore_points(logger, points: list[tuple[str, Any]], step: int) -> None:
    """Write back points removed by a truncation, with their epoch and wall time."""
    for key, point in points:
        logger.store.log_metrics(logger.run_id, {key: point.value}, step=step, epoch=point.epoch,
                                 wall_time=point.wall_time)


class ContinueRun(Callback):
    """On a resumed fit: tell the loggers the step training restarts from, so re-run steps replace their points.

    The evaluation at that very step stays: it measured the checkpoint's weights before the checkpoint was written,
    and a resumed run does not repeat it (the start-of-training analyses record the step again).
    """

    def on_train_start(self, trainer, pl_module) -> None:
        if not trainer.is_global_zero:  # only rank zero writes the store
            return
        for logger in trainer.loggers:
            if hasattr(logger, "continue_from"):
                kept = evaluation_points(logger, trainer.global_step) if hasattr(logger, "store") else []
                logger.continue_from(trainer.global_step)
                restore_points(logger, kept, trainer.global_step)


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
