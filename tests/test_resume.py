"""Faults done for real: SIGKILL mid-epoch then resume, SIGTERM, a store killed mid-write."""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from test_cli import DEMO, TINY

from ortholab.cli.train import resume_arguments
from ortholab.db import Store, StoreError
from ortholab.db.extract import copy_resume_files, write_run_store
from ortholab.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
# 4 batches per epoch, validation (and so a checkpoint) every 3 steps, 12 steps in all
RUN = [
    *TINY,
    "--trainer.max_steps",
    "12",
    "--data.train_size",
    "40",
    "--trainer.val_check_interval",
    "3",
    "--trainer.check_val_every_n_epoch",
    "null",
]


FAULT_MODULES = "faults,reliability_faults"  # the tests' fault callbacks, allowed in configs by the user's variable


def ortholab(cwd, *args, env=None):
    env = {
        **os.environ,
        "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'tests'}",
        "ORTHOLAB_CONFIG_MODULES": FAULT_MODULES,
        **(env or {}),
    }
    return subprocess.run(
        [sys.executable, "-c", "from ortholab.cli.main import main; main()", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def final_state(run_dir: str) -> dict:
    return torch.load(Path(run_dir) / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]


def steps_of(store, run_id, key="train/loss"):
    return [p.step for p in store.metric_series(run_id, key)]


def uninterrupted(folder, flags):
    """A run of `flags` without faults: (store, run)."""
    done = ortholab(folder, "fit", "--config", DEMO, *flags, "--db", f"sqlite:///{folder / 'runs.db'}")
    assert done.returncode == 0, done.stderr
    store = Store(f"sqlite:///{folder / 'runs.db'}")
    (run,) = store.list_runs()
    return store, run


def fit_signalled(folder, db, step, *flags, signal_name=None):
    """`ortholab fit` of the demo config with `flags`, sent a signal at `step` by tests/faults.py's SignalAt
    (SIGKILL unless `signal_name`): the finished process."""
    signalled = ["--trainer.callbacks+=faults.SignalAt", f"--trainer.callbacks.step={step}"]
    if signal_name:
        signalled.append(f"--trainer.callbacks.signal_name={signal_name}")
    return ortholab(folder, "fit", "--config", DEMO, *flags, "--db", db, *signalled)


def killed_at_step_8(folder, db):
    """A run of RUN killed outright (SIGKILL) at step 8, after its step-6 checkpoint: (store, run)."""
    killed = fit_signalled(folder, db, 8, *RUN)
    assert killed.returncode == -signal.SIGKILL
    store = Store(db)
    (run,) = store.list_runs()
    return store, run


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return uninterrupted(tmp_path_factory.mktemp("clean"), RUN)


def assert_same_training(store, run, reference):
    ref_store, ref_run = reference
    assert steps_of(store, run.id) == list(range(12))  # gap-free, no duplicates
    assert steps_of(ref_store, ref_run.id, "val/loss") == [3, 6, 9, 12]
    assert steps_of(store, run.id, "val/loss") == [3, 6, 9, 12]
    ref_losses = [p.value for p in ref_store.metric_series(ref_run.id, "train/loss")]
    assert [p.value for p in store.metric_series(run.id, "train/loss")] == ref_losses
    ours, theirs = final_state(store.get_run(run.id).run_dir), final_state(ref_store.get_run(ref_run.id).run_dir)
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)


def test_sigkill_mid_epoch_then_resume_equals_an_uninterrupted_run(tmp_path, reference):
    damaged = tmp_path
    db = f"sqlite:///{damaged / 'runs.db'}"
    store, run = killed_at_step_8(damaged, db)
    assert run.status == "running" and max(steps_of(store, run.id)) >= 6  # killed after the step-6 checkpoint

    resumed = ortholab(damaged, "fit", "--resume", str(run.id), "--db", db)
    assert resumed.returncode == 0, resumed.stderr
    said = resumed.stdout + resumed.stderr
    assert f"Run {run.id} continues from its checkpoint at step 6: the " in said and "on are removed" in said
    (after,) = store.list_runs()
    assert after.id == run.id and after.status == "finished"
    assert_same_training(store, after, reference)


def test_a_failed_run_continued_with_another_setting_records_the_change_and_why_it_had_stopped(tmp_path):
    """`fit --resume ID --KEY VALUE` after the NaN guard failed the run: the same run goes on from its last checkpoint,
    and its info keeps the failure's reason (the resume clears the run's reason column), the step, the key with
    its old and new value, and the command; the export's provenance says so."""
    from ortholab.app.export import run_provenance
    from ortholab.db.provenance import resume_notes

    db = f"sqlite:///{tmp_path / 'runs.db'}"
    poisoned = ["--trainer.callbacks+=faults.NaNGradientAt", "--trainer.callbacks.step=8"]
    failed = ortholab(tmp_path, "fit", "--config", DEMO, *RUN, "--db", db, *poisoned)
    store = Store(db)
    (run,) = store.list_runs()
    assert failed.returncode != 0 and run.status == "failed" and "non-finite" in run.reason

    resumed = ortholab(tmp_path, "fit", "--resume", str(run.id), "--db", db, "--model.optimizers.other.lr", "0.002")
    assert resumed.returncode == 0, resumed.stderr
    said = f"Run {run.id} goes on from step 6 with model.optimizers.other.lr 0.002 (was 0.001)"
    assert said in resumed.stdout + resumed.stderr
    detail = store.get_run(run.id)
    assert detail.status == "finished" and detail.reason is None
    (resume,) = detail.info["resumes"]
    assert resume["step"] == 6 and resume["stopped"] == "failed" and resume["reason"] == run.reason
    assert resume["changed"] == {"model.optimizers.other.lr": [0.001, 0.002]}
    assert "--model.optimizers.other.lr 0.002" in resume["command"]
    assert store.params_of([run.id])[run.id]["model.optimizers.other.lr"] == 0.002  # the setting it ends with
    optimizers = torch.load(Path(detail.run_dir) / "checkpoints" / "last.ckpt", weights_only=False)["optimizer_states"]
    assert [g["lr"] for state in optimizers for g in state["param_groups"]] == [1e-4, 0.002]  # trained with it
    assert steps_of(store, run.id) == list(range(12))  # no point lost or doubled
    (note,) = resume_notes(detail.info)  # the dashboard's run details
    assert note.startswith(f"Continued from step 6 after it failed ({run.reason}), with ")
    assert "model.optimizers.other.lr 0.002 (was 0.001): `ortholab fit --resume" in note
    command = run_provenance(store, run.id)["command"]
    assert command.startswith("ortholab fit --config")
    assert "; continued from step 6 with model.optimizers.other.lr 0.002 (was 0.001): ortholab fit --resume" in command
    shown = ortholab(tmp_path, "runs", "show", str(run.id), "--db", db)  # the run whole, for a terminal
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == f"run {run.id}: copying_scornn · fit · scornn on copying · finished"
    assert lines[1].startswith("steps 12/12 · best val/loss ") and "(baseline " in lines[1]
    assert f"run folder: {detail.run_dir}" in lines and "checkpoints: " in shown.stdout
    assert "continued with other code" not in shown.stdout and note in lines  # same code; the resume as the dashboard


def test_a_run_is_resumed_by_its_name_as_a_job_script_that_knows_no_id_does(tmp_path, reference):
    """`fit --resume NAME`: the newest run of that name not finished (a requeued SLURM job's script reruns one command);
    once it has finished, or for a name no run has, one line and nothing recorded."""
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    store, run = killed_at_step_8(tmp_path, db)
    resumed = ortholab(tmp_path, "fit", "--resume", run.name, "--db", db)
    assert resumed.returncode == 0, resumed.stderr
    assert f"--resume {run.name}: run {run.id}, the newest run of that name not finished" in resumed.stdout
    (after,) = store.list_runs()
    assert after.id == run.id and after.status == "finished"
    assert_same_training(store, after, reference)
    for name, says in (
        (run.name, f"--resume {run.name}: every run named {run.name!r} has finished (the newest is run {run.id})"),
        ("no-such-run", f"--resume no-such-run: no run in {db} has that id or name; give a run's id or name"),
    ):
        refused = ortholab(tmp_path, "fit", "--resume", name, "--db", db)
        assert refused.returncode == 2 and says in refused.stderr.strip().splitlines()[-1], refused.stderr
    assert [r.id for r in store.list_runs()] == [run.id]


def test_a_setting_changed_by_a_resume_stays_when_the_next_resume_starts_from_an_older_checkpoint(tmp_path):
    """`fit --resume ID --KEY VALUE` killed before its first checkpoint (a machine gone, an export taken while it
    trained): the next plain `fit --resume ID` starts from a checkpoint written with the old value, and trains with
    the run's setting, VALUE (the checkpoint's hyperparameters had won, undoing the change: scurnn_figure5 run 32
    went back to eps = 0 and failed again at the same step)."""
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    store, run = killed_at_step_8(tmp_path, db)  # its last checkpoint: step 6, lr 0.001
    killed_again = ortholab(
        tmp_path,
        *("fit", "--resume", str(run.id), "--db", db, "--model.optimizers.other.lr", "0.002"),
        *("--trainer.callbacks+=faults.SignalAt", "--trainer.callbacks.step=7", "--trainer.callbacks.marker=again"),
    )
    assert killed_again.returncode == -signal.SIGKILL, killed_again.stderr
    folder = Path(store.get_run(run.id).run_dir)
    assert torch.load(folder / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 6  # none since

    resumed = ortholab(tmp_path, "fit", "--resume", str(run.id), "--db", db)
    assert resumed.returncode == 0, resumed.stderr
    assert "(was 0.002)" not in resumed.stdout + resumed.stderr  # no change back to the checkpoint's 0.001
    assert store.params_of([run.id])[run.id]["model.optimizers.other.lr"] == 0.002
    optimizers = torch.load(folder / "checkpoints" / "last.ckpt", weights_only=False)["optimizer_states"]
    assert [g["lr"] for state in optimizers for g in state["param_groups"]] == [1e-4, 0.002]  # trained with it
    assert store.get_run(run.id).status == "finished" and steps_of(store, run.id) == list(range(12))


def test_sigterm_stops_at_a_batch_boundary_with_a_checkpoint_and_an_interrupted_run(tmp_path, reference):
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    stopped = fit_signalled(tmp_path, db, 5, *RUN, signal_name="SIGTERM")
    assert stopped.returncode == 128 + signal.SIGTERM, stopped.stderr
    assert "--resume" in stopped.stdout
    store = Store(db)
    (run,) = store.list_runs()
    assert run.status == "interrupted" and run.reason.startswith("SIGTERM at step 5")
    assert (
        torch.load(Path(store.get_run(run.id).run_dir) / "checkpoints" / "last.ckpt", weights_only=False)["global_step"]
        == 5
    )
    resumed = ortholab(tmp_path, "fit", "--resume", str(run.id), "--db", db)
    assert resumed.returncode == 0, resumed.stderr
    (run,) = store.list_runs()
    assert (run.status, run.reason) == ("finished", None)  # the SIGTERM's "resume with ..." no longer holds
    # Lightning validated the cut-short epoch at step 5 after the checkpoint: the resume forgot that point
    assert_same_training(store, run, reference)


def test_slurms_sigusr1_stops_the_run_with_its_checkpoint_and_no_requeue_of_a_new_run(tmp_path, reference):
    """On SLURM (`--signal=USR1@90`), Lightning's own handler saved hpc_ckpt_1.ckpt in the current folder and asked
    `scontrol requeue`: the requeued job's `ortholab fit --config X` then loaded that checkpoint into a new run (its
    points from step 5 on, the first run left 'running'). Now SIGUSR1 stops the run as SIGTERM does: checkpoint at
    the batch boundary, run interrupted, exit 128 + 10; `fit --resume` reaches the uninterrupted curve."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "scontrol").write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "scontrol.log"}\n')
    (fake / "scontrol").chmod(0o755)
    slurm = {"SLURM_NTASKS": "1", "SLURM_JOB_NAME": "job", "SLURM_JOB_ID": "42", "SLURM_NODELIST": "localhost"}
    slurm |= {"SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0"}
    env = {**slurm, "PATH": f"{fake}{os.pathsep}{os.environ['PATH']}"}
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    signalled = ["--trainer.callbacks+=faults.SignalAt", "--trainer.callbacks.step=5"]
    signalled.append("--trainer.callbacks.signal_name=SIGUSR1")
    stopped = ortholab(tmp_path, "fit", "--config", DEMO, *RUN, "--db", db, *signalled, env=env)
    assert stopped.returncode == 128 + signal.SIGUSR1, stopped.stderr
    assert "SLURM auto-requeueing enabled" not in stopped.stdout + stopped.stderr  # (OrthoLab's handler answers)
    store = Store(db)
    (run,) = store.list_runs()
    assert run.status == "interrupted" and run.reason.startswith("SIGUSR1 at step 5; resume with `ortholab fit")
    assert not list(tmp_path.glob("hpc_ckpt_*.ckpt")) and not (tmp_path / "scontrol.log").exists()
    resumed = ortholab(tmp_path, "fit", "--resume", str(run.id), "--db", db, env=env)
    assert resumed.returncode == 0, resumed.stderr
    (run,) = store.list_runs()
    assert (run.status, run.reason) == ("finished", None)
    assert_same_training(store, run, reference)


def test_a_stale_hpc_checkpoint_in_the_current_folder_is_not_loaded_into_a_new_run_under_slurm(tmp_path):
    """Under SLURM, Lightning loads the newest hpc_ckpt_N.ckpt of trainer.default_root_dir into a fit given no
    checkpoint; that folder was the current one, where earlier Lightning jobs (or OrthoLab before SIGUSR1 stopped runs
    itself) left them. A new run now starts from its own initialisation, as without SLURM."""
    slurm = {"SLURM_NTASKS": "1", "SLURM_JOB_NAME": "job", "SLURM_JOB_ID": "42", "SLURM_NODELIST": "localhost"}
    slurm |= {"SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0"}
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    first = ortholab(tmp_path, "fit", "--config", DEMO, *RUN, "--db", db)
    assert first.returncode == 0, first.stderr
    (earlier,) = Store(db).list_runs()
    shutil.copy(Path(Store(db).get_run(earlier.id).run_dir) / "checkpoints" / "last.ckpt", tmp_path / "hpc_ckpt_1.ckpt")
    second = ortholab(tmp_path, "fit", "--config", DEMO, *RUN, "--db", db, env=slurm)
    assert second.returncode == 0, second.stderr
    assert "hpc_ckpt" not in second.stdout + second.stderr
    run = max(Store(db).list_runs(), key=lambda r: r.id)
    steps = [p.step for p in Store(db).metric_series(run.id, "train/loss")]
    assert run.id != earlier.id and len(steps) == 12 and steps[0] == 0  # all 12 steps, not none after the file's 12


# an epoch-bounded run (3 epochs of 4 batches, shuffled), validated and tested at each epoch end as the MNIST rows
EPOCHS = [
    *TINY,
    "--trainer.max_steps",
    "-1",
    "--trainer.max_epochs",
    "3",
    "--data.train_size",
    "40",
    "--trainer.val_check_interval",
    "1.0",
    "--trainer.check_val_every_n_epoch",
    "1",
    "--data.shuffle",
    "true",
    "--test_every_validation",
    "true",
    "--data.test_size",
    "20",
]


@pytest.fixture(scope="module")
def epoch_reference(tmp_path_factory):
    return uninterrupted(tmp_path_factory.mktemp("epochs"), EPOCHS)


@pytest.mark.parametrize("step", [5, 4], ids=["inside-an-epoch", "at-an-epochs-last-batch"])
def test_sigterm_in_an_epoch_bounded_run_resumes_into_the_same_epochs(tmp_path, epoch_reference, step):
    """A stop one batch into epoch 1 must resume the rest of epoch 1 (Lightning ends the cut-short epoch, and a
    checkpoint of that state resumed into epoch 2, skipping three batches); a stop at an epoch's last batch waits
    for the epoch's end. Either way the record and the weights are those of the uninterrupted run."""
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    stopped = fit_signalled(tmp_path, db, step, *EPOCHS, signal_name="SIGTERM")
    assert stopped.returncode == 128 + signal.SIGTERM, stopped.stderr
    store = Store(db)
    (run,) = store.list_runs()
    assert run.reason.startswith("SIGTERM at step 5")  # at the last batch (step 4) it waits for the next one
    resumed = ortholab(tmp_path, "fit", "--resume", str(run.id), "--db", db)
    assert resumed.returncode == 0, resumed.stderr
    ref_store, ref_run = epoch_reference
    for key in ("train/loss", "val/loss", "test/acc"):
        ours = [(p.step, p.epoch, p.value) for p in store.metric_series(run.id, key)]
        assert ours == [(p.step, p.epoch, p.value) for p in ref_store.metric_series(ref_run.id, key)], key
    assert [p.step for p in store.metric_series(run.id, "test/acc")] == [4, 8, 12]  # epoch ends only
    ours, theirs = final_state(store.get_run(run.id).run_dir), final_state(ref_store.get_run(ref_run.id).run_dir)
    assert all(torch.equal(ours[k], theirs[k]) for k in theirs)


def test_a_resume_to_a_step_the_checkpoint_has_reached_is_refused_and_changes_nothing(tmp_path):
    """`fit --resume ID --trainer.max_steps N` with N below the checkpoint's step restored it, stopped at once and
    recorded the run finished past N, with exit 0: a mistyped or too small N ended a run meant to go on. Now one line,
    exit 2, naming the step and the value; the run, its points and its checkpoints stay as they were."""
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    store, run = killed_at_step_8(tmp_path, db)  # its last checkpoint is at step 6
    fields = ("status", "reason", "steps", "ended_at", "info", "config")
    before = [getattr(store.get_run(run.id), f) for f in fields]
    points = {key: store.metric_series(run.id, key) for key in ("train/loss", "val/loss")}
    folder = Path(store.get_run(run.id).run_dir) / "checkpoints"
    files = {path.name: path.read_bytes() for path in folder.iterdir()}
    for flags in (["--trainer.max_steps", "5"], ["--trainer.max_steps=4"]):
        refused = ortholab(tmp_path, "fit", "--resume", str(run.id), "--db", db, *flags)
        said = refused.stderr.strip()
        assert refused.returncode == 2 and "\n" not in said and "Traceback" not in said, refused.stderr
        assert f"--trainer.max_steps {flags[-1][-1]}: run {run.id} continues from its checkpoint at step 6" in said
        assert f"give N of 6 or more (`ortholab fit --resume {run.id} --trainer.max_steps N`" in said
        assert [getattr(store.get_run(run.id), f) for f in fields] == before
        assert {key: store.metric_series(run.id, key) for key in points} == points
        assert {path.name: path.read_bytes() for path in folder.iterdir()} == files
    resumed = ortholab(tmp_path, "fit", "--resume", str(run.id), "--db", db, "--trainer.max_steps", "12")
    assert resumed.returncode == 0, resumed.stderr
    assert store.get_run(run.id).status == "finished" and steps_of(store, run.id) == list(range(12))


def test_a_resume_to_fewer_epochs_than_the_checkpoint_began_is_refused_and_changes_nothing(tmp_path):
    """`fit --resume ID --trainer.max_epochs E` from a checkpoint one batch into epoch 2 with E = 1 restored it,
    stopped at once and recorded the run finished after 5 steps of a 4-step epoch, with exit 0. Now one line, exit 2,
    naming the epoch (counted from 1) and the value; the run stays as it was; E = 2 ends it with that epoch."""
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    stopped = fit_signalled(tmp_path, db, 5, *EPOCHS, signal_name="SIGTERM")  # last.ckpt at step 5: epoch 2 begun
    assert stopped.returncode == 128 + signal.SIGTERM, stopped.stderr
    store = Store(db)
    (run,) = store.list_runs()
    fields = ("status", "reason", "steps", "ended_at", "info", "config")
    before = [getattr(store.get_run(run.id), f) for f in fields]
    points = store.metric_series(run.id, "train/loss")
    folder = Path(store.get_run(run.id).run_dir) / "checkpoints"
    files = {path.name: path.read_bytes() for path in folder.iterdir()}
    for flags in (["--trainer.max_epochs", "1"], ["--trainer.max_epochs=0"]):
        refused = ortholab(tmp_path, "fit", "--resume", str(run.id), "--db", db, *flags)
        said = refused.stderr.strip()
        assert refused.returncode == 2 and "\n" not in said and "Traceback" not in said, refused.stderr
        assert f"--trainer.max_epochs {flags[-1][-1]}: run {run.id} continues from its checkpoint at step 5, " in said
        assert "inside its epoch 2 (counted from 1)" in said and "give E of 2 or more" in said, said
        assert [getattr(store.get_run(run.id), f) for f in fields] == before
        assert store.metric_series(run.id, "train/loss") == points
        assert {path.name: path.read_bytes() for path in folder.iterdir()} == files
    resumed = ortholab(tmp_path, "fit", "--resume", str(run.id), "--db", db, "--trainer.max_epochs", "2")
    assert resumed.returncode == 0, resumed.stderr
    assert store.get_run(run.id).status == "finished" and steps_of(store, run.id) == list(range(8))


def test_sigterm_at_the_last_batch_of_training_lets_the_run_finish(tmp_path):
    """The stop waits out an epoch's last batch; when that batch ends training, the run simply finishes."""
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    done = fit_signalled(tmp_path, db, 12, *RUN, signal_name="SIGTERM")
    assert done.returncode == 0, done.stderr
    assert "Interrupted" not in done.stdout
    (run,) = Store(db).list_runs()
    assert (run.status, run.reason) == ("finished", None)
    again = ortholab(tmp_path, "fit", "--resume", str(run.id), "--db", db)  # would stop at once: refused, saying why
    assert again.returncode == 2 and f"run {run.id} is finished" in again.stderr
    assert f"`ortholab fit --resume {run.id} --trainer.max_steps N`" in again.stderr
    assert "trainer.max_steps = 12" in again.stderr  # the limit it reached
    same = ortholab(tmp_path, "fit", "--resume", str(run.id), "--db", db, "--trainer.max_steps", "12")  # not above
    assert same.returncode == 2 and f"run {run.id} is finished" in same.stderr
    assert Store(db).get_run(run.id).status == "finished"


def test_a_run_stopped_by_its_time_limit_is_told_to_give_time_not_steps(tmp_path, monkeypatch, capsys):
    """A run ended by trainer.max_time was told to raise max_steps, which trained nothing: Lightning's timer
    restores the time spent from the checkpoint and stops at once ('Time limit reached')."""
    from ortholab.cli.main import main

    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    timed = ["--trainer.max_steps", "1000000", "--trainer.max_time", "00:00:00:01", "--data.train_size", "4000"]
    main(["fit", "--config", DEMO, *TINY, *timed, "--db", db])
    (run,) = Store(db).list_runs()
    assert run.status == "finished" and 0 < run.steps < 1000000  # stopped by the clock
    for more in ([], ["--trainer.max_steps", "2000000"]):
        with pytest.raises(SystemExit) as refused:
            main(["fit", "--resume", str(run.id), "--db", db, *more])
        said = capsys.readouterr().err
        assert refused.value.code == 2 and "trainer.max_time = '00:00:00:01' too" in said, said
        assert f"`ortholab fit --resume {run.id} --trainer.max_time null`" in said
    main(
        [
            "fit",
            "--resume",
            str(run.id),
            "--db",
            db,
            "--trainer.max_time",
            "null",
            "--trainer.max_steps",
            str(run.steps + 5),
        ]
    )
    assert Store(db).get_run(run.id).steps == run.steps + 5


def test_sigterm_with_one_batch_an_epoch_stops_one_batch_later(tmp_path):
    """Every batch is its epoch's last: the stop waits out one of them, not all."""
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    stopped = fit_signalled(tmp_path, db, 2, *RUN, "--data.train_size", "10", signal_name="SIGTERM")
    assert stopped.returncode == 128 + signal.SIGTERM, stopped.stderr
    (run,) = Store(db).list_runs()
    assert run.status == "interrupted" and run.reason.startswith("SIGTERM at step 3")


def test_resuming_an_unknown_run_names_it(tmp_path):
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    Store(db)
    failed = ortholab(tmp_path, "fit", "--resume", "42", "--db", db)
    assert failed.returncode == 2 and "No run with id 42" in failed.stderr and "Traceback" not in failed.stderr


def test_a_resume_from_another_folder_uses_the_runs_folder_the_run_was_recorded_in(tmp_path):
    """A config no longer pins --runs_dir (a `--print_config` copy would have pinned it): `fit --resume ID` from
    another folder and without $ORTHOLAB_RUNS checks, and writes in, the run's own runs folder, making no ./runs."""
    first, elsewhere = tmp_path / "first", tmp_path / "elsewhere"
    first.mkdir(), elsewhere.mkdir()
    db = f"sqlite:///{first / 'runs' / 'runs.db'}"
    short = ["--trainer.max_steps", "6", "--trainer.val_check_interval", "3"]
    trained = ortholab(first, "fit", "--config", DEMO, *TINY, *short, "--db", db, env={"ORTHOLAB_RUNS": ""})
    assert trained.returncode == 0, trained.stderr
    (run,) = Store(db).list_runs()
    resumed = ortholab(elsewhere, "fit", "--resume", str(run.id), "--db", db, "--trainer.max_steps", "9")
    assert resumed.returncode == 0, resumed.stderr
    assert not (elsewhere / "runs").exists() and Store(db).get_run(run.id).status == "finished"
    assert Store(db).get_run(run.id).run_dir.startswith(str(first / "runs"))


WRITER = """
import sys
from ortholab.cli.train import resume_arguments
from ortholab.db import Store, StoreError
from ortholab.errors import ConfigError
store = Store(sys.argv[1])
run = store.create_run(name="victim")
print(run, flush=True)
step = 0
while True:
    store.log_metrics(run, {f"m{k}": float(step) for k in range(50)}, step=step)
    step += 1
"""


def test_a_store_killed_mid_write_opens_at_its_last_commit(tmp_path):
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, db],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    run_id = int(writer.stdout.readline())
    time.sleep(1.5)
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    store = Store(db)
    keys = store.metric_keys(run_id)
    assert len(keys) == 50
    per_key = [steps_of(store, run_id, key) for key in keys]
    assert len(per_key[0]) > 5 and all(steps == per_key[0] for steps in per_key)  # every commit whole, or absent
    assert per_key[0] == list(range(len(per_key[0])))


def test_a_copy_of_the_store_does_not_resume_a_run_into_the_folder_a_live_process_writes(tmp_path):
    """An export's runs.db names the run folders of the store it was copied from; on the machine that still trains
    them, `fit --resume ID --db COPY` took a run that the copy showed as stopped, loaded the live run's last.ckpt,
    rewrote its config.yaml and, stopped, its last.ckpt, stamped by the copy. The folder's lock file names the store
    that writes it, so the copy is refused, with nothing in the folder or either store changed; the live run goes on
    to its end."""
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    store, run = killed_at_step_8(tmp_path, db)
    write_run_store(store, [run.id], tmp_path / "copy.db")  # as `report --export` writes DIR/runs.db
    copy_db = f"sqlite:///{tmp_path / 'copy.db'}"
    run_dir = Path(store.get_run(run.id).run_dir)
    pause = ["--trainer.callbacks+=faults.PauseAt", "--trainer.callbacks.step=9"]
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'tests'}", "ORTHOLAB_CONFIG_MODULES": FAULT_MODULES}
    command = [sys.executable, "-c", "from ortholab.cli.main import main; main()", "fit", "--resume", str(run.id)]
    live = subprocess.Popen([*command, "--db", db, *pause], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "paused").exists() and live.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert (tmp_path / "paused").exists(), live.stderr.read() if live.poll() is not None else "not paused"
        before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
        copy_before = Store(copy_db, access="read").get_run(run.id)
        refused = ortholab(tmp_path, "fit", "--resume", str(run.id), "--db", copy_db)
        assert refused.returncode == 2, refused.stderr
        (line,) = [x for x in refused.stderr.splitlines() if x.startswith("ortholab: error:")]
        assert f"run {run.id}'s folder {run_dir} was written by the store at sqlite:{tmp_path / 'runs.db'}, " in line
        assert "not by this one" in line and "continue run 1 with --db pointing at that store" in line
        assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before  # nothing written there
        after = Store(copy_db, access="read").get_run(run.id)
        assert (after.status, after.steps, after.reason) == (copy_before.status, copy_before.steps, copy_before.reason)
    finally:
        (tmp_path / "go").write_text("")
        live.wait(timeout=300)
    assert live.returncode == 0, live.stderr.read()
    assert Store(db).get_run(run.id).status == "finished" and steps_of(Store(db), run.id) == list(range(12))


