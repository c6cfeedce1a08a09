"""The evidence ships with the numbers (issue 48): `report --export DIR` writes DIR/runs.db, from which the same
report.md and report.csv are written again byte for byte, and which the dashboard opens without writing to it;
the export's files are whole or absent (issue 47)."""

import csv
import errno
import hashlib
import os
import pathlib
import re
import shutil
import sqlite3
import stat

import pytest
from test_reproduce import TABLE, _write

from ortholab.cli.main import main
from ortholab.db import Store, published


def _store(tmp_path, monkeypatch):
    """Two seeds of the MNIST row (with a test run each), one run of the copying row."""
    folder = tmp_path / "published"
    folder.mkdir()
    _write(folder, TABLE)
    monkeypatch.setattr(published, "PUBLISHED_DIR", folder)
    monkeypatch.setattr(published, "CHECKS_DIR", tmp_path / "no-checks")
    table = published.load_tables()["demo_table9"]
    mnist, copy, _ = table.rows
    db = f"sqlite:///{tmp_path / 'source.db'}"
    store = Store(db)
    for seed, accs in ((1, [0.5, 0.93, 0.95]), (2, [0.6, 0.94, 0.92])):
        fit = store.create_run(
            name="m",
            family="scornn",
            task="mnist",
            tags=[mnist.tag, f"seed:{seed}"],
            main_metric="val/acc",
            main_metric_mode="max",
        )
        store.update_run(fit, info={"code": [{"commit": "abc1234"}], "command": f"ortholab reproduce --seeds {seed},"})
        for step, acc in enumerate(accs):
            store.log_metrics(fit, {"val/acc": acc, "train/loss": 1 - acc}, step=step * 100)
        store.set_status(fit, "finished")
        test = store.create_run(name="m", stage="test", tags=[mnist.tag, f"seed:{seed}"], main_metric="test/acc")
        store.log_metrics(test, {"test/acc": accs[-1] - 0.01}, step=200)
        store.set_status(test, "finished")
    other = store.create_run(name="unrelated", family="lstm", task="mnist")  # not behind any number
    store.set_status(other, "finished")
    run = store.create_run(
        name="c", family="lstm", task="copying", tags=[copy.tag], main_metric="val/loss", baseline=0.5
    )
    store.log_metrics(run, {"val/loss": 0.3}, step=0)
    store.set_status(run, "finished")
    return db


def _copying_run_with_a_folder(tmp_path, monkeypatch, status: str, more: dict[str, bytes] | None = None):
    """_store's copying run given a run folder holding last.ckpt ('step 0') and `more` checkpoints, and `status`:
    (db, store, run)."""
    db = _store(tmp_path, monkeypatch)
    store = Store(db)
    (copying_run,) = [r for r in store.list_runs() if r.task == "copying"]
    run_dir = tmp_path / "runs" / "store-0a1b2c3d" / "c" / str(copying_run.id)
    (run_dir / "checkpoints").mkdir(parents=True)
    for name, content in {"last.ckpt": b"step 0", **(more or {})}.items():
        (run_dir / "checkpoints" / name).write_bytes(content)
    store.update_run(copying_run.id, run_dir=str(run_dir), status=status)
    return db, store, copying_run


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_exported_store_writes_the_same_report_again(tmp_path, monkeypatch, capsys):
    db = _store(tmp_path, monkeypatch)
    main(["report", "demo_table9", "--db", db, "--export", str(tmp_path / "one")])
    exported = tmp_path / "one" / "runs.db"
    copy = Store(f"sqlite:///{exported}", access="read")
    assert sorted(r.id for r in copy.list_runs()) == [1, 2, 3, 4, 6]  # the runs behind the numbers, not run 5
    copy.close()
    monkeypatch.chdir(tmp_path)  # the export's store by its path, as the issue and docs/reproducing.md write it
    main(["report", "demo_table9", "--db", "one/runs.db", "--export", str(tmp_path / "two")])
    html = sorted(p.name for p in (tmp_path / "one").glob("*.html"))
    assert html  # the figure too: its plotly div id was random, so no two exports were the same file
    for name in ("report.md", "report.csv", *html):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes(), name
    figure = (tmp_path / "one" / html[0]).read_text()
    for line in {m for m in re.findall(r'"text":"(baseline [^"]+)"', figure)}:  # each panel's baseline drawn once
        assert figure.count(f'"text":"{line}"') == 1, line
    report = (tmp_path / "one" / "report.md").read_text()
    assert "2 seeds: 92.5 ± 2.1 (91–94)" in report  # each seed's test run: 94 and 91, in percent
    lines = (tmp_path / "one" / "report.csv").read_text().splitlines()
    (row,) = [r for r in csv.DictReader(lines) if r["kind"] == "row" and r["row"] == "mnist_scornn_n8"]
    assert row["n"] == "8" and row["seeds_n"] == "2"  # the hidden size, and the number of seeds
    seeds = [line for line in lines if ",seed,mnist_scornn_n8," in line]
    assert len(seeds) == 2 and all("abc1234" in line and "ortholab reproduce --seeds" in line for line in seeds)


