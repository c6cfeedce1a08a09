"""Checkpoints and run folders under hostile use: a kill or a full disk during a checkpoint write keeps the previous
checkpoint whole and leaves no temporary file; run folders stay inside --runs_dir and apart for two stores; a
resume loads only its own run's checkpoint and keeps everything recorded before it."""

import gc
import os
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from test_cli import DEMO

from ortholab.cli.main import main
from ortholab.db import SQLLogger, Store
from ortholab.db.logger import STAMP_KEY
from ortholab.db.store import RunBusy
from ortholab.training.callbacks.checkpoint_io import AtomicCheckpointIO, CheckpointWriteError, atomic_torch_save
from ortholab.training.callbacks.lifecycle import ContinueRun

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"


def _mount_tmpfs(folder: Path, size: str) -> bool:
    folder.mkdir(parents=True, exist_ok=True)
    return (
        os.geteuid() == 0
        and shutil.which("mount") is not None
        and subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True
        ).returncode
        == 0
    )


def _umount(folder: Path) -> None:
    gc.collect()
    subprocess.run(["umount", "-l", str(folder)], capture_output=True)


# a kill during the write --------------------------------------------------------------------------------------
KILLED_SAVE = """
import sys, torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from ortholab.training.callbacks.checkpoint_io import AtomicCheckpointIO
from reliability_faults import _arm, _simulate_cross_device_renames
io = {"ours": AtomicCheckpointIO, "lightning": TorchCheckpointIO}[sys.argv[2]]()
if sys.argv[3] == "1":
    _simulate_cross_device_renames()
io.save_checkpoint({"step": 1, "weights": torch.ones(200_000)}, sys.argv[1])
_arm()  # die at the next fsync, or halfway through the next copy
io.save_checkpoint({"step": 2, "weights": torch.zeros(200_000)}, sys.argv[1])
"""


