"""The analysis callbacks write what they say, the gradient profile shows the papers' contrast, the NaN guard trips."""

import os

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from test_cli import DEMO, TINY
from tolerances import close, norm, roundoff

from ortholab.cli.main import main
from ortholab.datamodules import AddingTask, CopyingTask
from ortholab.db import SQLLogger, Store
from ortholab.db.artifacts import EIGENVALUES, GRAD_NORMS, HIDDEN_TRAJECTORY, array_from_bytes
from ortholab.training.callbacks import NaNGuard, NonFiniteError
from ortholab.training.callbacks.matrix import orthogonality_error
from ortholab.training.callbacks.probes import hidden_gradient_norms
from ortholab.training.module import RecurrentModule

# scoRNN's float32 W = Cayley(A) D at n = 8: n eps32 cond(I + A), cond(I + A) <= sqrt(2) at the init (its blocks are
# tan(t/2) <= 1) and A barely moves in 6 steps of lr 1e-4
DEMO_W_ROUNDOFF = roundoff(torch.float32, 8, scale=2)


def _fit(tmp_path, monkeypatch, *extra):
    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    main(["fit", "--config", DEMO, *TINY, "--db", db, *extra])
    store = Store(db)
    (run,) = store.list_runs()
    return store, run


def test_orthogonality_drift_is_recorded_at_the_end_of_training_too(tmp_path, monkeypatch):
    """Walk-through 6: a run shorter than every_n_steps had one drift point, at step 0, on the Eigenvalues page."""
    store, run = _fit(tmp_path, monkeypatch)  # the default, every 100 steps: 6 steps
    assert [p.step for p in store.metric_series(run.id, "analysis/orthogonality")] == [0, 6]
    (tmp_path / "due").mkdir()
    store, run = _fit(
        tmp_path / "due",
        monkeypatch,
        "--trainer.callbacks+=training.callbacks.OrthogonalityDrift",
        "--trainer.callbacks.every_n_steps=3",
    )
    assert [p.step for p in store.metric_series(run.id, "analysis/orthogonality")] == [0, 3, 6]  # 6 once


def test_default_callbacks_record_drift_eigenvalues_profile_and_timing(tmp_path, monkeypatch):
    store, run = _fit(
        tmp_path,
        monkeypatch,
        "--trainer.callbacks+=training.callbacks.OrthogonalityDrift",
        "--trainer.callbacks.every_n_steps=2",
        "--trainer.callbacks+=training.callbacks.HiddenTrajectory",
        "--trainer.callbacks.steps=[0, 4]",
        "--trainer.callbacks+=training.callbacks.Timing",
        "--trainer.callbacks.every_n_steps=2",
    )
    drift = store.metric_series(run.id, "analysis/orthogonality")
    assert [p.step for p in drift] == [0, 2, 4, 6] and all(p.value < DEMO_W_ROUNDOFF for p in drift)

    eig = store.artifacts(run.id, EIGENVALUES)  # start, end of epoch 0 (4 batches), end of training
    assert [a.step for a in eig] == [0, 4, 6] and eig[0].meta["n"] == 8
    values = array_from_bytes(store.artifact_data(eig[0].id))
    # |lambda| lies between W's extreme singular values, 1 +- ||W^T W - I|| / 2; the float64 eigensolver adds n eps64
    assert values.dtype == np.complex128 and np.allclose(np.abs(values), 1.0, rtol=0, atol=DEMO_W_ROUNDOFF)

    (profile,) = store.artifacts(run.id, GRAD_NORMS)  # default steps 0 and 300: only 0 is reached in 6 steps
    norms = array_from_bytes(store.artifact_data(profile.id))
    assert profile.step == 0 and norms.shape == (5 + 20,) and (norms > 0).all()

    trajectories = store.artifacts(run.id, HIDDEN_TRAJECTORY)
    assert [a.step for a in trajectories] == [0, 4]
    assert array_from_bytes(store.artifact_data(trajectories[0].id)).shape == (25, 8)

    assert [p.step for p in store.metric_series(run.id, "time/step_s")] == [2, 4, 6]
    assert all(p.value > 0 for p in store.metric_series(run.id, "time/samples_per_s"))
    assert store.metric_series(run.id, "time/epoch_s") and store.metric_series(run.id, "memory/peak_mb")


def test_analysis_can_be_switched_off_and_the_run_still_reaches_its_last_step(tmp_path, monkeypatch):
    """Timing went with the analyses: a finished run of 6 steps listed 5 (its last train/loss point, of the batch
    step 6 trained on) and a running one had no pace or ETA."""
    store, run = _fit(tmp_path, monkeypatch, "--analysis", "false")
    assert "analysis/orthogonality" not in store.metric_keys(run.id) and not store.artifacts(run.id)
    assert max(p.step for p in store.metric_series(run.id, "train/loss")) == 5
    assert run.steps == 6 and [p.step for p in store.metric_series(run.id, "time/step_s")] == [6]


