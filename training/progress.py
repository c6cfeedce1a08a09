"""What a training run prints: Lightning's rich progress bar on a terminal, with the step budget of a run bounded by
steps; plain lines where stdout is no terminal."""

from __future__ import annotations

import math
import time

from lightning.pytorch.callbacks import ProgressBar, RichProgressBar


class StepBudgetProgressBar(RichProgressBar):
    """Lightning's rich bar; a run bounded by steps, not epochs, reads 'Epoch 0 · step budget 1000' where
    Lightning would print 'Epoch 0/-2' (max_epochs = -1 minus one)."""

    def _get_train_description(self, current_epoch: int) -> str:
        trainer = self.trainer
        if trainer.max_steps > 0 and (trainer.max_epochs is None or trainer.max_epochs < 0):
            return f"Epoch {current_epoch} · step budget {trainer.max_steps}"
        return super()._get_train_description(current_epoch)


class PlainProgress(ProgressBar):
    """What a run prints where stdout is no terminal (`make demo > log`, a job scheduler, `docker logs`), where a
    progress bar shows nothing: one plain line after the first optimizer step, then every `every_s` seconds (and
    every `every_n_steps` steps, if given), then one when training ends:

        step 700/10000 · loss 0.1234 · 12.3 steps/s · ETA 12m36s

    The pace is measured from the end of the first step on: that step holds the compilation and warm-up (often many
    times a step's time), so the first line reads `ETA estimating…`.
    """

    def __init__(self, every_s: float = 30.0, every_n_steps: int | None = None):
        super().__init__()
        if every_s < 0 or (every_n_steps is not None and every_n_steps <= 0):
            raise ValueError(f"every_s must be >= 0 and every_n_steps positive, got {every_s}, {every_n_steps}")
        self.every_s, self.every_n_steps = every_s, every_n_steps
        self._enabled = True
        self._start = self._last = 0.0
        self._first_step = 0
        self._first_at: float | None = None  # when this process's first step ended: the pace is measured from then

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    def on_train_start(self, trainer, pl_module) -> None:
        self._start = self._last = time.monotonic()
        self._first_step, self._first_at = trainer.global_step, None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step, now = trainer.global_step, time.monotonic()
        first = self._first_at is None and step > self._first_step  # once, however many batches a step accumulates
        if first:
            self._first_at = now
        due = (
            first
            or now - self._last >= self.every_s
            or (self.every_n_steps is not None and step % self.every_n_steps == 0)
        )
        if due and self._enabled and trainer.is_global_zero and not self._last_step(trainer, step):
            self._last = now
            print(self.line(trainer, now), flush=True)

    @staticmethod
    def _last_step(trainer, step: int) -> bool:
        """The plan's last step: the line training's end prints says it, once."""
        total = trainer.estimated_stepping_batches
        return isinstance(total, (int, float)) and math.isfinite(total) and step >= int(total)

    def on_train_end(self, trainer, pl_module) -> None:
        if self._enabled and trainer.is_global_zero:
            print(self.line(trainer, time.monotonic(), done=True), flush=True)

    def line(self, trainer, now: float, done: bool = False) -> str:
        step, total = trainer.global_step, trainer.estimated_stepping_batches
        planned = isinstance(total, int) or (isinstance(total, float) and math.isfinite(total))
        parts = [f"step {step}/{int(total)}" if planned else f"step {step}"]
        loss = trainer.callback_metrics.get("train/loss")
        if loss is not None:
            parts.append(f"loss {float(loss):.4g}")
        elapsed = now - self._start
        since = now - self._first_at if self._first_at is not None else 0.0  # the first step (warm-up) left out
        rate = (step - self._first_step - 1) / since if since > 0 else 0.0
        if rate > 0:
            parts.append(f"{rate:.3g} steps/s")
        if done:
            parts.append(f"training ended after {_clock(elapsed)}")
        elif planned:
            parts.append(f"ETA {_clock(max(int(total) - step, 0) / rate)}" if rate > 0 else "ETA estimating…")
        return " · ".join(parts)


def _clock(seconds: float) -> str:
    """'1h02m', '12m36s' or '7s'."""
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"