def test_a_byte_copy_of_the_store_does_not_resume_a_run_into_the_originals_folder(tmp_path):
    """`cp -a runs copy` copies the store file, which records the original's run folders: `fit --resume` on the copy
    rewrote the original's last.ckpt, and the original, resumed later, went on from the copy's step with a gap in
    its history. The copy is refused; the original resumes as if the copy had never been made."""
    runs = tmp_path / "runs"
    db = f"sqlite:///{runs / 'ortholab.db'}"
    store, run = killed_at_step_8(tmp_path, db)
    run_dir = Path(store.get_run(run.id).run_dir)
    store.close()  # cp in a process of its own: a file this process opens and closes drops its SQLite locks
    subprocess.run(["cp", "-a", str(runs), str(tmp_path / "copy")], check=True)
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    refused = ortholab(
        tmp_path, "fit", "--resume", str(run.id), "--db", f"sqlite:///{tmp_path / 'copy' / 'ortholab.db'}"
    )
    assert refused.returncode == 2, refused.stderr
    assert f"was written by the store at sqlite:{runs / 'ortholab.db'}, not by this one" in refused.stderr
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before
    resumed = ortholab(tmp_path, "fit", "--resume", str(run.id), "--db", db)
    assert resumed.returncode == 0, resumed.stderr
    assert Store(db).get_run(run.id).status == "finished" and steps_of(Store(db), run.id) == list(range(12))