def test_an_exports_store_is_read_as_it_is_and_refused_to_writers(tmp_path, monkeypatch, capsys):
    """`fit --resume ID --db DIR/runs.db` trained into an export's store, a committed file of evidence (and, on the
    machine that trained the run, into its live run folder). Writers are refused in one line pointing to `ortholab
    restore`; readers open it unchanged; a copy of the file under another name or beside no export.txt is a store."""
    db = _store(tmp_path, monkeypatch)
    main(["report", "demo_table9", "--db", db, "--export", str(tmp_path / "one")])
    exported = tmp_path / "one" / "runs.db"
    before = _digest(exported)
    capsys.readouterr()
    for argv in (["fit", "--resume", "6"], ["runs", "tag", "6", "mine"], ["runs", "delete", "6", "--yes"]):
        with pytest.raises(SystemExit) as refused:
            main([*argv, "--db", str(exported)])
        line = capsys.readouterr().err.strip()
        assert refused.value.code == 2 and f"it is the runs.db of an export ({exported.parent} holds its export" in line
        assert f"`ortholab restore {exported.parent}` makes a store of its runs to go on with" in line
    main(["runs", "--db", str(exported)])
    assert "a copy an export wrote on" in capsys.readouterr().out and _digest(exported) == before
    shutil.copyfile(exported, tmp_path / "one" / "mine.db")  # by hand, as docs/checkpoints.md restores it
    main(["runs", "tag", "6", "mine", "--db", str(tmp_path / "one" / "mine.db")])
    assert "mine" in Store(f"sqlite:///{tmp_path / 'one' / 'mine.db'}", access="read").get_run(6).tags


@pytest.mark.parametrize("read_only", [True, False], ids=["read-only-folder", "writable-folder"])
def test_the_dashboard_reads_the_exported_store_without_writing(tmp_path, monkeypatch, read_only):
    """In a read-only folder (a checkout's docs/results/ on a shared mount) and in a writable one (a clone), the
    store's file and its folder are the same after the dashboard read them: no journal, no WAL file, no change."""
    from streamlit.testing.v1 import AppTest
    from test_dashboard_app import APP_MAIN

    db = _store(tmp_path, monkeypatch)
    main(["report", "demo_table9", "--db", db, "--export", str(tmp_path / "out")])
    folder = tmp_path / "out"
    before = {p.name: _digest(p) for p in folder.iterdir()}
    if read_only:
        folder.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        monkeypatch.setenv("ORTHOLAB_DB", f"sqlite:///{folder / 'runs.db'}")
        at = AppTest.from_file(APP_MAIN, default_timeout=60)
        at.run()
        assert not at.exception and not at.error, (at.exception, at.error)
        assert any(
            "a copy an export wrote (" in c.value and "UTC): runs as they were then" in c.value for c in at.caption
        )
        assert {p.name: _digest(p) for p in folder.iterdir()} == before  # nothing written, nothing added
    finally:
        folder.chmod(stat.S_IRWXU)


