"""`ortholab restore DIR` (ortholab/cli/restore.py): an export's runs.db and checkpoints become a new machine's store
and run folders, in the runs folder they trained in or in any other (their recorded paths moved there, db/relocate.py),
and the unfinished run goes on from there to the curve of an uninterrupted one; what would be written over or
replayed (a store there, its -wal, a run folder) or a file as the runs folder is refused in one line, nothing
copied; one that fails midway takes back what it had copied."""

import os
import shutil
import signal
from pathlib import Path

import pytest
from test_resume import (  # noqa: F401
    RUN,
    assert_same_training,
    fit_signalled,
    killed_at_step_8,
    ortholab,
    reference,
)

from ortholab.db import Store, folder_lock
from ortholab.db.extract import copy_resume_files, write_run_store


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A run killed at step 8 (checkpoint at step 6), exported with its checkpoints, then its machine gone:
    (export folder, the runs folder it trained in, the run's id, its folder)."""
    machine = tmp_path_factory.mktemp("machine")
    store, run = killed_at_step_8(machine, f"sqlite:///{machine / 'runs.db'}")
    export = tmp_path_factory.mktemp("export")
    write_run_store(store, [run.id], export / "runs.db")
    assert copy_resume_files(store, [run.id], export / "checkpoints")
    run_dir = Path(store.get_run(run.id).run_dir)
    store.close()
    runs_root = run_dir.parents[2]
    shutil.rmtree(runs_root)  # the machine is gone
    return export, runs_root, run.id, run_dir


def test_a_restored_export_goes_on_to_the_same_training(exported, reference, tmp_path):
    export, runs_root, run_id, run_dir = exported
    here = {"ORTHOLAB_RUNS": str(runs_root)}  # the runs folder they trained in: nothing moves
    restored = ortholab(tmp_path, "restore", str(export), env=here)
    assert restored.returncode == 0, restored.stderr
    said = restored.stdout
    assert f"into {runs_root / 'ortholab.db'}, with the run folders of 1." in said and "recorded under" not in said
    assert (
        f"Unfinished, with their checkpoints: {run_id}. Continue with `export ORTHOLAB_RUNS={runs_root}`, then "
        f"`ortholab fit --resume {run_id}`." in said
    )  # no paper row's run: no `reproduce` to offer
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()
    url = f"sqlite:///{runs_root / 'ortholab.db'}"  # the restored store names itself the folder's writer
    facts = folder_lock.written_by(run_dir)
    assert facts["store"] == folder_lock.store_place(url) and facts["store_id"] == Store(url, access="read").store_id
    assert Store(url, access="read").frozen_at is None  # this machine's store now: `runs` called it a frozen copy

    machine = runs_root.parent  # (the folder of the fault's marker file: killed once, not again)
    resumed = ortholab(machine, "fit", "--resume", str(run_id), env={"ORTHOLAB_RUNS": str(runs_root)})
    assert resumed.returncode == 0, resumed.stderr
    store = Store(f"sqlite:///{runs_root / 'ortholab.db'}", access="read")
    (after,) = store.list_runs()
    assert after.id == run_id and after.status == "finished" and store.get_run(run_id).run_dir == str(run_dir)
    assert "restores" not in store.get_run(run_id).info
    assert_same_training(store, after, reference)
    store.close()

    # a byte copy of the store has its id, but the folder names the store that wrote it: the copy's delete keeps it
    shutil.copyfile(runs_root / "ortholab.db", tmp_path / "copy.db")
    deleted = ortholab(tmp_path, "runs", "delete", str(run_id), "--db", str(tmp_path / "copy.db"), "--yes")
    assert deleted.returncode == 0, deleted.stderr
    place = folder_lock.store_place(url)
    assert f"its folder {run_dir} is written by the store at {place}, not this one" in deleted.stdout
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()
    deleted = ortholab(tmp_path, "runs", "delete", str(run_id), "--db", url, "--yes")  # the store's own: removed
    assert f"deleted run {run_id} ({after.name}) and its folder {run_dir}" in deleted.stdout and not run_dir.exists()

    again = ortholab(tmp_path, "restore", str(export), env=here)  # the store is there, trained on: never written over
    before = (runs_root / "ortholab.db").read_bytes()
    assert again.returncode == 2 and again.stdout == ""
    (line,) = again.stderr.strip().splitlines()
    assert f"{runs_root / 'ortholab.db'} exists: a store is there already" in line and "nothing was copied" in line
    assert (runs_root / "ortholab.db").read_bytes() == before


def test_an_export_of_finished_runs_is_restored_into_any_runs_folder(tmp_path):
    """Nothing to go on: the runs folders they trained in do not matter; the store takes new runs beside them."""
    source = Store(f"sqlite:///{tmp_path / 'source.db'}")
    run = source.create_run(name="done", family="lstm", task="copying", main_metric="val/loss")
    source.update_run(run, run_dir="/a/machine/long/gone/runs/store-0a1b2c3d/done/1", status="finished")
    write_run_store(source, [run], tmp_path / "export" / "runs.db")
    spelt = "--runs_dir"  # as `fit --runs_dir` spells it (--runs-dir too): refused as unknown before
    restored = ortholab(tmp_path, "restore", str(tmp_path / "export"), spelt, str(tmp_path / "here"))
    assert restored.returncode == 0, restored.stderr
    here = tmp_path / "here"
    assert restored.stdout.splitlines() == [
        f"Restored 1 run from {tmp_path / 'export' / 'runs.db'} into {here / 'ortholab.db'}.",
        f"The folders of 1 run, recorded under /a/machine/long/gone/runs, are now recorded under {here} (the paths "
        f"under them too); each run's info keeps the folder it trained in (`ortholab runs show ID`).",
        "No unfinished run among them: the store takes new runs and seeds beside these.",
    ]
    store = Store(f"sqlite:///{here / 'ortholab.db'}", access="read")
    (copied,) = store.list_runs()
    assert (copied.id, copied.name, copied.status) == (run, "done", "finished")
    moved = store.get_run(run)  # not on this machine, but named under its runs folder, never the gone one's
    assert moved.run_dir == str(here / "store-0a1b2c3d" / "done" / "1")
    assert [(r["from"], r["to"]) for r in moved.info["restores"]] == [
        ("/a/machine/long/gone/runs/store-0a1b2c3d/done/1", moved.run_dir)
    ]


def test_a_run_restored_into_another_runs_folder_goes_on_there_from_its_checkpoint(tmp_path, reference):
    """A run of runs folder A (its store there, --runs_dir A), killed at step 8 after its step-6 checkpoint and
    exported with its checkpoints, restored into B, another path: its folder, the store's and the config's paths and
    the checkpoints' own folder are B's now, the folder it trained in kept in its info; `fit --resume` with
    ORTHOLAB_RUNS=B continues from step 6 to the training of an uninterrupted run, with the same checkpoint files,
    and writes nothing under A (still there, as on a machine that keeps the old folder)."""
    machine = tmp_path / "machine"
    machine.mkdir()
    old_root, new_root = machine / "A", tmp_path / "other-disk" / "B"
    killed = fit_signalled(machine, f"sqlite:///{old_root / 'ortholab.db'}", 8, *RUN, "--runs_dir", str(old_root))
    assert killed.returncode == -signal.SIGKILL
    source = Store(f"sqlite:///{old_root / 'ortholab.db'}")
    (run,) = source.list_runs()
    trained_in = source.get_run(run.id).run_dir
    export = tmp_path / "export"
    write_run_store(source, [run.id], export / "runs.db")
    assert copy_resume_files(source, [run.id], export / "checkpoints")
    source.close()
    before = _tree(old_root)

    restored = ortholab(tmp_path, "restore", str(export), "--runs-dir", str(new_root))
    assert restored.returncode == 0, restored.stderr
    assert f"The folders of 1 run, recorded under {old_root}, are now recorded under {new_root} " in (restored.stdout)
    assert f"`export ORTHOLAB_RUNS={new_root}`, then `ortholab fit --resume {run.id}`." in restored.stdout
    run_dir = new_root / Path(trained_in).relative_to(old_root)
    url = f"sqlite:///{new_root / 'ortholab.db'}"
    moved = Store(url, access="read").get_run(run.id)
    assert moved.run_dir == str(run_dir) and (moved.config["db"], moved.config["runs_dir"]) == (url, str(new_root))
    ((restore,),) = [moved.info["restores"]]
    assert (restore["from"], restore["to"]) == (trained_in, str(run_dir))
    assert str(old_root) in moved.info["command"]  # the command as it was typed
    for path in [run_dir / "config.yaml", *(run_dir / "checkpoints").glob("*.ckpt")]:
        assert str(old_root) not in path.read_bytes().decode("latin-1"), path

    resumed = ortholab(machine, "fit", "--resume", str(run.id), env={"ORTHOLAB_RUNS": str(new_root)})
    assert resumed.returncode == 0, resumed.stderr
    assert f"Run {run.id} continues from its checkpoint at step 6: " in resumed.stdout + resumed.stderr
    store = Store(url, access="read")
    (after,) = store.list_runs()
    assert (after.id, after.status, store.get_run(run.id).run_dir) == (run.id, "finished", str(run_dir))
    assert_same_training(store, after, reference)
    ref_store, ref_run = reference  # its best kept as one file, as it was tracked (the checkpoints name B)
    theirs = Path(ref_store.get_run(ref_run.id).run_dir) / "checkpoints"
    assert sorted(p.name for p in (run_dir / "checkpoints").glob("*.ckpt")) == sorted(p.name for p in theirs.glob("*"))
    assert store.get_run(run.id).info["restores"] == [restore]  # kept by the resume
    shown = ortholab(tmp_path, "runs", "show", str(run.id), "--db", url)
    assert f"into {run_dir}; its folder was {trained_in}" in shown.stdout
    store.close()
    assert _tree(old_root) == before  # nothing under A written, not even read into a new -wal


def test_a_restore_elsewhere_moves_every_path_under_the_runs_folders_and_keeps_what_was_typed(tmp_path):
    """Two runs folders of one store's runs, A and C (a --runs_dir for a while), restored into B: each path recorded
    under either (a run's folder, the store's file in the config and params, an evaluated checkpoint, predictions,
    an artifact's meta) names the same place under B; a path beside them (A2), the commands as typed and a run
    folder in no runs folder's layout stay as recorded."""
    a, c, b = "/gone/machine/A", "/gone/disk/C", tmp_path / "B"
    source = Store(f"sqlite:///{tmp_path / 'source.db'}")
    fit = source.create_run(name="fit", family="lstm", task="copying", main_metric="val/loss")
    best = f"{a}/store-0a1b2c3d/fit/{fit}/checkpoints/best-step6.ckpt"
    config = {"db": f"sqlite:///{a}/ortholab.db", "runs_dir": a, "data": {"root": "/gone/machine/A2/data"}}
    source.update_run(fit, run_dir=f"{a}/store-0a1b2c3d/fit/{fit}", status="finished", config=config)
    source.update_run(fit, info={"command": f"ortholab fit --runs_dir {a}", "resumes": [{"command": a}]})
    source.log_params(fit, {"db": config["db"], "runs_dir": a})
    source.add_artifact(fit, "audio", "clip", step=1, meta={"source": f"{a}/store-0a1b2c3d/fit/{fit}/x.wav"})
    test = source.create_run(name="test", family="lstm", task="copying", main_metric="test/loss", stage="test")
    source.update_run(test, run_dir=f"{c}/test/{test}", status="finished", config={"ckpt_path": best})
    source.update_run(test, info={"predict": {"checkpoint": best, "predictions": f"{c}/test/{test}/p.npz"}})
    odd = source.create_run(name="odd", family="lstm", task="copying", main_metric="val/loss")
    source.update_run(odd, run_dir="/srv/odd", status="finished")
    write_run_store(source, [fit, test, odd], tmp_path / "export" / "runs.db", with_artifacts=True)
    source.close()

    restored = ortholab(tmp_path, "restore", str(tmp_path / "export"), env={"ORTHOLAB_RUNS": str(b)})
    assert restored.returncode == 0, restored.stderr
    assert f"The folders of 2 runs, recorded under {c}, {a}, are now recorded under {b} " in (restored.stdout)
    store = Store(f"sqlite:///{b / 'ortholab.db'}", access="read")
    moved_best = f"{b}/store-0a1b2c3d/fit/{fit}/checkpoints/best-step6.ckpt"
    ran, tested = store.get_run(fit), store.get_run(test)
    assert ran.run_dir == f"{b}/store-0a1b2c3d/fit/{fit}" and tested.run_dir == f"{b}/test/{test}"
    assert ran.config == {"db": f"sqlite:///{b}/ortholab.db", "runs_dir": str(b), "data": config["data"]}
    assert store.params_of([fit])[fit] == {"db": f"sqlite:///{b}/ortholab.db", "runs_dir": str(b)}
    (artifact,) = store.artifacts(fit)
    assert artifact.meta == {"source": f"{b}/store-0a1b2c3d/fit/{fit}/x.wav"}
    assert tested.config == {"ckpt_path": moved_best}
    assert tested.info["predict"] == {"checkpoint": moved_best, "predictions": f"{b}/test/{test}/p.npz"}
    assert (ran.info["command"], ran.info["resumes"]) == (f"ortholab fit --runs_dir {a}", [{"command": a}])
    assert [(r["from"], r["to"]) for r in tested.info["restores"]] == [(f"{c}/test/{test}", tested.run_dir)]
    assert store.get_run(odd).run_dir == "/srv/odd" and "restores" not in (store.get_run(odd).info or {})
    store.close()


def _tree(root: Path) -> dict:
    """Every path under `root` (itself too): its kind, size and modification time."""
    return {
        str(p.relative_to(root)): (p.is_dir(), p.stat().st_size, p.stat().st_mtime_ns) for p in [root, *root.rglob("*")]
    }


@pytest.mark.parametrize(
    "case, says",
    [
        ("runs-dir a file", "--runs-dir {root}: cannot write run folders there (Not a directory); give a writable"),
        ("a stale wal there", "{root}/ortholab.db-wal exists: a store is there already"),
        ("a run folder there", "exists: a run folder would be written over (nothing was copied)"),
        ("no runs.db", "no runs.db there; give a folder `ortholab report TABLE --export DIR --with-checkpoints`"),
        ("runs.db not a store", "no SQLite database at all (it does not begin as one); {source} is not a folder"),
        ("ORTHOLAB_DB set", "$ORTHOLAB_DB names the store, so the restored one would not be used: unset it"),
    ],
)
def test_a_restore_that_would_go_wrong_is_one_line_and_copies_nothing(exported, tmp_path, case, says):
    export, runs_root, run_id, run_dir = exported
    target, env, source = runs_root.parent / f"{runs_root.name}-{case.replace(' ', '-')}", {}, export
    args = ["--runs-dir", str(target)]
    if case == "runs-dir a file":
        says = says.format(root=target)
        target.write_text("not a folder")
    else:  # into `target`, another runs folder than they trained in (restored there, moved): a copy of the export
        source = tmp_path / "export"
        shutil.copytree(export, source)
        says = says.format(root=target, source=source)
        target.mkdir()
        if case == "a stale wal there":
            (target / "ortholab.db-wal").write_bytes(b"an earlier store's log")
        elif case == "a run folder there":
            (target / run_dir.relative_to(runs_root)).mkdir(parents=True)
        elif case == "no runs.db":
            (source / "runs.db").unlink()
        elif case == "runs.db not a store":  # its message named --db, which restore does not take
            (source / "runs.db").write_text("run,loss\n1,0.5\n")
        elif case == "ORTHOLAB_DB set":
            env = {"ORTHOLAB_DB": f"sqlite:///{tmp_path / 'other.db'}"}
    listed = _tree(target) if target.exists() else {}
    refused = ortholab(tmp_path, "restore", str(source), *args, env=env)
    assert refused.returncode == 2 and refused.stdout == ""
    (line,) = refused.stderr.strip().splitlines()
    assert says in line, line
    assert (_tree(target) if target.exists() else {}) == listed  # nothing copied
    assert not (tmp_path / "other.db").exists()


@pytest.fixture
def two_run_folders(tmp_path):
    """An export of two runs of runs folder /gone/A with their folders (a config.yaml each, naming /gone/A, so that a
    restore elsewhere rewrites it), made without training: the export folder."""
    source = Store(f"sqlite:///{tmp_path / 'source.db'}")
    export = tmp_path / "export"
    for name in ("one", "two"):
        run = source.create_run(name=name, family="lstm", task="copying", main_metric="val/loss")
        source.update_run(run, run_dir=f"/gone/A/store-0a1b2c3d/{name}/{run}", status="interrupted")
        folder = export / "checkpoints" / "store-0a1b2c3d" / name / str(run)
        folder.mkdir(parents=True)
        (folder / "config.yaml").write_text("runs_dir: /gone/A\n")
    write_run_store(source, [run.id for run in source.list_runs()], export / "runs.db")
    source.close()
    return export


def _failing_second(real, err):
    """`real`, raising `err` at its second call (after doing its work: a folder half copied, a file rewritten)."""
    calls = []

    def failing(*args, **kwargs):
        calls.append(args)
        done = real(*args, **kwargs)
        if len(calls) == 2:
            raise err
        return done

    return failing


def _contents(root: Path) -> dict:
    """Every path under `root` and each file's bytes (folders' times left out: a folder made and removed in one)."""
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_bytes() for p in root.rglob("*")}


