"""Hostile input (issue 22): each case ends with one line naming the file, key or value and the fix, exit code 2,
no traceback, and a sentinel store whose runs, points and artifacts are unchanged.

The cases of the issue run by default; the further cases (`HOSTILE`, below) run each as its own CLI process too and
are marked slow (`make test-slow`): about 20 s a process on the 2-core machine, most of it importing Lightning."""

import hashlib
import math
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import torch
import yaml
from test_cli import DEMO, REPO, TINY

from ortholab.db import Store
from ortholab.models import ConfigError

MUSIC = str(REPO / "configs" / "demo" / "music_jsb_lstm.yaml")
SECRET = "s3cretpw"  # a database password that must appear in no output and no child's command line
UNREACHABLE = f"postgresql+psycopg://ortholab:{SECRET}@127.0.0.1:9/runs"  # port 9 (discard): nothing listens


@pytest.fixture(scope="module")
def sentinel(tmp_path_factory):
    """A store holding one finished run, and a snapshot of everything in it."""
    folder = tmp_path_factory.mktemp("sentinel")
    db = f"sqlite:///{folder / 'store.db'}"
    store = Store(db)
    run = store.create_run(name="kept", family="scornn", task="copying")
    store.log_metrics(run, {"train/loss": 1.5, "val/loss": 1.25}, step=3)
    store.add_artifact(run, "eigenvalues", "W", step=3, data=b"\x93NUMPY-kept", meta={"near_minus_one": 0})
    store.set_status(run, "finished")
    return db, folder


def snapshot(db):
    """Every run's status, steps and best, its points, and its artifacts with a digest of their bytes."""
    store = Store(db)
    return {
        r.id: (
            r.status,
            r.steps,
            r.best,
            [(k, [(p.step, p.value) for p in store.metric_series(r.id, k)]) for k in store.metric_keys(r.id)],
            [
                (a.kind, a.name, a.step, hashlib.sha256(store.artifact_data(a.id)).hexdigest())
                for a in store.artifacts(r.id)
            ],
        )
        for r in store.list_runs()
    }


def files(folder):
    return {
        "empty.yaml": b"",
        "list.yaml": b"- model\n- data\n",
        "binary.yaml": bytes(range(256)) * 4,
        "tabs.yaml": b"model:\n\tfamily: scornn\n",
        "png.yaml": b"\x89PNG\r\n\x1a\n" + bytes(64),
        "negative_lr.yaml": b"model:\n  optimizers:\n    default: {name: adam, lr: -0.01}\n",
        "nan_lr.yaml": b"model:\n  optimizers:\n    default: {name: rmsprop_tf, lr: .nan}\n",
        "text_lr.yaml": b"model:\n  optimizers:\n    default: {name: adam, lr: fast}\n",
        "twice.yaml": b"model:\n  family: scornn\ntrainer:\n  max_steps: 2\nmodel:\n  family: lstm\n",  # review
        "number.yaml": b"model: 5\n",  # review: a traceback from training/family_options.py
        "word.yaml": b"trainer: fast\n",  # review: "Unable to load config 'fast'"
        "beside.yaml": b"data:\n  class_path: datamodules.CopyingTask\n  init_args: {seq_len: 10}\n  foo: 3\n",
        "flat.yaml": b"data:\n  class_path: datamodules.CopyingTask\n  seq_len: 10\n",  # "no option 'class_path'"
    }


CASES = [
    (["--config", "{folder}/empty.yaml"], "empty.yaml: the file is empty"),
    (["--config", "{folder}/list.yaml"], "list.yaml: holds a list, not a mapping"),
    (["--config", "{folder}/binary.yaml"], "binary.yaml: not a text file"),
    (["--config", "{folder}/png.yaml"], "png.yaml: not a text file"),
    (["--config", "{folder}/tabs.yaml"], "tabs.yaml: not valid YAML at line 2, column 1"),
    (
        ["--config", "{folder}/twice.yaml"],
        "twice.yaml: not valid YAML at line 5, column 1: the key 'model' is given twice in one mapping (first at line "
        "1)",
    ),
    (["--config", "{folder}/number.yaml"], "number.yaml: model: 5 is not a mapping"),
    (["--config", "{folder}/word.yaml"], "word.yaml: trainer: 'fast' is neither a mapping of its keys nor a config"),
    (["--config", DEMO, "--config", "{folder}/beside.yaml"], "beside.yaml: data.foo is given beside data.class_path"),
    (["--config", DEMO, "--config", "{folder}/flat.yaml"], "flat.yaml: data.seq_len is given beside data.class_path"),
    (["--config", DEMO, *TINY, "--seed_everything", "-1"], "seed_everything = -1"),
    (["--config", DEMO, *TINY, "--name", "../../escape"], "--name '../../escape': a run name is one folder name"),
    (["--config", DEMO, *TINY, "--name", "/abs/path"], "--name '/abs/path'"),
    (["--config", DEMO, *TINY, "--runs_dir", "/proc/x"], "/proc is a virtual filesystem that stores no files"),
    (["--config", DEMO, *TINY, "--name", "x" * 300], "at most 100 characters"),
    (["--config", DEMO, *TINY, "--name", "two\nlines"], "a run name is one folder name"),
    (
        ["--config", DEMO, *TINY, "--trainer.val_check_interval", "0"],
        "trainer.val_check_interval = 0 (on the command line) must be positive",
    ),
    (["--config", DEMO, *TINY, "--trainer.max_steps", "-5"], "`max_steps` must be a non-negative integer"),
    (
        ["--config", DEMO, "--config", "{folder}/negative_lr.yaml", *TINY],
        "model.optimizers.default.lr = -0.01 (in {folder}/negative_lr.yaml) must be a positive finite number",
    ),
    (["--config", DEMO, "--config", "{folder}/nan_lr.yaml", *TINY], "lr = nan (in {folder}/nan_lr.yaml) must be"),
    (["--config", DEMO, "--config", "{folder}/text_lr.yaml", *TINY], "lr = 'fast' (in {folder}/text_lr.yaml) must"),
]


