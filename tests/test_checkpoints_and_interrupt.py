"""A fit keeps the best checkpoint by the task's main metric; Ctrl-C stops it cleanly with exit code 130."""

import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_cli import DEMO
from test_resume import RUN, ortholab
from tolerances import roundoff

from ortholab.cli.main import main
from ortholab.db import Store
from ortholab.user_errors import crash_reason


def test_fit_writes_the_best_checkpoint_by_the_main_metric(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    main(["fit", "--config", DEMO, *RUN, "--db", db])
    store = Store(db)
    (summary,) = store.list_runs()
    run = store.get_run(summary.id)
    assert run.main_metric == "val/loss" and run.main_metric_mode == "min"
    series = store.metric_series(run.id, run.main_metric)
    assert [p.step for p in series] == [3, 6, 9, 12]  # validation after every 3rd step
    best = min(series, key=lambda p: p.value)
    (path,) = (Path(run.run_dir) / "checkpoints").glob("best-step*.ckpt")
    saved = torch.load(path, weights_only=False)
    assert saved["global_step"] == best.step and path.name == f"best-step{best.step}.ckpt"
    (state,) = [s for key, s in saved["callbacks"].items() if key.startswith("ModelCheckpoint{'monitor': 'val/loss'")]
    # the checkpoint keeps the score as Lightning's float32 tensor: one rounding
    assert float(state["best_model_score"]) == pytest.approx(best.value, rel=roundoff(torch.float32))
    assert (Path(run.run_dir) / "checkpoints" / "last.ckpt").is_file()


DIGITS = str(Path(DEMO).with_name("mnist_digits_scornn.yaml"))  # val/acc is its main metric
DIGITS_RUN = [
    *("--model.hidden_size", "16", "--model.family_args", "{rho: 2}", "--trainer.max_epochs", "1"),
    *("--trainer.val_check_interval", "2", "--trainer.enable_progress_bar", "false"),
]


@pytest.mark.parametrize("select_on", ["main_metric", "loss"])
def test_select_on_loss_keeps_the_checkpoint_of_the_lowest_validation_loss(tmp_path, monkeypatch, select_on):
    """The SRNN paper tests pMNIST at the epoch of the lowest validation cross-entropy, not the best accuracy:
    --select_on loss makes best-stepN.ckpt that checkpoint (and the run records the choice)."""
    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    main(["fit", "--config", DIGITS, *DIGITS_RUN, "--select_on", select_on, "--db", db])
    store = Store(db)
    (run,) = store.list_runs()
    losses, accuracies = store.metric_series(run.id, "val/loss"), store.metric_series(run.id, "val/acc")
    lowest_loss = min(losses, key=lambda p: p.value).step
    best_accuracy = max(accuracies, key=lambda p: p.value).step  # the first of equal ones, as ModelCheckpoint
    assert lowest_loss != best_accuracy, (losses, accuracies)  # the two choices differ on this run
    chosen = lowest_loss if select_on == "loss" else best_accuracy
    (path,) = (Path(store.get_run(run.id).run_dir) / "checkpoints").glob("best-step*.ckpt")
    assert path.name == f"best-step{chosen}.ckpt" and store.params_of([run.id])[run.id]["select_on"] == select_on
    assert run.main_metric == "val/acc"  # the run is still ranked by its task's main metric


def test_last_checkpoint_follows_every_validation_when_the_metric_stops_improving(tmp_path, monkeypatch):
    """With frozen weights the main metric never improves on its first value: the best checkpoint stays at the
    first validation, but last.ckpt must hold the last one, or a killed run resumes from that first best."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ORTHOLAB_CONFIG_MODULES", "faults")
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    main(["fit", "--config", DEMO, *RUN, "--trainer.callbacks+=faults.FreezeWeights", "--db", db])
    store = Store(db)
    (summary,) = store.list_runs()
    run = store.get_run(summary.id)
    assert [p.step for p in store.metric_series(run.id, "val/loss")] == [3, 6, 9, 12]
    folder = Path(run.run_dir) / "checkpoints"
    assert sorted(p.name for p in folder.glob("*.ckpt")) == ["best-step3.ckpt", "last.ckpt"]
    last = torch.load(folder / "last.ckpt", weights_only=False)
    assert last["global_step"] == 12
    assert last["loops"]["fit_loop"]["epoch_loop.batch_progress"]["total"]["completed"] == 12


def test_a_run_stopped_by_a_bug_records_the_exception_and_its_step_as_its_reason(tmp_path, monkeypatch):
    """A traceback (a bug in a model or a task, not a user error) left the run `failed` with no reason: the store
    now says which exception, at which step, with the first line of its message."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ORTHOLAB_CONFIG_MODULES", "faults")
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    with pytest.raises(RuntimeError, match="injected failure"):
        main(
            [
                "fit",
                "--config",
                DEMO,
                *RUN,
                "--trainer.callbacks+=faults.RaiseAt",
                "--trainer.callbacks.step=2",
                "--db",
                db,
            ]
        )
    (summary,) = Store(db).list_runs()
    run = Store(db).get_run(summary.id)
    assert run.status == "failed", run.status
    assert run.reason.startswith("RuntimeError at step 2: injected failure (a traceback"), run.reason
    assert "second line" not in run.reason


