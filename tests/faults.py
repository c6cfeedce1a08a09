"""Callbacks that do real damage to a training process, for the fault tests (loaded by class path in configs)."""

import os
import signal
import time
from pathlib import Path

from lightning.pytorch import Callback


class SignalAt(Callback):
    """Send `signal_name` to this very process after optimizer step `step`, once (a marker file remembers); with
    `rank`, only that process of a DDP run is signalled, as a scheduler signals one node's processes."""

    def __init__(self, step: int, signal_name: str = "SIGKILL", marker: str = "signalled", rank: int | None = None):
        self.step, self.signal_name, self.marker, self.rank = step, signal_name, Path(marker), rank

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self.rank is not None and trainer.global_rank != self.rank:
            return
        if trainer.global_step == self.step and not self.marker.exists():
            self.marker.write_text(self.signal_name)
            os.kill(os.getpid(), getattr(signal, self.signal_name))


class SignalAtStartOf(Callback):
    """Send `signal_name` to this very process as the sanity check (the validation before training) or a test starts,
    while Lightning's own signal handlers listen."""

    def __init__(self, stage: str = "sanity_check", signal_name: str = "SIGTERM"):
        self.stage, self.signal_name = stage, signal_name

    def _send(self, stage: str) -> None:
        if stage == self.stage:
            os.kill(os.getpid(), getattr(signal, self.signal_name))

    def on_sanity_check_start(self, trainer, pl_module):
        self._send("sanity_check")

    def on_test_start(self, trainer, pl_module):
        self._send("test")


class PauseAt(Callback):
    """After optimizer step `step`, write the file `paused` and wait (up to `timeout_s`) until the file `go` exists: a
    live training process that a test holds still while it tries something beside it."""

    def __init__(self, step: int, paused: str = "paused", go: str = "go", timeout_s: float = 120.0):
        self.step, self.paused, self.go, self.timeout_s = step, Path(paused), Path(go), timeout_s

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step != self.step:
            return
        self.paused.write_text(str(os.getpid()))
        deadline = time.monotonic() + self.timeout_s
        while not self.go.exists() and time.monotonic() < deadline:
            time.sleep(0.05)


class SaveRecurrentMatrix(Callback):
    """At the end of training every rank writes its recurrent matrix to `<folder>/rank<k>.pt`."""

    def __init__(self, folder: str):
        self.folder = Path(folder)

    def on_train_end(self, trainer, pl_module):
        import torch

        self.folder.mkdir(parents=True, exist_ok=True)
        torch.save(pl_module.model.layer.recurrent_matrix().detach(), self.folder / f"rank{trainer.global_rank}.pt")


class FreezeWeights(Callback):
    """Every learning rate set to 0 as training starts: the weights, and so every validation metric, never change."""

    def on_train_start(self, trainer, pl_module):
        for optimizer in trainer.optimizers:
            for group in optimizer.param_groups:
                group["lr"] = 0.0


class NaNGradientAt(Callback):
    """A NaN in one gradient entry at optimizer step `step`, once (a marker file remembers): the NaN guard fails the
    run there, as a diverging setting would."""

    def __init__(self, step: int, marker: str = "poisoned"):
        self.step, self.marker = step, Path(marker)

    def on_after_backward(self, trainer, pl_module):
        if trainer.global_step == self.step and not self.marker.exists():
            self.marker.write_text(str(self.step))
            next(p for p in pl_module.parameters() if p.grad is not None).grad.view(-1)[0] = float("nan")


class RaiseAt(Callback):
    """A RuntimeError after optimizer step `step`, as a bug in a model or a task would raise one."""

    def __init__(self, step: int, message: str = "injected failure"):
        self.step, self.message = step, message

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == self.step:
            raise RuntimeError(f"{self.message}\nits second line")
