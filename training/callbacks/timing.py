"""Wall time per step and per epoch, throughput and peak memory (the scoRNN paper's Table 3 view)."""

from __future__ import annotations

import resource
import sys
import time

import torch
from lightning.pytorch import Callback

from ortholab.training.callbacks.record import is_due, record_metrics


def process_peak_resident_mb() -> float:
    """The process's peak resident memory: VmHWM from /proc/self/status on Linux (it restarts at exec, where
    ru_maxrss can carry a forking parent's peak over), else getrusage's ru_maxrss."""
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 2**10  # kB
    except (OSError, StopIteration, ValueError, IndexError):
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
        return rss / (2**20 if sys.platform == "darwin" else 2**10)


def peak_memory_mb(device: torch.device) -> float:
    """Peak CUDA memory allocated on `device`, else the process peak resident memory."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return process_peak_resident_mb()


class Timing(Callback):
    """Every `every_n_steps` steps and at the end of training: `time/step_s` (mean since the last record) and
    `time/samples_per_s`; at the end of each epoch this process trained whole `time/epoch_s` (none for an epoch a
    resume joined midway or max_steps cut short: its time would be part of an epoch's); with each record
    `memory/peak_mb` (MiB: the CUDA peak allocated on a GPU, else the process peak resident memory). Validation
    time is excluded."""

    def __init__(self, every_n_steps: int | None = 50):
        self.every_n_steps = every_n_steps
        self._since = 0.0
        self._steps = self._samples = 0
        self._epoch_train_s = 0.0
        self._epoch_batches = 0

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self._epoch_train_s, self._epoch_batches = 0.0, 0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._start = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        elapsed = time.perf_counter() - self._start
        self._since += elapsed
        self._epoch_train_s += elapsed
        self._epoch_batches += 1
        self._steps += 1
        self._samples += int(batch[0].shape[0])
        if is_due(trainer.global_step, self.every_n_steps):
            self._record_steps(trainer, pl_module)

    def _record_steps(self, trainer, pl_module) -> None:
        record_metrics(
            trainer,
            {
                "time/step_s": self._since / self._steps,
                "time/samples_per_s": self._samples / self._since,
                "memory/peak_mb": peak_memory_mb(pl_module.device),
            },
            trainer.global_step,
        )
        self._since, self._steps, self._samples = 0.0, 0, 0

    def on_train_end(self, trainer, pl_module) -> None:
        """The steps since the last record, recorded at the last one: a run's points reach the step it ended at."""
        if self._steps and self.every_n_steps:
            self._record_steps(trainer, pl_module)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        if self._epoch_batches < trainer.num_training_batches != float("inf"):  # (an iterable's epoch: no count)
            return
        record_metrics(trainer, {"time/epoch_s": self._epoch_train_s}, trainer.global_step)