@pytest.mark.parametrize("args, expected", CASES, ids=[c[1][:40] for c in CASES])
def test_hostile_input_is_one_line_and_touches_nothing(sentinel, args, expected):
    db, folder = sentinel
    for name, content in files(folder).items():
        (folder / name).write_bytes(content)
    before = snapshot(db)
    argv = [a.replace("{folder}", str(folder)) for a in args]
    done = subprocess.run(
        [sys.executable, "-c", "from ortholab.cli.main import main; main()", "fit", *argv, "--db", db],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().startswith("ortholab: error:"), done.stderr  # nothing before it ("Seed set to ...")
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("ortholab: error:")]
    assert expected.replace("{folder}", str(folder)) in line, line
    assert "accelerator" not in line  # no hint about devices for a setting that has nothing to do with them
    assert snapshot(db) == before
    assert not (folder.parent / "escape").exists() and not [
        p for p in folder.rglob("*") if p.is_file() and p.suffix in (".ckpt", ".yaml") and "runs" in p.parts
    ]


# ---------------------------------------------------------------------------------------------------------------------
# More hostile input, each a CLI process of its own (slow): the remaining cases and our own.
def ortholab(args, cwd, env=None, timeout=300):
    return subprocess.run(
        [sys.executable, "-c", "from ortholab.cli.main import main; main()", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def refusal(done, *expected, forbidden=(SECRET,)):
    """The one `ortholab: error:` line of a refused command, after checking exit code 2 and no traceback."""
    output = done.stdout + done.stderr
    assert done.returncode == 2 and "Traceback" not in output, output[-3000:]
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("ortholab: error:")]
    assert all(part in line for part in expected), line
    assert not [word for word in forbidden if word in output], output[-3000:]
    return line


def write_roll_mat(path: Path, bad_value: float | None = None) -> Path:
    """A TCN-style .mat (float64 cells, as MATLAB writes them) whose first training piece holds `bad_value`."""
    rng = np.random.default_rng(0)
    cells = {}
    for key, count in (("traindata", 3), ("validdata", 2), ("testdata", 2)):
        cell = np.empty((1, count), dtype=object)
        for i in range(count):
            cell[0, i] = (rng.random((6, 88)) < 0.1).astype(np.float64)
        cells[key] = cell
    if bad_value is not None:
        cells["traindata"][0, 0][2, 40] = bad_value
    scipy.io.savemat(path, cells)
    return path


class Payload:
    """Unpickling this runs `touch pwned`: what a crafted checkpoint would do under weights_only=False."""

    def __reduce__(self):
        return os.system, ("touch pwned",)


def hostile_files(folder: Path) -> None:
    """Every file the cases below name, written once."""
    (folder / "empty.mat").write_bytes(b"")
    for name, value in ROLL_VALUES.items():
        write_roll_mat(folder / f"roll_{name}.mat", value)
    with open(folder / "notes.pickle", "wb") as stream:
        pickle.dump({"train": [[[60.5]]], "valid": [[[60]]], "test": [[[60]]]}, stream)
    texts = {
        "tag_space.yaml": 'model.hidden_size: !!python/object/apply:os.system ["touch pwned"]\n',
        "empty_space.yaml": "",
        "lowhigh_space.yaml": "model.hidden_size: {low: 9, high: 3}\n",
        "log0_space.yaml": "model.optimizers.other.lr: {low: 0, high: 0.1, log: true}\n",
        "dicts_space.yaml": "model.family_args: [{rho: 4}, {rho: 2}]\n",
        "badkey_space.yaml": "hidden_size: [4, 8]\n",
        "failing_space.yaml": "data.seq_len: [0]\n",  # passes the sweep's check of the model; fails each trial
        "lambda.yaml": "trainer:\n  callbacks:\n    - class_path: lightning.pytorch.callbacks.LambdaCallback\n"
        "      init_args: {on_fit_start: builtins.print}\n",
        "this.yaml": "data:\n  class_path: this.Zen\n",
        "backbone.yaml": "trainer:\n  callbacks:\n    - class_path: lightning.pytorch.callbacks.BackboneFinetuning\n"
        "      init_args: {lambda_func: lightning.pytorch.callbacks.finetuning.multiplicative}\n",
        "pytag.yaml": 'model:\n  hidden_size: !!python/object/apply:os.system ["touch pwned"]\n',
    }
    for name, text in texts.items():
        (folder / name).write_text(text)
    torch.save({"state_dict": {}, "hyper_parameters": {}, "payload": Payload()}, folder / "crafted.ckpt")
    (folder / "checkpoints_only").mkdir(exist_ok=True)


ROLL_VALUES = {"5": 5.0, "minus3": -3.0, "1e9": 1e9, "nan": math.nan, "inf": math.inf}
FIT = ["fit", "--config", DEMO, *TINY, "--db", "{db}"]
MUSIC_FIT = ["fit", "--config", MUSIC, "--db", "{db}", "--trainer.max_steps", "1", "--data.dataset", "jsb"]
SWEEP = ["sweep", "--config", DEMO, "--trials", "1", "--db", "{db}"]

HOSTILE = [  # (id, argv, parts of the error line)
    # the cases -------------------------------------------------------------------------------------------
    (
        "base-task",
        [*FIT, "--data.class_path", "datamodules.base.TaskDataModule"],
        [
            "data.class_path = 'ortholab.datamodules.base.TaskDataModule' is a base class, not a task",
            "datamodules.CopyingTask",
        ],
    ),
    ("ckpt-missing", [*FIT, "--ckpt_path", "{folder}/nothing.ckpt"], ["--ckpt_path", "nothing.ckpt: no such file"]),
    ("ckpt-folder", [*FIT, "--ckpt_path", "{folder}/checkpoints_only"], ["checkpoints_only is a folder", "last.ckpt"]),
    # Lightning's checkpoint names: a new run's Trainer holds no checkpoint (a ValueError traceback and a failed run,
    # or `last` loading nothing: an untrained model trained or scored)
    ("ckpt-best", [*FIT, "--ckpt_path", "best"], ["--ckpt_path best names no file", "`ortholab fit --resume RUN_ID`"]),
    ("ckpt-last", [*FIT, "--ckpt_path", "last"], ["--ckpt_path last names no file", "checkpoints/last.ckpt"]),
    (
        "ckpt-last-test",
        ["test", "--config", DEMO, *TINY, "--db", "{db}", "--ckpt_path", "last"],
        ["--ckpt_path last names no file", "`ortholab test --run RUN_ID --checkpoint last`"],
    ),
    (
        "ckpt-hpc-validate",
        ["validate", "--run", "{run}", "--db", "{db}", "--ckpt_path", "hpc"],
        ["--ckpt_path hpc names no file", "`ortholab validate --run RUN_ID --checkpoint best`"],
    ),
    (
        "ckpt-registry-predict",
        ["predict", "--config", DEMO, *TINY, "--db", "{db}", "--ckpt_path", "registry"],
        ["--ckpt_path registry names no file"],
    ),
    (
        "resume-ckpt-missing",  # the run's own checkpoints offered, not the files beside the mistyped path
        ["fit", "--resume", "{run}", "--db", "{db}", "--trainer.max_steps", "12", "--ckpt_path", "{folder}/x.ckpt"],
        ["x.ckpt (FileNotFoundError: no such file); pass --ckpt_path with one of", "last.ckpt in ", "/kept/"],
    ),
    ("mat-0-bytes", [*MUSIC_FIT, "--data.path", "{folder}/empty.mat"], ["empty.mat is empty (0 bytes)"]),
    *[
        (
            f"roll-{name}",
            [*MUSIC_FIT, "--data.path", f"{{folder}}/roll_{name}.mat"],
            [f"roll_{name}.mat: traindata piece 0 holds", "at step 2, key 40", "0 (silent) or 1 (sounding)"],
        )
        for name in ROLL_VALUES
    ],
    (
        "rmsprop-tf-negative-lr",
        [*FIT, "--model.optimizers.recurrent.lr", "-1.0e-3"],
        ["model.optimizers.recurrent.lr = -0.001 (on the command line) must be a positive finite number"],
    ),
    (
        "rmsprop-tf-text-lr",
        [*FIT, "--model.optimizers.other.lr", "fast"],
        ["model.optimizers.other.lr = 'fast' (on the command line) must be a positive finite number"],
    ),
    (
        "adam-nan-lr",
        [*FIT, "--model.optimizers", "{default: {name: adam, lr: .nan}}"],
        ["model.optimizers.default.lr = nan"],
    ),
    (
        "adam-betas",
        [*FIT, "--model.optimizers", "{default: {name: adam, lr: 1.0e-3, betas: [2, 0.9]}}"],
        ["model.optimizers.default", "optimizer 'adam' refuses it (Invalid beta parameter at index 0: 2)"],
    ),
    (
        "budget-too-small",
        [*FIT, "--model.hidden_size", "auto", "--model.param_budget", "10"],
        [
            "model.param_budget = 10 (on the command line) is below the smallest 'scornn' model",
            "give model.param_budget >= ",
        ],
    ),
    (
        "space-python-tag",
        [*SWEEP, "--space", "{folder}/tag_space.yaml"],
        ["tag_space.yaml: not valid YAML at line 1", "python/object/apply:os.system"],
    ),
    (
        "crafted-checkpoint",
        ["evaluate-audio", "{run}", "--db", "{db}", "--checkpoint", "{folder}/crafted.ckpt"],
        ["--checkpoint", "crafted.ckpt: cannot be read as a checkpoint of weights", "refused, not run"],
    ),
    (
        "lambda-callback",
        [*FIT, "--config", "{folder}/lambda.yaml"],
        ["trainer.callbacks names 'lightning.pytorch.callbacks.LambdaCallback', which a config may not import"],
    ),
    (
        "import-side-effect",
        [*FIT, "--config", "{folder}/this.yaml"],
        ["data.class_path names 'this.Zen', which a config may not import"],
    ),
    (
        "callable-value",
        [*FIT, "--config", "{folder}/backbone.yaml"],
        ["trainer.callbacks.0.init_args.lambda_func", "may not name a function"],
    ),
    ("callable-on-command-line", [*FIT, "--trainer.callbacks+=builtins.print"], ["names 'builtins.print'"]),
    # our own: the model and its options --------------------------------------------------------------------------
    (
        "unknown-family",
        [*FIT, "--model.family", "scorn"],
        ["model.family = 'scorn' (on the command line) is not a registered family"],
    ),
    (
        "family-args-a-list",
        [*FIT, "--model.family_args", "[1, 2]"],
        ["model.family_args = '[1, 2]' (on the command line): expected a mapping"],
    ),
    ("family-arg-wrong-type", [*FIT, "--model.family_args", "{rho: many}"], ["model.family_args.rho", "'many'"]),
    (
        "family-arg-class-path",
        [*FIT, "--model.family_args", "{rho: {class_path: builtins.print}}"],
        ["model.family_args.rho"],
    ),
    (
        "hidden-size-0",
        [*FIT, "--model.hidden_size", "0"],
        ["model.hidden_size (on the command line) must be a positive integer, got 0"],
    ),
    ("hidden-size-fraction", [*FIT, "--model.hidden_size", "8.5"], ["model.hidden_size = '8.5'"]),
    ("hidden-size-huge", [*FIT, "--model.hidden_size", "10000000"], ["not enough memory", "lower model.hidden_size"]),
    (
        "negative-clip-norm",
        [*FIT, "--model.grad_clip_norm", "-1"],
        ["model.grad_clip_norm = -1.0 (on the command line) must be a positive finite number"],
    ),
    ("config-python-tag", [*FIT, "--config", "{folder}/pytag.yaml"], ["pytag.yaml: not valid YAML"]),
    ("config-missing", [*FIT, "--config", "{folder}/nowhere.yaml"], ["nowhere.yaml: no such file"]),
    ("config-a-folder", [*FIT, "--config", "{folder}/checkpoints_only"], ["checkpoints_only: not a file"]),
    # the task and its data ---------------------------------------------------------------------------------------
    ("unknown-task-option", [*FIT, "--data.bogus", "1"], ["unknown config key data.bogus"]),
    (
        "negative-batch-size",
        [*FIT, "--data.batch_size", "-4"],
        ["data.batch_size (on the command line) must be a positive integer"],
    ),
    (
        "seq-len-0",
        [*FIT, "--data.seq_len", "0"],
        ["data.seq_len (on the command line) must be a positive integer, got 0"],
    ),
    (
        "train-size-0",
        [*FIT, "--data.train_size", "0"],
        ["data.train_size (on the command line) must be a positive integer"],
    ),
    ("missing-data-path", [*MUSIC_FIT, "--data.path", "{folder}/nowhere.mat"], ["nowhere.mat", "does not exist"]),
    (
        "pickle-fractional-note",
        [*MUSIC_FIT, "--data.path", "{folder}/notes.pickle"],
        ["notes.pickle holds the note 60.5"],
    ),
    # the run: names, tags, resume, folders -----------------------------------------------------------------------
    (
        "unicode-name-with-separator",
        [*FIT, "--name", "ünï/cödé"],  # letters of any script are a name (issue 47)
        ["--name 'ünï/cödé': a run name is one folder name"],
    ),
    ("tags-not-json", [*FIT, "--tags", "[unclosed"], ["tags = '[unclosed': expected a list"]),
    ("resume-unknown-id", ["fit", "--resume", "999", "--db", "{db}"], ["No run with id 999"]),
    ("resume-not-fit", ["validate", "--resume", "{run}", "--db", "{db}"], ["use `ortholab fit --resume"]),
    ("resume-finished", ["fit", "--resume", "{run}", "--db", "{db}"], ["is finished", "--trainer.max_steps N"]),
    ("runs-dir-a-file", [*FIT, "--runs_dir", "{folder}/empty.mat/runs"], ["--runs_dir", "cannot write run folders"]),
    (
        "max-epochs-text",
        [*FIT, "--trainer.max_epochs", "abc"],
        ["trainer.max_epochs = 'abc' (on the command line): expected int"],
    ),
    ("task-option-text", [*FIT, "--data.seq_len", "1OO"], ["data.seq_len = '1OO' (on the command line): expected int"]),
    # stores and secrets ------------------------------------------------------------------------------------------
    ("db-unknown-scheme", [*FIT[:-1], f"ftp://u:{SECRET}@host/x"], ["no database driver", "ftp://u:***@host/x"]),
    ("db-postgres-scheme", ["runs", "--db", "postgres://u@h/db"], ["write the URL as postgresql+psycopg://"]),
    ("db-a-yaml-file", ["runs", "--db", "sqlite:///{folder}/failing_space.yaml"], ["no SQLite database at all"]),
    ("db-unreachable", [*FIT[:-1], UNREACHABLE], ["Cannot use the run database", ":***@127.0.0.1:9/runs"]),
    ("db-version-unreachable", ["db", "version", "--db", UNREACHABLE], [":***@127.0.0.1:9/runs"]),
    ("db-upgrade-unreachable", ["db", "upgrade", "--db", UNREACHABLE], [":***@127.0.0.1:9/runs"]),
    ("runs-unreachable", ["runs", "--db", UNREACHABLE], [":***@"]),
    ("sweep-unreachable", [*SWEEP[:-1], UNREACHABLE, "--space", "{folder}/failing_space.yaml"], [":***@"]),
    (
        "db-at-in-password",
        [*FIT[:-1], f"postgresql://u:{SECRET}@x@127.0.0.1:9/runs"],
        ["the password holds an '@'; percent-encode it as %40"],
    ),
    ("db-port-text", [*FIT[:-1], f"postgresql://u:{SECRET}@host:port/runs"], ["not a database URL"]),
    # the other commands ------------------------------------------------------------------------------------------
    ("unknown-command", ["frobnicate"], ["unknown command 'frobnicate'; use one of fit"]),
    ("command-typo", ["run"], ["unknown command 'run'; did you mean 'runs'?"]),
    ("command-of-another-name", ["show", "2"], ["unknown command 'show'; did you mean `ortholab runs show ID`?"]),
    ("command-of-another-tool", ["train"], ["unknown command 'train'; did you mean `ortholab fit`?"]),
    ("fit-without-config", ["fit"], ["no task given: name a config with --config FILE"]),
    (
        "db-unknown-action",
        ["db", "frobnicate", "--db", "{db}"],
        ["'frobnicate' is not one of upgrade, version", "ortholab db --help"],
    ),
    ("space-empty", [*SWEEP, "--space", "{folder}/empty_space.yaml"], ["empty_space.yaml: holds nothing"]),
    ("space-low-above-high", [*SWEEP, "--space", "{folder}/lowhigh_space.yaml"], ["low = 9 above high = 3"]),
    ("space-log-from-0", [*SWEEP, "--space", "{folder}/log0_space.yaml"], ["log scale from low = 0"]),
    ("space-mapping-choices", [*SWEEP, "--space", "{folder}/dicts_space.yaml"], ["model.family_args.<option>"]),
    (
        "space-not-a-key",
        [*SWEEP, "--space", "{folder}/badkey_space.yaml"],
        ["unknown config key hidden_size (in ", "did you mean model.hidden_size?"],
    ),
    ("sweep-0-trials", [*SWEEP[:4], "0", "--db", "{db}", "--space", "{folder}/empty_space.yaml"], ["--trials 0"]),
    (
        "sweep-config-missing",
        [
            "sweep",
            "--config",
            "{folder}/nowhere.yaml",
            "--space",
            "{folder}/failing_space.yaml",
            "--trials",
            "1",
            "--db",
            "{db}",
        ],
        ["nowhere.yaml: no such file"],
    ),
    (
        "audio-of-a-copying-run",
        ["evaluate-audio", "{run}", "--db", "{db}", "--checkpoint", "last"],
        ["audio evaluation needs the speech task"],
    ),
    ("audio-unknown-run", ["evaluate-audio", "999", "--db", "{db}"], ["No run with id 999"]),
    (
        "audio-negative-utterances",
        ["evaluate-audio", "{run}", "--db", "{db}", "--utterances", "-1"],
        ["--utterances -1"],
    ),
    ("dashboard-port", ["dashboard", "--port", "70000", "--db", "{db}"], ["--port 70000"]),
    ("bench-batches-text", ["bench", "--batches", "x", "--families", "lstm"], ["--batches 'x'"]),
    ("report-unknown-table", ["report", "nosuch", "--db", "{db}"], ["no published table 'nosuch'"]),
    ("list-unknown", ["list", "nothing"], ["'nothing' is not one of families, tasks, configs"]),
]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A sentinel store holding a real finished run (run folder, checkpoints, config.yaml, artifacts), and every file
    the hostile cases name."""
    folder = tmp_path_factory.mktemp("trained")
    db = f"sqlite:///{folder / 'store.db'}"
    done = ortholab(
        [a.replace("{db}", db) for a in FIT] + ["--runs_dir", str(folder / "runs"), "--name", "kept"], folder
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = Store(db).list_runs()
    hostile_files(folder)
    return db, folder, run.id


def fill(args, db, folder, run_id):
    return [a.replace("{db}", db).replace("{folder}", str(folder)).replace("{run}", str(run_id)) for a in args]


@pytest.mark.slow
@pytest.mark.parametrize("args, expected", [case[1:] for case in HOSTILE], ids=[case[0] for case in HOSTILE])
def test_more_hostile_input_is_one_line_and_touches_nothing(trained, args, expected):
    db, folder, run_id = trained
    before = snapshot(db)
    files_before = sorted(p for p in folder.rglob("*") if "runs" in p.parts)
    done = ortholab(fill(args, db, folder, run_id), cwd=folder)
    line = refusal(done, *expected)
    assert "accelerator" not in line and len(line) < 1200, line
    assert "Beautiful is better than ugly" not in done.stdout + done.stderr  # `this` was never imported
    assert not (folder / "pwned").exists()  # no crafted value ran code
    assert snapshot(db) == before
    assert sorted(p for p in folder.rglob("*") if "runs" in p.parts) == files_before  # no run folder or checkpoint


@pytest.mark.slow
def test_resume_checks_the_stored_config_again(trained):
    """A run folder's config.yaml edited to call a function: `fit --resume` refuses it as it would a --config."""
    db, folder, run_id = trained
    stored = Path(Store(db).get_run(run_id).run_dir) / "config.yaml"
    original = stored.read_text()
    config = yaml.safe_load(original)
    config["trainer"]["callbacks"] = [
        {"class_path": "lightning.pytorch.callbacks.LambdaCallback", "init_args": {"on_fit_start": "builtins.print"}}
    ]
    before = snapshot(db)
    try:
        stored.write_text(yaml.safe_dump(config))
        further = ["--trainer.max_steps", "12"]  # the run is finished: a resume that would stop at once is refused
        done = ortholab(["fit", "--resume", str(run_id), "--db", db, *further], cwd=folder)
    finally:
        stored.write_text(original)
    refusal(done, "trainer.callbacks names 'lightning.pytorch.callbacks.LambdaCallback', which a config may not import")
    assert snapshot(db) == before


def mount_tmpfs(folder: Path, size: str) -> bool:
    """A small tmpfs at `folder` (root only); False where it cannot be mounted."""
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return False
    return (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True
        ).returncode
        == 0
    )


