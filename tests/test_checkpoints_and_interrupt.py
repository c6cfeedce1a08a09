"""A fit keeps the best checkpoint by the task's main metric; Ctrl-C stops it cleanly with exit code 130."""

import signal
from pathlib import Path

import pytest
import torch
from test_cli import DEMO
from test_resume import RUN, ortholab
from tolerances import roundoff

from ortholab.cli.main import main
from ortholab.db import Store


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


def test_ctrl_c_stops_with_exit_130_an_interrupted_run_and_a_checkpoint(tmp_path):
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    stopped = ortholab(
        tmp_path,
        "fit",
        "--config",
        DEMO,
        *RUN,
        "--db",
        db,  # SIGINT to itself after step 5
        "--trainer.callbacks+=faults.SignalAt",
        "--trainer.callbacks.step=5",
        "--trainer.callbacks.signal_name=SIGINT",
    )
    assert stopped.returncode == 128 + signal.SIGINT == 130, stopped.stderr
    assert "Interrupted by SIGINT" in stopped.stdout and "--resume" in stopped.stdout
    assert "Traceback" not in stopped.stderr and "KeyboardInterrupt" not in stopped.stderr
    store = Store(db)
    (run,) = store.list_runs()
    assert run.status == "interrupted" and run.reason.startswith("SIGINT at step 5")
    last = Path(store.get_run(run.id).run_dir) / "checkpoints" / "last.ckpt"
    assert torch.load(last, weights_only=False)["global_step"] == 5