def killed_save(tmp_path: Path, writer: str):
    """Save a checkpoint twice with `writer`'s CheckpointIO, killed during the second save, the checkpoint on
    another filesystem than the system's temporary folder: (its folder, the temporary folder)."""
    system_tmp = tmp_path / "system-tmp"
    system_tmp.mkdir()
    elsewhere = tmp_path / "elsewhere"
    simulate = "0" if _mount_tmpfs(elsewhere, "64m") else "1"  # no second filesystem: renames fail across folders
    target = elsewhere / "run" / "checkpoints" / "last.ckpt"
    done = subprocess.run(
        [sys.executable, "-c", KILLED_SAVE, str(target), writer, simulate],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TMPDIR": str(system_tmp), "PYTHONPATH": f"{REPO}{os.pathsep}{TESTS}"},
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    return target, system_tmp, simulate == "0"


def test_a_kill_while_saving_leaves_the_previous_checkpoint_whole_and_no_temporary_file(tmp_path):
    target, system_tmp, mounted = killed_save(tmp_path, "ours")
    try:
        assert torch.load(target, weights_only=True)["step"] == 1
        assert list(system_tmp.iterdir()) == []  # never wrote into the system's temporary folder
        (left,) = [p for p in target.parent.iterdir() if p != target]  # the killed write's file, beside it
        assert left.name.startswith(".last.ckpt.") and left.name.endswith(".tmp")
        AtomicCheckpointIO().save_checkpoint({"step": 3}, target)  # the next save (or a resume) clears it
        assert [p.name for p in target.parent.iterdir()] == ["last.ckpt"]
        assert torch.load(target, weights_only=True) == {"step": 3}
    finally:
        if mounted:
            _umount(tmp_path / "elsewhere")


def test_the_same_kill_breaks_lightnings_own_save_across_filesystems(tmp_path):
    """The harness can fail: Lightning's TorchCheckpointIO writes into the system's temporary folder and, across
    filesystems, copies over the checkpoint; killed halfway, the previous checkpoint is gone. (If this starts
    failing, Lightning's own save became safe here.)"""
    target, system_tmp, mounted = killed_save(tmp_path, "lightning")
    try:
        with pytest.raises(Exception):  # noqa: B017 - a missing or a truncated file: torch.load raises different types
            torch.load(target, weights_only=True)
        assert list(system_tmp.iterdir()) != []  # and its temporary file stays behind
    finally:
        if mounted:
            _umount(tmp_path / "elsewhere")


def test_a_full_disk_keeps_the_previous_checkpoint_and_says_so_in_one_line(tmp_path):
    folder = tmp_path / "small"
    if not _mount_tmpfs(folder, "512k"):
        pytest.skip("needs root and mount for a small filesystem")
    try:
        target = folder / "checkpoints" / "last.ckpt"
        io = AtomicCheckpointIO()
        io.save_checkpoint({"step": 1, "weights": torch.ones(1000)}, target)
        with pytest.raises(
            CheckpointWriteError,
            match=r"cannot write the checkpoint .*last\.ckpt \(No space left "
            r"on device\); the previous checkpoint is kept",
        ):
            io.save_checkpoint({"step": 2, "weights": torch.ones(1_000_000)}, target)  # 4 MB on 512 kB
        assert torch.load(target, weights_only=True)["step"] == 1
        assert [p.name for p in target.parent.iterdir()] == ["last.ckpt"]
    finally:
        _umount(folder)


# run folders ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["../../x", "/abs/path", "x" * 300, "two\nlines", "..", "ok-name_1.0"])
def test_a_run_folder_always_lies_inside_the_runs_folder(tmp_path, name):
    root = tmp_path / "runs"
    logger = SQLLogger(db_url=f"sqlite:///{tmp_path / 'runs.db'}", name=name, root_dir=str(root))
    folder = Path(logger.log_dir)
    assert folder.is_dir() and folder.resolve().is_relative_to(root.resolve())
    component = folder.parent.name
    assert "\n" not in component and "/" not in component and len(component) <= 100 and component not in (".", "..")
    assert (component == name) == (name == "ok-name_1.0")  # a valid name is kept as it is, others slugged
    assert logger.store.get_run(logger.run_id).name == name  # the recorded name is the user's
    logger.finalize("success")


def test_two_stores_sharing_a_runs_folder_never_share_a_run_folder(tmp_path):
    root = str(tmp_path / "runs")
    first = SQLLogger(db_url=f"sqlite:///{tmp_path / 'a.db'}", name="same", root_dir=root)
    second = SQLLogger(db_url=f"sqlite:///{tmp_path / 'b.db'}", name="same", root_dir=root)
    assert first.run_id == second.run_id == 1
    assert first.log_dir != second.log_dir
    assert Path(first.log_dir).parent.parent.name == f"store-{first.store.store_id[:8]}"
    for logger in (first, second):
        logger.finalize("success")


# resume: whose checkpoint, and what is kept ----------------------------------------------------------------------
def interrupted_run(tmp_path: Path, db_file: str, reason="SIGTERM at step 3; resume with `ortholab fit --resume 1`"):
    """A recorded run stopped by SIGTERM, with a stored config and the folder for its checkpoints: (logger, url)."""
    url = f"sqlite:///{tmp_path / db_file}"
    logger = SQLLogger(db_url=url, name="copying_scornn", root_dir=str(tmp_path / "runs"))
    logger.mark_interrupted(reason)
    logger.finalize("success")
    shutil.copy(DEMO, Path(logger.log_dir) / "config.yaml")
    (Path(logger.log_dir) / "checkpoints").mkdir()
    return logger, url


def resume_fails(capsys, url, run_id=1) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--resume", str(run_id), "--db", url])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err, err
    (line,) = err.strip().splitlines()
    return line


def test_resume_refuses_the_checkpoint_of_another_stores_run(tmp_path, capsys):
    ours, url = interrupted_run(tmp_path, "ours.db")
    theirs, _ = interrupted_run(tmp_path, "theirs.db")  # run 1 of another store, in the same --runs_dir
    last = Path(ours.log_dir) / "checkpoints" / "last.ckpt"
    torch.save({"global_step": 3, STAMP_KEY: theirs.checkpoint_stamp()}, last)  # e.g. copied over by mistake
    before = Store(url).get_run(1)
    line = resume_fails(capsys, url)
    assert f"the checkpoint {last} was written by run 1 of another store (store id {theirs.store.store_id[:8]}" in line
    after = Store(url).get_run(1)
    assert (after.status, after.reason, after.heartbeat_at) == (before.status, before.reason, before.heartbeat_at)


def test_resume_of_a_run_whose_last_checkpoint_was_deleted_offers_the_checkpoints_it_kept(tmp_path, capsys):
    """last.ckpt deleted by hand: the run's best-step checkpoints are offered (it said the run had stopped before its
    first checkpoint and to start a new run)."""
    _, url = interrupted_run(tmp_path, "runs.db")
    folder = Path(Store(url).get_run(1).run_dir) / "checkpoints"
    for step in (3, 12):
        torch.save({"global_step": step}, folder / f"best-step{step}.ckpt")
    os.utime(folder / "best-step3.ckpt", (1, 1))  # the older one: best-step12 is offered (not by its name's order)
    line = resume_fails(capsys, url)
    assert f"run 1 has no checkpoint at {folder / 'last.ckpt'}, but its folder holds best-step12.ckpt, " in line
    assert f"continue from one of them with --ckpt_path {folder / 'best-step12.ckpt'}" in line
    assert Store(url).get_run(1).status == "interrupted"
    for name in ("best-step3.ckpt", "best-step12.ckpt"):
        (folder / name).unlink()
    line = resume_fails(capsys, url)
    assert "(it stopped before its first checkpoint, written at its first validation); start a new run instead" in line
    assert line.endswith(
        f": `ortholab fit --config {folder.parent / 'config.yaml'}` (`ortholab runs delete 1` removes this one)"
    )


def test_resume_with_a_folder_as_ckpt_path_names_the_flag_and_the_checkpoints_in_it(tmp_path, capsys):
    """`fit --resume ID --ckpt_path FOLDER` said `--resume ID: cannot read the checkpoint FOLDER (FileNotFoundError:
    not a file)`; it says the folder is one and names the .ckpt files in it, as without --resume."""
    logger, url = interrupted_run(tmp_path, "runs.db")
    folder = Path(logger.log_dir) / "checkpoints"
    torch.save({"global_step": 3}, folder / "last.ckpt")
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--resume", "1", "--db", url, "--ckpt_path", str(folder)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err, err
    (line,) = err.strip().splitlines()
    assert f"--ckpt_path {folder} is a folder (it holds last.ckpt); give the checkpoint file" in line, line
    assert "FileNotFoundError" not in line and "not a file" not in line, line
    assert Store(url).get_run(1).status == "interrupted"


def test_resume_refuses_the_checkpoint_of_another_run_and_an_unreadable_one(tmp_path, capsys):
    first, url = interrupted_run(tmp_path, "runs.db")
    other = SQLLogger(db_url=url, name="copying_scornn", root_dir=str(tmp_path / "runs"))
    last = Path(first.log_dir) / "checkpoints" / "last.ckpt"
    torch.save({"global_step": 3, STAMP_KEY: other.checkpoint_stamp()}, last)
    assert "was written by run 2 of this store, not by run 1" in resume_fails(capsys, url)
    last.write_bytes(b"")  # a 0-byte checkpoint (what a copy across filesystems, killed, used to leave)
    (last.parent / "best-step3.ckpt").write_bytes(b"x")
    line = resume_fails(capsys, url)
    assert f"cannot read the checkpoint {last}" in line and "--ckpt_path with one of best-step3.ckpt" in line
    other.finalize("success")


@pytest.mark.parametrize(
    "flags,refusal",
    [
        (["--data.class_path", "adding"], "--resume 1: the run's checkpoint was trained on task 'copying', this"),
        (["--model.hidden_size", "6"], "--resume 1: the run's checkpoint holds a model with model.hidden_size = 8"),
        (["--model.optimizers.other.name", "adam"], "group 'other' was trained with 'rmsprop_tf', its state cannot"),
    ],
)
def test_a_refused_resume_leaves_the_run_as_it_was_and_a_plain_resume_continues_it(tmp_path, capsys, flags, refusal):
    """A resume whose flags change the task or the model is refused before anything is recorded: the run keeps its
    status, task, reason, baseline, config and config.yaml, so `fit --resume ID` alone still continues it."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    quiet = ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false", "--db", url]
    tiny = ["--model.hidden_size", "8", "--model.family_args", "{rho: 4}", "--trainer.val_check_interval", "2"]
    main(["fit", "--config", DEMO, *tiny, "--trainer.max_steps", "4", "--runs_dir", str(tmp_path / "runs"), *quiet])
    before = Store(url).get_run(1)
    stored = Path(before.run_dir, "config.yaml").read_bytes()
    points = Store(url).metric_series(1, "val/loss")
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--resume", "1", *flags, "--trainer.max_steps", "8", *quiet])
    said = capsys.readouterr().err
    assert exit_info.value.code == 2 and refusal in said and "--ckpt_path" not in said, said  # none was given
    after = Store(url).get_run(1)
    fields = ("status", "task", "reason", "baseline", "config", "ended_at", "info")
    assert [getattr(after, f) for f in fields] == [getattr(before, f) for f in fields]
    assert (
        Path(before.run_dir, "config.yaml").read_bytes() == stored and Store(url).metric_series(1, "val/loss") == points
    )
    main(["fit", "--resume", "1", "--trainer.max_steps", "6", *quiet])
    assert Store(url).get_run(1).status == "finished"
    assert [p.step for p in Store(url).metric_series(1, "val/loss")] == [2, 4, 6]


def test_a_resume_whose_recorded_runs_folder_is_unwritable_names_it_and_only_the_flag_that_moves_it(
    tmp_path, capsys, monkeypatch
):
    """`fit --resume` writes to the runs folder the run was recorded in, whatever $ORTHOLAB_RUNS says now: an error
    there names that folder and --runs_dir, not $ORTHOLAB_RUNS (which would not move it)."""
    import ortholab.training.lightning_cli as lightning_cli
    from ortholab.training.preflight import check_writable_folder

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    quiet = ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false", "--db", url]
    tiny = ["--model.hidden_size", "8", "--model.family_args", "{rho: 4}", "--trainer.val_check_interval", "2"]
    monkeypatch.setenv("ORTHOLAB_RUNS", str(tmp_path / "runs"))  # the runs folder as most runs get it
    main(["fit", "--config", DEMO, *tiny, "--trainer.max_steps", "2", *quiet])
    (tmp_path / "afile").write_text("")
    checked = []

    def unwritable(folder, given_as="--runs_dir", fix=None):  # the recorded folder, as if it could not be written
        checked.append(folder)
        check_writable_folder(str(tmp_path / "afile" / "runs"), given_as, fix)

    monkeypatch.setattr(lightning_cli, "check_writable_folder", unwritable)
    monkeypatch.setenv("ORTHOLAB_RUNS", str(tmp_path / "elsewhere"))
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--resume", "1", "--trainer.max_steps", "4", *quiet])
    said = capsys.readouterr().err
    assert exit_info.value.code == 2 and checked == [str(tmp_path / "runs")], (checked, said)
    assert "run 1's recorded runs folder" in said and "give a writable folder with --runs_dir\n" in said, said
    assert "$ORTHOLAB_RUNS" not in said and Store(url).get_run(1).status == "finished", said


def test_a_resume_keeps_all_that_was_recorded_before_its_checkpoint_and_clears_the_stop_reason(tmp_path):
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    logger = SQLLogger(db_url=url, root_dir=str(tmp_path / "runs"))
    logger.log_metrics({"train/loss": 1.0}, step=2)
    logger.log_metrics({"val/loss": 0.5, "time/step_s": 0.1, "memory/peak_mb": 9.0, "custom/x": 1.0}, step=3)
    stamp = logger.checkpoint_stamp()  # the checkpoint of step 3 is written here
    logger.log_metrics({"train/loss": 0.9}, step=3)  # the batch after the checkpoint ...
    logger.log_metrics({"train/loss": 0.8, "time/step_s": 0.2}, step=4)
    logger.log_artifact("eigenvalues", "W", step=4, data=b"after")
    logger.mark_interrupted("SIGTERM at step 4; resume with `ortholab fit --resume 1`")
    logger.finalize("success")

    resumed = SQLLogger(db_url=url, root_dir=str(tmp_path / "runs"), run_id=logger.run_id)
    assert resumed.run_id == 1
    store = resumed.store
    assert (store.get_run(1).status, store.get_run(1).reason) == ("running", None)  # no stale reason
    continuing = ContinueRun()
    continuing.on_load_checkpoint(None, None, {STAMP_KEY: stamp})
    continuing.on_train_start(SimpleNamespace(global_step=3, loggers=[resumed], is_global_zero=True), None)
    steps = {key: [p.step for p in store.metric_series(1, key)] for key in store.metric_keys(1)}
    assert steps == {"train/loss": [2], "val/loss": [3], "time/step_s": [3], "memory/peak_mb": [3], "custom/x": [3]}
    assert store.artifacts(1) == []
    resumed.log_metrics({"train/loss": 0.9}, step=3)
    resumed.finalize("success")
    run = store.get_run(1)
    assert (run.status, run.reason) == ("finished", None)


def test_a_second_resume_of_a_run_being_resumed_is_refused_and_leaves_it_alone(tmp_path):
    logger, url = interrupted_run(tmp_path, "runs.db")
    first = SQLLogger(db_url=url, root_dir=str(tmp_path / "runs"), run_id=1)
    assert first.run_id == 1  # holds the run now
    second = SQLLogger(db_url=url, root_dir=str(tmp_path / "runs"), run_id=1)
    second._owner = "another|host|ns|1|1"  # as if in another process (one process's loggers share its lease)
    with pytest.raises(RunBusy, match=f"still being written by process {os.getpid()}"):
        second.run_id  # noqa: B018 - the property takes the run's lease, which raises RunBusy here
    second.finalize("failed")  # Lightning's cleanup after the refusal: must not mark the live run failed
    assert Store(url).get_run(1).status == "running"
    first.log_metrics({"m": 1.0}, step=5)
    first.finalize("success")
    assert Store(url).get_run(1).status == "finished"


def test_a_run_recorded_before_store_folders_resumes_in_its_own_folder_spelt_as_before(tmp_path, monkeypatch):
    """Lightning's ModelCheckpoint restores its best and last files only when the folder is the same string as in
    the checkpoint: an old run (runs/NAME/ID, a relative --runs_dir) resumes in exactly that spelling."""
    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    store = Store(url)
    run = store.create_run(name="old-run")
    store.update_run(run, run_dir=str(tmp_path / "runs" / "old-run" / str(run)))  # the layout before store folders
    store.set_status(run, "interrupted", reason="SIGTERM at step 3")
    resumed = SQLLogger(db_url=url, root_dir="runs", run_id=run)
    assert resumed.log_dir == os.path.join("runs", "old-run", str(run))
    assert (resumed.save_dir, resumed.name, resumed.version) == ("runs", "old-run", str(run))
    resumed.finalize("success")


def test_an_atomic_checkpoint_gets_the_permissions_of_a_plain_write(tmp_path):
    """mkstemp makes 0600 files; the renamed checkpoint must carry what open() under the umask gives, so another
    user of a shared volume (the dashboard's container, a colleague's predict) can read it."""
    if os.name != "posix":
        pytest.skip("POSIX permissions")
    previous = os.umask(0o022)
    try:
        atomic_torch_save({"w": torch.zeros(2)}, tmp_path / "last.ckpt")
        (tmp_path / "plain").write_bytes(b"")
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "last.ckpt").stat().st_mode) == stat.S_IMODE((tmp_path / "plain").stat().st_mode)
    assert stat.S_IMODE((tmp_path / "last.ckpt").stat().st_mode) == 0o644


def test_a_resume_with_a_config_file_holding_ckpt_path_continues_from_the_runs_last_checkpoint(tmp_path, caplog):
    """A run's stored config.yaml holds `ckpt_path:` when its fit started from a checkpoint; given back as --config to
    `fit --resume ID`, that key stood over the run's last.ckpt (the flag went before the file): the run went back to
    the step it started from, past the checks made on last.ckpt. last.ckpt is what a resume continues from."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    quiet = ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false", "--db", url]
    tiny = ["--model.hidden_size", "8", "--model.family_args", "{rho: 4}", "--trainer.val_check_interval", "2"]
    tiny += ["--runs_dir", str(tmp_path / "runs")]
    main(["fit", "--config", DEMO, *tiny, "--trainer.max_steps", "2", *quiet])
    first = Path(Store(url).get_run(1).run_dir, "checkpoints", "last.ckpt")
    start = tmp_path / "start.ckpt"
    shutil.copy(first, start)  # a step-2 checkpoint: run 2 starts from it, and its config.yaml keeps the path
    main(["fit", "--config", DEMO, *tiny, "--ckpt_path", str(start), "--trainer.max_steps", "4", *quiet])
    stored = Path(Store(url).get_run(2).run_dir, "config.yaml")
    assert f"ckpt_path: {start}" in stored.read_text()
    caplog.clear()
    main(["fit", "--resume", "2", "--config", str(stored), "--trainer.max_steps", "6", *quiet])
    assert "Run 2 continues from its checkpoint at step 4:" in caplog.text, caplog.text
    assert [p.step for p in Store(url).metric_series(2, "val/loss")] == [4, 6]
