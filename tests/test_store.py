"""The run store on a real SQLite file: writes, reads, aggregates, errors, and two processes sharing it."""

import json
import math
import os
import sqlite3
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
from sqlalchemy import event

from ortholab.db import Store, StoreError, default_db_url, runs_root
from ortholab.db.store import StoreMissing, store_url

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def db_path(tmp_path):
    return tmp_path / "runs" / "ortholab.db"


@pytest.fixture
def store(db_path):
    store = Store(f"sqlite:///{db_path}")
    yield store
    store.close()


def run_python(code: str) -> str:
    """Run `code` in a fresh interpreter at the repository root and return its stdout."""
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_round_trip(store):
    run_id = store.create_run(
        name="scornn-copy",
        family="scornn",
        task="copy",
        config={"model": {"hidden_size": 8}},
        main_metric="val/loss",
        baseline=0.095,
        run_dir="/tmp/r",
        world_size=2,
        tags=["smoke", "cpu"],
        hostname="box",
    )
    store.log_params(run_id, {"model": {"hidden_size": 8}, "lr": 1e-3})
    store.log_metrics(run_id, {"val/loss": 0.5, "val/acc": 0.25}, step=10, epoch=1, wall_time=123.5)
    store.update_run(run_id, parameter_count=1234, info={"groups": {"A": 64}})
    store.set_status(run_id, "finished")

    run = store.get_run(run_id)
    assert (run.name, run.family, run.task, run.status, run.stage) == (
        "scornn-copy",
        "scornn",
        "copy",
        "finished",
        "fit",
    )
    assert run.config == {"model": {"hidden_size": 8}}
    assert run.params == {"model.hidden_size": 8, "lr": 1e-3}
    assert (run.run_dir, run.hostname, run.world_size, run.tags) == ("/tmp/r", "box", 2, ("smoke", "cpu"))
    assert (run.parameter_count, run.info, run.baseline) == (1234, {"groups": {"A": 64}}, 0.095)
    assert (run.steps, run.best, run.last) == (10, 0.5, 0.5)
    for stamp in (run.created_at, run.ended_at, run.heartbeat_at):
        assert stamp.tzinfo is not None and stamp.utcoffset().total_seconds() == 0
    assert run.created_at <= run.heartbeat_at and run.ended_at <= run.heartbeat_at
    assert abs((datetime.now(timezone.utc) - run.created_at).total_seconds()) < 60
    assert store.metric_keys(run_id) == ["val/acc", "val/loss"]
    [point] = store.metric_series(run_id, "val/acc")
    assert (point.step, point.epoch, point.value, point.wall_time) == (10, 1, 0.25, 123.5)


def test_sqlite_settings(store, db_path):
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    with store._engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30000
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL


def test_status_transitions(store):
    run_id = store.create_run(name="r")
    assert store.get_run(run_id).status == "running" and store.get_run(run_id).ended_at is None
    store.set_status(run_id, "interrupted")
    assert store.get_run(run_id).ended_at is not None
    store.set_status(run_id, "running")  # resumed
    assert store.get_run(run_id).ended_at is None
    with pytest.raises(StoreError, match="'done'"):
        store.set_status(run_id, "done")


