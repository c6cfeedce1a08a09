"""The shared pattern of the slow learning checks: one `ortholab fit` in-process, its recorded run back."""

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