@pytest.mark.slow
def test_a_nearly_full_disk_is_refused_before_the_run(trained, tmp_path, monkeypatch, capsys):
    """--runs_dir on a 64 KiB filesystem: refused before a run is recorded, naming the folder and what is free."""
    db, folder, _ = trained
    tiny = tmp_path / "tiny"
    before = snapshot(db)
    if mount_tmpfs(tiny, "64k"):
        try:
            done = ortholab([*fill(FIT, db, folder, 0), "--runs_dir", str(tiny)], cwd=folder)
            contents = list(tiny.rglob("*"))
        finally:
            subprocess.run(["umount", str(tiny)])
        line = refusal(done, f"--runs_dir {tiny}: 0.06 MiB free", "free space there or give --runs_dir")
    else:  # no mount here: the same check in this process, the disk's free space simulated
        from ortholab.cli.main import main

        monkeypatch.setattr("shutil.disk_usage", lambda path: type("Usage", (), {"free": 65536})())
        monkeypatch.chdir(folder)
        with pytest.raises(SystemExit) as exit_info:
            main([*fill(FIT, db, folder, 0), "--runs_dir", str(tiny)])
        assert exit_info.value.code == 2
        line = capsys.readouterr().err.strip().splitlines()[-1]
        assert f"--runs_dir {tiny}: 0.06 MiB free" in line
        contents = list(tiny.rglob("*"))
    assert "MiB" in line and contents == [] and snapshot(db) == before