def test_list_runs_aggregates(store):
    low = store.create_run(name="low", main_metric="val/loss", main_metric_mode="min")
    for step, value in [(0, 3.0), (1, 1.0), (3, 2.5), (2, 2.0)]:  # logged out of step order
        store.log_metrics(low, {"val/loss": value}, step=step)
    store.log_metrics(low, {"train/loss": 9.0}, step=7)
    high = store.create_run(name="high", main_metric="val/acc", main_metric_mode="max")
    for step, value in [(0, 0.2), (1, 0.9), (2, 0.5)]:
        store.log_metrics(high, {"val/acc": value, "val/loss": -value}, step=step)
    diverged = store.create_run(name="diverged", main_metric="val/loss")
    store.log_metrics(diverged, {"val/loss": 4.0}, step=0)
    store.log_metrics(diverged, {"val/loss": math.nan}, step=1)
    empty = store.create_run(name="empty", main_metric="val/loss")

    runs = store.list_runs()
    assert [r.id for r in runs] == [empty, diverged, high, low]  # newest first
    by_name = {r.name: r for r in runs}
    assert (by_name["low"].steps, by_name["low"].best, by_name["low"].last) == (7, 1.0, 2.5)
    assert (by_name["high"].steps, by_name["high"].best, by_name["high"].last) == (2, 0.9, 0.5)
    assert by_name["diverged"].best == 4.0 and math.isnan(by_name["diverged"].last)  # NaN kept, not best
    assert (by_name["empty"].steps, by_name["empty"].best, by_name["empty"].last) == (0, None, None)


def test_list_runs_is_one_query(store):
    for i in range(5):
        run_id = store.create_run(name=f"r{i}", main_metric="m")
        store.log_metrics(run_id, {"m": float(i)}, step=i)
    statements = []
    event.listen(store._engine, "before_cursor_execute", lambda *args: statements.append(args[2]))
    assert len(store.list_runs()) == 5
    assert len([s for s in statements if s.lstrip().upper().startswith("SELECT")]) == 1


def test_to_dict_is_json(store):
    run_id = store.create_run(name="r", tags=["a"])
    store.set_status(run_id, "failed")
    summary = store.list_runs()[0].to_dict()
    detail = store.get_run(run_id).to_dict()
    assert json.loads(json.dumps(summary))["tags"] == ["a"]
    assert datetime.fromisoformat(summary["ended_at"]).tzinfo is not None
    assert set(summary) < set(detail) and {"config", "params", "hostname"} <= set(detail)


def test_params_flatten_and_upsert(store):
    run_id = store.create_run(name="r")
    store.log_params(
        run_id, {"model": {"hidden_size": 8, "act": {"name": "modrelu"}}, "dims": (1, 2), "path": Path("/x")}
    )
    store.log_params(run_id, {"model.hidden_size": 16, "lr": 0.1})  # same key again: the new value wins
    assert store.get_run(run_id).params == {
        "model.hidden_size": 16,
        "model.act.name": "modrelu",
        "dims": [1, 2],
        "path": "/x",
        "lr": 0.1,
    }


def test_artifacts(store):
    run_id = store.create_run(name="r")
    blob = bytes(range(256)) * 4
    audio = store.add_artifact(run_id, "audio", "clip.wav", step=5, epoch=0, data=blob, media_type="audio/wav")
    eig = store.add_artifact(run_id, "eigenvalues", "W", step=5, meta={"real": [1.0, -1.0], "imag": [0.0, 0.0]})
    assert [a.id for a in store.artifacts(run_id)] == [audio, eig]
    [record] = store.artifacts(run_id, kind="eigenvalues")
    assert (record.name, record.step, record.meta) == ("W", 5, {"real": [1.0, -1.0], "imag": [0.0, 0.0]})
    assert not hasattr(record, "data")  # bytes only on request
    assert store.artifact_data(audio) == blob
    assert store.artifact_data(eig) == b""
    with pytest.raises(StoreError, match="999"):
        store.artifact_data(999)


def test_bad_requests_name_the_problem(store):
    run_id = store.create_run(name="r")
    with pytest.raises(StoreError, match="colour"):
        store.update_run(run_id, colour="red")
    with pytest.raises(StoreError, match="id"):
        store.update_run(run_id, id=5)
    with pytest.raises(StoreError, match="serve"):  # (predict is a stage: `ortholab predict`)
        store.update_run(run_id, stage="serve")
    for write in (
        lambda: store.log_metrics(404, {"m": 1.0}, step=0),
        lambda: store.log_params(404, {"a": 1}),
        lambda: store.set_status(404, "failed"),
        lambda: store.get_run(404),
    ):
        with pytest.raises(StoreError, match="404"):
            write()