@pytest.mark.parametrize("steps, validated", [(2, []), (5, [3])])
def test_a_fit_whose_last_steps_no_validation_followed_keeps_them_in_last_ckpt(tmp_path, monkeypatch, steps, validated):
    """A fit of fewer steps than its validation interval (or ending between two validations) ended with no
    checkpoint of its final weights, or with one steps behind them: last.ckpt is written once more at its end."""
    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    main(["fit", "--config", DEMO, *RUN, "--trainer.max_steps", str(steps), "--db", db])
    store = Store(db)
    (summary,) = store.list_runs()
    run = store.get_run(summary.id)
    assert run.status == "finished" and [p.step for p in store.metric_series(run.id, "val/loss")] == validated
    last = torch.load(Path(run.run_dir) / "checkpoints" / "last.ckpt", weights_only=False)
    assert last["global_step"] == steps


def fit_signalled(tmp_path, step, *extra):
    """A tiny fit (validation after steps 3, 6, 9 and 12) with `extra` flags that sends itself SIGINT after optimizer
    step `step`: the finished process and its store's URL."""
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    flags = ["--trainer.callbacks+=faults.SignalAt", f"--trainer.callbacks.step={step}"]
    stopped = ortholab(
        tmp_path, "fit", "--config", DEMO, *RUN, "--db", db, *extra, *flags, "--trainer.callbacks.signal_name=SIGINT"
    )
    return stopped, db


def test_ctrl_c_stops_with_exit_130_an_interrupted_run_and_a_checkpoint(tmp_path):
    stopped, db = fit_signalled(tmp_path, 5)
    assert stopped.returncode == 128 + signal.SIGINT == 130, stopped.stderr
    assert "Interrupted by SIGINT" in stopped.stdout and "--resume" in stopped.stdout
    assert "Traceback" not in stopped.stderr and "KeyboardInterrupt" not in stopped.stderr
    store = Store(db)
    (run,) = store.list_runs()
    assert run.status == "interrupted" and run.reason.startswith("SIGINT at step 5")
    # the way on, as typed: this installation's console script (its path when PATH lacks it), the run, its store
    (command,) = re.findall(r"continue with `([^`]+)`", stopped.stdout)
    program, rest = command.split(" ", 1)
    script = Path(sys.executable).parent / "ortholab"  # bare only where PATH finds this very script
    on_path = shutil.which("ortholab") is not None and Path(shutil.which("ortholab")).resolve() == script.resolve()
    assert program == ("ortholab" if on_path or not script.exists() else str(script)), command
    assert rest == f"fit --resume {run.id} --db '{db}'", command
    last = Path(store.get_run(run.id).run_dir) / "checkpoints" / "last.ckpt"
    assert torch.load(last, weights_only=False)["global_step"] == 5


