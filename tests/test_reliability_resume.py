"""Kill a training process during training, during validation and during a checkpoint write (with the run folder on
a second filesystem), resume it, and compare the store point by point with an uninterrupted run: same (key, step)
points with the same values (timing points: present at the same steps; their values are wall-clock times), the
same artifacts, nothing doubled; a good checkpoint survives every kill and no temporary file is left anywhere."""

import math
import os
import shutil
import signal
import subprocess
import tempfile
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from reliability_faults import SIMULATE_EXDEV_VAR
from test_cli import DEMO
from test_resume import RUN, ortholab

from ortholab.db import Store

pytestmark = pytest.mark.slow  # each test trains twice in subprocesses: minutes on a busy CPU

# timing every 3 steps, so that timing points lie at the checkpoints' steps (validation every 3 steps)
TIMED = [*RUN, "--trainer.callbacks+=ortholab.training.callbacks.Timing", "--trainer.callbacks.every_n_steps=3"]
TIMING_PREFIXES = ("time/", "memory/")


def recorded(store, run_id) -> tuple[dict, Counter]:
    """{(key, step): (epoch, value)} of every metric point (timing values left out) and the artifacts' (kind, name,
    step) counts."""
    points = {}
    for key in store.metric_keys(run_id):
        for p in store.metric_series(run_id, key):
            value = None if key.startswith(TIMING_PREFIXES) else ("nan" if math.isnan(p.value) else p.value)
            points[(key, p.step)] = (p.epoch, value)
    return points, Counter((a.kind, a.name, a.step) for a in store.artifacts(run_id))


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    folder = tmp_path_factory.mktemp("uninterrupted")
    db = f"sqlite:///{folder / 'runs.db'}"
    done = ortholab(folder, "fit", "--config", DEMO, *TIMED, "--db", db)
    assert done.returncode == 0, done.stderr
    store = Store(db)
    (run,) = store.list_runs()
    points, artifacts = recorded(store, run.id)
    assert {("time/step_s", s) for s in (3, 6, 9, 12)} <= set(points)  # the timing the truncation used to lose
    return points, artifacts, store.get_run(run.id).run_dir


def assert_same_record(store, run_id, uninterrupted, resumed_at: int):
    reference_points, reference_artifacts, reference_dir = uninterrupted
    points, artifacts = recorded(store, run_id)
    assert set(points) - set(reference_points) == set(), "points an uninterrupted run does not have"
    # the epoch the resume joined midway has no time/epoch_s: its time before the kill went with the process
    ends = sorted(step for key, step in reference_points if key == "time/epoch_s")
    joined = next((step for step in ends if step > resumed_at), None)
    unrecordable = {("time/epoch_s", joined)} if joined is not None and resumed_at not in ends else set()
    assert set(reference_points) - set(points) == unrecordable, "points lost"
    assert points == {k: v for k, v in reference_points.items() if k not in unrecordable}  # values and epochs too
    assert set(artifacts.values()) == {1}, "an artifact doubled"
    assert reference_artifacts - artifacts == Counter(), "artifacts lost"
    assert artifacts - reference_artifacts == Counter(), f"artifacts an uninterrupted run does not have ({resumed_at})"
    run = store.get_run(run_id)
    assert (run.status, run.reason) == ("finished", None)

    def names(folder):
        return sorted(p.name for p in (Path(folder) / "checkpoints").iterdir())

    assert names(run.run_dir) == names(reference_dir)  # last.ckpt rewritten (not last-v1.ckpt), no stale best
    ours = torch.load(Path(run.run_dir) / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    theirs = torch.load(Path(reference_dir) / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)


def no_temporaries(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.name.endswith(".tmp") or p.name.startswith("tmp")]


def resume(folder, db, run_id, env=None):
    done = ortholab(folder, "fit", "--resume", str(run_id), "--db", db, env=env)
    assert done.returncode == 0, done.stderr
    return done


def test_killed_during_training_resumes_to_the_uninterrupted_record(tmp_path, uninterrupted):
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    killed = ortholab(
        tmp_path,
        "fit",
        "--config",
        DEMO,
        *TIMED,
        "--db",
        db,
        "--trainer.callbacks+=faults.SignalAt",
        "--trainer.callbacks.step=8",
    )
    assert killed.returncode == -signal.SIGKILL
    store = Store(db)
    (run,) = store.list_runs()
    # killed after recording past the step-6 checkpoint it resumes from (train/loss at 6: the batch after it)
    assert run.status == "running" and [p.step for p in store.metric_series(run.id, "train/loss")][-1] == 6
    resume(tmp_path, db, run.id)
    assert_same_record(store, run.id, uninterrupted, resumed_at=6)


def test_killed_during_validation_resumes_to_the_uninterrupted_record(tmp_path, uninterrupted):
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    killed = ortholab(
        tmp_path,
        "fit",
        "--config",
        DEMO,
        *TIMED,
        "--db",
        db,
        "--trainer.callbacks+=reliability_faults.KillDuringValidation",
        "--trainer.callbacks.step=6",
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    store = Store(db)
    (run,) = store.list_runs()
    last = Path(store.get_run(run.id).run_dir) / "checkpoints" / "last.ckpt"
    assert torch.load(last, weights_only=True)["global_step"] == 3  # the step-6 checkpoint was never written
    resume(tmp_path, db, run.id)
    assert_same_record(store, run.id, uninterrupted, resumed_at=3)


@contextmanager
def second_filesystem(tmp_path: Path):
    """A folder on another filesystem than tmp_path: a fresh tmpfs (root), else /dev/shm; None if neither."""
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    mounted = (
        os.geteuid() == 0
        and shutil.which("mount")
        and subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", str(mount)], capture_output=True
        ).returncode
        == 0
    )
    if mounted:
        try:
            yield mount
        finally:
            subprocess.run(["umount", "-l", str(mount)], capture_output=True)
        return
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK) and shm.stat().st_dev != tmp_path.stat().st_dev:
        folder = Path(tempfile.mkdtemp(dir=shm, prefix="ortholab-test-"))
        try:
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return
    yield None