def test_written_in_child_read_here(db_path):
    url = f"sqlite:///{db_path}"
    out = run_python(
        "from db import Store\n"
        f"s = Store({url!r})\n"
        "r = s.create_run(name='child', main_metric='loss')\n"
        "s.log_metrics(r, {'loss': 2.0}, step=0)\n"
        "s.log_metrics(r, {'loss': 1.5}, step=1)\n"
        "s.set_status(r, 'finished')\n"
        "print(r)\n"
    )
    run = Store(url).get_run(int(out))
    assert (run.name, run.status, run.steps, run.best, run.last) == ("child", "finished", 1, 1.5, 1.5)


def test_written_here_read_in_child(store):
    run_id = store.create_run(name="parent", main_metric="acc", main_metric_mode="max")
    store.log_metrics(run_id, {"acc": 0.75}, step=4)
    out = run_python(
        f"import json\nfrom db import Store\nprint(json.dumps(Store({store.url!r}).get_run({run_id}).to_dict()))\n"
    )
    run = json.loads(out)
    assert (run["name"], run["status"], run["steps"], run["best"]) == ("parent", "running", 4, 0.75)


@pytest.mark.parametrize("round_", range(3))
def test_processes_opening_a_new_database_at_once(db_path, round_):
    """Several ranks or sweep jobs starting together must not race to create the tables, nor to switch the new file
    to WAL: SQLite can refuse a switch at once, 'database is locked', without busy_timeout's wait (the suite failed
    so once on a loaded 2-core machine, and 5 of 90 openings in a loop after it) until the store's
    switch_to_wal (db/sqlite_files.py) waited and looked again. Three rounds, as the race is rare."""
    code = (
        f"from db import Store\ns = Store({f'sqlite:///{db_path}'!r})\n"
        "s.log_metrics(s.create_run(name='p'), {'m': 1.0}, step=3)\n"
    )
    children = [subprocess.Popen([sys.executable, "-c", code], cwd=REPO_ROOT, stderr=subprocess.PIPE) for _ in range(6)]
    errors = [child.communicate(timeout=120)[1].decode() for child in children]
    assert [child.returncode for child in children] == [0] * 6, errors
    assert [r.steps for r in Store(f"sqlite:///{db_path}").list_runs()] == [3] * 6


def test_parent_is_a_file(tmp_path):
    (tmp_path / "afile").write_text("not a directory")
    path = tmp_path / "afile" / "ortholab.db"
    with pytest.raises(StoreError) as error:
        Store(f"sqlite:///{path}")
    assert str(path) in str(error.value) and "--db" in str(error.value)


def test_path_is_a_directory(tmp_path):
    with pytest.raises(StoreError, match="is a directory") as error:
        Store(f"sqlite:///{tmp_path}")
    assert str(tmp_path) in str(error.value) and "--db" in str(error.value)


def test_read_only_database_fails_at_open(store, db_path):
    with pytest.raises(StoreError, match="readonly") as error:
        Store(f"sqlite:///file:{db_path}?mode=ro&uri=true")
    assert "--db" in str(error.value)


def test_unknown_driver():
    with pytest.raises(StoreError) as error:
        Store("nosuchdb://x")
    assert "nosuchdb://x" in str(error.value) and "--db" in str(error.value)


def test_password_is_masked():
    with pytest.raises(StoreError) as error:
        Store("postgresql+nosuchdriver://me:s3cret@localhost/runs")
    assert "s3cret" not in str(error.value) and "me:***@localhost" in str(error.value)


