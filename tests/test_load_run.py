"""A recorded run's model and task from Python (training/api.py's load_run, and RecurrentModule.load_from_checkpoint
itself): in the dtype the run trained in, the task rebuilt whatever it is, the store only read."""

from pathlib import Path

import numpy as np
import pytest
import torch
from tolerances import roundoff

from ortholab.datamodules import AddingTask, CopyingTask
from ortholab.db import Store
from ortholab.training.api import fit, load_run
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
    """(store URL, {name: run id}): a 64-true copying run, a 32-true and a 64-true adding run, in one store."""
    folder = tmp_path_factory.mktemp("load_run")
    db = f"sqlite:///{folder / 'store.db'}"
    place = {"db": db, "runs_dir": str(folder / "runs")}
    ids = {
        "copying64": fit(config("datamodules.CopyingTask", "64-true"), **place),
        "adding": fit(config("ortholab.datamodules.AddingTask", "32-true"), **place),  # a full class path
        "adding64": fit(config("datamodules.AddingTask", "64-true"), **place),  # real-valued inputs, float64
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
    plain = RecurrentModule.load_from_checkpoint(path, map_location="cpu", weights_only=True)
    model, task = load_run(ids["copying64"], db=db)
    for loaded in (plain, model):
        assert loaded.dtype == torch.float64
        state = loaded.state_dict()
        for key, value in saved.items():
            assert state[key].dtype == value.dtype and torch.equal(state[key], value), key
    assert isinstance(task, CopyingTask) and not model.training
    inputs, _ = task.make_split("val")
    with torch.no_grad():
        assert model(inputs).dtype == torch.float64  # symbol ids in, float64 logits out


def test_load_run_rebuilds_another_task_which_the_model_scores_as_recorded(runs):
    db, ids = runs
    model, task = load_run(np.int64(ids["adding"]), db=db, checkpoint="last")  # an id as frames.runs gives it
    assert isinstance(task, AddingTask) and model.dtype == torch.float32
    inputs, targets = task.make_split("val")
    with torch.no_grad():
        loss = float(model.objective.loss(model(inputs), targets))
    recorded = Store(db, access="read").metric_series(ids["adding"], "val/loss")[-1].value  # at last.ckpt's step
    # float32: the same weights and sequences; each output accumulates over n units and T steps, the loss is a mean of
    # VAL squared errors, relative to the loss
    assert abs(loss - recorded) < roundoff(torch.float32, N * T + VAL, scale=recorded)


def test_a_64_true_model_takes_the_tasks_float32_inputs_in_a_plain_trainer_and_scores_as_recorded(runs):
    """A float64 model fed its task's float32 inputs (a default `pl.Trainer`, or a call) failed: 'expected m1 and m2
    to have the same dtype'. forward casts them to the model's dtype, as the run's 64-true precision plugin did."""
    import lightning.pytorch as pl

    db, ids = runs
    model, task = load_run(ids["adding64"], db=db)
    inputs, targets = task.make_split("val")
    assert inputs.dtype == torch.float32 and model.dtype == torch.float64
    with torch.no_grad():
        assert torch.equal(model(inputs), model(inputs.double()))  # float32 to float64 is exact
    trainer = pl.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    (scored,) = trainer.validate(model, task, verbose=False)
    recorded = Store(db, access="read").metric_series(ids["adding64"], "val/loss")[-1].value
    # the same float64 outputs; the plain trainer's metric sums VAL squared errors in float32, relative to the loss
    assert abs(scored["val/loss"] - recorded) < roundoff(torch.float32, VAL, scale=recorded)


def test_load_run_takes_best_a_kept_files_name_or_a_path(runs):
    db, ids = runs
    best = sorted(checkpoint_of(db, ids["adding"]).parent.glob("best-step*.ckpt"))[-1]
    for checkpoint in ("best", best.name, best, str(best)):
        model, _ = load_run(ids["adding"], db=db, checkpoint=checkpoint)
        assert torch.equal(
            model.state_dict()["model.readout.weight"], torch.load(best)["state_dict"]["model.readout.weight"]
        )


def test_load_run_names_a_bad_argument_and_never_creates_a_store(runs, tmp_path):
    from ortholab.db.store_errors import StoreError

    db, ids = runs
    with pytest.raises(TypeError, match=r"^run_id must be a run's id \(int\), got '1' \(str\)$"):
        load_run("1", db=db)
    with pytest.raises(TypeError, match="^checkpoint must be a str or a path"):
        load_run(ids["adding"], db=db, checkpoint=2)
    with pytest.raises(ValueError, match=r"^run_id: No run with id 999 in sqlite:///"):
        load_run(999, db=db)
    with pytest.raises(ValueError) as wrong:
        load_run(ids["adding"], db=db, checkpoint="lats")
    assert str(wrong.value).startswith(f"checkpoint='lats': run {ids['adding']} holds best-step")
    assert "last.ckpt; give 'last', 'best'" in str(wrong.value) and "\n" not in str(wrong.value)
    with pytest.raises(
        ValueError, match=r"^checkpoint='.*last.ckpt' was trained on task 'copying', run \d+ on 'adding'"
    ):
        load_run(ids["adding"], db=db, checkpoint=str(checkpoint_of(db, ids["copying64"])))
    missing = tmp_path / "none.db"
    with pytest.raises(StoreError):
        load_run(1, db=missing)
    assert not missing.exists()


def test_a_run_that_kept_no_checkpoint_is_named_as_such(runs, tmp_path):
    db, ids = runs
    folder = checkpoint_of(db, ids["adding"]).parent
    kept = {p.name: p.read_bytes() for p in folder.glob("*.ckpt")}
    try:
        for name in kept:
            (folder / name).unlink()
        with pytest.raises(ValueError, match=rf"^checkpoint='last': run {ids['adding']} kept no checkpoint"):
            load_run(ids["adding"], db=db)
    finally:
        for name, data in kept.items():
            (folder / name).write_bytes(data)


def test_a_64_true_runs_recorded_loss_is_its_float64_loss(runs):
    """torchmetrics' states stay float32 through Lightning's .double(): a 64-true run recorded its validation loss
    rounded to float32 (2.154846668 for 2.1548467039)."""
    db, ids = runs
    model, task = load_run(ids["copying64"], db=db)
    inputs, targets = task.make_split("val")
    with torch.no_grad():
        loss = float(model.objective.loss(model(inputs), targets))
    recorded = Store(db, access="read").metric_series(ids["copying64"], "val/loss")[-1].value
    # float64: the same weights and sequences; each logit accumulates over n units and T + 20 steps, the loss is a mean
    # of VAL * (T + 20) cross-entropies, relative to the loss
    assert abs(loss - recorded) < roundoff(torch.float64, N * (T + 20) + VAL * (T + 20), scale=recorded)


def test_a_bare_file_name_is_the_runs_own_checkpoint_before_one_in_the_current_folder(runs, tmp_path, monkeypatch):
    """checkpoint="best-step4.ckpt" loaded a file of that name from the current folder, another run's, before the
    run's own."""
    db, ids = runs
    own = sorted(checkpoint_of(db, ids["adding"]).parent.glob("best-step*.ckpt"))[-1]
    monkeypatch.chdir(tmp_path)
    (tmp_path / own.name).write_bytes(checkpoint_of(db, ids["copying64"]).read_bytes())  # another run's, same name
    model, task = load_run(ids["adding"], db=db, checkpoint=own.name)
    assert isinstance(task, AddingTask) and model.dtype == torch.float32


def test_a_file_that_is_no_lightning_checkpoint_is_a_value_error_naming_it(runs, tmp_path):
    """A text file or a run's config.yaml gave Lightning's `IndexError: pop from empty list` (or a KeyError), which
    names neither the file nor what is wrong with it."""
    db, ids = runs
    config_yaml = checkpoint_of(db, ids["adding"]).parents[1] / "config.yaml"
    (tmp_path / "notes.txt").write_text("not a checkpoint\n")
    torch.save({"weights": torch.zeros(2)}, tmp_path / "weights.pt")  # a torch file, but not Lightning's
    torch.save(torch.zeros(2), tmp_path / "tensor.pt")
    (tmp_path / "empty.ckpt").write_bytes(b"")
    cases = {
        config_yaml: "not a file torch.save writes",
        tmp_path / "notes.txt": "not a file torch.save writes",
        tmp_path / "weights.pt": "a torch file without state_dict or pytorch-lightning_version",
        tmp_path / "tensor.pt": "torch.save wrote a Tensor there",
        tmp_path / "empty.ckpt": "an empty file",
    }
    for path, why in cases.items():
        for given in (path, str(path)):
            with pytest.raises(ValueError) as refused:
                RecurrentModule.load_from_checkpoint(given, map_location="cpu")
            said = str(refused.value)
            assert said.startswith(f"{str(path)!r} is not a Lightning checkpoint ({why}") and "\n" not in said, said
        with pytest.raises(ValueError, match="is not a Lightning checkpoint"):  # through load_run too
            load_run(ids["adding"], db=db, checkpoint=path)
    model = RecurrentModule.load_from_checkpoint(checkpoint_of(db, ids["adding"]), map_location="cpu")
    assert model.hparams.family == "scornn"  # a checkpoint still loads
    with pytest.raises(TypeError, match="cannot be called on an instance"):  # as Lightning's own refuses
        model.load_from_checkpoint(checkpoint_of(db, ids["adding"]))
