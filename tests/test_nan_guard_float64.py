"""The NaN guard reruns the bad step in float64: it tells float32 overflowing (finite in float64, with the gradient's
size) from a model whose loss or gradient is infinite in any precision."""

import re

import lightning.pytorch as pl
import pytest
import torch

from ortholab.datamodules import AddingTask
from ortholab.db import SQLLogger, Store
from ortholab.training.callbacks import NaNGuard, NonFiniteError
from ortholab.training.callbacks.nan_guard import float64_recheck
from ortholab.training.module import RecurrentModule

STEPS = 12  # adding task of length 12: h_T ~ gain^11 times h_1 in a relu RNN with W_hh = gain I


def _exploding_module(gain: float) -> tuple[RecurrentModule, AddingTask]:
    task = AddingTask(seq_len=STEPS, train_size=20, batch_size=10, val_size=10)
    torch.manual_seed(0)
    module = RecurrentModule(task.spec, family="rnn", hidden_size=4, family_args={"nonlinearity": "relu"})
    rnn = module.model.layer.rnn
    with torch.no_grad():
        rnn.weight_hh_l0.copy_(gain * torch.eye(4))
        rnn.weight_ih_l0.fill_(1.0)
        rnn.bias_ih_l0.fill_(1.0)  # every unit > 0 from the first step, so relu passes the growth on
        rnn.bias_hh_l0.zero_()
    return module, task


def _failure(tmp_path, gain: float) -> str:
    module, task = _exploding_module(gain)
    logger = SQLLogger(db_url=f"sqlite:///{tmp_path / 'runs.db'}", root_dir=str(tmp_path / "runs"))
    trainer = pl.Trainer(
        max_steps=2,
        logger=logger,
        callbacks=[NaNGuard()],
        accelerator="cpu",
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    with pytest.raises(NonFiniteError) as error:
        trainer.fit(module, datamodule=task)
    (run,) = Store(logger._db_url).list_runs()
    assert str(error.value).startswith(run.reason.split(" (checkpoint before the step")[0])  # the run says the same
    return str(error.value)


def test_float32_overflow_is_told_from_a_divergent_model(tmp_path):
    # gain 1e5: h_T ~ 1e55, its square in the MSE ~ 1e110 overflows float32 (max ~3.4e38), not float64 (~1.8e308)
    overflow = _failure(tmp_path / "overflow", 1e5)
    assert "non-finite loss" in overflow and "at step 0" in overflow
    assert "recomputed in float64 on the same batch" in overflow and "the gradient norms are finite" in overflow
    assert "--trainer.precision 64" in overflow and "model.grad_clip_norm" in overflow
    # gain 1e10: the loss ~ 1e220 is finite in float64, its gradient (~ h_T times dh_T/dW ~ 1e330) is not
    exploded = _failure(tmp_path / "exploded", 1e10)
    assert "the loss is 1.2" in exploded and "but the gradient is not finite either (other inf)" in exploded
    # gain 1e30, a float32 weight: h_T ~ 1e330 is beyond float64 too
    diverged = _failure(tmp_path / "diverged", 1e30)
    assert re.search(r"recomputed in float64 on the same batch, the loss is (inf|nan) too\.", diverged), diverged


def test_the_recheck_reports_the_float64_numbers_and_leaves_the_model_as_it_was():
    module, task = _exploding_module(1e5)
    task.setup("fit")
    batch = next(iter(task.train_dataloader()))
    before = {k: v.clone() for k, v in module.state_dict().items()}
    message = float64_recheck(module, batch)
    inputs, targets = batch
    model = module.model.double()  # the same loss by hand, in float64
    loss = module.objective.loss(model(inputs.double()), targets.double(), None)
    loss.backward()
    norm = torch.sqrt(sum(p.grad.square().sum() for p in module.parameter_groups()["other"]))
    module.float()
    assert f"the loss is {float(loss):.4g}" in message and f"other {float(norm):.4g}" in message
    assert all(torch.equal(module.state_dict()[k].double(), v.double()) for k, v in before.items())
    module.zero_grad()
    assert float64_recheck(module.double(), batch) == ""  # float64 already: nothing to add
    assert float64_recheck(module.float(), None) == ""  # no batch seen
