"""The shared pattern of the slow learning checks: one `ortholab fit` in-process, its recorded run back."""

import math

from ortholab.cli.main import main
from ortholab.db import Store

QUIET = [
    "--trainer.enable_progress_bar",
    "false",
    "--trainer.enable_model_summary",
    "false",
    "--trainer.check_val_every_n_epoch",
    "null",
    "--trainer.accelerator",
    "cpu",
]

# copying T = 20 and adding T = 50: the tasks of the slow learning checks, each a few hundred steps on one thread
COPYING_T20 = [
    "--data",
    "datamodules.CopyingTask",
    "--data.seq_len",
    "20",
    "--data.batch_size",
    "20",
    "--data.val_size",
    "500",
]
# blank until the marker, then a blind guess among 8 symbols for 10 steps: 10 ln 8 / (T + 20) at T = 20, from the
# formula here and not from datamodules/copying.py, so a recorded baseline that drifted from it fails
COPYING_T20_BASELINE = 10 * math.log(8) / (20 + 20)
ADDING_T50 = [
    "--data",
    "datamodules.AddingTask",
    "--data.seq_len",
    "50",
    "--data.batch_size",
    "50",
    "--data.train_size",
    "100000",
    "--data.val_size",
    "1000",
]


def fit_recorded(tmp_path, monkeypatch, args):
    """Train with `args` in tmp_path and return the finished run's summary (its best main metric is `best`)."""
    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    main(["fit", *args, *QUIET, "--db", db])
    (run,) = Store(db).list_runs()
    assert run.status == "finished"
    print(
        f"{run.family} {run.task}: best {run.main_metric} {run.best:.4g} after {run.steps} steps "
        f"(baseline {run.baseline:.4g})"
    )
    return run