@pytest.mark.parametrize("at_step", [0, 2])
def test_a_ctrl_c_lightning_catches_itself_exits_130_and_says_how_the_run_goes_on(
    tmp_path, monkeypatch, capsys, at_step
):
    """A Ctrl-C in the first moments of a fit (before GracefulInterrupt listens), or a second one, reaches Lightning,
    which exited 1 after "Detected KeyboardInterrupt": the run then held no reason, and `fit --resume` of one that
    never trained asked for a config. Now: exit 130, the run's reason, and a resume that says there is nothing."""
    from ortholab.training.module import RecurrentModule

    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    real_step = RecurrentModule.training_step

    def pressed(self, *args, **kwargs):  # as Python raises it on SIGINT with no handler of ours installed
        if self.trainer.global_step >= at_step:
            raise KeyboardInterrupt
        return real_step(self, *args, **kwargs)

    monkeypatch.setattr(RecurrentModule, "training_step", pressed)
    monkeypatch.setattr(signal, "signal", lambda *args: None)  # Lightning ignores SIGINT from then on: not here
    with pytest.raises(SystemExit) as stop:
        main(["fit", "--config", DEMO, *RUN, "--db", db])
    said = capsys.readouterr().err
    run = Store(db).list_runs()[0]
    assert stop.value.code == 130 and run.status == "interrupted"
    reason = Store(db).get_run(run.id).reason
    if at_step == 0:
        assert reason == "stopped by Ctrl-C before its first training step"
        assert f"Interrupted by SIGINT: run {run.id} holds nothing to continue; run the same command again" in said
        for expected in (
            "(it stopped before its first checkpoint, written at its first validation); start a new run instead",
            "its config or a",
        ):
            with pytest.raises(SystemExit) as refused:
                main(["fit", "--resume", str(run.id), "--db", db])
            assert refused.value.code == 2 and expected in capsys.readouterr().err
            Path(Store(db).get_run(run.id).run_dir, "config.yaml").unlink(missing_ok=True)  # a Ctrl-C a moment earlier
    else:
        assert reason == "stopped at once by a second Ctrl-C at step 2; continue from its last checkpoint"
        assert f"`ortholab fit --resume {run.id} --db '{db}'`" in said


@pytest.mark.parametrize("val_batches", [2, 1])
def test_a_sigterm_before_training_exits_143_with_an_interrupted_run(tmp_path, val_batches):
    """A SIGTERM in the sanity check reached Lightning's own handler, whose SystemExit without a code exited 0 and left
    the run `failed` with no reason; with a one-batch sanity check it was heard a step later the same way. Now exit
    143 and an `interrupted` run: stopped before its first step, or at step 1 with its checkpoint."""
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    stopped = ortholab(
        tmp_path,
        "fit",
        "--config",
        DEMO,
        *RUN,
        "--db",
        db,
        "--data.val_size",
        str(20 * val_batches),  # the demo's batches hold 20 sequences
        "--trainer.callbacks+=faults.SignalAtStartOf",
    )
    assert stopped.returncode == 128 + signal.SIGTERM == 143, stopped.stderr
    assert "Traceback" not in stopped.stderr
    store = Store(db)
    (run,) = store.list_runs()
    reason = store.get_run(run.id).reason
    assert run.status == "interrupted", (run.status, reason)
    if val_batches == 2:  # Lightning raised it between the sanity check's two batches
        assert reason == "stopped by SIGTERM before its first training step"
        assert f"Interrupted by SIGTERM: run {run.id} holds nothing to continue" in stopped.stderr
    else:  # heard after the last batch: the stop is GracefulInterrupt's, at the end of the first step
        assert reason == f"SIGTERM at step 1; resume with `ortholab fit --resume {run.id} --db '{db}'`"
        last = Path(store.get_run(run.id).run_dir) / "checkpoints" / "last.ckpt"
        assert torch.load(last, weights_only=False)["global_step"] == 1


def test_a_sigterm_during_a_test_exits_143_and_the_test_run_says_so(tmp_path):
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    assert ortholab(tmp_path, "fit", "--config", DEMO, *RUN, "--db", db).returncode == 0
    (trained,) = Store(db).list_runs()
    flags = ["--trainer.callbacks+=faults.SignalAtStartOf", "--trainer.callbacks.stage=test"]
    stopped = ortholab(tmp_path, "test", "--run", str(trained.id), "--db", db, *flags)
    assert stopped.returncode == 143 and "Traceback" not in stopped.stderr, stopped.stderr
    assert "Interrupted by SIGTERM: run the same command again" in stopped.stderr
    tested = max(Store(db).list_runs(), key=lambda r: r.id)
    assert tested.id != trained.id and tested.status == "interrupted"
    assert Store(db).get_run(tested.id).reason == "stopped by SIGTERM during test"


def test_a_ctrl_c_outside_training_is_one_line_and_exit_130(monkeypatch, capsys):
    """While Python imports Lightning, or a reader reads: a KeyboardInterrupt traceback before."""

    def interrupted(name):
        raise KeyboardInterrupt

    monkeypatch.setattr("ortholab.cli.main.command_module", interrupted)
    with pytest.raises(SystemExit) as stop:
        main(["runs"])
    assert stop.value.code == 130 and capsys.readouterr().err.strip() == "ortholab: stopped by Ctrl-C"


