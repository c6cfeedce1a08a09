"""Hostile input to the commands (issue 47): each case ends with exit code 2 and one `ortholab: error:` line naming
the file, key or value and the fix; no traceback; readers create and change no store; what is recorded stays.

Cases that would hang or exhaust memory without their check (a YAML alias bomb, 10^8 layers, more CPU processes
than cores) run as their own CLI process under a time and memory bound; the rest call `main([...])` here."""

import errno
import functools
import os
import resource
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch
import yaml
from alembic import command
from sqlalchemy import create_engine, inspect, text
from test_cli import DEMO, REPO, TINY
from test_hostile_input import refusal, sentinel, snapshot  # noqa: F401 - sentinel: the shared store fixture
from test_predict import ortholab as cli  # `ortholab ARGS` in this process: (exit code, stdout, stderr)

from ortholab.cli.main import main
from ortholab.db import Store
from ortholab.db.lease import current_owner
from ortholab.db.schema_version import alembic_config, head_revision

QUIET = ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]


def one_line(code, err, *expected) -> str:
    """The one error line of a refused command, after checking exit code 2, no traceback and the parts expected."""
    assert code == 2 and "Traceback" not in err, err[-3000:]
    (line,) = [line for line in err.splitlines() if line.startswith("ortholab: error:")]
    assert all(part in line for part in expected), line
    return line


