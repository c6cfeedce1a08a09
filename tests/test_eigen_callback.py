"""EigenvalueSnapshots (issue 7): eig(W) stored with a near -1 count that the stored values confirm, scuRNN's
phases beside it, and snapshots exactly at the requested steps."""

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from tolerances import roundoff

from ortholab.datamodules import CopyingTask
from ortholab.db import SQLLogger, Store
from ortholab.db.artifacts import EIGENVALUES, array_from_bytes
from ortholab.training.callbacks import EigenvalueSnapshots
from ortholab.training.module import RecurrentModule


def fit(tmp_path, family, family_args, callback, max_steps=6):
    """A tiny copying fit (4 batches per epoch) with only `callback`; the store and the run it recorded."""
    torch.manual_seed(0)
    task = CopyingTask(seq_len=5, train_size=40, batch_size=10, val_size=10)
    module = RecurrentModule(task.spec, family=family, hidden_size=8, family_args=family_args)
    logger = SQLLogger(db_url=f"sqlite:///{tmp_path / 'runs.db'}", root_dir=str(tmp_path / "runs"))
    trainer = pl.Trainer(
        max_steps=max_steps,
        logger=logger,
        callbacks=[callback],
        accelerator="cpu",
        limit_val_batches=0,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    trainer.fit(module, datamodule=task)
    store = Store(logger._db_url)
    (run,) = store.list_runs()
    return store, run, module


def stored(store, artifact):
    return array_from_bytes(store.artifact_data(artifact.id))


@pytest.mark.parametrize("tolerance", [1e-2, 0.5])
def test_near_minus_one_counts_the_stored_eigenvalues(tmp_path, tolerance):
    # scoRNN with init 'zeros': A = 0, so W = (I + A)^-1 (I - A) D = D holds rho entries -1 (scoRNN eq. 3.3)
    rho = 3
    store, run, _ = fit(
        tmp_path, "scornn", {"rho": rho, "init": "zeros"}, EigenvalueSnapshots(every_epoch=True, tolerance=tolerance)
    )
    snapshots = store.artifacts(run.id, EIGENVALUES)
    assert [a.step for a in snapshots] == [0, 4, 6]  # start, end of epoch 0, end of training
    for artifact in snapshots:
        values = stored(store, artifact)
        assert values.shape == (8,) and values.dtype == np.complex128
        assert artifact.meta["tolerance"] == tolerance and artifact.meta["n"] == 8
        assert artifact.meta["near_minus_one"] == int((np.abs(values + 1) < tolerance).sum())
    initial = stored(store, snapshots[0])
    assert snapshots[0].meta["near_minus_one"] == rho
    assert np.allclose(np.sort(initial.real), [-1] * rho + [1] * (8 - rho)) and np.allclose(initial.imag, 0)


def test_trained_eigenvalues_leave_minus_one_and_the_count_follows(tmp_path):
    # a tolerance tighter than the first steps' movement: the count drops below rho once W has moved
    store, run, module = fit(
        tmp_path,
        "scornn",
        {"rho": 3, "init": "zeros"},
        EigenvalueSnapshots(every_epoch=False, every_n_steps=6, tolerance=1e-9),
    )
    first, last = store.artifacts(run.id, EIGENVALUES)
    assert (first.step, last.step) == (0, 6)
    assert first.meta["near_minus_one"] == 3
    moved = stored(store, last)
    assert last.meta["near_minus_one"] == int((np.abs(moved + 1) < last.meta["tolerance"]).sum()) < 3
    # the snapshot is the trained W's spectrum, not an earlier one's: each stored value within float64 round-off of
    # one of LAPACK's eigenvalues of the final W and back (W is orthogonal, so normal: condition 1; n = 8 eps)
    final = np.linalg.eigvals(module.model.layer.recurrent_matrix().detach().double().numpy())
    distance = np.abs(moved[:, None] - final[None, :])
    bound = roundoff(torch.float64, 8, scale=8)
    assert distance.min(axis=1).max() < bound and distance.min(axis=0).max() < bound
    assert np.abs(final - stored(store, first)[:, None]).min(axis=0).max() > 1e3 * bound  # it did move


def test_scurnn_stores_its_phases_beside_the_eigenvalues(tmp_path):
    callback = EigenvalueSnapshots(every_epoch=False, every_n_steps=3)
    store, run, module = fit(tmp_path, "scurnn", {}, callback)
    eig = store.artifacts(run.id, EIGENVALUES)
    phases = store.artifacts(run.id, "phases")
    assert [a.step for a in phases] == [a.step for a in eig] == [0, 3, 6]
    last = stored(store, phases[-1])
    assert last.shape == (8,) and last.dtype == np.float64
    assert np.array_equal(last, module.model.layer.cayley.theta.detach().double().numpy())  # D = diag(e^{i theta})
    w_eig = stored(store, eig[0])
    # unitary W: complex64 Cayley transform at n = 8, n eps32 cond(I + A), cond <= sqrt(2) at the init; |lambda|
    # between W's extreme singular values 1 +- ||W^H W - I|| / 2
    assert w_eig.dtype == np.complex128 and np.allclose(np.abs(w_eig), 1.0, rtol=0, atol=roundoff(torch.float32, 8, 2))


@pytest.mark.parametrize("every_n_steps, steps", [(2, [0, 2, 4, 6]), (3, [0, 3, 6]), (5, [0, 5])])
def test_every_n_steps_snapshots_at_those_steps(tmp_path, every_n_steps, steps):
    store, run, _ = fit(
        tmp_path, "scornn", {"rho": 4}, EigenvalueSnapshots(every_epoch=False, every_n_steps=every_n_steps)
    )
    assert [a.step for a in store.artifacts(run.id, EIGENVALUES)] == steps


def test_a_step_due_twice_is_stored_once(tmp_path):
    # step 4 ends epoch 0 and is a multiple of 2: one snapshot there, not two identical ones
    store, run, _ = fit(tmp_path, "scornn", {"rho": 4}, EigenvalueSnapshots(every_epoch=True, every_n_steps=2))
    assert [a.step for a in store.artifacts(run.id, EIGENVALUES)] == [0, 2, 4, 6]
