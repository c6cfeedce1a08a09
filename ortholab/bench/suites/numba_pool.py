"""`ortholab bench --suite numba-pool`: what numba's thread pool costs when it is larger than the threads a process
uses. Each process here has OMP_NUM_THREADS=1 (torch's ops and the kernels on one thread) and a numba pool of one
thread or of `pool` (NUMBA_NUM_THREADS, numba's default: one per core). A uRNN's forward and backward (the numba
kernels of models/urnn_kernels.py) is timed in a fresh process while another runs an EURNN's forward in a loop (the
kernels of models/givens_kernels.py), for the four pairings of the two pools. ortholab/threads.py sizes the pool by
OMP_NUM_THREADS; before it, every process had the larger one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict

from ortholab.bench.families import machine
from ortholab.bench.suites.common import SuiteResult
from ortholab.bench.suites.settings import NumbaPool

TIMED = """
import json, statistics, sys, time, torch
from ortholab.bench.families import build
hidden, batch, seq_len, repeats = map(int, sys.argv[1:])
torch.manual_seed(0)
model, x = build("urnn", hidden, "cpu"), torch.randn(batch, seq_len, 1)
def once():
    start = time.perf_counter()
    model(x).sum().backward()
    return time.perf_counter() - start
once()
print(json.dumps(statistics.median(once() for _ in range(repeats))))
"""

NEIGHBOUR = """
import sys, torch
from ortholab.bench.families import build
hidden, batch, seq_len = map(int, sys.argv[1:])
model, x = build("eurnn", hidden, "cpu"), torch.randn(batch, seq_len, 1)
with torch.no_grad():
    model(x)
    print("ready", flush=True)
    while True:
        model(x)
"""

BOTH_LARGE, BOTH_ONE = "pools of every core", "pools of one"
OWN_LARGE, OTHERS_LARGE = "own pool of every core, the other's of one", "own pool of one, the other's of every core"


def _env(pool: int) -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": str(pool)}


def timed_beside(settings: NumbaPool, own: int, other: int) -> float:
    """Seconds of the uRNN's forward+backward (median) with a pool of `own`, while the EURNN runs with `other`."""
    shape = [str(settings.batch), str(settings.seq_len)]
    neighbour = subprocess.Popen(
        [sys.executable, "-c", NEIGHBOUR, str(settings.neighbour_hidden), *shape],
        env=_env(other),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        if neighbour.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the EURNN process beside the timing did not start (exit {neighbour.poll()})")
        done = subprocess.run(
            [sys.executable, "-c", TIMED, str(settings.hidden), *shape, str(settings.repeats)],
            env=_env(own),
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode:
            raise RuntimeError(f"the timed uRNN process failed: {done.stderr[-1000:]}")
        return float(json.loads(done.stdout.strip().splitlines()[-1]))
    finally:
        neighbour.kill()
        neighbour.wait()


def run(settings: NumbaPool) -> SuiteResult:
    pool = settings.pool or os.cpu_count() or 1
    result = SuiteResult("numba-pool", machine(), {**asdict(settings), "pool": pool}, {}, {})
    pairings = {BOTH_LARGE: (pool, pool), OWN_LARGE: (pool, 1), OTHERS_LARGE: (1, pool), BOTH_ONE: (1, 1)}
    for name, (own, other) in pairings.items():
        result.seconds[name] = timed_beside(settings, own, other)
    for name in (BOTH_LARGE, OWN_LARGE, OTHERS_LARGE):
        result.ratio(name, BOTH_ONE)
    if pool == 1:
        result.notes.append("one core: every pool has one thread, and the four pairings are the same")
    return result
