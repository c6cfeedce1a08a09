"""Learning checks of the oRNN and the Shuffling RNN through the CLI (slow: `make test-slow`; CI runs them)."""

import pytest
import torch
from learning import ADDING_T50, COPYING_T20, COPYING_T20_BASELINE, fit_recorded
from tolerances import roundoff

pytestmark = pytest.mark.slow


def test_ornn_beats_the_copying_baseline_at_t20(tmp_path, monkeypatch):
    run = fit_recorded(
        tmp_path,
        monkeypatch,
        [
            "--model.family",
            "ornn",
            "--model.hidden_size",
            "128",
            "--model.optimizers",
            "{default: {name: adam, lr: 1.0e-3}}",
            *COPYING_T20,
            "--trainer.max_steps",
            "600",
            "--trainer.val_check_interval",
            "100",
        ],
    )
    assert run.baseline == pytest.approx(COPYING_T20_BASELINE, rel=roundoff(torch.float64, 4))
    assert run.best < 0.5 * run.baseline


def test_ornn_solves_adding_at_t50(tmp_path, monkeypatch):
    run = fit_recorded(
        tmp_path,
        monkeypatch,
        [
            "--model.family",
            "ornn",
            "--model.hidden_size",
            "128",
            "--model.family_args",
            "{num_reflections: 16}",
            "--model.optimizers",
            "{default: {name: adam, lr: 1.0e-2}}",
            *ADDING_T50,
            "--trainer.max_steps",
            "1000",
            "--trainer.val_check_interval",
            "250",
        ],
    )
    assert run.best < 0.05


def test_srnn_beats_the_copying_baseline_at_t20(tmp_path, monkeypatch):
    run = fit_recorded(
        tmp_path,
        monkeypatch,
        [
            "--model.family",
            "srnn",
            "--model.hidden_size",
            "128",
            "--model.family_args",
            "{hyper: 8, embed_symbols: true}",
            "--model.optimizers",
            "{default: {name: rmsprop, lr: 1.0e-3, alpha: 0.9}}",
            *COPYING_T20,
            "--trainer.max_steps",
            "600",
            "--trainer.val_check_interval",
            "100",
        ],
    )
    assert run.best < 0.5 * run.baseline


def test_srnn_solves_adding_at_t50(tmp_path, monkeypatch):
    run = fit_recorded(
        tmp_path,
        monkeypatch,
        [
            "--model.family",
            "srnn",
            "--model.hidden_size",
            "128",
            "--model.family_args",
            "{hyper: 8}",
            "--model.optimizers",
            "{default: {name: rmsprop, lr: 1.0e-3, alpha: 0.9}}",
            *ADDING_T50,
            "--trainer.max_steps",
            "2000",
            "--trainer.val_check_interval",
            "250",
        ],
    )
    assert run.best < 0.05