def test_killed_while_writing_a_checkpoint_on_another_filesystem_keeps_a_good_one(tmp_path, uninterrupted):
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    system_tmp = tmp_path / "system-tmp"  # the system's temporary folder, on another filesystem than the runs
    system_tmp.mkdir()
    with second_filesystem(tmp_path) as other:
        env = {"TMPDIR": str(system_tmp)}
        if other is None:  # no second filesystem here: renames across folders fail as across filesystems
            other, env[SIMULATE_EXDEV_VAR] = tmp_path / "runs-elsewhere", "1"
        else:
            assert other.stat().st_dev != system_tmp.stat().st_dev
        runs_dir = other / "runs"
        killed = ortholab(
            tmp_path,
            "fit",
            "--config",
            DEMO,
            *TIMED,
            "--db",
            db,
            "--runs_dir",
            str(runs_dir),
            "--trainer.callbacks+=reliability_faults.KillInCheckpointWrite",
            "--trainer.callbacks.step=6",
            env=env,
        )
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        store = Store(db)
        (run,) = store.list_runs()
        checkpoints = Path(store.get_run(run.id).run_dir) / "checkpoints"
        assert checkpoints.is_relative_to(runs_dir)
        assert torch.load(checkpoints / "last.ckpt", weights_only=True)["global_step"] == 3  # the previous one, whole
        assert no_temporaries(system_tmp) == []  # nothing was ever written to the system's temporary folder

        resume(tmp_path, db, run.id, env=env)
        assert no_temporaries(checkpoints) == [] and no_temporaries(system_tmp) == []
        assert_same_record(store, run.id, uninterrupted, resumed_at=3)


def test_two_stores_on_one_runs_folder_keep_their_runs_apart(tmp_path):
    """Two stores write run 1 into one --runs_dir: two folders; a checkpoint of one store's run copied into the
    other's folder is refused by the resume, which then continues from its own."""
    runs = str(tmp_path / "runs")
    dbs = {name: f"sqlite:///{tmp_path / f'{name}.db'}" for name in ("first", "second")}
    for _name, db in dbs.items():
        done = ortholab(
            tmp_path,
            "fit",
            "--config",
            DEMO,
            *RUN,
            "--trainer.max_steps",
            "6",
            "--db",
            db,
            "--runs_dir",
            runs,
            "--name",
            "same",
        )
        assert done.returncode == 0, done.stderr
    folders = {name: Path(Store(db).get_run(1).run_dir) for name, db in dbs.items()}
    assert folders["first"] != folders["second"] and all(f.is_relative_to(runs) for f in folders.values())
    own = folders["first"] / "checkpoints" / "last.ckpt"
    kept = own.read_bytes()
    shutil.copy(folders["second"] / "checkpoints" / "last.ckpt", own)
    refused = ortholab(tmp_path, "fit", "--resume", "1", "--db", dbs["first"], "--trainer.max_steps", "9")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "was written by run 1 of another store" in refused.stderr
    own.write_bytes(kept)
    resumed = ortholab(tmp_path, "fit", "--resume", "1", "--db", dbs["first"], "--trainer.max_steps", "9")
    assert resumed.returncode == 0, resumed.stderr
    assert [p.step for p in Store(dbs["first"]).metric_series(1, "val/loss")] == [3, 6, 9]
    assert [p.step for p in Store(dbs["second"]).metric_series(1, "val/loss")] == [3, 6]
