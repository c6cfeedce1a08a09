"""Lightning's own loggers beside the run store (issue 49): named in a config or on the command line, each gets
the same metrics while the SQL store stays the record; a tracker whose package is missing is one line naming its
extra, before anything is recorded."""

import sys

import pytest
import torch
from test_cli import DEMO, TINY
from tolerances import roundoff

from ortholab.cli.main import main
from ortholab.db import Store


def _fit(tmp_path, *extra):
    db = f"sqlite:///{tmp_path / 'store.db'}"
    main(["fit", "--config", DEMO, *TINY, "--db", db, "--runs_dir", str(tmp_path / "runs"), *extra])
    return Store(db)


def test_tensorboard_receives_the_metrics_the_store_records(tmp_path):
    pytest.importorskip("tensorboard", reason="the tensorboard extra is not installed (make install has it)")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    store = _fit(
        tmp_path,
        "--trainer.logger",
        "lightning.pytorch.loggers.TensorBoardLogger",
        "--trainer.logger.save_dir",
        str(tmp_path / "tb"),
    )
    (run,) = store.list_runs()
    assert run.status == "finished"  # the store still records the run
    (events,) = (tmp_path / "tb").rglob("events.out.tfevents.*")
    board = EventAccumulator(str(events.parent))
    board.Reload()
    for key in ("train/loss", "val/loss"):
        written = {e.step: e.value for e in board.Scalars(key)}
        stored = {p.step: p.value for p in store.metric_series(run.id, key)}
        assert written.keys() == stored.keys() and written, key
        # TensorBoard keeps float32: each value rounded once to float32 (n = 1, scale: the value)
        assert all(abs(written[s] - stored[s]) <= roundoff(torch.float32, 1, abs(stored[s])) for s in stored), key


@pytest.mark.parametrize(
    "logger, extra, module", [("MLFlowLogger", "mlflow", "mlflow"), ("WandbLogger", "wandb", "wandb")]
)
def test_a_tracker_without_its_package_is_one_line_naming_the_extra(
    tmp_path, capsys, monkeypatch, logger, extra, module
):
    monkeypatch.setitem(sys.modules, module, None)  # as where it is not installed
    with pytest.raises(SystemExit) as stop:
        _fit(tmp_path, "--trainer.logger", f"lightning.pytorch.loggers.{logger}")
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("ortholab: error:")]
    assert stop.value.code == 2 and len(err) == 1 and f"pip install 'ortholab[{extra}]'" in err[0], err
    assert Store(f"sqlite:///{tmp_path / 'store.db'}").list_runs() == []  # nothing recorded
