"""Divide every learning rate by 10 when a validation is worse than each of the few before it.

The R-Transformer music script's schedule (DSE-MSU/R-transformer audio/experiment.py): after epoch 10, an epoch whose
validation loss exceeds the maximum of the previous three divides the learning rate by 10. Lightning's
ReduceLROnPlateau waits for no improvement over the best, a different rule, hence this callback.
"""

from __future__ import annotations

import math

import lightning.pytorch as pl
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities import rank_zero_info

from ortholab.errors import ConfigError


class DropLearningRateOnStall(pl.Callback):
    """Multiply every optimizer's learning rate by `factor` when `monitor` (lower is better) at a fit's validation
    is above the maximum of the `window` validations before it, from validation `after + 1` on (1-based)."""

    def __init__(self, monitor: str = "val/loss", after: int = 10, window: int = 3, factor: float = 0.1):
        if window < 1 or after < 0 or not 0 < factor < 1:
            raise ConfigError(
                f"DropLearningRateOnStall(after={after}, window={window}, factor={factor}): give "
                f"after >= 0, window >= 1 and 0 < factor < 1"
            )
        self.monitor, self.after, self.window, self.factor = monitor, after, window, factor
        self.history: list[float] = []  # the monitored value at each validation so far (saved with a checkpoint)
        self.drops: list[int] = []  # the global steps at which the rates were divided

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or trainer.state.fn != TrainerFn.FITTING:
            return
        value = trainer.callback_metrics.get(self.monitor)
        if value is None:
            raise ConfigError(
                f"DropLearningRateOnStall: no metric {self.monitor!r} at this validation; monitor one "
                f"of {sorted(k for k in trainer.callback_metrics if k.startswith('val/'))}"
            )
        value = float(value)
        recent = self.history[-self.window :]
        if len(self.history) >= self.after and recent and not math.isnan(value) and value > max(recent):
            for optimizer in trainer.optimizers:
                for group in optimizer.param_groups:
                    group["lr"] *= self.factor
            self.drops.append(trainer.global_step)
            rank_zero_info(
                f"{self.monitor} = {value:.5f} above the last {len(recent)} validations' maximum "
                f"{max(recent):.5f}: learning rates multiplied by {self.factor}"
            )
        self.history.append(value)

    def state_dict(self) -> dict:
        return {"history": list(self.history), "drops": list(self.drops)}

    def load_state_dict(self, state_dict: dict) -> None:
        self.history, self.drops = list(state_dict["history"]), list(state_dict["drops"])