def test_a_moved_store_names_where_its_run_folder_is_now_and_the_link_that_continues_it(tmp_path):
    runs = tmp_path / "runs"
    store, run = killed_at_step_8(tmp_path, f"sqlite:///{runs / 'ortholab.db'}")
    folder = Path(store.get_run(run.id).run_dir)
    store.close()
    moved = tmp_path / "moved"
    runs.rename(moved)
    db = f"sqlite:///{moved / 'ortholab.db'}"
    refused = ortholab(tmp_path, "fit", "--resume", str(run.id), "--db", db)
    assert refused.returncode == 2, refused.stderr
    assert f"{folder} is not there, but {moved / folder.relative_to(runs)} is: the store was moved" in refused.stderr
    assert f"(ln -s {moved} {runs})" in refused.stderr
    runs.symlink_to(moved)  # as the error says
    resumed = ortholab(tmp_path, "fit", "--resume", str(run.id), "--db", db)
    assert resumed.returncode == 0, resumed.stderr
    assert Store(db).get_run(run.id).status == "finished" and steps_of(Store(db), run.id) == list(range(12))


def test_an_exported_unfinished_run_resumes_from_a_copy_of_its_store_on_a_new_machine(tmp_path, reference):
    """The machine goes away with its store and run folders; what `report --export --with-checkpoints` wrote (runs.db,
    the run's config and last checkpoint) is restored into the same runs folder, and `fit --resume` on the copied
    store continues the run to the same curve as an uninterrupted one (docs/checkpoints.md)."""
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    store, run = killed_at_step_8(tmp_path, db)
    export = tmp_path / "export"
    write_run_store(store, [run.id], export / "runs.db")
    files = copy_resume_files(store, [run.id], export / "checkpoints")
    run_dir = Path(store.get_run(run.id).run_dir)
    where = Path(*run_dir.parts[-3:])
    assert where.parts[0] == f"store-{store.store_id[:8]}"
    copied = sorted(str(f.relative_to(export / "checkpoints" / where)) for f in files)
    best = sorted(p.name for p in (run_dir / "checkpoints").glob("best-step*.ckpt"))
    assert best and copied == sorted(["config.yaml", "checkpoints/last.ckpt", *[f"checkpoints/{b}" for b in best]])
    store.close()
    runs_root = run_dir.parents[2]
    shutil.rmtree(runs_root)  # the machine is gone
    for name in ("runs.db", "runs.db-wal", "runs.db-shm"):
        (tmp_path / name).unlink(missing_ok=True)

    shutil.copytree(export / "checkpoints", runs_root)  # the restore docs/checkpoints.md gives
    shutil.copyfile(export / "runs.db", tmp_path / "restored.db")
    restored = f"sqlite:///{tmp_path / 'restored.db'}"
    resumed = ortholab(tmp_path, "fit", "--resume", str(run.id), "--db", restored)
    assert resumed.returncode == 0, resumed.stderr
    copy = Store(restored)
    assert copy.copied_from == store.store_id != copy.store_id
    (after,) = copy.list_runs()
    assert after.id == run.id and after.status == "finished" and copy.get_run(run.id).run_dir == str(run_dir)
    assert_same_training(copy, after, reference)


