"""`ortholab sweep` with two workers on a tiny space: every trial recorded once, tagged, and the best reported."""
import subprocess
import sys
from collections import Counter

import optuna
import pytest

from ortholab.db import Store
from test_cli import DEMO, TINY


@pytest.mark.slow
def test_two_workers_share_one_grid_sweep(tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text("model.hidden_size: [4, 6]\nmodel.optimizers.other.lr: [0.001, 0.01]\n")
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    done = subprocess.run([sys.executable, "-c", "from ortholab.training.cli import main; main()", "sweep",
                           "--config", DEMO, "--space", str(space), "--trials", "4", "--workers", "2",
                           "--sampler", "grid", "--name", "tiny", "--db", db, *TINY, "--analysis", "false"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = [r for r in Store(db).list_runs() if "sweep:tiny" in r.tags]
    assert len(runs) == 4 and all(r.status == "finished" for r in runs)
    trials = Counter(tag for r in runs for tag in r.tags if tag.startswith("trial:"))
    assert sorted(trials) == ["trial:0", "trial:1", "trial:2", "trial:3"] and set(trials.values()) == {1}
    study = optuna.load_study(study_name="tiny", storage=db)
    grid = {(t.params["model.hidden_size"], t.params["model.optimizers.other.lr"]) for t in study.trials}
    assert grid == {(4, 0.001), (4, 0.01), (6, 0.001), (6, 0.01)}  # the whole grid, each point once
    best = min(runs, key=lambda r: r.best)
    assert f"best run {best.id} " in done.stdout and "4 trials completed" in done.stdout
