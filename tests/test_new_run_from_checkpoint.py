"""`fit --config X --ckpt_path FILE` and `fit --config RUN/config.yaml`: new runs, started where docs/checkpoints.md
says (the checkpoint's step, or step 0 for a config.yaml that a resume rewrote)."""

import os
from pathlib import Path

import torch
import yaml
from test_cli import DEMO, TINY

from ortholab.cli.main import main
from ortholab.db import Store


def first_step(store, run_id):
    return store.metric_series(run_id, "train/loss")[0].step


def trained(tmp_path, monkeypatch):
    """A tiny demo run (6 steps of 4 an epoch: last.ckpt inside epoch 2) in tmp_path's store: (db, store, run, its
    last.ckpt)."""
    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    main(["fit", "--config", DEMO, *TINY, "--db", db])
    store = Store(db)
    (run,) = store.list_runs()
    return db, store, run, Path(store.get_run(run.id).run_dir) / "checkpoints" / "last.ckpt"


def test_a_resumed_runs_config_yaml_starts_a_new_run_from_scratch(tmp_path, monkeypatch):
    """A resume recorded its own last.ckpt as the config's ckpt_path: `fit --config` of that config.yaml trained on
    from the run's weights and step, not the fresh run the page promises."""
    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    main(["fit", "--config", DEMO, *TINY, "--db", db])
    store = Store(db)
    (run,) = store.list_runs()
    main(["fit", "--resume", str(run.id), "--db", db, "--trainer.max_steps", "9"])
    config = Path(store.get_run(run.id).run_dir) / "config.yaml"
    assert yaml.safe_load(config.read_text())["ckpt_path"] is None
    assert store.get_run(run.id).config["ckpt_path"] is None  # the store's copy too
    main(["fit", "--config", str(config), "--db", db, "--trainer.max_steps", "3"])
    fresh = max(r.id for r in store.list_runs())
    assert first_step(store, fresh) == 0 and store.get_run(fresh).steps == 3


def test_a_new_run_from_a_checkpoint_goes_on_from_its_step_without_lightnings_folder_warning(
    tmp_path, monkeypatch, recwarn
):
    """Lightning warned, with both folders' paths, that the new run would not reload the old run's best_k_models:
    nothing for the user to act on (the new run keeps its own best checkpoint in its own folder)."""
    db, store, run, last = trained(tmp_path, monkeypatch)
    main(["fit", "--config", DEMO, *TINY, "--db", db, "--ckpt_path", str(last), "--trainer.max_steps", "9"])
    assert not [w for w in recwarn if "dirpath has changed" in str(w.message)]
    new = store.get_run(max(r.id for r in store.list_runs()))
    assert new.id != run.id and first_step(store, new.id) == torch.load(last, weights_only=False)["global_step"]
    # the new run's config.yaml keeps the checkpoint it started from: `fit --config` of it starts there again
    assert yaml.safe_load((Path(new.run_dir) / "config.yaml").read_text())["ckpt_path"] == str(last)
    main(["fit", "--resume", str(new.id), "--db", db, "--trainer.max_steps", "12"])
    assert yaml.safe_load((Path(new.run_dir) / "config.yaml").read_text())["ckpt_path"] == str(last)


def test_a_new_run_whose_limit_the_checkpoint_reached_is_refused_before_it_is_recorded(tmp_path, monkeypatch, capsys):
    """`fit --config F --ckpt_path C --trainer.max_steps N` with N at or below C's step restored C, trained no step
    and recorded a run 'finished' with 0 steps, told to validate sooner; max_epochs likewise."""
    import pytest

    db, store, run, last = trained(tmp_path, monkeypatch)
    step = torch.load(last, weights_only=False)["global_step"]
    base = ["fit", "--config", DEMO, *TINY, "--db", db, "--ckpt_path", str(last)]
    refusals = {
        f"max_steps {step}": (["--trainer.max_steps", str(step)], f"give --trainer.max_steps above {step}"),
        f"max_steps {step - 2}": (["--trainer.max_steps", str(step - 2)], f"trainer.max_steps = {step - 2} ends"),
        "max_epochs 1": (
            ["--trainer.max_steps", "-1", "--trainer.max_epochs", "1"],
            "inside epoch 2 (counted from 1), and trainer.max_epochs = 1 ends training there",
        ),
    }
    for case, (args, said) in refusals.items():
        with pytest.raises(SystemExit) as stop:
            main([*base, *args])
        err = capsys.readouterr().err
        assert stop.value.code == 2 and "Traceback" not in err, case
        assert f"the checkpoint is at step {step}" in err and said in err, (case, err)
        assert [r.id for r in store.list_runs()] == [run.id], case  # nothing recorded
    main([*base, "--trainer.max_steps", str(step + 1)])  # one step past it trains, as a run of its own
    new = store.get_run(max(r.id for r in store.list_runs()))
    assert new.id != run.id and new.steps == step + 1 and first_step(store, new.id) == step


def test_a_relative_checkpoint_path_is_recorded_absolute_so_the_runs_config_starts_there_from_any_folder(
    tmp_path, monkeypatch
):
    """`--ckpt_path runs/.../last.ckpt` was stored as typed, so `fit --config RUN/config.yaml` from another folder
    failed to find it (data.path was already recorded absolute)."""
    db, store, run, last = trained(tmp_path, monkeypatch)
    typed = os.path.relpath(last, tmp_path)
    main(["fit", "--config", DEMO, *TINY, "--db", db, "--ckpt_path", typed, "--trainer.max_steps", "8"])
    new = store.get_run(max(r.id for r in store.list_runs()))
    config = Path(new.run_dir) / "config.yaml"
    assert yaml.safe_load(config.read_text())["ckpt_path"] == str(last) == new.config["ckpt_path"]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    main(["fit", "--config", str(config), "--db", db, "--trainer.max_steps", "9"])  # starts at the checkpoint again
    again = max(r.id for r in store.list_runs())
    assert first_step(store, again) == first_step(store, new.id)


def test_deleting_a_run_names_the_runs_made_from_its_checkpoints(tmp_path, monkeypatch, capsys):
    """`runs delete` named the predict runs it kept, not the test runs of the run's checkpoint or a new run trained
    on from it: their config's ckpt_path pointed into a folder about to go, without a word."""
    db, store, run, checkpoint = trained(tmp_path, monkeypatch)
    main(["test", "--run", str(run.id), "--db", db])
    main(["fit", "--config", DEMO, *TINY, "--db", db, "--ckpt_path", str(checkpoint), "--trainer.max_steps", "9"])
    tested, trained_on = sorted(r.id for r in store.list_runs() if r.id != run.id)
    assert store.runs_made_from([run.id]) == {run.id: {"test": [tested], "fit": [trained_on]}}
    capsys.readouterr()
    main(["runs", "delete", str(run.id), "--db", db, "--yes"])
    said = capsys.readouterr().out.splitlines()
    assert said[1:] == [
        f"kept run {tested} (tests of run {run.id}'s checkpoint), naming a run no longer in this store: "
        f"`ortholab runs delete {tested}` removes it too",
        f"kept run {trained_on} (trained on from run {run.id}'s checkpoint): its own folder and checkpoints stay",
    ]
    assert Path(store.get_run(trained_on).run_dir, "checkpoints", "last.ckpt").is_file()
