"""scuRNN learns, through the CLI (slow: `make test-slow`; CI runs them)."""

import pytest
import torch
from learning import ADDING_T50, COPYING_T20, COPYING_T20_BASELINE, fit_recorded
from tolerances import roundoff

pytestmark = pytest.mark.slow

# A: the official code's numpy RMSProp (accumulator from 0, eps 1e-8 inside the root); theta: TF1 Adagrad
A_RMSPROP = "{name: rmsprop_tf, lr: %s, initial_accumulator: 0.0, eps: 1.0e-8}"


def test_scurnn_beats_the_copying_baseline_at_t20(tmp_path, monkeypatch):
    run = fit_recorded(
        tmp_path,
        monkeypatch,
        [
            "--model.family",
            "scurnn",
            "--model.hidden_size",
            "64",
            "--model.optimizers",
            "{recurrent: %s, scaling: {name: adagrad_tf, lr: 1.0e-3}, "
            "other: {name: adam, lr: 1.0e-3}}" % (A_RMSPROP % "1.0e-3"),
            *COPYING_T20,
            "--trainer.max_steps",
            "300",
            "--trainer.val_check_interval",
            "100",
        ],
    )
    assert run.baseline == pytest.approx(COPYING_T20_BASELINE, rel=roundoff(torch.float64, 4))
    assert run.best < 0.5 * run.baseline


def test_scurnn_solves_adding_at_t50(tmp_path, monkeypatch):
    run = fit_recorded(
        tmp_path,
        monkeypatch,
        [
            "--model.family",
            "scurnn",
            "--model.hidden_size",
            "64",
            "--model.optimizers",
            "{recurrent: %s, scaling: {name: adam, lr: 1.0e-3}, "
            "other: {name: adam, lr: 1.0e-2}}" % (A_RMSPROP % "1.0e-3"),
            *ADDING_T50,
            "--trainer.max_steps",
            "1500",
            "--trainer.val_check_interval",
            "250",
        ],
    )
    assert run.best < 0.05