@pytest.mark.slow
def test_a_disk_that_fills_during_training_is_one_line_and_no_partial_checkpoint(trained, tmp_path):
    """The filesystem of --runs_dir fills up at step 1; the checkpoint at step 3 cannot be written: one line, exit 2,
    no partial or temporary checkpoint, the run marked failed with that line as its reason, earlier runs intact."""
    db, folder, _ = trained
    tiny = tmp_path / "tiny"
    mounted = mount_tmpfs(tiny, "1m")
    (folder / "fill.yaml").write_text(
        yaml.safe_dump(
            {
                "trainer": {
                    "callbacks": [
                        {
                            "class_path": "hostile_faults.FillDisk",
                            "init_args": {"folder": str(tiny), "step": 1, "simulate": not mounted},
                        }
                    ]
                }
            }
        )
    )
    before = snapshot(db)
    env = {
        "ORTHOLAB_CONFIG_MODULES": "hostile_faults",
        "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), os.environ.get("PYTHONPATH", "")]),
    }
    try:
        done = ortholab(
            [*fill(FIT, db, folder, 0), "--config", str(folder / "fill.yaml"), "--runs_dir", str(tiny)],
            cwd=folder,
            env=env,
        )
        checkpoints = [
            p for p in tiny.rglob("*") if p.is_file() and (p.suffix in (".ckpt", ".tmp") or ".ckpt." in p.name)
        ]
    finally:
        if mounted:
            subprocess.run(["umount", str(tiny)])
    refusal(done, "cannot write the checkpoint", "best-step3.ckpt", "No space left on device", "--resume")
    assert checkpoints == []  # neither a half-written checkpoint nor a temporary file is left
    after = snapshot(db)
    assert {run: after[run] for run in before} == before  # what was recorded before is untouched
    (new,) = set(after) - set(before)
    run = Store(db).get_run(new)
    assert run.status == "failed" and run.reason and "cannot write the checkpoint" in run.reason, run.reason
    assert [p.step for p in Store(db).metric_series(new, "train/loss")] == [0, 1, 2]  # its points up to the failure


