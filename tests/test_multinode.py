"""Training across machines, rehearsed on this one: two "nodes" over gloo on localhost through the console script,
launched by torchrun and by SLURM's environment (as `srun` sets it; Lightning's SLURMEnvironment reads it). Each
records one run of world size 2 with one point per step (docs/gpus.md, several machines). About 20 s each: behind
the slow marker, which CI runs."""

import os
import random
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from test_cli import DEMO, TINY

from ortholab.db import Store

BIN = Path(sys.executable).parent
TRAIN = [
    str(BIN / "ortholab"),
    "fit",
    "--config",
    DEMO,
    *TINY,
    "--trainer.accelerator",
    "cpu",
    "--trainer.num_nodes",
    "2",
    "--trainer.devices",
    "1",
    "--trainer.strategy",
    "ddp",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_nodes(commands_and_envs, cwd: Path) -> None:
    nodes = [
        subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for cmd, env in commands_and_envs
    ]
    outputs = [node.communicate(timeout=300)[0] for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], "\n\n".join(o[-3000:] for o in outputs)


def assert_one_run_of_two(db: str) -> None:
    store = Store(db)
    (run,) = store.list_runs()  # the second node records nothing of its own
    assert run.status == "finished" and store.get_run(run.id).world_size == 2
    assert [p.step for p in store.metric_series(run.id, "train/loss")] == list(range(6))  # one point per step


@pytest.mark.slow
def test_two_nodes_through_torchrun(tmp_path):
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    port = free_port()
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    run_nodes(
        [
            (
                [
                    str(BIN / "torchrun"),
                    "--nnodes",
                    "2",
                    "--nproc-per-node",
                    "1",
                    "--node-rank",
                    str(rank),
                    "--master-addr",
                    "127.0.0.1",
                    "--master-port",
                    str(port),
                    "--no-python",
                    *TRAIN,
                    "--db",
                    db,
                ],
                env,
            )
            for rank in (0, 1)
        ],
        tmp_path,
    )
    assert_one_run_of_two(db)


@pytest.mark.slow
def test_two_nodes_in_slurms_environment(tmp_path):
    # what `srun --nodes 2 --ntasks-per-node 1 ortholab fit ...` gives each task; Lightning derives the master's
    # address from SLURM_NODELIST and its port from the job id
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    job = str(random.randrange(1000, 9999))
    common = {
        **os.environ,
        "SLURM_NTASKS": "2",
        "SLURM_NTASKS_PER_NODE": "1",
        "SLURM_NNODES": "2",
        "SLURM_NODELIST": "localhost",
        "SLURM_JOB_ID": job,
        "SLURM_JOB_NAME": "ortholab",
        "SLURM_LOCALID": "0",
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
    }
    run_nodes(
        [([*TRAIN, "--db", db], {**common, "SLURM_PROCID": str(rank), "SLURM_NODEID": str(rank)}) for rank in (0, 1)],
        tmp_path,
    )
    assert_one_run_of_two(db)
