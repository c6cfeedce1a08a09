"""Sweeps prune hopeless trials (issue 49): Optuna's median pruner fed from each trial's validation points as the
store records them; a pruned trial's run is stopped, tagged `pruned`, and the study counts it as pruned."""

import optuna
import pytest
from test_cli import DEMO, TINY

import ortholab.cli.sweep_study as sweep
from ortholab.cli.main import main
from ortholab.db import Store


@pytest.mark.slow  # two trials of 200 steps: about a minute
def test_a_trial_worse_than_the_completed_ones_is_pruned(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sweep, "PRUNE_STARTUP", 1)  # prune from the second trial on (Optuna's default: 5)
    monkeypatch.setattr(sweep, "POLL_S", 0.2)
    monkeypatch.chdir(tmp_path)  # the trials' run folders (no --runs_dir) beside the store, not in the checkout
    space = tmp_path / "space.yaml"
    space.write_text("model.optimizers.other.lr: [0.05, 1.0e-12]\n")  # the second cannot learn its readout
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    steps = ["--trainer.max_steps", "200", "--trainer.val_check_interval", "20", "--data.train_size", "2000"]
    flags = [*TINY, *steps]  # the later flags win: a trial long enough to be watched
    main(
        [
            "sweep",
            "--config",
            DEMO,
            "--space",
            str(space),
            "--trials",
            "2",
            "--sampler",
            "grid",
            "--name",
            "p",
            "--db",
            db,
            *flags,
            "--analysis",
            "false",
        ]
    )
    study = optuna.load_study(study_name="p", storage=db)
    states = {t.params["model.optimizers.other.lr"]: t.state for t in study.trials}
    assert states == {0.05: optuna.trial.TrialState.COMPLETE, 1e-12: optuna.trial.TrialState.PRUNED}, states
    (pruned,) = [r for r in Store(db).list_runs() if "pruned" in r.tags]
    assert pruned.status == "interrupted" and pruned.steps < 200  # stopped early, resumable
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1] == "sweep: 1 trials done, 0 failed, 1 pruned"
    said = [line for line in out if line.startswith(f"sweep p: trial 1 is run {pruned.id}, pruned at step ")]
    assert said, out  # a pruned trial's own line, as a completed one gets


def test_no_pruner_runs_every_trial_to_its_end():
    assert isinstance(sweep.make_pruner("none"), optuna.pruners.NopPruner)
    assert isinstance(sweep.make_pruner("median"), optuna.pruners.MedianPruner)


@pytest.mark.slow  # two trials of 40 steps
def test_a_trial_is_not_pruned_at_its_last_step(tmp_path, monkeypatch, capsys):
    """Walk-through 11: the pruner, asked at a trial's last validation (training over), stopped a finished run and
    counted it pruned, its objective dropped. A trial validated only at its end is never pruned."""
    monkeypatch.setattr(sweep, "PRUNE_STARTUP", 1)
    monkeypatch.setattr(sweep, "POLL_S", 0.05)
    monkeypatch.chdir(tmp_path)
    space = tmp_path / "space.yaml"
    space.write_text("model.optimizers.other.lr: [0.05, 1.0e-12]\n")  # the second is worse at the one validation
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    steps = ["--trainer.max_steps", "40", "--trainer.val_check_interval", "40", "--data.train_size", "400"]
    main(
        ["sweep", "--config", DEMO, "--space", str(space), "--trials", "2", "--sampler", "grid", "--name", "p"]
        + ["--db", db, *TINY, *steps, "--analysis", "false"]
    )
    study = optuna.load_study(study_name="p", storage=db)
    assert {t.state for t in study.trials} == {optuna.trial.TrialState.COMPLETE}, [t.state for t in study.trials]
    runs = Store(db).list_runs()
    assert [r.status for r in runs] == ["finished", "finished"] and not [r for r in runs if "pruned" in r.tags]
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("sweep: 2 trials done, 0 failed")


def test_the_sweeps_report_gives_the_best_metric_in_its_own_sign_not_the_negated_objective():
    """A metric to maximise enters the (minimising) study negated: the report said 'objective -0.93' for an
    accuracy of 0.93."""
    study = optuna.create_study()
    for number, accuracy in enumerate([0.93, 0.81]):
        attrs = {"run_id": number + 1, "metric": "val/acc", "sign": -1}
        study.add_trial(optuna.trial.create_trial(value=-accuracy, params={}, distributions={}, user_attrs=attrs))
    said = sweep.report(study)
    assert "best run 1 (trial 0, val/acc 0.93)" in said, said


def test_the_sweeps_page_gives_the_pruners_numbers():
    """docs/sweeps.md says when pruning starts and how often the store is read: the numbers the code uses."""
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "sweeps.md").read_text()
    assert f"once {sweep.PRUNE_STARTUP} trials have completed" in page
    assert f"read every {sweep.POLL_S:g} s" in page
    assert all(f"`--pruner {kind}`" in page for kind in sweep.PRUNERS)
