"""model.grad_clip_norm: the optimizers step with gradients clipped to that total norm (NRU's authors use 1)."""

import lightning.pytorch as pl
import pytest
import torch
from tolerances import roundoff

from ortholab.datamodules import CopyingTask
from ortholab.training.module import RecurrentModule

CLIP = 1.0
LOSS_SCALE = 1e4  # a huge loss: its gradient's norm is far above CLIP


class _GradientNormSeen(pl.Callback):
    """The total gradient norm over every parameter when the (first) optimizer steps."""

    def __init__(self):
        self.norms = []

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        grads = [p.grad for p in pl_module.parameters() if p.grad is not None]
        self.norms.append(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])).item())


def gradient_norm_at_first_step(family: str, grad_clip_norm: float | None, monkeypatch) -> float:
    torch.manual_seed(0)
    task = CopyingTask(seq_len=5, train_size=10, batch_size=10, val_size=10)
    module = RecurrentModule(
        task.spec,
        family=family,
        hidden_size=8,
        grad_clip_norm=grad_clip_norm,
        family_args={"rho": 4} if family == "scornn" else {},
    )
    unscaled = module.objective.loss
    monkeypatch.setattr(module.objective, "loss", lambda *args: LOSS_SCALE * unscaled(*args))
    seen = _GradientNormSeen()
    trainer = pl.Trainer(
        max_steps=1,
        logger=False,
        callbacks=[seen],
        accelerator="cpu",
        limit_val_batches=0,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    trainer.fit(module, datamodule=task)
    assert len(seen.norms) == 1  # one manual step, one hook call through Lightning's first optimizer
    return seen.norms[0]


@pytest.mark.parametrize("family", ["rnn", "scornn"])  # one parameter group; several groups, clipped together
def test_grad_clip_norm_bounds_the_gradient_the_optimizer_sees(family, monkeypatch):
    unclipped = gradient_norm_at_first_step(family, None, monkeypatch)
    clipped = gradient_norm_at_first_step(family, CLIP, monkeypatch)
    assert unclipped > 100 * CLIP  # the huge loss: without the option the step would see this
    # float32: the clip's total norm and this one, each over the ~200 gradient entries (n = 8), and the rescaling
    assert clipped <= CLIP * (1 + roundoff(torch.float32, 2 * 200 + 1)) and clipped > 0.99 * CLIP  # not zeroed
