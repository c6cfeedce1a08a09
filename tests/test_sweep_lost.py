"""A sweep worker lost mid-trial (`kill -9`, its machine gone): its trial's `ortholab fit` stops with it
(cli/children.py, PR_SET_PDEATHSIG), and the next worker fails the trial once it has been silent for LOST_AFTER_S, tags
its run `stopped` and trains a copy of its values; the lost trial does not count toward --trials.

Before, the fit trained on, orphaned, and its trial stayed RUNNING in the study for ever: counted toward --trials,
never ranked (a finished run better than the sweep's named best was left out of its report), never trained again."""

import os
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from ortholab.cli import children
from ortholab.db import Store

REPO = Path(__file__).resolve().parents[1]
State = optuna.trial.TrialState


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")  # ask() outside optimize, as a worker would
def test_a_trial_whose_worker_went_silent_is_failed_and_its_values_wait_to_be_trained_again(
    tmp_path, monkeypatch, capsys
):
    from ortholab.cli import sweep_study as sweep

    monkeypatch.setattr(sweep, "HEARTBEAT_S", 1)
    monkeypatch.setattr(sweep, "LOST_AFTER_S", 1)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    store = Store(db)
    run_id = store.create_run(name="s-t0", family="scornn", task="copy", tags=["sweep:s", "trial:0"])
    store.set_status(run_id, "interrupted", "SIGTERM at step 17; resume with `ortholab fit --resume 1`")
    study = sweep.open_study("s", db, "random", {"x": {"low": 0.0, "high": 1.0}}, seed=0)
    lost = study.ask({"x": optuna.distributions.FloatDistribution(0.0, 1.0)})
    study._storage.record_heartbeat(lost._trial_id)  # what its worker's heartbeat thread wrote last

    sweep.fail_lost_trials(study)  # a heartbeat just now: its worker may be alive
    assert [t.state for t in study.get_trials()] == [State.RUNNING] and sweep.started_trials(study) == 1

    time.sleep(3)  # SQLite's now() has whole seconds
    sweep.fail_lost_trials(study)
    first, copy = study.get_trials()
    assert first.state == State.FAIL and copy.state == State.WAITING and copy.params == first.params
    assert copy.user_attrs == {"retry_of": 0}
    assert sweep.started_trials(study) == 0  # its copy counts toward --trials once it starts, not it
    assert sweep.summary_line(study) == "sweep: 0 trials done, 0 failed, 0 pruned, 1 lost"
    assert capsys.readouterr().out == (
        "sweep s: trial 0 (run 1, interrupted) lost its worker (no heartbeat for 1 s); its values wait to be trained "
        "again\n"
    )
    run = Store(db, access="read").get_run(run_id)
    assert {"trial:0", "stopped"} <= set(run.tags)  # the dashboard counts it apart and never names it the best
    assert run.reason.startswith("its worker of sweep s was lost: the same sweep command trains this trial's values")

    again = study.ask()  # the next worker takes the waiting copy first
    assert again.number == 1 and again.params == first.params
    again.set_user_attr("run_id", 2)
    study.tell(again, 0.5)
    assert sweep.started_trials(study) == 1
    assert sweep.summary_line(study) == "sweep: 1 trials done, 0 failed, 0 pruned"
    assert "failed" not in sweep.report(study).splitlines()[0]  # the lost trial is not a failure either


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")  # ask() outside optimize, as a worker would
def test_a_heartbeat_write_that_fails_once_does_not_end_the_trials_heartbeat(tmp_path, monkeypatch):
    """Optuna's heartbeat thread ended at its first exception (a SQLite lock held past its wait, a dropped
    connection): LOST_AFTER_S later another worker failed the live trial as lost, tagged its run `stopped` and trained
    a copy, and this worker ended in Optuna's `ValueError: Cannot tell a FAIL trial`."""
    from optuna.storages._heartbeat import HeartbeatThread
    from sqlalchemy.exc import OperationalError

    from ortholab.cli import sweep_study as sweep

    monkeypatch.setattr(sweep, "HEARTBEAT_S", 1)
    study = sweep.open_study("s", f"sqlite:///{tmp_path / 'runs.db'}", "random", {"x": [1, 2]}, seed=0)
    trial = study.ask()
    beats = []
    written = optuna.storages.RDBStorage.record_heartbeat

    def locked_once(self, trial_id: int) -> None:
        beats.append(trial_id)
        if len(beats) == 1:
            raise OperationalError("UPDATE trial_heartbeats", {}, Exception("database is locked"))
        written(self, trial_id)

    monkeypatch.setattr(optuna.storages.RDBStorage, "record_heartbeat", locked_once)
    heartbeat = HeartbeatThread(trial._trial_id, study._storage)
    heartbeat.start()
    try:
        deadline = time.monotonic() + 20
        while len(beats) < 2 and heartbeat._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(beats) >= 2 and heartbeat._thread.is_alive()  # the next beat came, HEARTBEAT_S later
    finally:
        heartbeat.join()


CHILD = """
import signal, sys, time
from pathlib import Path
from ortholab.cli.children import PARENT_ENV, stop_with_parent
stop_with_parent()
folder = Path(sys.argv[1])
signal.signal(signal.SIGTERM, lambda *_: ((folder / "stopped").write_text("SIGTERM"), sys.exit(0)))
import os
(folder / "armed").write_text(str(os.environ.get(PARENT_ENV)))
time.sleep(60)
"""

PARENT = """
import os, subprocess, sys, time
env = {**os.environ, sys.argv[2]: str(os.getpid())}
subprocess.Popen([sys.executable, "-c", sys.argv[3], sys.argv[1]], env=env)
time.sleep(60)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_trial_gets_sigterm_when_its_sweep_is_killed_with_sigkill(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(tmp_path), children.PARENT_ENV, CHILD], env=env)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "armed").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert (tmp_path / "armed").read_text() == "None"  # not passed on to the trial's own children
        parent.kill()  # SIGKILL: no handler of the parent's runs
        parent.wait()
        deadline = time.monotonic() + 20
        while not (tmp_path / "stopped").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert (tmp_path / "stopped").read_text() == "SIGTERM"  # a fit saves its checkpoint on it
    finally:
        parent.kill()
