"""`fit --config X --ckpt_path FILE` and `fit --config RUN/config.yaml`: new runs, started where docs/checkpoints.md
says (the checkpoint's step, or step 0 for a config.yaml that a resume rewrote)."""

from pathlib import Path

import yaml
from test_cli import DEMO, TINY

from ortholab.cli.main import main
from ortholab.db import Store


def first_step(store, run_id):
    return store.metric_series(run_id, "train/loss")[0].step


def test_a_resumed_runs_config_yaml_starts_a_new_run_from_scratch(tmp_path, monkeypatch):
    """A resume recorded its own last.ckpt as the config's ckpt_path: `fit --config` of that config.yaml trained on
    from the run's weights and step, not the fresh run the page promises."""
    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    main(["fit", "--config", DEMO, *TINY, "--db", db])
    store = Store(db)
    (run,) = store.list_runs()
    main(["fit", "--resume", str(run.id), "--db", db, "--trainer.max_steps", "9"])
    config = Path(store.get_run(run.id).run_dir) / "config.yaml"
    assert yaml.safe_load(config.read_text())["ckpt_path"] is None
    assert store.get_run(run.id).config["ckpt_path"] is None  # the store's copy too
    main(["fit", "--config", str(config), "--db", db, "--trainer.max_steps", "3"])
    fresh = max(r.id for r in store.list_runs())
    assert first_step(store, fresh) == 0 and store.get_run(fresh).steps == 3