def restarted(url: str, run_id: int) -> None:
    """Rewrite the run's lease as if its holder had run before this machine's last boot (db/lease.py's token:
    host|boot|pid namespace|pid|start time), and as expired, as the boot's minutes leave it."""
    from datetime import datetime

    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    with engine.begin() as connection:
        token = connection.execute(text("SELECT lease_owner FROM runs WHERE id = :id"), {"id": run_id}).scalar_one()
        host, _, *rest = token.split("|")
        earlier = "|".join([host, "an-earlier-boot", *rest])
        connection.execute(
            text("UPDATE runs SET lease_owner = :t, lease_expires_at = :past WHERE id = :id"),
            {"t": earlier, "past": datetime(2000, 1, 1), "id": run_id},
        )
    engine.dispose()


def test_reproduce_resume_continues_a_killed_paper_row_as_the_same_run(tmp_path, reference, monkeypatch, capsys):
    """A machine restart mid-row: the run stays 'running' with no process; `reproduce --resume` finds it by its
    silence and continues it to the same curve as an uninterrupted run. (Killed on a machine that stays up, it is
    found at once: tests/test_reproduce.py.)"""
    import yaml

    import ortholab.db.published as published
    from ortholab.cli.main import main

    tables = tmp_path / "published"
    tables.mkdir()
    (tables / "toy_figure1.yaml").write_text(
        yaml.safe_dump(
            {
                "paper": "toy",
                "table": "Figure 1",
                "metric": "val/loss",
                "mode": "min",
                "rows": [{"row": "copy", "task": "copying", "family": "scornn", "value": None, "config": DEMO}],
            }
        )
    )
    monkeypatch.setattr(published, "PUBLISHED_DIR", tables)
    monkeypatch.setattr(published, "CHECKS_DIR", tmp_path / "no-checks")
    monkeypatch.setenv("PYTHONPATH", f"{REPO}{os.pathsep}{REPO / 'tests'}")  # faults.SignalAt, in the stored config
    monkeypatch.setenv("ORTHOLAB_CONFIG_MODULES", FAULT_MODULES)
    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    killed = fit_signalled(tmp_path, db, 8, *RUN, "--tags", '["paper:toy_figure1/copy"]')
    assert killed.returncode == -signal.SIGKILL
    store = Store(db)
    (run,) = store.list_runs()
    assert run.status == "running"
    restarted(db, run.id)  # its lease names the boot before the restart: whether it lives, only silence tells

    main(["reproduce", "--resume", "--db", db])  # seconds ago: it may still be alive, so it is left alone
    assert "no unfinished paper rows" in capsys.readouterr().out and store.list_runs()[0].status == "running"
    main(["reproduce", "--resume", "--stale_minutes", "0", "--db", db])
    assert f"paper:toy_figure1/copy: run {run.id} finished" in capsys.readouterr().out
    (after,) = store.list_runs()
    assert after.id == run.id and after.status == "finished"
    assert_same_training(store, after, reference)


