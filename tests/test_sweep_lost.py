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
from test_cli import DEMO

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


def test_a_worker_silent_past_lost_after_s_says_so_and_goes_on_with_the_sweep(tmp_path, monkeypatch, capsys):
    """A worker alive but silent for more than LOST_AFTER_S (Ctrl-Z, a laptop asleep, a paused VM) while another
    shares the store: the other failed its trial as lost. When it woke and its trial's run finished, Optuna told the
    finished trial and the sweep ended in `ValueError: Cannot tell a FAIL trial`. Now one line, its run kept, and the
    sweep goes on: its copy is trained."""
    from ortholab.cli import sweep_study as sweep

    monkeypatch.setattr(sweep, "HEARTBEAT_S", 1)
    monkeypatch.setattr(sweep, "LOST_AFTER_S", 1)
    monkeypatch.setattr(sweep, "check_space_values", lambda *args: None)  # no fit reads the flags: no trial trains
    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    space = tmp_path / "space.yaml"
    space.write_text("x: {low: 0.0, high: 1.0}\n")
    beaten, asleep = set(), []
    beat = sweep._HeartbeatStorage.record_heartbeat

    def suspended_or_beating(self, trial_id: int) -> None:
        if not asleep:  # a suspended process writes nothing
            beat(self, trial_id)
            beaten.add(trial_id)

    def fake_fit(config, overrides, db, run_name, tags, extra, trial, threads):
        store = Store(db, access="write")
        run_id = store.create_run(name=run_name, family="scornn", task="copy", tags=tags, main_metric="val/loss")
        if trial.number == 0:
            deadline = time.monotonic() + 20
            while trial._trial_id not in beaten and time.monotonic() < deadline:
                time.sleep(0.05)
            asleep.append(True)  # Ctrl-Z: its heartbeat stops with it
            time.sleep(3)  # SQLite's now() has whole seconds
            other = sweep.open_study("s", db, "random", {"x": {"low": 0.0, "high": 1.0}}, seed=1)  # another worker
            sweep.fail_lost_trials(other)
            asleep.clear()  # `fg`: the trial's fit goes on and finishes
        store.log_metrics(run_id, {"val/loss": 0.5 - trial.number / 10}, step=5)
        store.set_status(run_id, "finished")
        return run_id

    monkeypatch.setattr(sweep._HeartbeatStorage, "record_heartbeat", suspended_or_beating)
    monkeypatch.setattr(sweep, "fit_trial", fake_fit)
    study = sweep.run_sweep(DEMO, str(space), trials=1, db=db, name="s", sampler="random")  # nothing escapes it

    out = capsys.readouterr().out.splitlines()
    assert out[-3:] == [
        "sweep s: trial 0 (run 1, running) lost its worker (no heartbeat for 1 s); its values wait to be trained again",
        "sweep s: trial 0 (run 1) was taken as lost by another worker while this one was silent for more than 1 s; "
        "its run is kept, its copy trains again",
        "sweep s: trial 1 is run 2, best val/loss 0.4",  # its copy, in this worker
    ], out
    first, copy = study.get_trials()
    assert first.state == State.FAIL and copy.state == State.COMPLETE and copy.params == first.params
    assert copy.user_attrs["run_id"] == 2 and sweep.summary_line(study) == "sweep: 1 trials done, 0 failed, 0 pruned"
    kept = Store(db, access="read").get_run(1)
    assert kept.status == "finished" and {"trial:0", "stopped"} <= set(kept.tags)  # never named the best


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")  # ask() outside optimize, as a worker would
def test_a_trial_taken_as_lost_mid_training_stops_its_fit_instead_of_reporting_to_the_finished_trial(
    tmp_path, monkeypatch
):
    """The pruner's report to a trial another worker failed as lost raised UpdateFinishedTrialError out of the watch
    and left its fit training; now the fit stops with its checkpoint (its copy trains again) and the objective says
    so."""
    from ortholab.cli import sweep_study as sweep

    monkeypatch.setattr(sweep, "POLL_S", 0.01)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    store = Store(db)
    run_id = store.create_run(name="s-t0", family="scornn", task="copy", tags=["sweep:s", "trial:0"], main_metric="m")
    store.log_metrics(run_id, {"m": 0.5}, step=5)
    study = sweep.open_study("s", db, "random", {"x": [1, 2]}, seed=0)
    trial = study.ask()
    study.tell(trial, state=State.FAIL)  # what another worker's fail_lost_trials did

    class Child:
        signals = []

        def poll(self):
            return 0 if self.signals else None

        def send_signal(self, signum):
            self.signals.append(signum)

    assert sweep._watch(Child(), db, "s-t0", ["sweep:s", "trial:0"], trial) is False  # not pruned
    assert Child.signals == [sweep.signal.SIGTERM]


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")  # ask() outside optimize, as a worker would
def test_a_lost_trial_whose_run_had_finished_keeps_its_value_instead_of_training_a_copy(tmp_path, monkeypatch, capsys):
    """A worker killed after its trial's fit had finished the run (its value in the store, not yet told to Optuna):
    the next worker trained a copy of the same values again (hours wasted) and tagged the finished run `stopped`. Now
    the run's value is kept as a completed trial: no copy, the run untagged, counted once toward --trials, ranked."""
    from ortholab.cli import sweep_study as sweep

    monkeypatch.setattr(sweep, "HEARTBEAT_S", 1)
    monkeypatch.setattr(sweep, "LOST_AFTER_S", 1)
    monkeypatch.setattr(sweep, "check_space_values", lambda *args: None)  # no fit reads the flags: no trial trains
    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    space = tmp_path / "space.yaml"
    space.write_text("x: {low: 0.0, high: 1.0}\n")
    store = Store(db)
    tags = ["sweep:s", "trial:0"]
    run_id = store.create_run(
        name="s-t0", family="scornn", task="copy", tags=tags, main_metric="val/acc", main_metric_mode="max"
    )
    store.log_metrics(run_id, {"val/acc": 0.9}, step=5)
    store.set_status(run_id, "finished")
    study = sweep.open_study("s", db, "random", {"x": {"low": 0.0, "high": 1.0}}, seed=0)
    lost = study.ask({"x": optuna.distributions.FloatDistribution(0.0, 1.0)})
    lost.report(-0.9, 5)  # what its watch reported to the pruner
    study._storage.record_heartbeat(lost._trial_id)  # its worker's last beat; then `kill -9`, after the fit ended
    time.sleep(3)  # SQLite's now() has whole seconds
    fits = []

    def fake_fit(config, overrides, db, run_name, tags, extra, trial, threads):
        fits.append(run_name)
        store = Store(db, access="write")
        new = store.create_run(
            name=run_name, family="scornn", task="copy", tags=tags, main_metric="val/acc", main_metric_mode="max"
        )
        store.log_metrics(new, {"val/acc": 0.5}, step=5)
        store.set_status(new, "finished")
        return new

    monkeypatch.setattr(sweep, "fit_trial", fake_fit)
    study = sweep.run_sweep(DEMO, str(space), trials=2, db=db, name="s", sampler="random")

    assert fits == ["s-t2"]  # one new trial: the lost one's values are not trained again
    first, kept, new = study.get_trials()
    assert (first.state, kept.state, new.state) == (State.FAIL, State.COMPLETE, State.COMPLETE)
    assert kept.params == first.params and kept.distributions == first.distributions and kept.value == -0.9
    assert kept.intermediate_values == {5: -0.9}  # the pruner compares later trials with it
    assert {k: kept.user_attrs[k] for k in ("run_id", "metric", "sign", "retry_of", "kept")} == {
        "run_id": run_id,
        "metric": "val/acc",
        "sign": -1,
        "retry_of": 0,
        "kept": True,
    }
    assert sweep.started_trials(study) == 2
    assert sweep.summary_line(study) == "sweep: 2 trials done, 0 failed, 0 pruned"
    assert sweep.report(study).splitlines()[0] == (  # the trial its run was trained as (s-t0, trial:0), as said above
        f"sweep s: 2 trials completed; best run {run_id} (trial 0, val/acc 0.9) with x={first.params['x']}"
    )
    assert (
        "sweep s: trial 0 (run 1, finished) lost its worker (no heartbeat for 1 s) after its run had finished; its "
        "best val/acc 0.9 is kept as the trial's result, nothing is trained again"
    ) in capsys.readouterr().out.splitlines()
    run = Store(db, access="read").get_run(run_id)
    assert run.status == "finished" and "stopped" not in run.tags and run.reason is None
    with pytest.raises(sweep.TakenAsLost, match="its finished run's value is kept as the trial's result$"):
        sweep._check_not_taken(lost, db)  # its worker only suspended: it wakes to this line, not "its copy trains"
