"""Learning checks of the restricted-capacity uRNN and the EURNN through the CLI (slow: `make test-slow`; CI runs them).

What the papers report at their sizes: the uRNN solves copying (Arjovsky et al.; at T = 1000-2000 the scoRNN and
scuRNN papers see it stay at the baseline) and learns adding (scoRNN Figure 2); the EURNN drops below the
copying baseline without always converging (scuRNN Figure 4) and, on adding, below the baseline (scoRNN Figure 2:
towards zero at T = 200; scuRNN Figure 5: back up again). At T = 20 / 50 and well under a minute of one thread
each, the checks ask for a clear drop below the baseline.
"""

import pytest
import torch
from learning import ADDING_T50, COPYING_T20, COPYING_T20_BASELINE, fit_recorded
from tolerances import roundoff

pytestmark = pytest.mark.slow

# Arjovsky's RMSProp (complex_RNN/optimizations.py): mean square from 1e-3, decay 0.9, no epsilon
ARJOVSKY_RMSPROP = "{name: rmsprop_tf, lr: 1.0e-3, initial_accumulator: 1.0e-3, eps: 0.0}"


def test_urnn_beats_the_copying_baseline_at_t20(tmp_path, monkeypatch):
    run = fit_recorded(
        tmp_path,
        monkeypatch,
        [
            "--model.family",
            "urnn",
            "--model.hidden_size",
            "128",
            "--model.optimizers",
            "{default: %s}" % ARJOVSKY_RMSPROP,
            *COPYING_T20,
            "--trainer.max_steps",
            "600",
            "--trainer.val_check_interval",
            "100",
        ],
    )
    assert run.baseline == pytest.approx(COPYING_T20_BASELINE, rel=roundoff(torch.float64, 4))
    assert run.best < 0.5 * run.baseline  # 5e-7 when written: the uRNN solves copying


def test_urnn_learns_adding_at_t50(tmp_path, monkeypatch):
    # Arjovsky's RMSProp for W's 7n parameters; the input/readout side by Adam 1e-2 (one RMSProp 1e-3 for all
    # stays at the baseline for these 1,000 steps here: 0.164 at n = 128)
    run = fit_recorded(
        tmp_path,
        monkeypatch,
        [
            "--model.family",
            "urnn",
            "--model.hidden_size",
            "64",
            "--model.optimizers",
            "{recurrent: %s, other: {name: adam, lr: 1.0e-2}}" % ARJOVSKY_RMSPROP,
            *ADDING_T50,
            "--trainer.max_steps",
            "1000",
            "--trainer.val_check_interval",
            "200",
        ],
    )
    assert run.best < 0.5 * run.baseline  # baseline 0.167 (always predicting 1); 0.014 when written


def test_eurnn_beats_the_copying_baseline_at_t20(tmp_path, monkeypatch):
    run = fit_recorded(
        tmp_path,
        monkeypatch,
        [
            "--model.family",
            "eurnn",
            "--model.hidden_size",
            "128",
            "--model.family_args",
            "{capacity: 2, recurrence: layers}",  # the matrix-free path (auto: dense at n = 128)
            "--model.optimizers",
            "{default: {name: rmsprop_tf, lr: 1.0e-3}}",  # the EUNN scripts' TF1 RMSProp
            *COPYING_T20,
            "--trainer.max_steps",
            "600",
            "--trainer.val_check_interval",
            "100",
        ],
    )
    assert run.best < 0.5 * run.baseline  # 4e-4 when written


def test_eurnn_drops_below_the_adding_baseline_at_t50(tmp_path, monkeypatch):
    # the scuRNN paper (Figure 5, T = 200): the EURNN "appears to decrease below the baseline and eventually
    # increases back towards it"; here it reaches 0.08-0.14 in 1,000 steps (the thread count changes which):
    # assert what the paper claims, below the baseline by the report's 10% rule
    run = fit_recorded(
        tmp_path,
        monkeypatch,
        [
            "--model.family",
            "eurnn",
            "--model.hidden_size",
            "128",
            "--model.family_args",
            "{capacity: 2}",
            "--model.optimizers",
            "{default: {name: adam, lr: 1.0e-2}}",
            *ADDING_T50,
            "--trainer.max_steps",
            "1000",
            "--trainer.val_check_interval",
            "200",
        ],
    )
    assert run.best < 0.9 * run.baseline  # 0.077 (one thread), 0.136 (two threads)
