"""`ortholab restore DIR` (ortholab/cli/restore.py): an export's runs.db and checkpoints become a new machine's store
and run folders, and the unfinished run goes on from there to the curve of an uninterrupted one; what would be
written over or replayed (a store there, its -wal, a run folder) or a runs folder the runs did not train in is
refused in one line, nothing copied."""

import shutil
from pathlib import Path

import pytest
from test_resume import assert_same_training, killed_at_step_8, ortholab, reference  # noqa: F401

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
    restored = ortholab(tmp_path, "restore", str(export))
    assert restored.returncode == 0, restored.stderr
    said = restored.stdout
    assert f"into {runs_root / 'ortholab.db'}, with the run folders of 1." in said
    assert f"Unfinished, with their checkpoints: {run_id}. Continue with `ORTHOLAB_RUNS={runs_root} ortholab" in said
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

    again = ortholab(tmp_path, "restore", str(export))  # the store is there now, trained on: never written over
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
    assert restored.stdout.splitlines() == [
        f"Restored 1 run from {tmp_path / 'export' / 'runs.db'} into {tmp_path / 'here' / 'ortholab.db'}.",
        "No unfinished run among them: the store takes new runs and seeds beside these.",
    ]
    (copied,) = Store(f"sqlite:///{tmp_path / 'here' / 'ortholab.db'}", access="read").list_runs()
    assert (copied.id, copied.name, copied.status) == (run, "done", "finished")


@pytest.mark.parametrize(
    "case, says",
    [
        ("runs-dir elsewhere", "runs.db records its runs' folders under {root}, and a run goes on only where"),
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
    if case == "runs-dir elsewhere":
        says = says.format(root=runs_root)
    else:  # the export's runs as if trained in `target`: a copy of its runs.db pointing there
        source = tmp_path / "export"
        shutil.copytree(export, source)
        _move_run_folders(source / "runs.db", runs_root, target)
        args, says = ["--runs-dir", str(target)], says.format(root=target, source=source)
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
    listed = sorted(p for p in target.rglob("*")) if target.exists() else []
    refused = ortholab(tmp_path, "restore", str(source), *args, env=env)
    assert refused.returncode == 2 and refused.stdout == ""
    (line,) = refused.stderr.strip().splitlines()
    assert says in line, line
    assert (sorted(p for p in target.rglob("*")) if target.exists() else []) == listed  # nothing copied
    assert not (tmp_path / "other.db").exists()


def _move_run_folders(db_file: Path, old_root: Path, new_root: Path) -> None:
    """Rewrite the runs' recorded folders from under `old_root` to under `new_root` (a copy of runs.db)."""
    import sqlite3

    with sqlite3.connect(db_file) as connection:
        connection.execute("UPDATE runs SET run_dir = replace(run_dir, ?, ?)", (str(old_root), str(new_root)))
    connection.close()