def test_lstm_has_no_recurrent_matrix_to_analyse(tmp_path, monkeypatch):
    store, run = _fit(
        tmp_path,
        monkeypatch,
        "--model.family",
        "lstm",
        "--model.family_args",
        "{}",
        "--model.optimizers",
        "{default: {name: adam, lr: 0.01}}",
    )
    assert "analysis/orthogonality" not in store.metric_keys(run.id) and not store.artifacts(run.id, EIGENVALUES)
    assert store.artifacts(run.id, GRAD_NORMS)  # the hidden-state profile needs no recurrent matrix


def test_orthogonality_error_sees_a_non_orthogonal_matrix():
    q = torch.linalg.qr(torch.randn(6, 6, dtype=torch.float64))[0]
    # Householder QR, n = 6: n eps in the 2-norm, sqrt(n) times that in the Frobenius norm
    assert orthogonality_error(q) < roundoff(torch.float64, 6, scale=6**0.5) < 0.1 < orthogonality_error(1.1 * q)


def test_gradient_profile_is_the_total_derivative():
    # ||dL/dh_t|| from the probe equals the plain-autograd total derivative through the stepwise cells
    task = AddingTask(seq_len=12, val_size=4)
    inputs, targets = task.make_split("val")
    module = RecurrentModule(task.spec, family="gru", hidden_size=5)
    norms, _ = hidden_gradient_norms(module, inputs, targets)
    gru = module.model.layer.rnn
    h, states = torch.zeros(4, 5), []
    for x_t in inputs.unbind(1):
        h = torch.gru_cell(x_t, h, gru.weight_ih_l0, gru.weight_hh_l0, gru.bias_ih_l0, gru.bias_hh_l0)
        h.retain_grad()
        states.append(h)
    torch.nn.functional.mse_loss(module.model.readout(h), targets).backward()
    expected = torch.stack([torch.linalg.vector_norm(s.grad) for s in states]).double()
    # float32 BPTT through a GRU: 3 gates read 2 inputs and 5 units per step, T = 12 steps, relative to the profile
    torch.testing.assert_close(norms, expected, **close(torch.float32, 3 * (2 + 5) * 12, norm(expected)))
    assert norms[0] > 0


def test_gradient_profile_flat_for_identity_scornn_and_vanishing_for_tanh_rnn():
    # scoRNN paper Figure 5: ||dL/dh_t|| stays level across t for scoRNN, decays for a vanilla tanh RNN
    task = AddingTask(seq_len=200, val_size=50)
    inputs, targets = task.make_split("val")
    torch.manual_seed(0)
    scornn = RecurrentModule(task.spec, family="scornn", hidden_size=64, family_args={"rho": 0, "init": "zeros"})
    rnn = RecurrentModule(task.spec, family="rnn", hidden_size=64, family_args={"nonlinearity": "tanh"})
    flat, _ = hidden_gradient_norms(scornn, inputs, targets)
    vanishing, _ = hidden_gradient_norms(rnn, inputs, targets)
    assert flat.max() / flat.min() < 10.0
    assert vanishing[-1] / vanishing[0] > 1e3


class _PoisonGradient(pl.Callback):
    def on_after_backward(self, trainer, pl_module):
        if trainer.global_step == 2:
            pl_module.model.layer.cayley.upper.grad[0] = float("nan")


