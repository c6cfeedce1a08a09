"""Stop at the first non-finite loss or gradient, before the optimizer applies it, and say where and why."""
from __future__ import annotations

import os

import torch
from lightning.pytorch import Callback


class NonFiniteError(RuntimeError):
    """Training produced a NaN or an infinity; the message names the step, the parameter group and a likely cause."""


def likely_cause(pl_module, group: str | None) -> str:
    hint = pl_module.model.layer.nonfinite_hint()  # a family's own diagnosis, e.g. the modReLU singularity
    if hint:
        return hint
    if group is None:
        return "the loss itself is not finite: check the inputs and targets, or lower the learning rates"
    return f"gradients of group {group!r} overflowed: lower model.optimizers.{group}.lr or set model.grad_clip_norm"


class NaNGuard(Callback):
    """After each backward pass: if the loss or a gradient is not finite, save a checkpoint of the parameters
    before the bad step (`nan-step<k>.ckpt` in the run folder), mark the run failed with the reason, and stop."""

    def on_after_backward(self, trainer, pl_module) -> None:
        loss = getattr(pl_module, "last_loss", None)
        bad_group = None
        if loss is None or torch.isfinite(loss):
            for group, params in pl_module.parameter_groups().items():
                grads = [p.grad for p in params if p.grad is not None]
                if grads and not all(bool(torch.isfinite(g).all()) for g in grads):
                    bad_group = group
                    break
            else:
                return
        step = trainer.global_step
        what = f"gradient of parameter group {bad_group!r}" if bad_group else f"loss ({float(loss)})"
        reason = f"non-finite {what} at step {step}: {likely_cause(pl_module, bad_group)}"
        folder = trainer.loggers[0].log_dir if trainer.loggers else trainer.default_root_dir
        path = os.path.join(folder, "checkpoints", f"nan-step{step}.ckpt")
        trainer.save_checkpoint(path)  # the parameters have not been updated with the bad gradient yet
        for logger in trainer.loggers:
            if hasattr(logger, "record_failure"):
                logger.record_failure(f"{reason} (checkpoint before the step: {path})")
        raise NonFiniteError(f"{reason}. Checkpoint before the step: {path}")