FAULTS = ["a copy", "a named pipe", "a config rewrite", "the store's relocation", "the folders' adoption", "Ctrl-C"]


@pytest.mark.parametrize("fault", FAULTS)
def test_a_restore_that_fails_midway_takes_back_what_it_copied_and_can_be_run_again(
    two_run_folders, tmp_path, monkeypatch, capsys, fault
):
    """A failure after some run folders were copied (a file that cannot be read or written, a full disk while the
    store's copy is rewritten, Ctrl-C) left them and ortholab.db.part behind: the next restore was refused (a run
    folder would be written over) and what to remove was the user's to find. Now what the restore made goes again,
    what was there stays, an OSError is one line naming the path and the reason, and the restore runs again."""
    import errno
    import sqlite3

    from ortholab.cli.main import main
    from ortholab.db import folder_lock, relocate
    from ortholab.training import run_folder_move

    there = tmp_path / "runs"  # a runs folder with the user's files, an empty store-ID folder among them
    (there / "store-0a1b2c3d").mkdir(parents=True)
    (there / "notes.txt").write_text("mine")
    target = tmp_path / "new" / "runs" if fault in ("a config rewrite", "Ctrl-C") else there  # or one to make
    before = _contents(there)
    half = two_run_folders / "checkpoints" / "store-0a1b2c3d" / "two"
    if fault == "a copy":
        err = PermissionError(errno.EACCES, "Permission denied", str(half))
        monkeypatch.setattr(shutil, "copytree", _failing_second(shutil.copytree, err))
        says = f"{half}: Permission denied"
    elif fault == "a named pipe":  # not patched: copytree copies the rest, then raises shutil.Error with its list
        os.mkfifo(pipe := next(half.iterdir()) / "pipe")
        says = f"`{pipe}` is a named pipe"
    elif fault == "a config rewrite":
        err = OSError(errno.ENOSPC, "No space left on device", str(target / "config.yaml.part"))
        failing = _failing_second(run_folder_move.move_folder_files, err)
        monkeypatch.setattr(run_folder_move, "move_folder_files", failing)
        says = f"{target / 'config.yaml.part'}: No space left on device"
    elif fault == "the folders' adoption":  # the store names itself their writer: that too before it appears
        err = PermissionError(errno.EACCES, "Permission denied", str(target / "lock"))
        monkeypatch.setattr(folder_lock, "adopt", _failing_second(folder_lock.adopt, err))
        says = f"{target / 'lock'}: Permission denied"
    else:
        err = sqlite3.OperationalError("database or disk is full") if fault != "Ctrl-C" else KeyboardInterrupt()

        def relocate_store(*args):
            raise err

        monkeypatch.setattr(relocate, "relocate_store", relocate_store)
        says = f"{target / 'ortholab.db.part'}: database or disk is full"
    with pytest.raises(SystemExit) as stopped:
        main(["restore", str(two_run_folders), "--runs-dir", str(target)])
    said = capsys.readouterr()
    assert said.out == "" and _contents(there) == before
    if fault == "Ctrl-C":
        assert stopped.value.code == 130 and said.err == "ortholab: stopped by Ctrl-C\n"
        assert not (tmp_path / "new").exists()  # the folders it made for the runs folder too
    else:
        assert stopped.value.code == 2
        (line,) = said.err.strip().splitlines()
        assert says in line and f"nothing was restored into {target}" in line, line
        assert target.exists() == (target == there)

    monkeypatch.undo()
    if fault == "a named pipe":
        pipe.unlink()
    main(["restore", str(two_run_folders), "--runs-dir", str(target)])
    assert "Restored 2 runs from" in capsys.readouterr().out
    store = Store(f"sqlite:///{target / 'ortholab.db'}", access="read")
    for run in store.list_runs():
        assert (Path(store.get_run(run.id).run_dir) / "config.yaml").read_text() == f"runs_dir: {target}\n"
    store.close()
    assert (there / "notes.txt").read_text() == "mine"