@pytest.mark.parametrize(
    "where, says",
    [
        ("file", "is a file, not a folder"),
        ("under-file", "is a file, not a folder"),
        ("read-only", "ermission denied"),
    ],
)
def test_an_export_that_cannot_be_written_is_one_line(tmp_path, monkeypatch, capsys, where, says):
    db = _store(tmp_path, monkeypatch)
    if where == "read-only" and os.geteuid() == 0:  # root writes into read-only folders: the refusal it would get
        original = pathlib.Path.mkdir

        def refused(self, *args, **kwargs):
            if self.parent == tmp_path / "ro":
                raise PermissionError(errno.EACCES, "Permission denied", str(self))
            return original(self, *args, **kwargs)

        monkeypatch.setattr(pathlib.Path, "mkdir", refused)
    target = {"file": tmp_path / "afile", "under-file": tmp_path / "afile" / "sub", "read-only": tmp_path / "ro" / "x"}
    (tmp_path / "afile").write_text("keep me")
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro").chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        with pytest.raises(SystemExit) as stop:
            main(["report", "demo_table9", "--db", db, "--export", str(target[where])])
    finally:
        (tmp_path / "ro").chmod(stat.S_IRWXU)
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1 and says in err[0] and "--export" in err[0], err
    assert (tmp_path / "afile").read_text() == "keep me"


