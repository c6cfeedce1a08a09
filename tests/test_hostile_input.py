"""Hostile input (issue 22): each case ends with one line naming the file, key or value and the fix, exit code 2,
no traceback, and a sentinel store whose runs and points are unchanged."""
import subprocess
import sys

import pytest

from ortholab.db import Store
from test_cli import DEMO, TINY


@pytest.fixture(scope="module")
def sentinel(tmp_path_factory):
    """A store holding one finished run, and a snapshot of everything in it."""
    folder = tmp_path_factory.mktemp("sentinel")
    db = f"sqlite:///{folder / 'store.db'}"
    store = Store(db)
    run = store.create_run(name="kept", family="scornn", task="copying")
    store.log_metrics(run, {"train/loss": 1.5, "val/loss": 1.25}, step=3)
    store.set_status(run, "finished")
    return db, folder


def snapshot(db):
    store = Store(db)
    return [(r.id, r.status, r.steps, r.best, [(k, [(p.step, p.value) for p in store.metric_series(r.id, k)])
                                                  for k in store.metric_keys(r.id)]) for r in store.list_runs()]


def files(folder):
    return {"empty.yaml": b"", "list.yaml": b"- model\n- data\n", "binary.yaml": bytes(range(256)) * 4,
            "tabs.yaml": b"model:\n\tfamily: scornn\n", "png.yaml": b"\x89PNG\r\n\x1a\n" + bytes(64),
            "negative_lr.yaml": b"model:\n  optimizers:\n    default: {name: adam, lr: -0.01}\n",
            "nan_lr.yaml": b"model:\n  optimizers:\n    default: {name: rmsprop_tf, lr: .nan}\n",
            "text_lr.yaml": b"model:\n  optimizers:\n    default: {name: adam, lr: fast}\n"}


CASES = [
    (["--config", "{folder}/empty.yaml"], "empty.yaml: the file is empty"),
    (["--config", "{folder}/list.yaml"], "list.yaml: holds a list, not a mapping"),
    (["--config", "{folder}/binary.yaml"], "binary.yaml: not a text file"),
    (["--config", "{folder}/png.yaml"], "png.yaml: not a text file"),
    (["--config", "{folder}/tabs.yaml"], "tabs.yaml: not valid YAML at line 2, column 1"),
    (["--config", DEMO, *TINY, "--name", "../../escape"], "--name '../../escape': a run name is one folder name"),
    (["--config", DEMO, *TINY, "--name", "/abs/path"], "--name '/abs/path'"),
    (["--config", DEMO, *TINY, "--name", "x" * 300], "at most 100 characters"),
    (["--config", DEMO, *TINY, "--name", "two\nlines"], "a run name is one folder name"),
    (["--config", DEMO, *TINY, "--trainer.val_check_interval", "0"], "trainer.val_check_interval = 0 must be positive"),
    (["--config", DEMO, *TINY, "--trainer.max_steps", "-5"], "`max_steps` must be a non-negative integer"),
    (["--config", DEMO, "--config", "{folder}/negative_lr.yaml", *TINY],
     "model.optimizers.default.lr = -0.01 must be a positive finite number"),
    (["--config", DEMO, "--config", "{folder}/nan_lr.yaml", *TINY], "lr = nan must be a positive finite number"),
    (["--config", DEMO, "--config", "{folder}/text_lr.yaml", *TINY], "lr = 'fast' must be a positive finite number"),
]


@pytest.mark.parametrize("args, expected", CASES, ids=[c[1][:40] for c in CASES])
def test_hostile_input_is_one_line_and_touches_nothing(sentinel, args, expected):
    db, folder = sentinel
    for name, content in files(folder).items():
        (folder / name).write_bytes(content)
    before = snapshot(db)
    argv = [a.replace("{folder}", str(folder)) for a in args]
    done = subprocess.run([sys.executable, "-c", "from ortholab.training.cli import main; main()", "fit", *argv, "--db", db],
                          cwd=folder, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("ortholab: error:")]
    assert expected in line, line
    assert "accelerator" not in line  # no hint about devices for a setting that has nothing to do with them
    assert snapshot(db) == before
    assert not (folder.parent / "escape").exists() and not [p for p in folder.rglob("*") if p.is_file()
                                                            and p.suffix in (".ckpt", ".yaml") and "runs" in p.parts]