def test_a_journal_left_by_a_restore_killed_outright_is_not_replayed_onto_the_next(two_run_folders, tmp_path, capsys):
    """A restore killed outright (SIGKILL, a power cut) while rewriting ortholab.db.part leaves SQLite's hot journal
    beside it; the next restore copied the export onto the .part and SQLite rolled that journal, pages of another
    database, into it. Restore's own temporaries are cleared first: the store restored is the export's, sound."""
    import sqlite3

    from ortholab.cli.main import main

    target = tmp_path / "runs"
    target.mkdir()
    other = target / "ortholab.db.part"  # a store mid-transaction, its journal hot, as a kill leaves it
    writer = sqlite3.connect(other, isolation_level=None)
    writer.execute("PRAGMA journal_mode=DELETE")
    writer.execute("PRAGMA cache_size=5")  # so that the transaction spills into the file: its journal is then hot
    writer.execute("CREATE TABLE filler (x BLOB)")
    writer.execute("INSERT INTO filler VALUES (zeroblob(200000))")
    writer.execute("BEGIN")
    writer.execute("DELETE FROM filler")
    writer.execute("INSERT INTO filler VALUES (randomblob(400000))")
    journal = Path(f"{other}-journal")
    assert journal.is_file()
    kept = journal.read_bytes()
    writer.close()  # a clean close rolls back and deletes it: put it back as a kill leaves it
    journal.write_bytes(kept)
    main(["restore", str(two_run_folders), "--runs-dir", str(target)])
    assert "Restored 2 runs from" in capsys.readouterr().out
    store = Store(f"sqlite:///{target / 'ortholab.db'}", access="read")
    assert sorted(run.name for run in store.list_runs()) == ["one", "two"]
    store.close()
    with sqlite3.connect(target / "ortholab.db") as check:
        assert check.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    check.close()
    assert sorted(path.name for path in target.iterdir()) == ["ortholab.db", "store-0a1b2c3d"]