@pytest.mark.parametrize(
    "url, secret",
    [
        ("postgresql+nosuchdriver://me:p@ss@localhost/runs", "ss@localhost"),  # an unencoded '@': all of it hidden
        ("postgresql+nosuchdriver://me@localhost/runs?password=s3cret", "s3cret"),
        ("postgresql+psycopg://me:s3cret@localhost:port/runs", "s3cret"),  # a port that is not a number
    ],
)
def test_store_and_upgrade_errors_never_show_a_password(url, secret):
    """Library users see the same masked URL as the CLI (issue 22): Store(...), Store.upgrade(...), display_url."""
    for attempt in (lambda: Store(url), lambda: Store.upgrade(url)):
        with pytest.raises(StoreError) as error:
            attempt()
        assert secret not in str(error.value) and "***" in str(error.value)


def test_default_db_url(tmp_path, monkeypatch):
    monkeypatch.setenv("ORTHOLAB_DB", "sqlite:////elsewhere/x.db")
    assert default_db_url() == "sqlite:////elsewhere/x.db"
    monkeypatch.delenv("ORTHOLAB_DB")
    monkeypatch.chdir(tmp_path)
    assert default_db_url() == f"sqlite:///{tmp_path}/runs/ortholab.db"
    Store().close()
    assert (tmp_path / "runs" / "ortholab.db").is_file()


