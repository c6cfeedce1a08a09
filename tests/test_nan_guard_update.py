"""The NaN guard catches an optimizer step that breaks finite weights, restores them, and gives a cause that fits."""

import os

import lightning.pytorch as pl
import pytest
import torch

from ortholab.datamodules import CopyingTask
from ortholab.db import SQLLogger, Store
from ortholab.training.callbacks import NaNGuard, NonFiniteError
from ortholab.training.callbacks.nan_guard import groups_named_in
from ortholab.training.module import RecurrentModule

OPTIMIZERS = {"recurrent": {"name": "adam", "lr": 1e-3}, "other": {"name": "sgd", "lr": 0.01}}


class _InfiniteLearningRate(pl.Callback):
    """At step `step`, set group `other`'s lr to inf and remember the weights before that batch."""

    def __init__(self, step: int):
        self.step, self.before = step, None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == self.step:
            self.before = {k: v.clone() for k, v in pl_module.state_dict().items()}
            trainer.optimizers[1].param_groups[0]["lr"] = float("inf")  # optimizers follow the groups' order


class _PoisonGradient(pl.Callback):
    def __init__(self, parameter: str):
        self.parameter = parameter

    def on_after_backward(self, trainer, pl_module):
        if trainer.global_step == 1:
            pl_module.get_parameter(self.parameter).grad.view(-1)[0] = float("nan")


def _setup(callback, optimizers: dict, logger, max_steps: int):
    """A tiny scoRNN on copying with the NaN guard: (task, module, trainer)."""
    task = CopyingTask(seq_len=5, train_size=40, batch_size=10, val_size=10)
    module = RecurrentModule(task.spec, family="scornn", hidden_size=8, family_args={"rho": 4}, optimizers=optimizers)
    trainer = pl.Trainer(
        max_steps=max_steps,
        logger=logger,
        callbacks=[callback, NaNGuard()],
        accelerator="cpu",
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    return task, module, trainer


def _fit(tmp_path, callback, modrelu_bias: float | None = None, optimizers: dict = OPTIMIZERS):
    logger = SQLLogger(db_url=f"sqlite:///{tmp_path / 'runs.db'}", root_dir=str(tmp_path / "runs"))
    task, module, trainer = _setup(callback, optimizers, logger, max_steps=6)
    if modrelu_bias is not None:
        module.model.layer.bias.data.fill_(modrelu_bias)
    with pytest.raises(NonFiniteError) as error:
        trainer.fit(module, datamodule=task)
    (run,) = Store(logger._db_url).list_runs()
    return module, logger, run, str(error.value)


def test_an_overflowing_update_is_undone_checkpointed_and_names_its_group(tmp_path):
    poison = _InfiniteLearningRate(step=2)
    module, logger, run, message = _fit(tmp_path, poison)
    assert "non-finite parameters of group 'other' after its optimizer step at step 2" in message
    assert "model.optimizers.other.lr" in message
    assert run.status == "failed" and run.reason.startswith("non-finite parameters of group 'other'")
    saved = torch.load(os.path.join(logger.log_dir, "checkpoints", "nan-step2.ckpt"), weights_only=False)
    assert saved["global_step"] == 2
    for key, before in poison.before.items():  # both groups as before the batch ('recurrent' stepped first)
        assert torch.equal(saved["state_dict"][key], before), key
        assert torch.equal(module.state_dict()[key], before), key


def test_the_family_hint_is_given_only_for_the_group_it_concerns(tmp_path):
    # scoRNN's modReLU hint (biases > 0) is about model.optimizers.other.lr, not the recurrent group
    *_, recurrent = _fit(tmp_path / "recurrent", _PoisonGradient("model.layer.cayley.upper"), modrelu_bias=0.5)
    assert "group 'recurrent' at step 1" in recurrent and "model.optimizers.recurrent.lr" in recurrent
    assert "modReLU" not in recurrent
    *_, other = _fit(tmp_path / "other", _PoisonGradient("model.layer.input_weight"), modrelu_bias=0.5)
    assert "group 'other' at step 1" in other and "modReLU biases b > 0" in other


class _GradientStaysZero(pl.Callback):
    """From step 2, one entry of the input weights gets a zero gradient, and its RMSprop mean square has underflowed
    to 0, as a float32 average of g^2 decaying by 0.9 does after ~760 zero gradients (fcuRNN, adding T = 750)."""

    def on_after_backward(self, trainer, pl_module):
        if trainer.global_step == 2:
            weight = pl_module.get_parameter("model.layer.input_weight")
            weight.grad.view(-1)[0] = 0.0
            trainer.optimizers[1].state[weight]["mean_square"].view(-1)[0] = 0.0


def test_a_zero_mean_square_with_eps_0_is_named_as_0_over_0_before_the_family_hint(tmp_path):
    """Wisdom et al.'s Theano RMSprop has no epsilon: a gradient that stays 0 long enough makes its step 0/0. The
    guard names the accumulator, the parameter and the fix, not scoRNN's modReLU hint (which biases > 0 would give)."""
    no_eps = {**OPTIMIZERS, "other": {"name": "rmsprop_tf", "lr": 1e-3, "eps": 0.0, "initial_accumulator": 1e-3}}
    *_, message = _fit(tmp_path, _GradientStaysZero(), modrelu_bias=0.5, optimizers=no_eps)
    assert "group 'other' after its optimizer step at step 2" in message
    assert "mean_square of model.layer.input_weight reached exactly 0 in 1 entry" in message
    assert "model.optimizers.other.eps a positive value" in message and "modReLU" not in message
    with_eps = {**OPTIMIZERS, "other": {**no_eps["other"], "eps": 1e-10}}  # the fix: 0 / sqrt(1e-10) = 0, finite
    assert _fit_without_failure(_GradientStaysZero(), optimizers=with_eps)


def test_the_0_over_0_fix_names_the_config_key_the_group_took_its_optimizer_from(tmp_path):
    """A group configured through model.optimizers.default (the uRNN configs) is fixed there: the message names
    that key, not model.optimizers.other, which would need a whole optimizer of its own."""
    no_eps = {"name": "rmsprop_tf", "lr": 1e-3, "eps": 0.0, "initial_accumulator": 1e-3}
    optimizers = {"recurrent": OPTIMIZERS["recurrent"], "default": no_eps}
    *_, message = _fit(tmp_path, _GradientStaysZero(), modrelu_bias=0.5, optimizers=optimizers)
    assert "give model.optimizers.default.eps a positive value" in message
    *_, poisoned = _fit(tmp_path / "lr", _PoisonGradient("model.layer.input_weight"), optimizers=optimizers)
    assert "model.optimizers.default.lr" in poisoned and "model.optimizers.other" not in poisoned


def _fit_without_failure(callback, optimizers: dict) -> bool:
    task, module, trainer = _setup(callback, optimizers, logger=False, max_steps=4)
    trainer.fit(module, datamodule=task)
    return trainer.global_step == 4 and all(bool(torch.isfinite(p).all()) for p in module.parameters())


def test_groups_named_in_a_hint():
    assert groups_named_in("lower model.optimizers.other.lr") == {"other"}
    assert groups_named_in(
        "lower model.optimizers.spectrum.lr / non_normal.lr, raise model.optimizers.non_normal.weight_decay"
    ) == {"spectrum", "non_normal"}
    assert groups_named_in("set model.grad_clip_norm: 1.0") == set()