@pytest.mark.parametrize(
    "tags, then",
    [
        (
            {3: ["paper:scurnn_figure5/adding-T750_eurnn_n512"]},
            "`ortholab reproduce scurnn_figure5 --resume` (a paper's",
        ),
        ({3: ["paper:a_table/r1"], 5: ["paper:b_table/r2", "seed:2"]}, "`ortholab reproduce --resume` (a paper's"),
        ({3: ["mine"], 5: []}, "`ortholab fit --resume ID`."),
    ],
)
def test_the_way_on_names_the_table_and_keeps_the_store_for_later_commands(tmp_path, capsys, tags, then):
    """The unfinished runs' own table (several: every table); `export`, not a one-command setting, which the hints
    of later commands (`continue with ortholab fit --resume 3`) would leave out and so name ./runs."""
    from types import SimpleNamespace

    from ortholab.cli.restore import _say_restored

    runs = {i: SimpleNamespace(tags=t) for i, t in tags.items()}
    root = tmp_path / "runs here"  # a space: quoted for the shell
    _say_restored(tmp_path / "runs.db", root, runs, dict.fromkeys(runs), sorted(runs), {}, {})
    said = capsys.readouterr().out
    assert f"Continue with `export ORTHOLAB_RUNS='{root}'`, then {then}" in said, said