def test_a_resume_on_a_machine_without_the_run_folder_says_so_not_that_nothing_was_recorded(tmp_path):
    """A node of a multi-node resume (or a new machine) lacking the run's folder was told the run stopped before it
    recorded anything and to delete it."""
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    run = Store(db).create_run(name="elsewhere", run_dir=str(tmp_path / "on-node-0" / "runs" / "1"))
    with pytest.raises(ConfigError) as refused:
        resume_arguments(["fit", "--resume", str(run), "--db", db])
    assert f"run {run}'s folder {tmp_path / 'on-node-0' / 'runs' / '1'} is not on this machine" in str(refused.value)
    assert "runs delete" not in str(refused.value)


def test_only_rank_0_of_a_resume_checks_the_runs_lease(tmp_path, monkeypatch):
    """Every process of a torchrun or SLURM launch runs `fit --resume`; one that starts after rank 0 took the run's
    lease must not refuse the run as busy (only a resume started alone, or rank 0, checks for another writer)."""
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    folder = tmp_path / "runs" / "1"
    folder.mkdir(parents=True)
    run = Store(db).create_run(name="held", run_dir=str(folder), owner="node0|boot|pid:[1]|4242|99")  # rank 0, live
    for variable in ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK"):
        monkeypatch.delenv(variable, raising=False)
    with pytest.raises(StoreError, match="still being written by process 4242 on node0"):
        resume_arguments(["fit", "--resume", str(run), "--db", db])
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(ConfigError, match="stopped before it recorded its config"):  # past the lease, to the folder
        resume_arguments(["fit", "--resume", str(run), "--db", db])


