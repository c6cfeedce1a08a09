"""Stopping `ortholab sweep` for real (cli/children.py): Ctrl-C in a terminal or a SIGTERM to it alone stop the running
trial at a batch boundary with its checkpoint, start no other, and leave a copy of the trial waiting; the same
command again trains that copy, and the stopped trial does not count toward --trials.

Before, a SIGTERM ended the sweep and left its trial training, orphaned, and Optuna counted the trial as done."""

import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from test_cli import DEMO, TINY
from test_reproduce_stop import _training_run, assert_ended_whole, stopped_job

from ortholab.db import Store

REPO = Path(__file__).resolve().parents[1]
State = optuna.trial.TrialState


def _sweep(tmp_path: Path, db: str, *flags: str) -> list[str]:
    space = tmp_path / "space.yaml"
    space.write_text("model.optimizers.other.lr: [0.01, 0.001]\n")
    command = ["sweep", "--config", DEMO, "--space", str(space), "--trials", "2", "--sampler", "grid"]
    command += ["--pruner", "none", "--name", "s", "--db", db, *TINY, "--analysis", "false", *flags]
    return [sys.executable, "-c", "from ortholab.cli.main import main; main()", *command]


@pytest.mark.slow  # two sweeps, three trials: about a minute
@pytest.mark.parametrize("how, code, said", [("SIGTERM to sweep alone", 143, "SIGTERM"), ("Ctrl-C", 130, "Ctrl-C")])
def test_a_stopped_sweep_stops_its_trial_with_a_checkpoint_and_trains_it_again_next_time(tmp_path, how, code, said):
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    env.pop("ORTHOLAB_DB", None)
    long = ["--trainer.max_steps", "100000", "--trainer.val_check_interval", "20", "--data.train_size", "2000"]
    argv = _sweep(tmp_path, db, *long)  # the later flags win over TINY's: a trial far longer than the test waits
    process, out, err, run = stopped_job(argv, tmp_path, env, lambda job: _training_run(db, job), how == "Ctrl-C")
    assert_ended_whole(process, code, out, err)
    assert "failed with" not in err  # Optuna's warnings of a NaN objective: the sweep's own line says it was stopped
    assert out.strip().splitlines()[-2:] == [
        f"sweep: stopped by {said}; the same command again goes on from there (a stopped trial is trained again "
        "from its start, with the same values)",
        "sweep: 0 trials done, 0 failed, 0 pruned, 1 stopped",
    ], out
    (stopped,) = Store(db, access="read").list_runs()  # no second trial started
    assert stopped.id == run.id and stopped.status == "interrupted" and {"trial:0", "stopped"} <= set(stopped.tags)
    assert stopped.reason.startswith(f"stopped with sweep s by {said}: the same sweep command trains this trial's")
    assert (Path(Store(db, access="read").get_run(run.id).run_dir) / "checkpoints" / "last.ckpt").is_file()
    study = optuna.load_study(study_name="s", storage=db)
    first, *_, copy = study.get_trials(deepcopy=False)  # a grid sweep's other point waits between them
    assert first.state == State.FAIL and first.user_attrs["stopped"].startswith(f"trial s-t0: stopped by {said}")
    assert copy.state == State.WAITING and copy.params == first.params and copy.user_attrs == {"retry_of": 0}

    again = subprocess.run(  # the same sweep, its trials short now: the grid's other point, then the copy
        _sweep(tmp_path, db, "--trainer.max_steps", "5"), cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.strip().splitlines()[-1] == "sweep: 2 trials done, 0 failed, 0 pruned"  # none waits now
    trials = optuna.load_study(study_name="s", storage=db).get_trials(deepcopy=False)
    assert [t.state for t in trials] == [State.FAIL, State.COMPLETE, State.COMPLETE]
    assert trials[0].number == 0 and trials[2].params == first.params and trials[1].params != first.params
    runs = {r.name: r.status for r in Store(db, access="read").list_runs()}
    assert runs == {"s-t0": "interrupted", "s-t1": "finished", "s-t2": "finished"}, runs
