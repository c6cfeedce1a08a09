"""Learning checks through the CLI (slow: `make test-slow`; CI runs them)."""

import pytest
import torch
from learning import ADDING_T50, COPYING_T20, COPYING_T20_BASELINE, fit_recorded
from tolerances import roundoff

pytestmark = pytest.mark.slow


def test_scornn_beats_the_copying_baseline_at_t20(tmp_path, monkeypatch):
    run = fit_recorded(
        tmp_path,
        monkeypatch,
        [
            "--model.family",
            "scornn",
            "--model.hidden_size",
            "128",
            "--model.family_args",
            "{rho: 64}",
            "--model.optimizers",
            "{recurrent: {name: rmsprop_tf, lr: 1.0e-4}, other: {name: rmsprop_tf, lr: 1.0e-3}}",
            *COPYING_T20,
            "--trainer.max_steps",
            "600",
            "--trainer.val_check_interval",
            "100",
        ],
    )
    assert run.baseline == pytest.approx(COPYING_T20_BASELINE, rel=roundoff(torch.float64, 4))
    assert run.best < 0.5 * run.baseline


def test_scornn_solves_adding_at_t50(tmp_path, monkeypatch):
    run = fit_recorded(
        tmp_path,
        monkeypatch,
        [
            "--model.family",
            "scornn",
            "--model.hidden_size",
            "128",
            "--model.family_args",
            "{rho: 0.5}",
            "--model.optimizers",
            "{recurrent: {name: rmsprop_tf, lr: 1.0e-3}, other: {name: adam, lr: 1.0e-3}}",
            *ADDING_T50,
            "--trainer.max_steps",
            "2000",
            "--trainer.val_check_interval",
            "250",
        ],
    )
    assert run.best < 0.05
