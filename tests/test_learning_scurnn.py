"""scuRNN learns, through the CLI (slow: `make test-slow`; CI runs them)."""
import pytest

from db import Store
from training.cli import main

pytestmark = pytest.mark.slow

QUIET = ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
         "--trainer.check_val_every_n_epoch", "null", "--trainer.accelerator", "cpu"]
# A: the official code's numpy RMSProp (accumulator from 0, eps 1e-8 inside the root); theta: TF1 Adagrad
A_RMSPROP = "{name: rmsprop_tf, lr: %s, initial_accumulator: 0.0, eps: 1.0e-8}"


def _fit(tmp_path, monkeypatch, args):
    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    main(["fit", *args, *QUIET, "--db", db])
    (run,) = Store(db).list_runs()
    assert run.status == "finished" and run.family == "scurnn"
    print(f"{run.task}: best {run.main_metric} {run.best:.4g} after {run.steps + 1} steps "
          f"(baseline {run.baseline:.4g})")
    return run


def test_scurnn_beats_the_copying_baseline_at_t20(tmp_path, monkeypatch):
    run = _fit(tmp_path, monkeypatch, [
        "--model.family", "scurnn", "--model.hidden_size", "64",
        "--model.optimizers", "{recurrent: %s, scaling: {name: adagrad_tf, lr: 1.0e-3}, "
                              "other: {name: adam, lr: 1.0e-3}}" % (A_RMSPROP % "1.0e-3"),
        "--data", "datamodules.CopyingTask", "--data.seq_len", "20", "--data.batch_size", "20",
        "--data.val_size", "500", "--trainer.max_steps", "300", "--trainer.val_check_interval", "100"])
    assert run.baseline == pytest.approx(0.5199, abs=1e-4)
    assert run.best < 0.5 * run.baseline


def test_scurnn_solves_adding_at_t50(tmp_path, monkeypatch):
    run = _fit(tmp_path, monkeypatch, [
        "--model.family", "scurnn", "--model.hidden_size", "64",
        "--model.optimizers", "{recurrent: %s, scaling: {name: adam, lr: 1.0e-3}, "
                              "other: {name: adam, lr: 1.0e-2}}" % (A_RMSPROP % "1.0e-3"),
        "--data", "datamodules.AddingTask", "--data.seq_len", "50", "--data.batch_size", "50",
        "--data.train_size", "100000", "--data.val_size", "1000", "--trainer.max_steps", "1500",
        "--trainer.val_check_interval", "250"])
    assert run.best < 0.05
