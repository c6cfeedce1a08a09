"""A callback of the user's own, outside OrthoLab's package: docs/configs.md's example, run as written, records its
metric points and artifacts into the run's store at the steps it says."""

import os
import re
from pathlib import Path

import torch
from test_cli import DEMO, TINY, ortholab
from tolerances import roundoff

from ortholab.db import Store, frames
from ortholab.db.artifacts import array_from_bytes

REPO = Path(__file__).resolve().parents[1]


def _docs_example() -> str:
    """docs/configs.md's module, as a user copies it."""
    text = (REPO / "docs" / "configs.md").read_text()
    return re.search(r"```python\n(# mylab/callbacks\.py\n.*?)```", text, re.DOTALL).group(1)


def test_the_docs_callback_of_ones_own_records_metrics_and_artifacts_at_its_steps(tmp_path):
    (tmp_path / "mylab").mkdir()
    (tmp_path / "mylab" / "__init__.py").write_text("")
    (tmp_path / "mylab" / "callbacks.py").write_text(_docs_example())
    env = {k: v for k, v in os.environ.items() if k != "ORTHOLAB_DB"} | {
        "ORTHOLAB_CONFIG_MODULES": "mylab.callbacks",
        "PYTHONPATH": str(tmp_path),
        "ORTHOLAB_RUNS": str(tmp_path / "runs"),
    }
    mine = ["--trainer.callbacks+=mylab.callbacks.SingularValues", "--trainer.callbacks.every_n_steps", "2"]
    done = ortholab("fit", "--config", DEMO, *TINY, "--trainer.max_steps", "6", *mine, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    db = f"sqlite:///{tmp_path / 'runs' / 'ortholab.db'}"
    (run,) = Store(db).list_runs()
    points = Store(db).metric_series(run.id, "analysis/largest_singular_value")
    assert [p.step for p in points] == [2, 4, 6]  # after steps 2, 4 and 6 (its batch-end hook: not step 0)
    # scoRNN's W is orthogonal: every singular value is 1 to float32 round-off (a Cayley map of size 8)
    tolerance = roundoff(torch.float32, n=8, c=10)
    assert all(abs(p.value - 1) < tolerance for p in points), [p.value for p in points]
    stored = frames.artifacts(run.id, "singular_values", db=db)
    assert list(stored["step"]) == [2, 4, 6] and set(stored["name"]) == {"recurrent"}
    values = array_from_bytes(Store(db).artifact_data(int(stored["id"].iloc[-1])))
    assert values.shape == (8,) and abs(values - 1).max() < tolerance
