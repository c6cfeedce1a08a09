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


def test_a_resume_that_changes_the_data_warns_that_the_runs_summary_mixes_two_settings(tmp_path):
    from ortholab.db import SQLLogger
    from ortholab.db.logger import changes_the_data

    assert changes_the_data("data.init_args.seq_len") and changes_the_data("data.class_path")
    for same in (
        "data.init_args.path",
        "data.init_args.train_file",
        "data.init_args.cache_dir",
        "data.init_args.num_workers",
        "data.init_args.batch_size",
        "model.hidden_size",
    ):
        assert not changes_the_data(same), same
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    first = SQLLogger(db_url=url, root_dir=str(tmp_path / "runs"))
    first.log_config({"data": {"init_args": {"seq_len": 100, "num_workers": 0}}})
    first.finalize("success")
    resumed = SQLLogger(db_url=url, root_dir=str(tmp_path / "runs"), run_id=first.run_id)
    resumed.log_config({"data": {"init_args": {"seq_len": 50, "num_workers": 2}}})
    with pytest.warns(UserWarning, match=r"Run 1's data changes at step 3 \(data.init_args.seq_len\): its points"):
        resumed.continue_from(3)
    resumed.finalize("success")


def test_evaluating_a_checkpoint_with_another_optimizer_in_the_config_is_not_refused():
    """validate and test restore the weights alone: the optimizer the config names does not matter there."""
    module = _module({"default": {"name": "adam", "lr": 1e-3}})
    checkpoint = _checkpoint(_module(SAVED), lr_now=1e-3)
    module.refuse_foreign_checkpoint(checkpoint, continues_training=False)
    with pytest.raises(ConfigError, match="cannot continue as 'adam'"):
        module.refuse_foreign_checkpoint(checkpoint)


def test_ortholabs_own_warnings_print_as_one_plain_line():
    import warnings

    from ortholab.errors import OrthoLabWarning
    from ortholab.training.console import quiet_third_party_noise

    before = warnings.formatwarning
    try:
        quiet_third_party_noise()
        quiet_third_party_noise()  # installed once
        own = warnings.formatwarning("the copy looks incomplete", OrthoLabWarning, "/x/speech.py", 177)
        other = warnings.formatwarning("deprecated", DeprecationWarning, "/x/lib.py", 3)
    finally:
        warnings.formatwarning = before
    assert own == "ortholab: warning: the copy looks incomplete\n"
    assert other.startswith("/x/lib.py:3: DeprecationWarning: deprecated")