@pytest.mark.slow
def test_a_sweep_whose_trials_all_fail_exits_2_with_the_first_reason(trained):
    db, folder, _ = trained
    before = snapshot(db)
    done = ortholab(
        [
            "sweep",
            "--config",
            DEMO,
            "--space",
            str(folder / "failing_space.yaml"),
            "--trials",
            "2",
            "--name",
            "doomed",
            "--db",
            db,
            *TINY,
        ],
        cwd=folder,
        timeout=600,
    )
    line = refusal(
        done,
        "sweep doomed: none of its 2 trials completed; the first failure: trial doomed-t0 failed:",
        "data.seq_len (given to the trial) must be a positive integer, got 0",
    )
    assert "ortholab sweep: trial doomed-t0 failed" in done.stderr and "trial doomed-t1 failed" in done.stderr
    assert "failed with value nan" not in done.stderr  # Optuna's own warning: the sweep's line says it already
    assert snapshot(db) == before, line


@pytest.mark.slow
def test_the_dashboard_on_all_interfaces_warns_that_it_has_no_authentication(trained):
    import socket

    db, folder, _ = trained
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from ortholab.cli.main import main; main()",
            "dashboard",
            "--host",
            "0.0.0.0",
            "--port",
            str(port),
            "--db",
            db,
        ],
        cwd=folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    import threading

    guard = threading.Timer(120, server.kill)  # a server that never warns ends the read instead of the test run
    guard.start()
    try:  # printed before the process becomes the server (Python's own warnings may come first)
        warning = next((line for line in iter(server.stderr.readline, "") if line.startswith("warning:")), "")
    finally:
        guard.cancel()
        server.send_signal(signal.SIGTERM)  # the process we started (now Streamlit itself)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    assert warning.startswith(
        "warning: --host 0.0.0.0 opens the dashboard to the network, and it has no authentication"
    ), warning
    assert f"port {port}" in warning and "--host 127.0.0.1" in warning


