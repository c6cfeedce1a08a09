"""Stopping `ortholab reproduce` for real (cli/children.py): Ctrl-C in a terminal or a SIGTERM to it alone stop the row
training at a batch boundary with its checkpoint, as a fit run alone stops, and start no other row.

Before, Python's subprocess killed the fit with SIGKILL a quarter of a second after a Ctrl-C (its run left
`running`, its last steps lost), and a SIGTERM ended reproduce and left the fit training, orphaned."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from ortholab.db import Store
from ortholab.db.store import StoreMissing

REPO = Path(__file__).resolve().parents[1]
# reproduce in a process of its own, reading the toy table from the folder given first
DRIVER = """
import sys
from pathlib import Path
from ortholab.db import published
published.PUBLISHED_DIR, published.CHECKS_DIR = Path(sys.argv[1]), Path(sys.argv[1]) / "no-checks"
from ortholab.cli.main import main
main(sys.argv[2:])
"""


def _toy_table(folder: Path) -> Path:
    """A one-row table whose run trains far longer than the test waits (tiny steps, 100000 of them)."""
    config = yaml.safe_load((REPO / "configs" / "demo" / "copying_scornn.yaml").read_text())
    config["model"]["hidden_size"], config["model"]["family_args"] = 8, {"rho": 4}
    config["data"]["init_args"].update(seq_len=5, batch_size=10, train_size=200, val_size=20, test_size=20)
    config["trainer"].update(max_steps=100000, val_check_interval=20, enable_progress_bar=False)
    (folder / "row.yaml").write_text(yaml.safe_dump(config))
    row = {"row": "copy_T5_scornn", "task": "copying", "family": "scornn", "value": None}
    row.update(expect="below_baseline", config=str(folder / "row.yaml"))
    table = {"paper": "scornn-icml2018", "table": "Figure 1", "title": "copying", "metric": "val/loss", "mode": "min"}
    published = folder / "published"
    published.mkdir()
    (published / "toy_figure1.yaml").write_text(yaml.safe_dump({**table, "rows": [row]}))
    return published


def _training_run(db: str, process: subprocess.Popen, deadline_s: float = 180.0):
    """The run once it has recorded a few steps (the fit child is then inside its training loop)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        assert process.poll() is None, process.communicate()
        try:
            runs = Store(db, access="read").list_runs()
        except StoreMissing:
            runs = []
        if runs and runs[0].steps >= 3:
            return runs[0]
        time.sleep(0.2)
    raise AssertionError("the row's run never started training")


def stopped_job(argv: list[str], cwd: Path, env: dict, started, ctrl_c: bool):
    """argv as a terminal's job (its own process group), stopped once `started(process)` returns: Ctrl-C to the
    group, or SIGTERM to the process alone; (process, stdout, stderr, what `started` returned)."""
    process = subprocess.Popen(
        argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        found = started(process)
        if ctrl_c:
            os.killpg(process.pid, signal.SIGINT)
        else:
            process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=180)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    return process, out, err, found


def assert_ended_whole(process: subprocess.Popen, code: int, out: str, err: str) -> None:
    """Exit `code`, no traceback, and nothing of the job left running (its children ended too, not orphaned)."""
    assert process.returncode == code, (out, err)
    assert "Traceback" not in err, err
    with pytest.raises(ProcessLookupError):
        os.killpg(process.pid, 0)


@pytest.mark.slow
@pytest.mark.parametrize(
    "how, code, said, recorded",
    [("SIGTERM to reproduce alone", 143, "SIGTERM", "SIGTERM"), ("Ctrl-C in a terminal", 130, "Ctrl-C", "SIGINT")],
)
def test_a_stopped_reproduce_stops_its_fit_with_a_checkpoint_and_starts_no_other_row(
    tmp_path, how, code, said, recorded
):
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    env.pop("ORTHOLAB_DB", None)
    command = ["reproduce", "toy_figure1", "--seeds", "5544,5545", "--db", db]
    argv = [sys.executable, "-c", DRIVER, str(_toy_table(tmp_path)), *command]
    ctrl_c = how.startswith("Ctrl-C")
    process, out, err, run = stopped_job(argv, tmp_path, env, lambda job: _training_run(db, job), ctrl_c)
    assert_ended_whole(process, code, out, err)
    lines = out.strip().splitlines()
    assert lines[-2:] == [
        f"reproduce: stopped by {said}; the same command again goes on from there (a stopped run continues from "
        "its checkpoint)",
        "reproduce: 0 done, 0 failed, 1 skipped, 1 stopped",  # stopped with a checkpoint: not failed
    ], out
    assert (
        f"paper:toy_figure1/copy_T5_scornn (seed 5544): fit stopped by {said} with a checkpoint; continue it with "
        f"`ortholab reproduce toy_figure1 --resume --rows copy_T5_scornn --db '{db}' --seeds 5544,5545`" in lines
    ), out
    assert f"paper:toy_figure1/copy_T5_scornn (seed 5545): not started, reproduce was stopped ({said})" in lines
    (stopped,) = Store(db, access="read").list_runs()  # the second seed never started
    assert stopped.id == run.id and stopped.status == "interrupted", stopped
    assert stopped.reason.startswith(f"{recorded} at step "), stopped.reason
    step = int(stopped.reason.split(" at step ")[1].split(";")[0])
    assert (
        step >= 3 and (Path(Store(db, access="read").get_run(run.id).run_dir) / "checkpoints" / "last.ckpt").is_file()
    )


@pytest.mark.slow
@pytest.mark.parametrize("how, code, said", [("SIGTERM to reproduce alone", 143, "SIGTERM"), ("Ctrl-C", 130, "Ctrl-C")])
def test_a_stopped_estimate_stops_its_timing_run_and_says_which_rows_were_not_timed(tmp_path, how, code, said):
    published = _toy_table(tmp_path)
    row = yaml.safe_load((tmp_path / "row.yaml").read_text())
    row["trainer"]["val_check_interval"] = 50000  # the timing run: 2 intervals, far longer than the test waits
    (tmp_path / "row.yaml").write_text(yaml.safe_dump(row))
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path)}
    argv = [sys.executable, "-c", DRIVER, str(published), "reproduce", "toy_figure1", "--estimate"]
    started = lambda job: _wait_for_timing(tmp_path, job)  # noqa: E731
    process, out, err, _ = stopped_job(argv, tmp_path, env, started, how == "Ctrl-C")
    assert_ended_whole(process, code, out, err)
    assert f"paper:toy_figure1/copy_T5_scornn: not timed, the estimate was stopped ({said})" in out + err
    assert out.strip().splitlines()[-2:] == [
        f"reproduce: stopped by {said}; the rows not timed are marked above",
        "reproduce: 0 timed, 0 failed, 1 skipped",
    ], out
    assert not _timing_stores(tmp_path)  # its scratch folder went with it


def _timing_stores(folder: Path) -> list[Path]:
    """The store of `--estimate`'s timing run, in its scratch folder under TMPDIR."""
    return list(folder.glob("ortholab-estimate-*/estimate.db"))


def _wait_for_timing(folder: Path, process: subprocess.Popen) -> None:
    end = time.monotonic() + 180
    while not _timing(folder):
        assert process.poll() is None and time.monotonic() < end, process.communicate()
        time.sleep(0.2)


def _timing(folder: Path) -> bool:
    """Whether the timing run has recorded a few steps (it is then inside its training loop)."""
    for db in _timing_stores(folder):
        try:
            runs = Store(f"sqlite:///{db}", access="read").list_runs()
        except Exception:  # the fit is still creating its store
            continue
        if runs and runs[0].steps >= 3:
            return True
    return False
