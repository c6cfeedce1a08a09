"""Two-process DDP on CPU (gloo) through the CLI: one run, no duplicated points, synced validation, equal ranks."""

import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
from test_cli import DEMO, TINY
from tolerances import roundoff

from ortholab.datamodules import CopyingTask
from ortholab.db import Store
from ortholab.training.module import RecurrentModule

REPO = Path(__file__).resolve().parents[1]
ORTHOLAB = Path(sys.executable).parent / "ortholab"  # DDP relaunches this very command for rank 1


def test_two_process_ddp_records_one_run_with_synced_metrics(tmp_path):
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    env = {
        "PYTHONPATH": f"{REPO}:{REPO / 'tests'}",
        "PATH": str(ORTHOLAB.parent),
        "ORTHOLAB_CONFIG_MODULES": "faults",
    }  # the test's own callback, admitted as a user admits their package
    done = subprocess.run(
        [
            str(ORTHOLAB),
            "fit",
            "--config",
            DEMO,
            *TINY,
            "--data.val_size",  # 7 over 2 processes: torch's DistributedSampler would evaluate one of them twice
            "7",
            "--data.eval_batch_size",
            "3",
            "--db",
            db,
            "--trainer.devices",
            "2",
            "--trainer.strategy",
            "ddp",
            "--trainer.accelerator",
            "cpu",
            "--trainer.callbacks+=faults.SaveRecurrentMatrix",
            f"--trainer.callbacks.folder={tmp_path / 'ranks'}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    store = Store(db)
    (run,) = store.list_runs()
    detail = store.get_run(run.id)
    assert run.status == "finished" and detail.world_size == 2
    for key in store.metric_keys(run.id):
        steps = [p.step for p in store.metric_series(run.id, key)]
        assert not [s for s, n in Counter(steps).items() if n > 1], f"{key} has duplicated steps"

    # the recurrent parametrisation is identical on both ranks after training
    w0, w1 = (torch.load(tmp_path / "ranks" / f"rank{r}.pt") for r in (0, 1))
    assert torch.equal(w0, w1)

    # validation covers the whole split once: the last val/loss equals a single-process evaluation of the final weights
    checkpoint = Path(detail.run_dir) / "checkpoints" / "last.ckpt"
    module = RecurrentModule.load_from_checkpoint(checkpoint, weights_only=False)
    task = CopyingTask(seq_len=5, train_size=40, batch_size=10, val_size=7, eval_batch_size=7)
    inputs, targets = task.make_split("val")
    with torch.no_grad():
        loss = module.objective.loss(module(inputs), targets)
    last_val = store.metric_series(run.id, "val/loss")[-1]
    assert torch.load(checkpoint, weights_only=False)["global_step"] == last_val.step
    # float32: T = 25 steps through n = 8 units, a readout and a softmax over 9 symbols, the mean of 175 CE terms
    # (split over two ranks there), relative to the loss
    assert abs(last_val.value - loss.item()) < roundoff(torch.float32, 8 * 25 + 2 * 9 + 175, scale=loss.item())


def test_four_concurrent_runs_share_one_sqlite_file(tmp_path):
    # several training processes writing one store at once: no "database is locked", no lost metric point
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    runs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from ortholab.cli.main import main; main()",
                "fit",
                "--config",
                DEMO,
                *TINY,
                "--db",
                db,
                "--name",
                f"concurrent-{k}",
                "--trainer.log_every_n_steps",
                "1",
            ],
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for k in range(4)
    ]
    errors = [p.communicate(timeout=600)[1] for p in runs]
    assert [p.returncode for p in runs] == [0, 0, 0, 0], errors
    store = Store(db)
    recorded = store.list_runs()
    assert sorted(r.name for r in recorded) == [f"concurrent-{k}" for k in range(4)]
    for run in recorded:
        assert run.status == "finished"
        assert [p.step for p in store.metric_series(run.id, "train/loss")] == list(range(6))
        assert [p.step for p in store.metric_series(run.id, "val/loss")] == [3, 6]


def test_an_evaluation_shard_gives_each_position_to_one_process_and_refuses_an_idle_one():
    import pytest

    from ortholab.datamodules.sharding import EvaluationShard
    from ortholab.errors import ConfigError

    order = [4, 0, 6, 2, 1, 5, 3]
    shards = [list(EvaluationShard(order, rank, 3, "val")) for rank in range(3)]
    assert sorted(sum(shards, [])) == list(range(7)) and [len(s) for s in shards] == [3, 2, 2]
    assert [len(EvaluationShard(order, rank, 3, "val")) for rank in range(3)] == [3, 2, 2]
    assert shards[0] == [4, 2, 3]  # the split's evaluation order (by length) is kept within a process
    with pytest.raises(ConfigError, match="a test split of 4 or more"):
        EvaluationShard([0, 1, 2], 0, 4, "test")


def test_a_split_smaller_than_the_processes_is_refused_before_the_run_is_recorded(tmp_path):
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    done = subprocess.run(
        [str(ORTHOLAB), "fit", "--config", DEMO, *TINY, "--data.val_size", "1", "--db", db]
        + ["--trainer.devices", "2", "--trainer.strategy", "ddp", "--trainer.accelerator", "cpu"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={"PYTHONPATH": f"{REPO}:{REPO / 'tests'}", "PATH": str(ORTHOLAB.parent)},
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "the val split holds 1 sequence for 2 processes" in done.stderr
    assert Store(db).list_runs() == []  # nothing recorded, no failed run left behind


@pytest.mark.parametrize("rank", [0, 1])
def test_a_sigterm_to_one_process_stops_every_rank_with_a_checkpoint_and_no_traceback(tmp_path, rank):
    """Walk-through 11: a SIGTERM to rank 0 made rank 1 exit with a TypeError (it knew no signal name), and one to
    rank 1 alone (one node's processes preempted) went unheard: training ran to its end."""
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    done = subprocess.run(
        [str(ORTHOLAB), "fit", "--config", DEMO, *TINY, "--trainer.max_steps", "40", "--db", db]
        + ["--trainer.devices", "2", "--trainer.strategy", "ddp", "--trainer.accelerator", "cpu"]
        + ["--trainer.callbacks+=faults.SignalAt", "--trainer.callbacks.step=2"]
        + ["--trainer.callbacks.signal_name=SIGTERM", f"--trainer.callbacks.rank={rank}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={
            "PYTHONPATH": f"{REPO}:{REPO / 'tests'}",
            "PATH": str(ORTHOLAB.parent),
            "ORTHOLAB_CONFIG_MODULES": "faults",
        },
    )
    assert done.returncode == 128 + signal.SIGTERM, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    (run,) = Store(db).list_runs()
    assert run.status == "interrupted" and run.reason.startswith("SIGTERM at step "), (run.status, run.reason)
    stopped_at = int(run.reason.split()[3].rstrip(";"))
    assert stopped_at < 40  # stopped, not trained to the end
    checkpoint = Path(Store(db).get_run(run.id).run_dir) / "checkpoints" / "last.ckpt"
    assert torch.load(checkpoint, weights_only=False)["global_step"] == stopped_at