@pytest.mark.slow
def test_a_postgres_password_is_in_no_output_and_on_no_command_line(tmp_path):
    """A real PostgreSQL store whose URL holds a password (the server trusts local connections, so any password
    works): db upgrade/version, fit, runs and a sweep with one trial print it nowhere, and no process this starts
    (the sweep's trial included) carries it on its command line, which every local user can read."""
    import threading

    from postgres import postgres_server, unavailable_reason, wait_until_ready

    if unavailable_reason():
        pytest.skip(unavailable_reason())
    seen, stop = [], threading.Event()

    def watch_command_lines():
        while not stop.is_set():
            for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
                try:
                    if SECRET.encode() in cmdline.read_bytes():
                        seen.append(cmdline.read_bytes().replace(b"\0", b" ").decode()[:300])
                except OSError:
                    pass
            time.sleep(0.05)

    with postgres_server() as url:
        wait_until_ready(url)
        secret_url = url.replace("ortholab@", f"ortholab:{SECRET}@")
        env = {"ORTHOLAB_DB": secret_url}  # the user's way to keep it off their own command line
        (tmp_path / "space.yaml").write_text("model.hidden_size: [6]\n")
        watcher = threading.Thread(target=watch_command_lines, daemon=True)
        watcher.start()
        try:
            outputs = [
                ortholab(args, cwd=tmp_path, env=env, timeout=600)
                for args in (
                    ["db", "upgrade"],
                    ["db", "version"],
                    ["fit", "--config", DEMO, *TINY],
                    ["runs"],
                    ["sweep", "--config", DEMO, "--space", str(tmp_path / "space.yaml"), "--trials", "1", *TINY],
                )
            ]
        finally:
            stop.set()
            watcher.join()
    for done in outputs:
        assert done.returncode == 0, done.stderr[-2000:]
        assert SECRET not in done.stdout + done.stderr
    assert ":***@127.0.0.1" in outputs[0].stdout and "1 trial completed" in outputs[-1].stdout
    assert seen == []


# ---------------------------------------------------------------------------------------------------------------------
# The same defences, checked in this process (fast, run by default).
@pytest.mark.parametrize(
    "text, shown",
    [
        (f"postgresql://u:{SECRET}@h:5432/db", "postgresql://u:***@h:5432/db"),
        (f"postgresql+psycopg://u:p@{SECRET}@h/db", "postgresql+psycopg://u:***@h/db"),  # an unencoded '@' in it
        (f"mysql://u:pw@h/db?password={SECRET}&x=1", "mysql://u:***@h/db?password=***&x=1"),
        ("sqlite:////abs/runs.db and sqlite:///rel.db", "sqlite:////abs/runs.db and sqlite:///rel.db"),
        (f"postgresql+psycopg://u:pa/{SECRET}@h:5432/db", "postgresql+psycopg://u:***@h:5432/db"),  # a '/': was shown
        (f"postgresql+psycopg://u:pa {SECRET}@h/db", "postgresql+psycopg://u:***@h/db"),  # a space, as SQLAlchemy reads
        (f"postgresql://u:p@ss/{SECRET}:x@h/db", "postgresql://u:***@h/db"),  # '@' then '/': all of it, not 'p'
        ("postgresql+psycopg://user@host:5432/runs", "postgresql+psycopg://user@host:5432/runs"),  # none to mask
        (
            f"postgresql://u@h/db?password=se:{SECRET}&sslmode=require",
            "postgresql://u@h/db?password=***&sslmode=require",
        ),
        ("postgresql://u:p@h:5432/db", "postgresql://u:***@h:5432/db"),  # the port after the '@' stays
    ],
)
def test_every_url_is_printed_with_its_password_masked(text, shown):
    from ortholab.db.masking import mask_url, passwords_in

    assert mask_url(text) == shown
    assert any(SECRET in password for password in passwords_in(text)) or SECRET not in text


def test_a_known_password_is_masked_wherever_a_message_quotes_it(monkeypatch):
    from ortholab.db.masking import known_passwords, mask_secrets

    url = f"postgresql://u:{SECRET}@h/db"
    monkeypatch.setenv("ORTHOLAB_DB", "postgresql://v:other-secret@h/db")
    known = known_passwords(["runs", "--db", url])
    assert sorted(known) == ["other-secret", SECRET]
    assert mask_secrets(f"server said: password {SECRET} refused", known) == "server said: password *** refused"


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://u@h/db?password={SECRET}",
        f"postgresql://u@h/db?password=se:{SECRET}&sslmode=require",
        f"postgresql://u:{SECRET}@h:5432/db",
        f"postgresql://u@h:5432/db?sslmode=require&password=se:{SECRET}",
    ],
)
def test_a_masked_password_leaves_the_text_after_it_alone(url):
    """A `?password=` value ran to the next space, so the ':' (or '),') after a URL went with it: 'Cannot use the
    run database ...?password=*** the file is ...'; masking text already masked changed it too."""
    from ortholab.db.masking import mask_secrets, mask_url

    shown = mask_url(url)
    assert SECRET not in shown and shown.count("***") == 1
    for around in ("Cannot use the run database {}: the file is no SQLite database", "a store ({}), then", "{}."):
        said = around.format(url)
        assert mask_secrets(said) == around.format(shown), said
        assert mask_secrets(mask_secrets(said)) == around.format(shown), said  # masked twice: the same


