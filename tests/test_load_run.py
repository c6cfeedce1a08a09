"""A recorded run's model from Python (RecurrentModule.load_from_checkpoint): in the dtype the run trained in."""

from pathlib import Path

import pytest
import torch

from ortholab.datamodules import CopyingTask
from ortholab.db import Store
from ortholab.training.api import fit
from ortholab.training.module import RecurrentModule

N, T, VAL = 6, 5, 20  # hidden units, sequence length, validation sequences


def config(task: str, precision: str) -> dict:
    return {
        "model": {"family": "scornn", "hidden_size": N, "family_args": {"rho": 3}},
        "data": {
            "class_path": task,
            "init_args": {"seq_len": T, "train_size": 40, "batch_size": 10, "val_size": VAL, "test_size": 20},
        },
        "trainer": {
            "accelerator": "cpu",
            "precision": precision,
            "max_steps": 4,
            "val_check_interval": 2,
            "check_val_every_n_epoch": None,
            "enable_progress_bar": False,
            "enable_model_summary": False,
        },
    }


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(store URL, {name: run id}): a 64-true copying run and a 32-true adding run, in one store."""
    folder = tmp_path_factory.mktemp("load_run")
    db = f"sqlite:///{folder / 'store.db'}"
    place = {"db": db, "runs_dir": str(folder / "runs")}
    ids = {
        "copying64": fit(config("datamodules.CopyingTask", "64-true"), **place),
        "adding": fit(config("ortholab.datamodules.AddingTask", "32-true"), **place),  # a full class path
    }
    return db, ids


def checkpoint_of(db: str, run_id: int, name: str = "last.ckpt") -> Path:
    return Path(Store(db, access="read").get_run(run_id).run_dir) / "checkpoints" / name


def test_a_64_true_runs_weights_load_as_float64_bit_for_bit(runs):
    """load_from_checkpoint built the module in float32 and load_state_dict rounded the float64 weights into it."""
    db, ids = runs
    path = checkpoint_of(db, ids["copying64"])
    saved = torch.load(path, map_location="cpu", weights_only=True)["state_dict"]
    assert {t.dtype for t in saved.values() if t.is_floating_point()} == {torch.float64}
    model = RecurrentModule.load_from_checkpoint(path, map_location="cpu", weights_only=True).eval()
    assert model.dtype == torch.float64
    state = model.state_dict()
    for key, value in saved.items():
        assert state[key].dtype == value.dtype and torch.equal(state[key], value), key
    task = CopyingTask(**Store(db, access="read").get_run(ids["copying64"]).config["data"]["init_args"])
    inputs, _ = task.make_split("val")
    with torch.no_grad():
        assert model(inputs).dtype == torch.float64  # symbol ids in, float64 logits out
