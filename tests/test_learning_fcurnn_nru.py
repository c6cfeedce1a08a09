"""The full-capacity uRNN and NRU learn copying, through the CLI (slow: `make test-slow`; CI runs them)."""

import pytest
import torch
from learning import COPYING_T20_BASELINE, fit_recorded
from tolerances import roundoff

pytestmark = pytest.mark.slow

COPYING_T20 = ["--data", "datamodules.CopyingTask", "--data.seq_len", "20", "--data.batch_size", "20"]


def test_fcurnn_solves_copying_at_t20(tmp_path, monkeypatch):
    # scoRNN paper Section 5.1: the full-capacity uRNN "converge[s] immediately to zero entropy solutions" on
    # copying T = 1000 with Wisdom's settings (n = 128, Cayley step 1e-3 for W, RMSprop 1e-3 for the rest).
    # Measured here (seeds 1, 2 and the default): CE ~0.05 after 100 steps, ~1e-3 after 200, <1e-4 after 300.
    run = fit_recorded(
        tmp_path,
        monkeypatch,
        [
            "--model.family",
            "fcurnn",
            "--model.hidden_size",
            "128",
            "--model.optimizers",
            (
                "{recurrent: {name: stiefel_cayley, lr: 1.0e-3}, "
                "other: {name: rmsprop_tf, lr: 1.0e-3, initial_accumulator: 1.0e-3, eps: 0.0}}"
            ),
            *COPYING_T20,
            "--data.val_size",
            "500",
            "--trainer.max_steps",
            "300",
            "--trainer.val_check_interval",
            "100",
        ],
    )
    assert run.baseline == pytest.approx(COPYING_T20_BASELINE, rel=roundoff(torch.float64, 4))
    assert run.best < 0.01 * run.baseline


def test_nru_learns_copying_at_t20(tmp_path, monkeypatch):
    # SRNN paper Figure 2: NRU (d_h = 128, Adam 1e-3, clipping at 1) is among the methods that solve copying at
    # T = 100, over ~10^5 training sequences. Its per-step loop allows ~2,500 batches of 20 here (95 s). Measured
    # on an AMD EPYC with the port's Xavier-normal readout (2026-11-26, seeds 5544 (the default), 1 and 2): CE/baseline
    # 0.68, 0.66, 0.64 after 1,500 steps, 0.35, 0.34, 0.41 after 2,500, 0.22, 0.21, 0.29 after 3,000, still falling
    # smoothly; a model that does not learn stays at 1.0. So this asserts learning well under way, not the full solve.
    run = fit_recorded(
        tmp_path,
        monkeypatch,
        [
            "--model.family",
            "nru",
            "--model.hidden_size",
            "128",
            "--model.grad_clip_norm",
            "1.0",
            "--model.optimizers",
            "{other: {name: adam, lr: 1.0e-3}}",
            *COPYING_T20,
            "--data.val_size",
            "200",
            "--trainer.max_steps",
            "2500",
            "--trainer.val_check_interval",
            "500",
        ],
    )
    assert run.baseline == pytest.approx(COPYING_T20_BASELINE, rel=roundoff(torch.float64, 4))
    assert run.best < 0.6 * run.baseline