def test_nan_guard_names_step_and_group_and_marks_the_run_failed(tmp_path):
    task = CopyingTask(seq_len=5, train_size=40, batch_size=10, val_size=10)
    module = RecurrentModule(task.spec, family="scornn", hidden_size=8, family_args={"rho": 4})
    logger = SQLLogger(db_url=f"sqlite:///{tmp_path / 'runs.db'}", root_dir=str(tmp_path / "runs"))
    trainer = pl.Trainer(
        max_steps=6,
        logger=logger,
        callbacks=[_PoisonGradient(), NaNGuard()],
        accelerator="cpu",
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    with pytest.raises(NonFiniteError, match=r"group 'recurrent' at step 2"):
        trainer.fit(module, datamodule=task)
    (run,) = Store(logger._db_url).list_runs()
    assert run.status == "failed" and "non-finite gradient of parameter group 'recurrent' at step 2" in run.reason
    # the same batch in float64 has a finite gradient (the NaN was planted): the guard says so, with its norms
    assert (
        "recomputed in float64 on the same batch" in run.reason and "gradient norms are finite (recurrent" in run.reason
    )
    checkpoint = os.path.join(logger.log_dir, "checkpoints", "nan-step2.ckpt")
    state = torch.load(checkpoint, weights_only=False)["state_dict"]
    assert state["model.layer.cayley.upper"].isfinite().all()  # saved before the poisoned step was applied


def test_an_overflowing_update_from_the_cli_is_one_message_a_failed_run_and_finite_weights(
    tmp_path, monkeypatch, capsys
):
    # lr = inf with finite gradients: the first group's update overflows; the guard restores the weights before it.
    # The config check refuses an infinite lr up front, so it is bypassed here to reach the guard.
    monkeypatch.setattr("ortholab.models.optimizers.check_optimizer_spec", lambda spec, where: None)
    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", DEMO, *TINY, "--db", db, "--model.optimizers", "{default: {name: sgd, lr: .inf}}"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "ortholab: error: non-finite parameters of group 'recurrent'" in err and "at step 0" in err
    assert "model.optimizers.default.lr" in err  # the key the config sets, not model.optimizers.recurrent
    (run,) = Store(db).list_runs()
    assert run.status == "failed" and run.reason.startswith("non-finite parameters of group 'recurrent'")
    run_dir = Store(db).get_run(run.id).run_dir
    checkpoint = torch.load(os.path.join(run_dir, "checkpoints", "nan-step0.ckpt"), weights_only=False)
    weights = [t for t in checkpoint["state_dict"].values() if t.is_floating_point()]
    assert weights and all(t.isfinite().all() for t in weights)


def test_an_epoch_trained_in_part_records_no_epoch_time():
    """`time/epoch_s` is an epoch's training time: an epoch a resume joined midway (or max_steps cut short, or a
    resume at the very end of one) records none, where it once recorded the part's time (0.0 at a finished run's
    end), which the timing tables would read as an epoch's."""
    from types import SimpleNamespace

    import torch

    from ortholab.training.callbacks.timing import Timing

    recorded = []
    logger = SimpleNamespace(log_metrics=lambda metrics, step: recorded.append((step, dict(metrics))))
    trainer = SimpleNamespace(
        is_global_zero=True, loggers=[logger], current_epoch=0, global_step=0, num_training_batches=4
    )
    timing, batch = Timing(every_n_steps=None), (torch.zeros(2, 3),)
    for batches in (4, 3, 0):  # a whole epoch; one a resume joined after its first batch; one resumed at its end
        timing.on_train_epoch_start(trainer, None)
        for _ in range(batches):
            timing.on_train_batch_start(trainer, None, batch, 0)
            trainer.global_step += 1
            timing.on_train_batch_end(trainer, None, None, batch, 0)
        timing.on_train_epoch_end(trainer, None)
    assert [step for step, metrics in recorded if "time/epoch_s" in metrics] == [4]


def test_the_steps_since_the_last_timing_record_are_recorded_when_training_ends():
    """Every 4 steps, 6 steps trained: points at 4 and, flushed at the end, at 6 (a run's points reach its last
    step; its summary's step count is the largest step recorded)."""
    from types import SimpleNamespace

    import torch

    from ortholab.training.callbacks.timing import Timing

    recorded = []
    logger = SimpleNamespace(log_metrics=lambda metrics, step: recorded.append((step, dict(metrics))))
    trainer = SimpleNamespace(
        is_global_zero=True, loggers=[logger], current_epoch=0, global_step=0, num_training_batches=100
    )
    timing, batch = Timing(every_n_steps=4), (torch.zeros(2, 3),)
    module = SimpleNamespace(device=torch.device("cpu"))
    for _ in range(6):
        timing.on_train_batch_start(trainer, module, batch, 0)
        trainer.global_step += 1
        timing.on_train_batch_end(trainer, module, None, batch, 0)
    timing.on_train_end(trainer, module)
    assert [step for step, metrics in recorded if "time/step_s" in metrics] == [4, 6]
    timing.on_train_end(trainer, module)  # nothing since: nothing more
    assert len(recorded) == 2


@pytest.mark.parametrize("family", ["scornn", "scurnn"])
def test_the_probes_feed_a_64_true_run_float64_inputs(tmp_path, monkeypatch, family):
    """The gradient and hidden-state probes read the validation tensors as stored (float32): a 64-true run of a task
    with real-valued inputs (adding) failed at step 0 with 'expected m1 and m2 to have the same dtype'."""
    store, run = _fit(
        tmp_path,
        monkeypatch,
        *("--data", "adding", "--data.seq_len", "6", "--trainer.precision", "64-true"),
        *("--model.family", family, "--model.family_args", "{}"),
        *("--model.optimizers", "{default: {name: adam, lr: 0.001}}"),
        "--trainer.callbacks+=training.callbacks.HiddenTrajectory",
    )
    assert run.status == "finished", run.reason
    (profile,) = store.artifacts(run.id, GRAD_NORMS)
    norms = array_from_bytes(store.artifact_data(profile.id))
    assert norms.shape == (6,) and (norms > 0).all()
    assert store.artifacts(run.id, HIDDEN_TRAJECTORY)