def bounded(args, cwd, timeout=240, memory_gib=8):
    """`ortholab ARGS` as its own process (and process group) under a memory and time bound; a process still
    running at the timeout is killed with its children and reported as exit code None."""

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (memory_gib * 2**30, memory_gib * 2**30))

    process = subprocess.Popen(
        [sys.executable, "-c", "from ortholab.cli.main import main; main()", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=limit,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # the group this test started: DDP workers included
        out, err = process.communicate()
        return subprocess.CompletedProcess(args, None, out, err + f"\n(still running after {timeout} s)")
    return subprocess.CompletedProcess(args, process.returncode, out, err)


def written(folder: Path) -> list[Path]:
    """The files under `folder` (none where it does not exist)."""
    return [p for p in folder.rglob("*") if p.is_file()] if folder.exists() else []


# ---------------------------------------------------------------------------------------------------------------------
# A recorded run to predict with (a copy of its store per test).
@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("trained")
    db = f"sqlite:///{folder / 'runs.db'}"
    main(["fit", "--config", DEMO, *TINY, "--db", db, "--runs_dir", str(folder / "runs"), "--name", "kept"])
    (run,) = Store(db).list_runs()
    return db, Store(db).get_run(run.id)


@pytest.fixture
def fresh(trained, tmp_path):
    db, source = trained
    copy = tmp_path / "runs.db"
    with sqlite3.connect(db.removeprefix("sqlite:///")) as original, sqlite3.connect(copy) as duplicate:
        original.backup(duplicate)
    return f"sqlite:///{copy}", source


# readers never create a store ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", [["predict", "--run", "2"], ["evaluate-audio", "1"], ["report"]])
def test_a_reader_on_a_mistyped_store_says_it_does_not_exist_and_creates_nothing(
    tmp_path, monkeypatch, capsys, command
):
    monkeypatch.chdir(tmp_path)
    typo = tmp_path / "rnus" / "ortholab.db"
    line = one_line(*cli(capsys, *command, "--db", f"sqlite:///{typo}")[::2], "does not exist", str(typo))
    assert "--db" in line
    assert list(tmp_path.iterdir()) == []  # no store, no folder


def test_report_without_a_store_names_the_way_to_list_the_rows_anyway(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    line = one_line(*cli(capsys, "report", "--db", f"sqlite:///{tmp_path / 'none.db'}")[::2], "does not exist")
    assert "ortholab report --all" in line and list(tmp_path.iterdir()) == []


# predict ------------------------------------------------------------------------------------------------------------
def test_predict_on_a_run_that_kept_no_best_checkpoint_uses_its_last(tmp_path, monkeypatch, capsys):
    """A fit that ended before its first validation keeps only last.ckpt: `predict --run` takes it and says so;
    `--checkpoint best` still names what the folder holds."""
    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    short = ["--trainer.max_steps", "2", "--trainer.val_check_interval", "50", *QUIET]
    main(["fit", "--config", DEMO, *TINY, *short, "--db", db, "--runs_dir", str(tmp_path / "runs")])
    said = capsys.readouterr().out  # the fit says why it has no best value, and what changes that
    assert "No validation ran in its 2 steps (trainer.val_check_interval = 50)" in said
    assert "--trainer.val_check_interval validates sooner" in said
    by_epoch = ["--trainer.max_steps", "2", "--trainer.val_check_interval", "1.0", *QUIET, "--db", db]
    main(["fit", "--config", DEMO, *TINY, *by_epoch, "--trainer.check_val_every_n_epoch", "5"])
    said = capsys.readouterr().out  # every 5th epoch: that key is the one to lower, not the interval
    assert "(trainer.check_val_every_n_epoch = 5)" in said and "a smaller --trainer.check_val_every_n_epoch" in said
    main(["fit", "--config", DEMO, *TINY, *by_epoch, "--trainer.check_val_every_n_epoch", "1"])
    said = capsys.readouterr().out  # a fraction of an epoch: "smaller" would mean 0.5; steps are an int
    assert "--trainer.val_check_interval K (an int: every K steps) validates sooner" in said, said
    (listed, *_) = sorted(Store(db).list_runs(), key=lambda run: run.id)
    source = Store(db).get_run(listed.id)
    checkpoints = Path(source.run_dir) / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["last.ckpt"]
    code, out, err = cli(capsys, "predict", "--run", source.id, "--db", db, *QUIET)
    assert code == 0, err[-3000:]
    assert f"note: run {source.id} kept no best-step checkpoint" in err
    (run,) = [r for r in Store(db).list_runs() if r.stage == "predict"]
    assert Store(db).get_run(run.id).info["predict"]["checkpoint"] == str((checkpoints / "last.ckpt").resolve())
    code, out, err = cli(capsys, "predict", "--run", source.id, "--checkpoint", "best", "--db", db, *QUIET)
    assert code == 2 and f"run {source.id} holds last.ckpt and no best-step file; give --checkpoint last" in err


def test_predict_on_a_run_still_training_uses_its_last_checkpoint(fresh, tmp_path, monkeypatch, capsys):
    """Training deletes best-step files as better ones are saved: here the moment predict starts."""
    import lightning.pytorch as pl

    monkeypatch.chdir(tmp_path)
    db, source = fresh
    writer = Store(db)
    writer.acquire_run(source.id, current_owner().token)  # a live process (this one) holds the run's lease
    writer.update_run(source.id, status="running")
    checkpoints = Path(source.run_dir) / "checkpoints"
    moved = []
    real_predict = pl.Trainer.predict

    @functools.wraps(real_predict)  # its signature: LightningCLI reads predict's options from it
    def predict_after_a_better_checkpoint(self, *args, **kwargs):
        for best in checkpoints.glob("best-step*.ckpt"):  # as training does when it saves a better one
            moved.append((best, best.rename(tmp_path / best.name)))
        return real_predict(self, *args, **kwargs)

    monkeypatch.setattr(pl.Trainer, "predict", predict_after_a_better_checkpoint)
    try:
        code, out, err = cli(capsys, "predict", "--run", source.id, "--db", db, *QUIET)
    finally:
        for original, aside in moved:  # the shared run folder, as it was
            aside.rename(original)
    assert code == 0, err[-3000:]
    assert f"run {source.id} is still being written" in err and "last.ckpt" in err
    (run,) = [r for r in Store(db).list_runs() if r.stage == "predict"]
    link = Store(db).get_run(run.id).info["predict"]
    assert link["checkpoint"] == str((checkpoints / "last.ckpt").resolve()) and Path(link["predictions"]).is_file()


def test_a_checkpoint_of_another_model_given_with_run_names_the_checkpoint_flag(fresh, tmp_path, monkeypatch, capsys):
    """`test --run ID --checkpoint OTHER.ckpt` holding another model was refused as `--ckpt_path OTHER.ckpt: ...`, a
    flag the user never typed (the command line turns --run and --checkpoint into --config and --ckpt_path)."""
    monkeypatch.chdir(tmp_path)
    db, source = fresh
    held = torch.load(Path(source.run_dir) / "checkpoints" / "last.ckpt", weights_only=True, map_location="cpu")
    held["hyper_parameters"]["hidden_size"] += 1  # another run's checkpoint: a model of another size
    torch.save(held, tmp_path / "OTHER.ckpt")
    before = snapshot(db)
    for subcommand in ("test", "validate", "predict"):
        code, _, err = cli(capsys, subcommand, "--run", source.id, "--db", db, "--checkpoint", "OTHER.ckpt", *QUIET)
        line = one_line(code, err, "the checkpoint holds a model with model.hidden_size")
        assert line.startswith("ortholab: error: --checkpoint OTHER.ckpt: the checkpoint holds"), line
        assert "--ckpt_path" not in line, line
    assert snapshot(db) == before  # nothing recorded, nothing changed


def test_a_folder_given_as_checkpoint_with_run_names_the_checkpoints_to_choose(fresh, tmp_path, monkeypatch, capsys):
    """`test --run ID --checkpoint FOLDER` (a run folder, its checkpoints/) said 'no such file' of a folder that is
    there; it names the .ckpt files in it, or, where it holds none, the run's own."""
    monkeypatch.chdir(tmp_path)
    db, source = fresh
    run_dir, empty = Path(source.run_dir), tmp_path / "empty"
    empty.mkdir()
    before = snapshot(db)
    code, _, err = cli(capsys, "test", "--run", source.id, "--db", db, "--checkpoint", run_dir, *QUIET)
    line = one_line(code, err, f"--checkpoint {run_dir}: a folder, not a checkpoint file; it holds checkpoints/")
    assert "checkpoints/last.ckpt" in line and f"(--checkpoint {run_dir / 'checkpoints'}/" in line, line
    assert "no such file" not in line and "--checkpoint last or best for run" in line, line
    code, _, err = cli(capsys, "predict", "--run", source.id, "--db", db, "--checkpoint", empty, *QUIET)
    line = one_line(code, err, f"--checkpoint {empty}: a folder, not a checkpoint file, and it holds no .ckpt file")
    assert f"run {source.id} holds " in line and "last.ckpt" in line and "no such file" not in line, line
    assert snapshot(db) == before  # nothing recorded, nothing changed


def test_a_checkpoint_chosen_twice_with_run_is_one_line_naming_both(fresh, tmp_path, monkeypatch, capsys):
    """`--run ID --checkpoint NAME --ckpt_path PATH` silently dropped --checkpoint, and `--run ID --config FILE`
    whose FILE holds `ckpt_path: X` silently evaluated the run's checkpoint instead of X: one line names both, to
    give one of them. The run's own stored config.yaml as --config is read as it is without --config."""
    monkeypatch.chdir(tmp_path)
    db, source = fresh
    stored, last = Path(source.run_dir) / "config.yaml", Path(source.run_dir) / "checkpoints" / "last.ckpt"
    before = snapshot(db)
    for subcommand in ("test", "validate", "predict"):
        code, _, err = cli(
            capsys, subcommand, "--run", source.id, "--db", db, "--checkpoint", "best", "--ckpt_path", last, *QUIET
        )
        one_line(code, err, f"--checkpoint best and --ckpt_path {last} both choose the checkpoint: give one")
    config = tmp_path / "evaluate.yaml"
    config.write_text(yaml.safe_dump({**yaml.safe_load(stored.read_text()), "ckpt_path": str(last)}))
    code, _, err = cli(capsys, "test", "--run", source.id, "--db", db, "--config", config, *QUIET)
    line = one_line(code, err, f"ckpt_path = {last} (in {config}) and --run {source.id} both choose the checkpoint")
    assert "drop one of them, the file's key (or set it to null) or --run" in line, line
    code, _, err = cli(capsys, "predict", "--run", source.id, "--db", db, "--config", config, "--checkpoint", "last")
    one_line(code, err, f"(in {config}) and --run {source.id} --checkpoint last both choose the checkpoint")
    for short in (["-c", config], [f"-c={config}"], [f"-c{config}"]):  # LightningCLI's -c: the file's key stood
        code, _, err = cli(capsys, "test", "--run", source.id, "--db", db, *short, *QUIET)
        one_line(code, err, f"ckpt_path = {last} (in {config}) and --run {source.id} both choose the checkpoint")
    assert snapshot(db) == before  # nothing recorded, nothing changed
    original = stored.read_text()  # a fit started from a checkpoint keeps it as its config.yaml's ckpt_path
    try:
        stored.write_text(yaml.safe_dump({**yaml.safe_load(original), "ckpt_path": str(tmp_path / "start.ckpt")}))
        code, _, err = cli(capsys, "validate", "--run", source.id, "--db", db, "--config", stored, *QUIET)
    finally:
        stored.write_text(original)
    assert code == 0, err[-3000:]  # the run's own config: its checkpoint is evaluated, as without --config


def test_a_copy_of_the_runs_own_config_with_run_is_not_a_second_checkpoint(fresh, tmp_path, monkeypatch, capsys):
    """A copy of a run's stored config.yaml (its folder on another machine, as the refusal of `--run ID` there says:
    `give copies of them (--config FILE --checkpoint PATH)`) holds the checkpoint its fit started from as ckpt_path:
    not a checkpoint chosen for this command, so it was wrongly refused as one chosen twice."""
    monkeypatch.chdir(tmp_path)
    db, source = fresh
    stored, last = Path(source.run_dir) / "config.yaml", Path(source.run_dir) / "checkpoints" / "last.ckpt"
    start = str(tmp_path / "start.ckpt")  # a fit started from it (`fit --ckpt_path start.ckpt`) records it so
    Store(db, access="write").update_run(source.id, config={**Store(db).get_run(source.id).config, "ckpt_path": start})
    copy = tmp_path / "copy.yaml"
    copy.write_text(yaml.safe_dump({**yaml.safe_load(stored.read_text()), "ckpt_path": start}))
    code, _, err = cli(capsys, "validate", "--run", source.id, "--db", db, "--config", copy, "--checkpoint", last)
    assert code == 0, err[-3000:]  # the checkpoint given is evaluated, as before the refusal
    copy.write_text(yaml.safe_dump({**yaml.safe_load(stored.read_text()), "ckpt_path": str(last)}))
    code, _, err = cli(capsys, "validate", "--run", source.id, "--db", db, "--config", copy, *QUIET)
    one_line(code, err, f"ckpt_path = {last} (in {copy}) and --run {source.id} both choose the checkpoint")


def test_a_full_disk_while_writing_predictions_is_one_line_for_predict_and_leaves_no_part_file(
    fresh, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    db, source = fresh
    before = snapshot(db)

    def save_half_then_fail(stream, **arrays):
        stream.write(b"PK\x03\x04" + bytes(4096))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(np, "savez", save_half_then_fail)
    code, _, err = cli(capsys, "predict", "--run", source.id, "--db", db, "--runs_dir", tmp_path / "runs", *QUIET)
    line = one_line(code, err, "no space left on the device writing", "predictions-test.npz", "ortholab predict")
    assert "--resume" not in line and "ortholab fit" not in line  # not the remedy of a training run
    assert [p for p in tmp_path.rglob("*") if p.name.endswith(".part")] == []
    after = snapshot(db)
    assert {run: after[run] for run in before} == before  # what was recorded is kept


def damaged_store(folder: Path) -> tuple[str, Path]:
    """A store holding one run whose schema text carries a byte that is not UTF-8 (a flipped bit on disk)."""
    path = folder / "damaged.db"
    store = Store(f"sqlite:///{path}")
    store.create_run(name="kept")
    store.close()
    with sqlite3.connect(path) as connection:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(path.read_bytes())
    at = data.index(b"(", data.index(b"CREATE TABLE runs"))
    data[at] = 0xFF
    path.write_bytes(bytes(data))
    return f"sqlite:///{path}", path


@pytest.mark.parametrize("command", [["predict", "--run", "1"], ["runs"], ["evaluate-audio", "1"]])
def test_a_store_with_damaged_bytes_is_one_line_naming_the_file(tmp_path, monkeypatch, capsys, command):
    monkeypatch.chdir(tmp_path)
    url, path = damaged_store(tmp_path)
    content = path.read_bytes()
    line = one_line(*cli(capsys, *command, "--db", url)[::2], str(path), "damaged", "backup")
    assert "UnicodeDecodeError" not in line and path.read_bytes() == content  # nothing written into it


def test_a_file_that_never_was_a_store_is_not_called_damaged(tmp_path, monkeypatch, capsys):
    """`--db` naming a YAML file said "file is not a database; restore it from a backup": the user named the
    wrong file, which no backup mends. A URL in the 'postgres://' form some hosts print is named with the fix."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "space.yaml").write_text("model.hidden_size: [4, 8]\n")
    line = one_line(*cli(capsys, "runs", "--db", f"sqlite:///{tmp_path / 'space.yaml'}")[::2], "space.yaml")
    assert "no SQLite database at all" in line and "they name another file" in line and "backup" not in line
    line = one_line(*cli(capsys, "runs", "--db", "postgres://u@h/db")[::2], "postgresql+psycopg://USER@HOST/DB")


def test_a_run_id_that_is_no_number_is_one_line(tmp_path, monkeypatch, capsys):
    """argparse printed a usage block under the program name 'ortholab' before its error. (`fit --resume` takes a
    run's name too: tests/test_resume.py.)"""
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(capsys, "predict", "--run", "abc")
    line = one_line(code, err, "argument --run: invalid int value: 'abc'", "`ortholab predict --help`")
    assert err.strip() == line  # no usage block before it


@pytest.mark.parametrize(
    "command",
    [
        ["runs", "show", "{id}"],
        ["runs", "tag", "{id}", "x"],
        ["runs", "delete", "{id}", "--yes"],
        ["predict", "--run", "{id}"],
        ["test", "--run", "{id}"],
        ["fit", "--resume", "{id}"],
        ["evaluate-audio", "{id}"],
    ],
    ids=lambda command: "-".join(c for c in command if not c.startswith(("{", "-"))),
)
@pytest.mark.parametrize("run_id", [str(2**64), str(-(2**63) - 1)], ids=["past-2^63", "below-minus-2^63"])
def test_a_run_id_past_what_a_store_holds_is_no_such_run(fresh, tmp_path, monkeypatch, capsys, command, run_id):
    """An id no 64-bit column holds raised SQLite's OverflowError (a traceback, exit 1) in every command that looks a
    run up; it names no run, as an id past the newest does."""
    db, _ = fresh
    monkeypatch.chdir(tmp_path)
    before = Store(db).list_runs()
    code, _, err = cli(capsys, *[c.replace("{id}", run_id) for c in command], "--db", db)
    line = one_line(code, err, run_id, f"in {db}", "`ortholab runs")
    assert "no run with id" in line.lower() or "no run in" in line  # (fit --resume reads a negative one as a name too)
    assert Store(db).list_runs() == before


@pytest.mark.parametrize(
    "args, expected",
    [
        (["runs", "--db", ""], "--db '': give the store's file or URL"),  # `--db "$DB"`, DB unset: not the default
        (["fit", "--config", "configs/demo/copying_scornn.yaml", "--db="], "--db '': give the store's file or URL"),
        (["predict", "--run", "1", "--predict_split", "tst", "--db", "{tmp}/p.db"], None),  # KeyError: 'tst'
        (["sweep", "--config", "c.yaml", "--space", "s.yaml", "--trials", "1", "--seed", "-1"], "--seed -1: give"),
        (["fit", "--config", DEMO, "--trainer.max_steps", "0"], "trainer.max_steps = 0 (on the command line) trains"),
        (["fit", "--config", DEMO, "--tags", ",,"], "--tags ',,' names no label"),
        (["reproduce", "cpu_checks", "--rows", ",", "--estimate"], "--rows ',' names no row"),
        (["reproduce", "--resume", "--stale_minutes", "nan"], "--stale_minutes nan: give a number of minutes >= 0"),
    ],
)
def test_review_inputs_that_leaked_a_traceback_or_meant_the_default_store(
    tmp_path, monkeypatch, capsys, args, expected
):
    """A bad-input audit: each is one line and exit 2; no store is made."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ORTHOLAB_RUNS", str(tmp_path / "runs"))
    if "predict" in args:  # a run to predict with, ended before its first validation (a note on its checkpoint)
        db = f"sqlite:///{tmp_path / 'p.db'}"
        fit = [
            "fit",
            "--config",
            DEMO,
            *TINY,
            "--trainer.max_steps",
            "2",
            "--db",
            db,
            "--runs_dir",
            str(tmp_path / "f"),
        ]
        main(fit)
        capsys.readouterr()
        expected = "--predict_split 'tst': give train, val or test"
    code, _, err = cli(capsys, *[a.replace("{tmp}", str(tmp_path)) for a in args])
    line = one_line(code, err, expected)
    assert not (tmp_path / "runs").exists()
    if "predict" in args:  # refused before its checkpoint was chosen and noted
        assert err.strip() == line, err


NO_HOME = "~nosuchuser-ortholab"  # a ~user this machine has no home for: Path.expanduser's RuntimeError traceback


@pytest.mark.parametrize(
    "args, env, said",
    [
        (["runs", "--db", f"{NO_HOME}/x.db"], {}, "--db"),
        (["runs", "--db", f"sqlite:///{NO_HOME}/x.db"], {}, "--db"),
        (["runs"], {"ORTHOLAB_RUNS": f"{NO_HOME}/x"}, "$ORTHOLAB_RUNS"),
        (["runs"], {"ORTHOLAB_DB": f"{NO_HOME}/x.db"}, "$ORTHOLAB_DB"),  # not --db: none was given
        (["runs"], {"ORTHOLAB_DB": f"sqlite:///{NO_HOME}/x.db"}, "$ORTHOLAB_DB"),
        (["fit", "--config", DEMO, *TINY, "--runs_dir", f"{NO_HOME}/x"], {}, "--runs_dir"),
        (["data", "list"], {"ORTHOLAB_DATA": f"{NO_HOME}/x"}, "$ORTHOLAB_DATA"),
    ],
    ids=["db-path", "db-url", "runs-env", "db-env", "db-env-url", "runs-dir", "data-env"],
)
def test_a_home_folder_of_no_user_is_one_line_naming_where_it_was_given(tmp_path, monkeypatch, capsys, args, env, said):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ORTHOLAB_RUNS", str(tmp_path / "runs"))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code, _, err = cli(capsys, *args)
    line = one_line(code, err, f"{said} '", f"{NO_HOME[1:]}' on this machine; write ~/ for your own home folder")
    assert "RuntimeError" not in line
    assert not (tmp_path / "runs").exists() and not list(tmp_path.glob("~*"))  # nothing made, no folder named ~...


def test_a_runs_dir_given_as_home_is_put_in_as_a_shell_would(tmp_path, monkeypatch, capsys):
    """`--runs_dir '~/runs'` (quoted, or a config file's runs_dir) made a folder named ~ in the current one, where
    $ORTHOLAB_RUNS and --db put the home folder in."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    main(["fit", "--config", DEMO, *TINY, *QUIET, "--db", db, "--runs_dir", "~/runs"])
    (run,) = Store(db).list_runs()
    folder = Path(Store(db).get_run(run.id).run_dir)
    assert folder.is_relative_to(tmp_path / "home" / "runs") and not (tmp_path / "~").exists()


def test_home_path_puts_in_a_home_and_names_where_a_home_it_cannot_find_was_given(monkeypatch):
    from ortholab.errors import ConfigError, home_path

    monkeypatch.setenv("HOME", "/home/someone")
    assert home_path("~/runs", "--runs_dir") == Path("/home/someone/runs")
    assert home_path("runs/~x", "--runs_dir") == Path("runs/~x")  # only a leading ~ is a home
    with pytest.raises(ConfigError, match=r"^--runs-dir '~nosuchuser-ortholab/x': ~nosuchuser-ortholab names no "):
        home_path(f"{NO_HOME}/x", "--runs-dir")
    monkeypatch.delenv("HOME")
    monkeypatch.setattr(os.path, "expanduser", lambda path: path)  # no HOME and no password entry: as it is
    with pytest.raises(ConfigError, match=r"^data.path '~/x': ~ names no home folder \(HOME is not set\); write"):
        home_path("~/x", "data.path")


# bench -------------------------------------------------------------------------------------------------------------
def test_bench_refuses_a_missing_data_file_instead_of_measuring_stand_ins(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    missing = tmp_path / "JSB_Chorales.mat"
    code, out, err = cli(capsys, "bench", "--suite", "music-eval", "--param", f"path={missing}", "--quick")
    one_line(code, err, f"--param path={missing}: no such file or folder")
    assert "validation pieces" not in out  # nothing was measured


def test_bench_refuses_a_device_the_machine_lacks_for_a_suite(capsys):
    code, out, err = cli(capsys, "bench", "--suite", "scurnn-complex", "--device", "cuda:99", "--quick")
    one_line(code, err, "--device cuda:99", "--device cpu")


# db upgrade -------------------------------------------------------------------------------------------------------
def store_at_0001(url: str) -> None:
    """A store as OrthoLab wrote it at schema revision 0001, holding a run and its points."""
    engine = create_engine(url)
    with engine.begin() as connection:
        command.upgrade(alembic_config(connection), "0001")
        connection.execute(
            text(
                "INSERT INTO runs (name, status, stage, created_at, heartbeat_at, main_metric_mode, "
                "hostname, world_size, tags) VALUES ('old', 'finished', 'fit', '2026-01-01', "
                "'2026-01-01', 'min', 'h', 1, '[]')"
            )
        )
        for step, value in [(0, 3.0), (1, 2.0)]:
            connection.execute(
                text("INSERT INTO metrics (run_id, key, step, value, wall_time) VALUES (1, 'val/loss', :s, :v, 0)"),
                {"s": step, "v": value},
            )
    engine.dispose()


def upgrade_twice_at_once(url: str) -> list:
    """Two `ortholab db upgrade` at once: each is held, once it reads the store's revision, until the other has
    read it too (or 3 s passed: a migration lock keeps the second waiting before it reads anything)."""
    import ortholab.db.schema_version as schema_version

    barrier, real_upgrade, codes = threading.Barrier(2), schema_version.command.upgrade, []

    def upgrade_together(config, revision, *args, **kwargs):
        try:
            barrier.wait(timeout=3)
        except threading.BrokenBarrierError:
            pass
        return real_upgrade(config, revision, *args, **kwargs)

    def one():
        try:
            main(["db", "upgrade", "--db", url])
            codes.append(0)
        except SystemExit as done:
            codes.append(done.code)
        except Exception as err:  # a traceback would be printed: recorded as a failure
            codes.append(repr(err))

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(schema_version.command, "upgrade", upgrade_together)
        threads = [threading.Thread(target=one) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
    return codes


def check_upgraded(url: str, capsys) -> None:
    store = Store(url)  # opens: at head, whole
    assert [(p.step, p.value) for p in store.metric_series(1, "val/loss")] == [(0, 3.0), (1, 2.0)]
    run = store.create_run(name="after")
    store.log_metrics(run, {"val/loss": 1.0}, step=0)
    capsys.readouterr()
    main(["db", "upgrade", "--db", url])  # and a later upgrade has nothing left to do
    assert f"{head_revision()} -> {head_revision()}" in capsys.readouterr().out


def test_two_upgrades_at_once_migrate_a_sqlite_store_once(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'old.db'}"
    store_at_0001(url)
    codes = upgrade_twice_at_once(url)
    out, err = capsys.readouterr()
    assert codes == [0, 0], err[-3000:]
    assert out.count(f"0001 -> {head_revision()}") == 1 and out.count(f"{head_revision()} -> {head_revision()}") == 1
    check_upgraded(url, capsys)


def test_two_upgrades_at_once_migrate_a_postgres_store_once(capsys):
    from postgres import postgres_server, unavailable_reason, wait_until_ready

    if unavailable_reason():
        pytest.skip(unavailable_reason())
    with postgres_server() as url:
        wait_until_ready(url)
        store_at_0001(url)
        codes = upgrade_twice_at_once(url)
        out, err = capsys.readouterr()
        assert codes == [0, 0], err[-3000:]
        assert out.count(f"0001 -> {head_revision()}") == 1
        check_upgraded(url, capsys)


def test_a_store_left_half_migrated_by_an_older_upgrade_is_upgraded(tmp_path, capsys):
    """What two racing upgrades left before the migration lock: revision 0001 with 0002's column and 0003's index."""
    url = f"sqlite:///{tmp_path / 'half.db'}"
    store_at_0001(url)
    engine = create_engine(url)
    with engine.begin() as connection:
        connection.execute(text("ALTER TABLE runs ADD COLUMN reason TEXT"))
        connection.execute(text("CREATE UNIQUE INDEX ux_metrics_run_key_step ON metrics (run_id, key, step)"))
    engine.dispose()
    code, out, err = cli(capsys, "db", "upgrade", "--db", url)
    assert code == 0 and f"0001 -> {head_revision()}" in out, err[-3000:]
    assert "ux_metrics_run_key_step" in {i["name"] for i in inspect(create_engine(url)).get_indexes("metrics")}
    check_upgraded(url, capsys)


# configs -----------------------------------------------------------------------------------------------------------
def alias_bomb(path: Path) -> Path:
    """'Billion laughs': nine aliases of nine aliases ... 9^9 strings from a few hundred bytes."""
    lines = ["a: &a [" + ", ".join(['"lol"'] * 9) + "]"]
    for previous, name in zip("abcdefgh", "bcdefghi"):
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{previous}"] * 9) + "]")
    path.write_text("\n".join(lines) + "\nmodel:\n  hidden_size: 8\n")
    return path


def test_a_yaml_alias_bomb_is_refused_before_it_is_expanded(sentinel, tmp_path):
    db, _ = sentinel
    before = snapshot(db)
    bomb = alias_bomb(tmp_path / "laughs.yaml")
    done = bounded(["fit", "--config", str(bomb), "--db", db], tmp_path, timeout=300)
    refusal(done, f"--config {bomb}: its YAML aliases (*name) expand to more than", "write the values out")
    assert snapshot(db) == before


def test_an_alias_that_holds_itself_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "loop.yaml").write_text("model: &m\n  family_args: *m\n")
    one_line(*cli(capsys, "fit", "--config", tmp_path / "loop.yaml")[::2], "loop.yaml", "the alias *m refers to")


# settings beyond the machine -----------------------------------------------------------------------------------
HUGE = 10**12
SETTINGS = [  # (the flags, parts of the error line)
    (["--data.num_workers", "-1"], ["data.num_workers", "-1", "--data.num_workers 0"]),
    (["--data.batch_size", str(HUGE)], [f"data.batch_size = {HUGE}", "set --data.batch_size to at most"]),
    (
        ["--data.batch_size", "41"],
        ["data.batch_size = 41 (on the command line) is larger than the split", "data.train_size = 40"],
    ),
    (["--data.eval_batch_size", str(HUGE)], [f"data.eval_batch_size = {HUGE}"]),
    (
        ["--data.train_size", str(HUGE)],
        [f"data.train_size = {HUGE} (on the command line) sequences need", "lower --data.train_size"],
    ),
    (
        ["--data.val_size", str(HUGE)],
        [f"data.val_size = {HUGE} (on the command line) sequences need", "lower --data.val_size"],
    ),
]


@pytest.mark.parametrize("flags, expected", SETTINGS, ids=[s[0][0] + "=" + s[0][1][:6] for s in SETTINGS])
def test_a_setting_beyond_the_machine_is_one_line_naming_the_key(
    sentinel, tmp_path, monkeypatch, capsys, flags, expected
):
    db, _ = sentinel
    before = snapshot(db)
    monkeypatch.chdir(tmp_path)
    code, _, err = cli(capsys, "fit", "--config", DEMO, *TINY, *flags, "--db", db, "--runs_dir", tmp_path / "runs")
    line = one_line(code, err, *expected)
    assert "hidden_size" not in line  # the key that asked for it, not another
    assert snapshot(db) == before and written(tmp_path / "runs") == []


@pytest.mark.parametrize(
    "flags, expected",
    [
        (["--model.num_layers", "100000000"], ["model.num_layers = 100000000", "at most 1024"]),
        (
            ["--trainer.accelerator", "cpu", "--trainer.devices", str((os.cpu_count() or 1) + 1)],
            [
                f"trainer.devices = {(os.cpu_count() or 1) + 1} (on the command line) starts",
                f"this machine has {os.cpu_count() or 1} CPU core",
                f"--trainer.devices {os.cpu_count() or 1} or fewer",
            ],
        ),
    ],
    ids=["layers", "cpu-processes"],
)
def test_a_setting_that_would_hang_is_refused_before_anything_starts(sentinel, tmp_path, flags, expected):
    db, _ = sentinel
    before = snapshot(db)
    done = bounded(
        ["fit", "--config", DEMO, *TINY, *flags, "--db", db, "--runs_dir", str(tmp_path / "runs")],
        tmp_path,
        timeout=120,
    )
    refusal(done, *expected)
    assert snapshot(db) == before and written(tmp_path / "runs") == []


def test_a_speech_recording_without_samples_is_named(sentinel, tmp_path, monkeypatch, capsys):
    from test_speech import fsdd_tree

    db, _ = sentinel
    before = snapshot(db)
    root = fsdd_tree(tmp_path / "recordings", speakers=("ann", "bob"))
    empty = root / "3_ann_10.wav"  # a training recording (FSDD indices 10-49)
    soundfile.write(str(empty), np.zeros(0, dtype=np.float32), 8000, subtype="PCM_16")
    monkeypatch.chdir(tmp_path)
    code, _, err = cli(
        capsys,
        "fit",
        "--config",
        REPO / "configs" / "demo" / "speech_fsdd_scornn.yaml",
        "--db",
        db,
        "--data.path",
        root,
        "--data.download",
        "false",
        "--data.cache_dir",
        "null",
        "--data.recordings_per_utterance",
        "2",
        "--model.hidden_size",
        "8",
        "--model.family_args.rho",
        "2",
        "--trainer.max_steps",
        "1",
        "--trainer.callbacks",
        "[]",
        "--runs_dir",
        tmp_path / "runs",
        *QUIET,
    )
    line = one_line(code, err, f"{empty} holds no samples", "remove it")
    after = snapshot(db)
    assert {run: after[run] for run in before} == before  # what was recorded is kept
    for run in set(after) - set(before):  # audio is read once the run exists: it ends failed, with this reason
        assert Store(db).get_run(run).status == "failed" and "holds no samples" in Store(db).get_run(run).reason, line


# run names ----------------------------------------------------------------------------------------------------------
def test_a_run_name_in_any_script_is_a_folder_name(sentinel, tmp_path, monkeypatch, capsys):
    db, _ = sentinel
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(
        capsys, "fit", "--config", DEMO, *TINY, "--name", "ρ-rün-✓", "--db", db, "--runs_dir", tmp_path / "runs"
    )
    assert code == 0, err[-3000:]
    (run,) = [r for r in Store(db).list_runs() if r.name == "ρ-rün-✓"]
    assert Path(Store(db).get_run(run.id).run_dir).parent.name == "ρ-rün-✓"


@pytest.mark.parametrize("name", ["ρ/rün", "..", "tab\tname", "a b", "_ρ", "é" * 101])
def test_a_run_name_that_is_not_one_folder_name_is_still_refused(tmp_path, monkeypatch, capsys, name):
    monkeypatch.chdir(tmp_path)
    code, _, err = cli(capsys, "fit", "--config", DEMO, *TINY, "--name", name, "--db", f"sqlite:///{tmp_path}/s.db")
    one_line(code, err, "a run name is one folder name")
    assert not (tmp_path / "s.db").exists() or Store(f"sqlite:///{tmp_path}/s.db").list_runs() == []


# exit codes and summary lines ---------------------------------------------------------------------------------------
def test_the_docs_list_every_commands_exit_codes():
    from ortholab.cli import COMMANDS

    docs = (REPO / "docs" / "troubleshooting.md").read_text()
    assert "## Exit codes" in docs
    section = docs.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    commands = set(COMMANDS)
    assert commands >= {"fit", "predict", "runs", "sweep", "reproduce", "report", "db", "bench", "dashboard"}
    missing = [c for c in commands if f"`{c}`" not in section]
    assert missing == [], f"docs/troubleshooting.md's exit-code table names no `{missing[0]}`: add it to its rows"
    for code in ("| 0 |", "| 1 |", "| 2 |"):
        assert code in section
    assert "`sweep: N trials done, N failed, N pruned`" in section
    assert "`reproduce: N done, N failed, N skipped`" in section  # ortholab/cli/reproduce_rows.py's summary()


def test_a_sweep_ends_with_a_summary_line_a_script_reads(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "space.yaml").write_text("model.hidden_size: [6]\n")
    code, out, err = cli(
        capsys,
        "sweep",
        "--config",
        DEMO,
        "--space",
        tmp_path / "space.yaml",
        "--trials",
        "1",
        "--db",
        "s.db",  # a file's path, as DB_HELP says: Optuna and the trial get its URL
        *TINY,
    )
    assert code == 0, err[-3000:]
    assert out.strip().splitlines()[-1] == "sweep: 1 trials done, 0 failed, 0 pruned"
    assert len(Store(f"sqlite:///{tmp_path / 's.db'}", access="read").list_runs()) == 1  # the trial's run, there


@pytest.mark.parametrize(
    "argv, own, passed_on",
    [
        (["--trainer.max_steps", "6", "--rows", "a"], ["--rows", "a"], ["--trainer.max_steps", "6"]),
        (["--model.family_args={rho: 4}", "--list"], ["--list"], ["--model.family_args={rho: 4}"]),
        (["t", "--model.family_args", "{rho: 4}", "--est"], ["t", "--est"], ["--model.family_args", "{rho: 4}"]),
        (["--model.optimizers.other.lr", "-0.01", "t"], ["t"], ["--model.optimizers.other.lr", "-0.01"]),
        (["--trainer.fast_dev_run", "--seeds", "3"], ["--seeds", "3"], ["--trainer.fast_dev_run"]),
        (["--", "--rows"], ["--", "--rows"], []),
    ],
)
def test_reproduce_passes_on_every_flag_it_does_not_define_with_its_value(argv, own, passed_on):
    """`--key value` and `--key=value` alike, whatever the value holds (argparse alone read the 6 of
    `--trainer.max_steps 6` as the table, and a value with a space as a positional)."""
    from ortholab.cli import reproduce
    from ortholab.cli.common import OneLineParser

    parser = OneLineParser(prog="ortholab reproduce")
    reproduce.add_arguments(parser)
    assert parser.split_passed_on(argv) == (own, passed_on)


def test_a_passed_on_value_with_a_space_is_not_read_as_the_table(tmp_path, capsys):
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    main(["reproduce", "--model.family_args", "{rho: 4}", "--list", "--db", db])  # was: no published table '{rho: 4}'
    assert "scornn_table1" in capsys.readouterr().out


@pytest.mark.parametrize(
    "space, flags, expected",
    [
        ("model.family_args.rho: [4, 8]\n", ["--name", "a b/c"], "--name 'a b/c': the trials' runs are named"),
        ("model.hidden_size: [-3, 8]\n", [], "model.hidden_size = -3 must be a positive integer"),
    ],
)
def test_a_sweep_refuses_before_any_trial_what_each_trial_would_fail_on(
    tmp_path, monkeypatch, capsys, space, flags, expected
):
    """A bad-input audit: these started a trial that failed, leaving a failed trial in the study."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "space.yaml").write_text(space)
    db = tmp_path / "sweep.db"
    args = ["sweep", "--config", DEMO, "--space", "space.yaml", "--trials", "1", "--db", str(db), *flags]
    code, _, err = cli(capsys, *args)
    one_line(code, err, expected)
    assert not db.exists()