def test_default_db_url_under_the_runs_root(tmp_path, monkeypatch):
    """$ORTHOLAB_RUNS moves the default store out of the working directory (issue 24: a fresh checkout keeps the
    runs); `~` expands; $ORTHOLAB_DB, when set, still names the store."""
    monkeypatch.delenv("ORTHOLAB_DB", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ORTHOLAB_RUNS", str(tmp_path / "kept"))
    assert runs_root() == tmp_path / "kept"
    assert default_db_url() == f"sqlite:///{tmp_path}/kept/ortholab.db"
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("ORTHOLAB_RUNS", "~/ortholab-runs")
    assert default_db_url() == f"sqlite:///{tmp_path}/home/ortholab-runs/ortholab.db"
    monkeypatch.setenv("ORTHOLAB_RUNS", "relative/root")  # relative to the working directory, as ./runs is
    assert default_db_url() == f"sqlite:///{tmp_path}/relative/root/ortholab.db"
    monkeypatch.setenv("ORTHOLAB_DB", "sqlite:////elsewhere/x.db")
    assert default_db_url() == "sqlite:////elsewhere/x.db"


def test_a_sqlite_url_under_the_home_folder_is_expanded_not_made_a_folder_named_tilde(tmp_path, monkeypatch):
    """`--db sqlite:///~/x/ortholab.db` made ./~/x/ortholab.db (walk-through 3): a folder that `rm -rf ~` removes
    the wrong way. It is the home folder's, as $ORTHOLAB_RUNS=~/... already was."""
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    store = Store("sqlite:///~/x/ortholab.db")
    assert store.url == f"sqlite:///{tmp_path}/home/x/ortholab.db" and (tmp_path / "home/x/ortholab.db").is_file()
    assert not (tmp_path / "cwd" / "~").exists()
    store.close()
    assert Store("sqlite:///~/x/ortholab.db", access="read").list_runs() == []
    assert Store.upgrade("sqlite:///~/x/ortholab.db") is not None


def test_not_a_url(tmp_path, monkeypatch):
    """A scheme without the URL's // (sqlite:runs.db) is a mistyped URL, not a file named so: refused, nothing made."""
    monkeypatch.chdir(tmp_path)
    for typo in ("sqlite:runs.db", "postgresql:/host/runs"):
        with pytest.raises(StoreError, match="not a database URL.*its path.*--db"):
            Store(typo)
    assert list(tmp_path.iterdir()) == []  # nothing created


def test_a_path_names_a_sqlite_file_as_its_absolute_url(tmp_path, monkeypatch):
    """`--db docs/results/x/runs.db`, as a user types it for an export: the file at that path, from the current
    folder, with ~ expanded; a reader given a path that does not exist creates nothing."""
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    with pytest.raises(StoreMissing, match="does not exist") as missing:
        Store("exports/runs.db", access="read")
    assert "docs/results/" not in str(missing.value)
    with pytest.raises(StoreMissing, match="exports under docs/results/ come with OrthoLab's repository, not with"):
        Store("docs/results/scurnn_figure5/runs.db", access="read")  # from the wheel, outside a checkout
    assert list((tmp_path / "cwd").iterdir()) == []
    (tmp_path / "cwd/kept").mkdir()
    (tmp_path / "cwd/kept/ortholab.db").write_bytes(b"")
    said = rf"\(\S+/ortolab.db\); did you mean {tmp_path}/cwd/kept/ortholab.db\? Else check --db"
    with pytest.raises(StoreMissing, match=said):
        Store("kept/ortolab.db", access="read")  # a typo beside the store: named, as a mistyped key is
    (tmp_path / "cwd/kept/ortholab.db").unlink()
    (tmp_path / "cwd/kept").rmdir()
    store = Store("exports/runs.db")
    assert store.url == f"sqlite:///{tmp_path}/cwd/exports/runs.db" and (tmp_path / "cwd/exports/runs.db").is_file()
    store.close()
    assert Store("~/runs.db").url == f"sqlite:///{tmp_path}/home/runs.db" and (tmp_path / "home/runs.db").is_file()
    monkeypatch.chdir(tmp_path)  # the same file from elsewhere, by another path and by its URL
    assert Store("cwd/exports/runs.db", access="read").store_id == Store(store.url, access="read").store_id
    assert store.created and not Store(store.url).created  # made once, then opened
    assert store_url("sqlite:////abs/x.db") == "sqlite:////abs/x.db"
    assert store_url("postgresql+psycopg://u@h/runs") == "postgresql+psycopg://u@h/runs"


def test_arrays_round_trip_through_artifacts(tmp_path):
    import numpy as np

    from ortholab.db.artifacts import EIGENVALUES, NPY_MEDIA_TYPE, array_from_bytes, array_to_bytes

    store = Store(f"sqlite:///{tmp_path / 'a.db'}")
    run_id = store.create_run(name="r")
    eig = np.exp(1j * np.linspace(0, 3, 7))
    art = store.add_artifact(
        run_id,
        EIGENVALUES,
        "W",
        step=3,
        data=array_to_bytes(eig),
        media_type=NPY_MEDIA_TYPE,
        meta={"near_minus_one": 0, "tolerance": 1e-3},
    )
    back = array_from_bytes(store.artifact_data(art))
    assert back.dtype == np.complex128 and np.array_equal(back, eig)


def test_bulk_reads_match_the_per_run_reads(store):
    import numpy as np

    a = store.create_run(name="a", main_metric="m")
    b = store.create_run(name="b", main_metric="m")
    empty = store.create_run(name="empty")
    store.log_params(a, {"model": {"hidden_size": 8}, "lr": 0.1})
    store.log_metrics(a, {"m": 3.0, "n": math.nan}, step=0, epoch=0)
    store.log_metrics(a, {"m": 2.0}, step=5)
    store.log_metrics(a, {"m": 2.5}, step=2, epoch=1)  # logged out of step order
    store.log_metrics(b, {"m": 7.0}, step=1)
    ids = [a, b, empty]
    assert store.params_of(ids) == {r: store.get_run(r).params for r in ids}
    assert store.metric_keys_of(ids) == {r: store.metric_keys(r) for r in ids}
    last = store.last_values(ids, ["m", "n"])
    assert last[(a, "m")] == 2.0 == store.get_run(a).last and last[(b, "m")] == 7.0
    assert math.isnan(last[(a, "n")]) and set(last) == {(a, "m"), (a, "n"), (b, "m")}
    columns = store.metric_columns(a, "m")
    series = store.metric_series(a, "m")
    assert columns["step"].tolist() == [p.step for p in series] == [0, 2, 5]
    assert columns["value"].tolist() == [p.value for p in series]
    np.testing.assert_array_equal(columns["epoch"], [0, 1, np.nan])  # no epoch recorded: NaN
    assert math.isnan(store.metric_columns(a, "n")["value"][0])


def test_a_reader_that_cannot_reach_its_store_is_not_told_to_find_a_writable_one():
    """Readers never write: their fix is the URL, not a writable database or folder."""
    unreachable = "postgresql+psycopg://reader@127.0.0.1:9/runs"
    with pytest.raises(StoreError) as refused:
        Store(unreachable, access="read")
    assert "it must name a store this machine can read" in str(refused.value) and "writable" not in str(refused.value)
    with pytest.raises(StoreError) as refused:
        Store(unreachable)  # a writer: where to write instead
    assert "writable" in str(refused.value)


def test_the_store_refuses_arguments_it_cannot_take_naming_them(tmp_path):
    """A bad-input audit of the library: Store(5) and get_run('abc') were errors without the argument's name,
    set_tags(add="abc") stored the tags a, b and c, truncate_run(1, -1) silently deleted every point."""
    import pathlib

    from ortholab.db import frames

    with pytest.raises(TypeError, match="url must be a SQLite file's path or an SQLAlchemy URL string, got 5"):
        Store(5)
    store = Store(pathlib.Path(tmp_path / "runs.db"))  # a path, as frames take it
    run = store.create_run(name="r")
    store.log_metrics(run, {"val/loss": 0.5}, step=3)
    for call, error, says in (
        (lambda: store.get_run("abc"), TypeError, "run_id must be an int (a run's id), got 'abc'"),
        (lambda: store.get_run(1.5), TypeError, "run_id must be an int"),
        (lambda: store.set_status(run, "bogus"), ValueError, "Invalid status 'bogus'"),
        (lambda: store.update_run(run, bogus=1), ValueError, "Unknown run field(s) ['bogus']"),
        (lambda: store.set_tags(run, add="abc"), TypeError, "add must be a list of tags, got 'abc'"),
        (lambda: store.set_tags(run, add=[""]), ValueError, "add: a tag is a non-empty string, got ''"),
        (lambda: store.log_params(run, "x"), TypeError, "params must be a mapping"),
        (lambda: store.log_metrics(run, {"val/loss": 1.0}, step=-5), ValueError, "step must be an int >= 0"),
        (lambda: store.truncate_run(run, -1), ValueError, "from_step must be an int >= 0"),
        (lambda: frames.metrics(run, keys=5, db=store.url), TypeError, "keys must be a metric's name or a list"),
    ):
        with pytest.raises(error) as raised:
            call()
        assert says in str(raised.value), raised.value
    assert [p.value for p in store.metric_series(run, "val/loss")] == [0.5] and store.get_run(run).tags == ()
    with pytest.raises(StoreError):  # the command line's handlers still catch it as the store's error
        store.set_status(run, "bogus")


def test_a_read_only_store_folder_and_a_file_that_is_no_store_are_said_as_such(tmp_path, monkeypatch):
    """A bad-input audit: a writer on a read-only folder read "unable to open database file" alone (SQLite's -wal and
    -shm files go beside the store); `db upgrade` of a text file said "file is not a database." and no more."""
    store = Store(f"sqlite:///{tmp_path / 'runs.db'}")
    monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != tmp_path)  # as on a read-only mount
    said = str(store._error("unable to open database file"))
    assert f"(its folder {tmp_path} is read-only here: SQLite writes its -wal and -shm files there)" in said
    monkeypatch.undo()
    (tmp_path / "notes.db").write_text("hello\n")
    with pytest.raises(StoreError, match="file is not a database; it is no SQLite database: nothing was changed"):
        Store.upgrade(f"sqlite:///{tmp_path / 'notes.db'}")