def test_a_full_disk_leaves_no_file_that_looks_whole(tmp_path, monkeypatch, capsys):
    import ortholab.app.export as export

    db = _store(tmp_path, monkeypatch)
    original = export._png

    def full(path, table, curves):  # the disk fills while the figure is written
        original(path, table, curves)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(export, "_png", full)
    with pytest.raises(SystemExit) as stop:
        main(["report", "demo_table9", "--db", db, "--export", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1 and "no space left" in err[0]
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert names == ["report.csv", "report.md"]  # written whole before it; no .part, no half figure


def test_exported_checkpoints_are_committable_while_run_folders_stay_ignored():
    """`report --export docs/results/X --with-checkpoints` writes checkpoints so that another machine goes on from
    them: git must not ignore them there (until 2026-11-28 `*.ckpt` did, and no export carried one), while the
    checkpoints of run folders stay ignored."""
    import shutil
    import subprocess

    repo = pathlib.Path(__file__).resolve().parents[1]
    if shutil.which("git") is None or not (repo / ".git").exists():
        pytest.skip("not a git checkout")

    def ignored(path: str) -> bool:
        return subprocess.run(["git", "check-ignore", "-q", path], cwd=repo).returncode == 0

    assert not ignored("docs/results/some_table/checkpoints/store-0a1b2c3d/some_table.row/7/checkpoints/last.ckpt")
    assert not ignored(
        "docs/results/some_table/checkpoints/store-0a1b2c3d/some_table.row/7/checkpoints/best-step9.ckpt"
    )
    assert ignored("runs/store-0a1b2c3d/copying_scornn/1/checkpoints/last.ckpt")
    assert ignored("elsewhere/model.ckpt")


def test_an_export_is_not_written_over_by_another_tables(tmp_path, monkeypatch, capsys):
    """`report OTHER --export DIR` into a table's export replaced its runs.db and report without a word."""
    monkeypatch.chdir(tmp_path)  # `--export ''` once wrote into the current folder
    db = _store(tmp_path, monkeypatch)
    folder = tmp_path / "out"
    main(["report", "demo_table9", "--db", db, "--export", str(folder)])
    main(["report", "demo_table9", "--db", db, "--export", str(folder)])  # the same table again: brought up to date
    before = {p.name: _digest(p) for p in folder.iterdir()}
    capsys.readouterr()
    published.PUBLISHED_DIR.joinpath("other_table.yaml").write_text(
        published.PUBLISHED_DIR.joinpath("demo_table9.yaml").read_text().replace("Table 9", "Table 10")
    )
    for argv in (
        ["report", "other_table", "--db", db, "--export", str(folder)],
        ["report", "demo_table9", "--db", db, "--export", ""],
    ):
        with pytest.raises(SystemExit) as refused:
            main(argv)
        assert refused.value.code == 2
    said = capsys.readouterr()
    first, second = said.err.strip().splitlines()
    assert f"--export {folder}: it holds the export of demo_table9; writing other_table there would replace it" in first
    assert "--export '': give the folder" in second
    assert said.out == ""  # refused before the report is printed (walk-through 9: the whole report, then the refusal)
    assert {p.name for p in folder.iterdir()} == set(before) and _digest(folder / "runs.db") == before["runs.db"]
    with pytest.raises(SystemExit) as refused:  # no row of it has a run: an export of nothing is not written
        main(["report", "other_table", "--db", db, "--export", str(tmp_path / "empty")])
    assert refused.value.code == 2 and not (tmp_path / "empty").exists()
    assert "--export " + str(tmp_path / "empty") + ": no row of other_table has a run in" in capsys.readouterr().err


def test_a_run_training_during_an_export_has_its_points_at_least_as_new_as_its_checkpoint(tmp_path, monkeypatch):
    """The checkpoints are copied before the store is read for the report and runs.db: a run that goes on training
    meanwhile resumes from the exported checkpoint with every point after it recorded again, not with a gap (until
    stop 71 runs.db was written first, and a live run's copied last.ckpt could be newer than its exported points)."""
    from ortholab.app import export

    db, store, copying_run = _copying_run_with_a_folder(tmp_path, monkeypatch, "interrupted")
    copy_resume_files = export.copy_resume_files

    def copy_then_train_on(source, run_ids, folder, **options):
        written = copy_resume_files(source, run_ids, folder, **options)
        store.log_metrics(copying_run.id, {"val/loss": 0.2}, step=50)  # the run trains on after the copy
        return written

    monkeypatch.setattr(export, "copy_resume_files", copy_then_train_on)
    main(["report", "demo_table9", "--db", db, "--export", str(tmp_path / "out"), "--with-checkpoints"])
    copied = tmp_path / "out" / "checkpoints" / "store-0a1b2c3d" / "c" / str(copying_run.id) / "checkpoints"
    assert (copied / "last.ckpt").read_bytes() == b"step 0"
    exported = Store(f"sqlite:///{tmp_path / 'out' / 'runs.db'}", access="read")
    assert [point.step for point in exported.metric_series(copying_run.id, "val/loss")] == [0, 50]


def test_a_run_whose_folder_is_on_another_machine_keeps_the_checkpoints_its_earlier_export_holds(tmp_path, monkeypatch):
    """A store restored from an export's runs.db on a new machine has no run folders: exported again with
    checkpoints, a stopped run's checkpoints from the earlier export stay in it (they were deleted, and with them
    the only copy of, e.g., a NaN run's checkpoint before its bad step), while a run that went on here is taken
    from its folder."""
    db, store, copying_run = _copying_run_with_a_folder(
        tmp_path, monkeypatch, "failed", {"nan-step7.ckpt": b"before the bad step"}
    )
    out = tmp_path / "out"
    main(["report", "demo_table9", "--db", db, "--export", str(out), "--with-checkpoints"])
    copied = out / "checkpoints" / "store-0a1b2c3d" / "c" / str(copying_run.id) / "checkpoints"
    assert sorted(p.name for p in copied.iterdir()) == ["last.ckpt", "nan-step7.ckpt"]
    moved = tmp_path / "elsewhere"
    run_dir = pathlib.Path(store.get_run(copying_run.id).run_dir)
    run_dir.rename(moved)  # the new machine: the run folder is not here
    main(["report", "demo_table9", "--db", db, "--export", str(out), "--with-checkpoints"])
    assert (copied / "nan-step7.ckpt").read_bytes() == b"before the bad step"
    assert (copied / "last.ckpt").read_bytes() == b"step 0" and not (out / "checkpoints.part").exists()
    moved.rename(run_dir)  # here again, and trained on: the folder's files are taken, not the earlier export's
    (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"step 9")
    (run_dir / "checkpoints" / "nan-step7.ckpt").unlink()
    main(["report", "demo_table9", "--db", db, "--export", str(out), "--with-checkpoints"])
    assert (
        sorted(p.name for p in copied.iterdir()) == ["last.ckpt"] and (copied / "last.ckpt").read_bytes() == b"step 9"
    )


def test_a_finished_run_keeps_only_its_nan_guards_checkpoint_and_config(tmp_path, monkeypatch):
    """A run that met a non-finite step and went on (eps raised on a resume) to finish: its NaN guard's checkpoint is
    the evidence a float64 recheck reads, kept by every export; its last and best ones are not needed by anyone."""
    db, store, copying_run = _copying_run_with_a_folder(
        tmp_path, monkeypatch, "finished", {"nan-step7.ckpt": b"before the bad step", "best-step5.ckpt": b"best"}
    )
    run_dir = pathlib.Path(store.get_run(copying_run.id).run_dir)
    (run_dir / "config.yaml").write_text("model: {}\n")
    out = tmp_path / "out"
    main(["report", "demo_table9", "--db", db, "--export", str(out), "--with-checkpoints"])
    copied = out / "checkpoints" / "store-0a1b2c3d" / "c" / str(copying_run.id)
    assert sorted(p.name for p in copied.rglob("*") if p.is_file()) == ["config.yaml", "nan-step7.ckpt"]
    run_dir.rename(tmp_path / "elsewhere")  # a new machine, the store restored from runs.db: the copy stays
    main(["report", "demo_table9", "--db", db, "--export", str(out), "--with-checkpoints"])
    assert (copied / "checkpoints" / "nan-step7.ckpt").read_bytes() == b"before the bad step"
    (tmp_path / "elsewhere").rename(run_dir)
    (run_dir / "checkpoints" / "nan-step7.ckpt").unlink()  # a finished run without one: nothing of it is copied
    main(["report", "demo_table9", "--db", db, "--export", str(out), "--with-checkpoints"])
    assert not copied.exists()


def test_a_checkpoint_rewritten_while_copied_is_copied_again(tmp_path, monkeypatch):
    """last.ckpt is rewritten in place by a live run: a copy that saw the file change is taken again."""
    import shutil

    from ortholab.db import extract

    source, target = tmp_path / "last.ckpt", tmp_path / "copy.ckpt"
    source.write_bytes(b"old")
    calls, copyfile = [], shutil.copyfile

    def copy_while_written(src, dst):
        calls.append(src)
        copyfile(src, dst)
        if len(calls) == 1:
            source.write_bytes(b"new, longer")  # the run saved again during the first copy
        return dst

    monkeypatch.setattr(extract.shutil, "copyfile", copy_while_written)
    extract.copy_settled(source, target)
    assert len(calls) == 2 and target.read_bytes() == b"new, longer"
    monkeypatch.setattr(extract.shutil, "copyfile", lambda src, dst: source.write_bytes(source.read_bytes() + b"."))
    with pytest.raises(ValueError, match=r"last.ckpt changed during each of 5 copies: stop the run writing it"):
        extract.copy_settled(source, target)


def test_a_best_checkpoint_replaced_while_exported_is_taken_as_the_new_one(tmp_path, monkeypatch):
    """A live run deletes its best-step file when it saves a better one: the export listed the old one, and its
    copy raised FileNotFoundError, reported as an unwritable export folder (review of stop 71)."""
    import shutil

    from ortholab.db import extract

    store = Store(f"sqlite:///{tmp_path / 'runs.db'}")
    run = store.create_run(name="c", family="lstm", task="copying")
    run_dir = tmp_path / "runs" / "store-0a1b2c3d" / "c" / str(run)
    (run_dir / "checkpoints").mkdir(parents=True)
    for name in ("last.ckpt", "best-step5.ckpt"):
        (run_dir / "checkpoints" / name).write_bytes(name.encode())
    store.update_run(run, run_dir=str(run_dir), status="interrupted")
    copyfile = shutil.copyfile

    def a_better_best_meanwhile(src, dst):
        if pathlib.Path(src).name == "best-step5.ckpt" and pathlib.Path(src).exists():
            pathlib.Path(src).unlink()
            (run_dir / "checkpoints" / "best-step9.ckpt").write_bytes(b"best-step9.ckpt")
        return copyfile(src, dst)

    monkeypatch.setattr(extract.shutil, "copyfile", a_better_best_meanwhile)
    written = extract.copy_resume_files(store, [run], tmp_path / "out")
    names = sorted(path.name for path in written)
    assert names == ["best-step9.ckpt", "last.ckpt"]  # the new best; no config.yaml in this run folder
    folder = tmp_path / "out" / "store-0a1b2c3d" / "c" / str(run) / "checkpoints"
    assert (
        sorted(p.name for p in folder.iterdir()) == names
        and (folder / "best-step9.ckpt").read_bytes() == b"best-step9.ckpt"
    )


def test_a_run_exported_while_it_trained_reads_as_it_was_then_not_as_silent(tmp_path, monkeypatch, capsys):
    """Run 31 of the scurnn_figure5 export read 'running (silent 1.0 h: killed?)' an hour after its export: a copy's
    runs write elsewhere, so their silence is measured at the moment the export copied them (Store.clock)."""
    from datetime import timedelta

    import ortholab.db.store as store_module
    from ortholab.db.progress import copy_note, runs_rows

    db = _store(tmp_path, monkeypatch)
    source = Store(db)
    (training,) = [run for run in source.list_runs() if run.name == "c"]
    source.set_status(training.id, "running")
    source.log_metrics(training.id, {"val/loss": 0.25}, step=100)  # a write: its heartbeat is now
    main(["report", "demo_table9", "--db", db, "--export", str(tmp_path / "one")])
    exported = f"sqlite:///{tmp_path / 'one' / 'runs.db'}"
    assert "| running |" in (tmp_path / "one" / "report.md").read_text()
    copy = Store(exported, access="read")
    assert copy.copied_at is not None and abs((copy.clock() - source.clock()).total_seconds()) < 60
    later = store_module.utcnow() + timedelta(hours=3)
    monkeypatch.setattr(store_module, "utcnow", lambda: later)  # three hours on
    capsys.readouterr()
    main(["report", "demo_table9", "--db", db, "--wide"])  # the live store: its silent run is named so
    assert "running (silent 3.0 h: killed?)" in capsys.readouterr().out
    main(["report", "demo_table9", "--db", exported, "--export", str(tmp_path / "two")])  # its copy: as then
    html = sorted(p.name for p in (tmp_path / "one").glob("*.html"))
    assert html  # the figure too: its plotly div id was random, so no two exports were the same file
    for name in ("report.md", "report.csv", *html):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes(), name
    figure = (tmp_path / "one" / html[0]).read_text()
    for line in {m for m in re.findall(r'"text":"(baseline [^"]+)"', figure)}:  # each panel's baseline drawn once
        assert figure.count(f'"text":"{line}"') == 1, line
    (row,) = [row for row in runs_rows(exported) if row["name"] == "c"]
    assert row["status"] == "running" and "silent" not in row
    assert copy_note(exported).startswith(f"a copy an export wrote on {copy.copied_at:%Y-%m-%d %H:%M} UTC")
    assert copy_note(Store(exported, access="read")) == copy_note(exported) and copy_note(db) is None
    main(["runs", "show", str(row["id"]), "--db", exported])  # one run of the copy: as it was, and the note
    assert capsys.readouterr().out.splitlines()[-1] == copy_note(exported)
    # restored as a live store (checkpoints.md: cp DIR/runs.db $ORTHOLAB_RUNS/ortholab.db) and trained on: live again
    shutil.copy(tmp_path / "one" / "runs.db", tmp_path / "restored.db")
    restored = Store(f"sqlite:///{tmp_path / 'restored.db'}", access="write")
    restored.log_metrics(row["id"], {"val/loss": 0.2}, step=200)  # written three hours after the copy
    assert restored.frozen_at is None and copy_note(restored.url) is None
    monkeypatch.setattr(store_module, "utcnow", lambda: later + timedelta(hours=2))  # then killed, two hours on
    (row,) = [row for row in runs_rows(restored.url) if row["name"] == "c"]
    assert row["silent"] == "silent 2.0 h: killed?"


def test_an_export_without_analyses_says_so_where_a_page_would_show_them(tmp_path, monkeypatch):
    """Walk-through 9: the dashboard on an export said 'no eigenvalue snapshots recorded for this run' of runs that
    recorded them; the export had left them out (no --with-artifacts)."""
    from ortholab.app.snapshots import no_snapshot_note

    db = _store(tmp_path, monkeypatch)
    source = Store(db)
    (fit,) = [r for r in source.list_runs() if r.task == "copying"]
    source.add_artifact(fit.id, "eigenvalues", "eig", step=0, data=b"0")
    assert not source.copied_without_analyses  # the store that recorded them
    main(["report", "demo_table9", "--db", db, "--export", str(tmp_path / "bare")])
    main(["report", "demo_table9", "--db", db, "--export", str(tmp_path / "full"), "--with-artifacts"])
    bare = Store(f"sqlite:///{tmp_path / 'bare' / 'runs.db'}", access="read")
    full = Store(f"sqlite:///{tmp_path / 'full' / 'runs.db'}", access="read")
    assert bare.copied_without_analyses and not full.copied_without_analyses
    note = no_snapshot_note(bare.get_run(fit.id), "gradient-norm profiles", bare.copied_without_analyses)  # an LSTM
    assert "no gradient-norm profiles in this store, an export's copy written without the runs' analyses" in note
    assert "`ortholab report TABLE --export DIR --with-artifacts` copies them" in note
    bare.close(), full.close(), source.close()
    # an export from before copies recorded where they came from (scornn_figure2_seeds, 2026-11-28) is known by its
    # place, a runs.db beside its export.txt; the same file elsewhere is a store like any other
    legacy = sqlite3.connect(tmp_path / "bare" / "runs.db")
    legacy.execute("DELETE FROM store_info WHERE key IN ('copied_from', 'copied_at')")
    legacy.commit(), legacy.close()
    assert Store(f"sqlite:///{tmp_path / 'bare' / 'runs.db'}", access="read").copied_without_analyses
    shutil.copy(tmp_path / "bare" / "runs.db", tmp_path / "elsewhere.db")
    assert not Store(f"sqlite:///{tmp_path / 'elsewhere.db'}", access="read").copied_without_analyses


def test_an_export_never_writes_over_a_store_of_runs_nor_the_store_it_reads(tmp_path, monkeypatch, capsys):
    """Review: `report --export DIR` replaced DIR/runs.db when it was a store of its own (its runs lost) or the very
    store given as --db (turned into a frozen copy of itself)."""
    db = _store(tmp_path, monkeypatch)
    own, reading = tmp_path / "own", tmp_path / "reading"
    for folder in (own, reading):  # a user's store that happens to be called runs.db (whole: its WAL folded in)
        folder.mkdir()
        with sqlite3.connect(tmp_path / "source.db") as source, sqlite3.connect(folder / "runs.db") as copy:
            source.backup(copy)
    before = {path: _digest(path) for path in (own / "runs.db", reading / "runs.db")}
    capsys.readouterr()
    for argv, says in (
        (["--db", db, "--export", str(own)], f"--export {own}: {own / 'runs.db'} is a store of its own (6 runs)"),
        (["--db", f"sqlite:///{reading / 'runs.db'}", "--export", str(reading)], "is the store this report reads"),
    ):
        with pytest.raises(SystemExit) as refused:
            main(["report", "demo_table9", *argv])
        said = capsys.readouterr()
        assert refused.value.code == 2 and says in said.err and said.out == "", said.err
    assert all(_digest(path) == digest for path, digest in before.items())
    main(["report", "demo_table9", "--db", db, "--export", str(tmp_path / "out")])  # an export, then again: allowed
    main(["report", "demo_table9", "--db", db, "--export", str(tmp_path / "out")])


def test_an_export_written_without_a_checkout_says_its_commit_is_unknown(tmp_path, monkeypatch, capsys):
    """The first-hour review: from a wheel, export.txt said `commit ortholab 0.1.0`, a version under "commit"."""
    import ortholab.app.export as export

    db = _store(tmp_path, monkeypatch)
    monkeypatch.setattr(export, "code_version", lambda: {"ortholab": "0.1.0", "commit": None})
    main(["report", "demo_table9", "--db", db, "--export", str(tmp_path / "out")])
    provenance = (tmp_path / "out" / "export.txt").read_text().splitlines()
    assert "commit unknown (ortholab 0.1.0, installed without a checkout)" in provenance


@pytest.mark.parametrize("command", ["report", "runs"])
def test_an_export_without_checkpoints_into_one_that_holds_them_is_refused(tmp_path, monkeypatch, capsys, command):
    """Exported again without --with-checkpoints, the folder kept the earlier export's checkpoints/, which no longer
    matched its new runs.db, and `ortholab restore` continued runs from them."""
    db, store, copying_run = _copying_run_with_a_folder(tmp_path, monkeypatch, "interrupted")
    out = tmp_path / "out"
    export = ["report", "demo_table9"] if command == "report" else ["runs"]
    main([*export, "--db", db, "--export", str(out), "--with-checkpoints"])
    held = {p: _digest(p) for p in out.rglob("*") if p.is_file()}
    assert any(p.suffix == ".ckpt" for p in held)
    capsys.readouterr()
    with pytest.raises(SystemExit) as refused:
        main([*export, "--db", db, "--export", str(out)])
    err = capsys.readouterr().err
    assert refused.value.code == 2 and "Traceback" not in err
    assert f"{out / 'checkpoints'} holds an earlier export's checkpoints" in err and "add --with-checkpoints" in err
    assert {p: _digest(p) for p in out.rglob("*") if p.is_file()} == held  # nothing written
    main([*export, "--db", db, "--export", str(out), "--with-checkpoints"])  # renewed with the flag, as before
