"""Learning checks of the oRNN and the Shuffling RNN through the CLI (slow: `make test-slow`; CI runs them)."""
import pytest

from db import Store
from training.cli import main

pytestmark = pytest.mark.slow

QUIET = ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
         "--trainer.check_val_every_n_epoch", "null", "--trainer.accelerator", "cpu"]
COPYING_T20 = ["--data", "datamodules.CopyingTask", "--data.seq_len", "20", "--data.batch_size", "20",
               "--data.val_size", "500"]
ADDING_T50 = ["--data", "datamodules.AddingTask", "--data.seq_len", "50", "--data.batch_size", "50",
              "--data.train_size", "100000", "--data.val_size", "1000"]


def _fit(tmp_path, monkeypatch, args):
    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    main(["fit", *args, *QUIET, "--db", db])
    (run,) = Store(db).list_runs()
    assert run.status == "finished"
    print(f"{run.family} {run.task}: best {run.main_metric} {run.best:.4g} after {run.steps + 1} steps "
          f"(baseline {run.baseline:.4g})")
    return run


def test_ornn_beats_the_copying_baseline_at_t20(tmp_path, monkeypatch):
    run = _fit(tmp_path, monkeypatch, [
        "--model.family", "ornn", "--model.hidden_size", "128",
        "--model.optimizers", "{default: {name: adam, lr: 1.0e-3}}",
        *COPYING_T20, "--trainer.max_steps", "600", "--trainer.val_check_interval", "100"])
    assert run.baseline == pytest.approx(0.5199, abs=1e-4)
    assert run.best < 0.5 * run.baseline


def test_ornn_solves_adding_at_t50(tmp_path, monkeypatch):
    run = _fit(tmp_path, monkeypatch, [
        "--model.family", "ornn", "--model.hidden_size", "128", "--model.family_args", "{num_reflections: 16}",
        "--model.optimizers", "{default: {name: adam, lr: 1.0e-2}}",
        *ADDING_T50, "--trainer.max_steps", "1000", "--trainer.val_check_interval", "250"])
    assert run.best < 0.05


def test_srnn_beats_the_copying_baseline_at_t20(tmp_path, monkeypatch):
    run = _fit(tmp_path, monkeypatch, [
        "--model.family", "srnn", "--model.hidden_size", "128",
        "--model.family_args", "{hyper: 8, embed_symbols: true}",
        "--model.optimizers", "{default: {name: rmsprop, lr: 1.0e-3, alpha: 0.9}}",
        *COPYING_T20, "--trainer.max_steps", "600", "--trainer.val_check_interval", "100"])
    assert run.best < 0.5 * run.baseline


def test_srnn_solves_adding_at_t50(tmp_path, monkeypatch):
    run = _fit(tmp_path, monkeypatch, [
        "--model.family", "srnn", "--model.hidden_size", "128", "--model.family_args", "{hyper: 8}",
        "--model.optimizers", "{default: {name: rmsprop, lr: 1.0e-3, alpha: 0.9}}",
        *ADDING_T50, "--trainer.max_steps", "2000", "--trainer.val_check_interval", "250"])
    assert run.best < 0.05