def test_a_refused_store_names_its_url_masked_then_the_reason_after_a_colon(tmp_path, capsys):
    from ortholab.cli.main import main

    (tmp_path / "junk.db").write_text("not a database\n")
    url = f"sqlite:///{tmp_path / 'junk.db'}?password={SECRET}"
    with pytest.raises(SystemExit) as exit_info:
        main(["runs", "--db", url])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and SECRET not in err, err
    assert f"Cannot use the run database sqlite:///{tmp_path / 'junk.db'}?password=***: the file is no SQLite" in err


@pytest.mark.parametrize(
    "url, expected",
    [
        ("postgresql://u:p@ss@h/db", "the password holds an '@'; percent-encode it as %40"),
        ("postgresql://u:p@ss/pw:x@h/db", "the password holds an '@'; percent-encode it as %40"),  # '/' after the '@'
        ("postgresql://u:pw@h:port/db", "not a database URL"),
    ],
)
def test_a_url_whose_password_would_be_misread_is_refused_masked(url, expected):
    from ortholab.db.masking import check_db_url

    with pytest.raises(ConfigError) as refused:
        check_db_url(url)
    assert expected in str(refused.value) and ":***@" in str(refused.value) and "pw" not in str(refused.value)


def test_db_version_prints_the_url_masked(tmp_path, monkeypatch, capsys):
    from ortholab.cli.main import main

    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tmp_path / 's.db'}?password={SECRET}"  # SQLite ignores it; the masking must not
    Store(url)
    main(["db", "upgrade", "--db", url])
    main(["db", "version", "--db", url])
    out = capsys.readouterr().out
    assert SECRET not in out and out.count("?password=***") == 2


def test_a_deep_optimizer_flag_changes_that_option_and_keeps_the_group(capsys):
    from ortholab.cli.main import main
    from ortholab.training.mapping_flags import merge_deep_mapping_flags

    argv = ["fit", "--config", DEMO, "--model.optimizers.other.lr", "0.01", "--model.family_args.rho", "4"]
    merged = merge_deep_mapping_flags(argv)
    assert merged[:3] == argv[:3] and merged[-2:] == ["--model.family_args.rho", "4"]  # one level: jsonargparse's
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--print_config"])
    assert exit_info.value.code == 0
    model = yaml.safe_load(capsys.readouterr().out)["model"]
    other, recurrent = model["optimizers"]["other"], model["optimizers"]["recurrent"]
    assert (other["name"], other["lr"]) == ("rmsprop_tf", 0.01)  # the group's optimizer kept, its lr changed
    assert (recurrent["name"], recurrent["lr"]) == ("rmsprop_tf", 1e-4)  # the other group untouched
    assert model["family_args"]["rho"] == 4 and model["family_args"]["init"] == "henaff"


def test_a_deep_optimizer_flag_on_a_config_naming_no_optimizer_keeps_the_optimizer_it_stands_in_for(tmp_path, capsys):
    from ortholab.cli.main import main

    config = tmp_path / "mine.yaml"  # no model.optimizers: Adam serves every group (it was 'other.name = None')
    config.write_text("model: {family: fcurnn, hidden_size: 4}\ndata: {class_path: datamodules.CopyingTask}\n")
    flags = ["--model.optimizers.other.lr", "0.01", "--model.optimizers.recurrent.lr", "0.05", "--print_config"]
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", str(config), *flags])
    assert exit_info.value.code == 0
    optimizers = yaml.safe_load(capsys.readouterr().out)["model"]["optimizers"]
    assert (optimizers["other"]["name"], optimizers["other"]["lr"]) == ("adam", 0.01)
    assert (optimizers["recurrent"]["name"], optimizers["recurrent"]["lr"]) == ("stiefel_cayley", 0.05)  # fcuRNN's


def test_an_optimizer_entry_without_a_name_is_recorded_with_the_optimizer_it_ran(tmp_path, monkeypatch):
    """`other: {lr: 0.01}` in a file trains with the optimizer it stands in for; the run's config.yaml and params
    held the entry without its name (`runs --columns model.optimizers.other.name` fell back to another group's)."""
    from ortholab.cli.main import main

    monkeypatch.chdir(tmp_path)
    config = tmp_path / "mine.yaml"
    config.write_text("model: {optimizers: {default: {name: sgd, lr: 0.1}, other: {lr: 0.01}}}\n")
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    main(["fit", "--config", DEMO, "--config", str(config), *TINY, "--db", db])
    (summary,) = Store(db, access="read").list_runs()
    run = Store(db, access="read").get_run(summary.id)
    recorded = yaml.safe_load((Path(run.run_dir) / "config.yaml").read_text())["model"]["optimizers"]
    assert recorded["other"] == {"name": "sgd", "lr": 0.01}, recorded
    assert run.config["model"]["optimizers"]["other"]["name"] == "sgd"


def test_an_optimizer_entry_without_a_name_changes_the_one_it_stands_in_for():
    from ortholab.models.optimizers import group_specs

    groups = {"recurrent": [], "other": []}
    specs = group_specs(groups, {"default": {"name": "sgd", "lr": 0.1}, "other": {"lr": 0.5}})
    assert specs["other"] == {"name": "sgd", "lr": 0.5} and specs["recurrent"] == {"name": "sgd", "lr": 0.1}
    assert group_specs(groups, {"default": {"lr": 0.5}})["other"] == {"name": "adam", "lr": 0.5}
    family_default = {"recurrent": {"name": "rmsprop_tf", "lr": 1e-4}}
    specs = group_specs(groups, {"default": {"name": "sgd", "lr": 0.1}, "recurrent": {"lr": 0.2}}, family_default)
    assert specs["recurrent"] == {"name": "rmsprop_tf", "lr": 0.2}


@pytest.mark.parametrize("value", [-0.01, 0, math.nan, math.inf, "fast", True, [1e-3]])
def test_every_optimizer_refuses_a_bad_learning_rate_by_its_key(value):
    from ortholab.models.optimizers import OPTIMIZERS, check_optimizer_spec

    for name in OPTIMIZERS:
        with pytest.raises(ConfigError, match=r"model\.optimizers\.other\.lr = .* must be a positive finite"):
            check_optimizer_spec({"name": name, "lr": value}, "model.optimizers.other")