def test_an_optimizer_option_first_set_on_resume_is_recorded_as_a_change_from_unset(tmp_path, monkeypatch):
    """`fit --resume ID --model.optimizers.other.eps 1e-6` where the config left eps to the optimizer trained with it
    but recorded and said no change: config_changes compared only the keys both configs had."""
    from ortholab.cli.main import main
    from ortholab.db.provenance import changed_settings

    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    main(["fit", "--config", DEMO, *TINY, "--db", db])
    store = Store(db)
    (run,) = store.list_runs()
    assert "eps" not in store.get_run(run.id).config["model"]["optimizers"]["other"]  # left to rmsprop_tf
    main(
        ["fit", "--resume", str(run.id), "--db", db, "--model.optimizers.other.eps", "1e-6"]
        + ["--trainer.max_steps", "9"]
    )
    (resume,) = store.get_run(run.id).info["resumes"]
    assert resume["changed"] == {"model.optimizers.other.eps": [None, 1e-6], "trainer.max_steps": [6, 9]}
    assert changed_settings(resume).startswith("model.optimizers.other.eps 1e-06 (was unset), ")
    last = torch.load(Path(store.get_run(run.id).run_dir) / "checkpoints" / "last.ckpt", weights_only=False)
    assert last["optimizer_states"][1]["param_groups"][0]["eps"] == 1e-6  # trained with it


def test_a_key_only_one_config_has_outside_the_optimizers_is_no_change():
    """Another OrthoLab version's added or dropped key is not a setting the resume changed."""
    from ortholab.db.logger import config_changes

    before = {"model": {"optimizers": {"other": {"lr": 1e-3, "eps": 1e-8}}, "new_key": 1}, "trainer": {"max_steps": 6}}
    after = {"model": {"optimizers": {"other": {"lr": 1e-3}}}, "trainer": {"max_steps": 6, "added": 2}}
    assert config_changes(before, after) == {"model.optimizers.other.eps": [1e-8, None]}


@pytest.mark.parametrize("stage", ["test", "validate", "predict"])
def test_resuming_a_run_that_trained_nothing_says_only_fit_runs_go_on(tmp_path, stage):
    """`fit --resume ID` of a predict run said it 'stopped before its first checkpoint; start a new run instead'."""
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    store = Store(db)
    run = store.create_run(name="scored", stage=stage, family="scornn", task="copying")
    store.set_status(run, "finished")
    with pytest.raises(ConfigError, match=rf"^run {run} is a {stage} run, which trains nothing, so there is nothing"):
        resume_arguments(["fit", "--resume", str(run), "--db", db])
