"""A resume with another optimizer setting: only the options the config changed replace the restored ones."""

import pytest

from ortholab.datamodules import CopyingTask
from ortholab.models import ConfigError
from ortholab.training.module import RecurrentModule

SAVED = {"default": {"name": "rmsprop_tf", "lr": 1e-3, "eps": 0.0}}


def _module(optimizers):
    task = CopyingTask(seq_len=5, train_size=40, batch_size=10, val_size=10)
    return RecurrentModule(task.spec, family="urnn", hidden_size=8, optimizers=optimizers)


def _checkpoint(module, lr_now: float) -> dict:
    """A checkpoint as Lightning writes it, trained with SAVED, whose lr a schedule has since lowered to `lr_now`."""
    states = []
    for optimizer in module.configure_optimizers():
        state = optimizer.state_dict()
        for group in state["param_groups"]:
            group.update(lr=lr_now, eps=0.0)
        states.append(state)
    return {"hyper_parameters": {**module.hparams, "optimizers": SAVED}, "optimizer_states": states}


def test_a_changed_eps_replaces_the_restored_one_and_a_scheduled_lr_stays():
    module = _module({"default": {**SAVED["default"], "eps": 1e-10}})
    checkpoint = _checkpoint(module, lr_now=1e-4)
    module.on_load_checkpoint(checkpoint)
    groups = [g for state in checkpoint["optimizer_states"] for g in state["param_groups"]]
    assert groups and all(g["eps"] == 1e-10 and g["lr"] == 1e-4 for g in groups)


def test_a_changed_lr_replaces_the_restored_one():
    module = _module({"default": {**SAVED["default"], "lr": 5e-4}})
    checkpoint = _checkpoint(module, lr_now=1e-3)
    module.on_load_checkpoint(checkpoint)
    assert all(g["lr"] == 5e-4 and g["eps"] == 0.0 for s in checkpoint["optimizer_states"] for g in s["param_groups"])


def test_switching_the_optimizer_on_a_resume_is_refused_naming_the_key():
    module = _module({"default": {"name": "adam", "lr": 1e-3}})
    checkpoint = _checkpoint(_module(SAVED), lr_now=1e-3)
    with pytest.raises(ConfigError, match=r"model\.optimizers\.default\.name: .* trained with 'rmsprop_tf'"):
        module.on_load_checkpoint(checkpoint)