def test_a_run_whose_ddp_peer_died_says_another_process_was_lost():
    """Rank 0 sees only gloo's 'Connection reset by peer' when rank 1 is killed (tried by hand on two CPU processes):
    the reason says a process was lost, not a bug in rank 0, and keeps a long message to one bounded line."""
    gloo = RuntimeError("[pair.cc:537] Read error [127.0.0.1]:19148: Connection reset by peer. This is typically\nmore")
    reason = crash_reason(gloo, 2)
    assert reason.startswith("another process of this run was lost at step 2 (its own output says why): [pair.cc")
    assert "more" not in reason
    assert len(crash_reason(ValueError("x" * 1000), 0)) < 400


def test_ctrl_c_while_the_command_is_still_importing_is_one_line_and_exit_130(tmp_path):
    """A Ctrl-C in the command's first moments (Python importing SQLAlchemy and Alembic) printed an import's
    traceback; the console script (ortholab/__main__.py `console`) says it as a stop once running does."""
    code = (
        "import builtins, sys\n"
        "real = builtins.__import__\n"
        "def interrupted(name, *args, **kwargs):\n"
        "    if name == 'ortholab.cli.main':\n"
        "        raise KeyboardInterrupt\n"
        "    return real(name, *args, **kwargs)\n"
        "builtins.__import__ = interrupted\n"
        "from ortholab.__main__ import console\n"
        "console()\n"
    )
    stopped = subprocess.run([sys.executable, "-c", code, "runs"], cwd=tmp_path, capture_output=True, text=True)
    assert stopped.returncode == 130 and stopped.stderr == "ortholab: stopped by Ctrl-C\n", stopped.stderr


@pytest.mark.parametrize("at_step, validated", [(5, [3]), (6, [3, 6])])
def test_ctrl_c_between_validations_stops_without_validating_the_cut_short_interval(tmp_path, at_step, validated):
    """Lightning validates when a fit is told to stop; after a Ctrl-C that is a whole validation pass (minutes for a
    uRNN on adding T = 750) with the run already `interrupted` and the terminal silent. The resumed run trains on
    from that step and validates on its own schedule, so the stop skips that pass; one due at that step still runs."""
    stopped, db = fit_signalled(tmp_path, at_step)
    assert stopped.returncode == 130, stopped.stderr
    store = Store(db)
    (run,) = store.list_runs()
    assert run.status == "interrupted" and run.reason.startswith(f"SIGINT at step {at_step}")
    assert [p.step for p in store.metric_series(run.id, "val/loss")] == validated


def test_a_ctrl_c_at_a_step_with_a_validation_due_keeps_that_validation_and_its_checkpoints(tmp_path):
    """The validation due at the stop's step runs; its checkpoints are written after it, as at any validation: the
    stop's own last.ckpt was written before it, with Lightning told the step was saved, so a best-step file of that
    validation was never written, and the resume (from before it) removed its points and did not validate again."""
    stopped, db = fit_signalled(tmp_path, 6)
    assert stopped.returncode == 130, stopped.stderr
    store = Store(db)
    (run,) = store.list_runs()
    points = store.metric_series(run.id, "val/loss")
    best = min(points, key=lambda p: p.value).step
    folder = Path(store.get_run(run.id).run_dir) / "checkpoints"
    assert (folder / f"best-step{best}.ckpt").is_file(), sorted(p.name for p in folder.iterdir())
    assert torch.load(folder / "last.ckpt", weights_only=False)["global_step"] == 6
    resumed = ortholab(tmp_path, "fit", "--resume", str(run.id), "--db", db)
    assert resumed.returncode == 0, resumed.stderr
    after = store.metric_series(run.id, "val/loss")
    assert [p.step for p in after] == [3, 6, 9, 12]
    assert [(p.step, p.value) for p in after[:2]] == [(p.step, p.value) for p in points]


def test_ctrl_c_before_min_steps_stops_the_run_there(tmp_path):
    """Lightning ignores a stop until `trainer.min_steps` is met: a SIGINT (or a scheduler's SIGTERM) at step 5 of a
    run with min_steps 12 left it training on, marked `interrupted`, to step 12. The stop stands over it."""
    stopped, db = fit_signalled(tmp_path, 5, "--trainer.min_steps", "12")
    assert stopped.returncode == 130, stopped.stderr
    (run,) = Store(db).list_runs()
    assert (run.status, run.steps) == ("interrupted", 5) and run.reason.startswith("SIGINT at step 5")