@pytest.mark.parametrize(
    "spec, expected",
    [
        ({"name": "adam", "betas": [2, 0.9]}, "Invalid beta parameter"),
        ({"name": "sgd", "lr": 0.1, "momentum": math.nan}, "model.optimizers.g.momentum = nan must be finite"),
        ({"name": "adam", "eps": "x"}, "optimizer 'adam' refuses it"),
        ({"name": "rmsprop_tf", "decay": 5}, "model.optimizers.g.decay = 5 must lie in [0, 1]"),
        ({"name": "sgd", "lr": 0.1, "nesterov": True}, "Nesterov momentum requires a momentum"),
        ({"name": "adamw", "weight_decay": -1}, "Invalid weight_decay value"),
    ],
)
def test_an_optimizer_option_torch_refuses_is_named_before_training(spec, expected):
    from ortholab.models.optimizers import check_optimizer_spec

    with pytest.raises(ConfigError) as refused:
        check_optimizer_spec(spec, "model.optimizers.g")
    assert expected in str(refused.value) and "model.optimizers.g" in str(refused.value)


def test_a_class_path_outside_the_allow_list_is_refused_before_its_module_is_imported(tmp_path, monkeypatch, capsys):
    from ortholab.aliases import check_class_path, config_import_refused
    from ortholab.cli.main import main

    sys.modules.pop("this", None)  # `import this` prints the Zen of Python: an import side effect to watch for
    assert config_import_refused("this.Zen") and config_import_refused("builtins.print")
    assert config_import_refused("lightning.pytorch.callbacks.LambdaCallback")
    assert not config_import_refused("datamodules.CopyingTask")
    assert not config_import_refused("lightning.pytorch.callbacks.ModelCheckpoint")
    with pytest.raises(ConfigError, match="run 3's data.class_path = 'this.Zen' is not a class OrthoLab configs"):
        check_class_path("this.Zen", "run 3's data.class_path")
    (tmp_path / "this.yaml").write_text("data:\n  class_path: this.Zen\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", DEMO, "--config", str(tmp_path / "this.yaml"), "--db", f"sqlite:///{tmp_path}/s.db"])
    captured = capsys.readouterr()
    assert exit_info.value.code == 2 and "this" not in sys.modules
    assert "Beautiful is better" not in captured.out + captured.err
    assert "data.class_path names 'this.Zen', which a config may not import" in captured.err


def test_the_users_own_modules_are_allowed_by_their_environment_only(monkeypatch):
    from ortholab.aliases import allowed_config_imports

    monkeypatch.setenv("ORTHOLAB_CONFIG_MODULES", "mytasks, mylab.callbacks")
    assert allowed_config_imports()[-2:] == ("mytasks", "mylab.callbacks")
    monkeypatch.setenv("ORTHOLAB_CONFIG_MODULES", "jsonargparse")  # would let a config change the policy itself
    with pytest.raises(ConfigError, match="ORTHOLAB_CONFIG_MODULES holds 'jsonargparse'"):
        allowed_config_imports()


def test_a_budget_too_small_for_any_model_names_the_smallest_that_works():
    from ortholab.models.sizing import hidden_size_for_budget, parameter_count

    smallest = parameter_count("lstm", 1, 10, 9)
    with pytest.raises(ConfigError, match=f"hidden_size 1 already has {smallest} parameters .* >= {smallest}"):
        hidden_size_for_budget("lstm", smallest - 1, 10, 9)
    assert hidden_size_for_budget("lstm", smallest, 10, 9) == 1  # that budget works
    with pytest.raises(ConfigError, match=r"hidden_size 16 already has \d+ parameters"):  # 16 reflections need 16
        hidden_size_for_budget("ornn", 10, 2, 1, {"num_reflections": 16})


@pytest.mark.parametrize(
    "host, warns",
    [
        ("0.0.0.0", True),
        ("::", True),
        ("192.168.1.5", True),
        ("myhost.example", True),
        ("127.0.0.1", False),
        ("localhost", False),
        ("::1", False),
        ("127.0.0.2", False),
    ],
)
def test_the_dashboard_warns_when_it_listens_beyond_this_machine(sentinel, monkeypatch, capsys, host, warns):
    from ortholab.app import launch

    class Execed(Exception):
        pass

    def fake_execve(path, argv, env):
        raise Execed(argv, env)

    db, _ = sentinel
    monkeypatch.setattr(launch.os, "execve", fake_execve)
    monkeypatch.setattr(launch, "check_port_free", lambda host, port: None)  # no address of this machine: the warning
    with pytest.raises(Execed) as execed:
        launch.run_dashboard(db, port=8599, host=host)
    argv, env = execed.value.args
    err = capsys.readouterr().err
    assert ("no authentication" in err) is warns
    assert env["ORTHOLAB_DB"] == db and not [a for a in argv if "store.db" in a]  # the URL in its environment only


def test_print_config_masks_the_database_password(capsys):
    from ortholab.cli.main import main

    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", DEMO, "--db", f"postgresql://u:{SECRET}@h/db", "--print_config"])
    out = capsys.readouterr().out
    assert exit_info.value.code == 0 and "db: postgresql://u:***@h/db" in out and SECRET not in out
    assert not isinstance(sys.stdout, __import__("ortholab.db.masking", fromlist=["x"]).MaskedStream)


def test_a_default_optimizer_that_no_group_takes_is_refused_by_its_key():
    """`--model.optimizers.default.lr 0.5` on a config whose every group names its optimizer changed nothing, in
    silence (and a resume wrote the dead entry into the run's config.yaml)."""
    from ortholab.models.optimizers import group_specs

    groups = {"recurrent": [], "other": []}
    named = {"recurrent": {"name": "sgd", "lr": 0.1}, "other": {"name": "adam", "lr": 0.1}}
    with pytest.raises(ConfigError, match=r"^model\.optimizers\.default: no parameter group takes it, as "):
        group_specs(groups, {"default": {"lr": 0.5}, **named})
    specs = group_specs(groups, {"default": {"name": "sgd", "lr": 0.5}, **named, "other": {"lr": 0.2}})
    assert specs["other"] == {"name": "sgd", "lr": 0.2}  # a group without a name stands on default: it takes it
    assert group_specs(groups, {"default": {"name": "sgd", "lr": 0.5}, "recurrent": named["recurrent"]})["other"]
