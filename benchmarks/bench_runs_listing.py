"""How long `ortholab runs` takes on a large store: 1,000 runs of 10,000 metric points each (target: under 1 s).

    python benchmarks/bench_runs_listing.py                      # builds the store in a temporary folder
    python benchmarks/bench_runs_listing.py --db /tmp/big.db     # builds it there once, reuses it afterwards
    python benchmarks/bench_runs_listing.py --runs 100 --points 1000

Each run has `--keys` metrics (val/loss is the main one) over points/keys steps; 1 % of the runs are still
running (they also read their plan and recent step times). Printed: the listing as `ortholab runs` computes it
(`training.commands.runs_rows`: one summary query plus the running runs' progress), the summary query alone
(`Store.list_runs`), and a whole `ortholab runs` process (interpreter start-up included), each the median of
`--repeats` calls.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sqlalchemy import func, insert, select, update

from ortholab.db import Store
from ortholab.db.schema import Metric, Run
from ortholab.training.commands import runs_rows

CHUNK = 50_000  # rows per INSERT batch


def build(url: str, runs: int, points: int, keys: int) -> None:
    """A store of `runs` runs with `points` points each, over `keys` metrics; about 1 % of them running."""
    store = Store(url)
    names = ["val/loss", "train/loss", "val/acc", "time/step_s", "memory/peak_mb", "analysis/orthogonality",
             "time/samples_per_s", "val/bpc", "test/loss", "train/acc"][:keys]
    steps = points // len(names)
    with store._engine.begin() as conn:
        for run_index in range(runs):
            running = run_index % 100 == 99
            run_id = conn.execute(insert(Run).values(
                name=f"bench-{run_index}", family="scornn", task="copying", status="running" if running else "finished",
                stage="fit", main_metric="val/loss", main_metric_mode="min", hostname="bench", world_size=1, tags=[],
                info={"plan": {"total_steps": steps * 2, "steps_per_epoch": 100, "max_epochs": None}},
            )).inserted_primary_key[0]
            rows = [{"run_id": run_id, "key": key, "step": step, "epoch": step // 100,
                     "value": 1.0 / (1 + step) + 0.001 * k + 0.0001 * run_index, "wall_time": float(step)}
                    for k, key in enumerate(names) for step in range(steps)]
            for start in range(0, len(rows), CHUNK):
                conn.execute(insert(Metric), rows[start:start + CHUNK])
            if run_index % 100 == 0:
                print(f"  built {run_index + 1}/{runs} runs", file=sys.stderr, flush=True)
    store.close()


def median_seconds(call, repeats: int) -> tuple[float, float]:
    """Median (wall seconds, CPU seconds of this process and its children) of `repeats` calls: on a shared
    machine the CPU time is the one to compare."""
    walls, cpus = [], []
    for _ in range(repeats):
        start, cpu = time.perf_counter(), _cpu()
        call()
        walls.append(time.perf_counter() - start)
        cpus.append(_cpu() - cpu)
    return statistics.median(walls), statistics.median(cpus)


def _cpu() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--points", type=int, default=10_000, help="metric points per run")
    parser.add_argument("--keys", type=int, default=10, help="metrics per run (at most 10)")
    parser.add_argument("--db", default=None, help="SQLite file to build (or reuse, when it exists)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    path = Path(args.db) if args.db else Path(tempfile.mkdtemp(prefix="ortholab-bench-")) / "runs.db"
    url = f"sqlite:///{path.absolute()}"
    if not path.exists():
        start = time.perf_counter()
        build(url, args.runs, args.points, args.keys)
        print(f"built {path} in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    try:
        store = Store(url, access="read")
    except TypeError:  # an OrthoLab from before reader access (to measure the old listing on its own store)
        store = Store(url)
    with store._engine.connect() as conn:
        n_runs = conn.scalar(select(func.count()).select_from(Run))
        n_points = conn.scalar(select(func.count()).select_from(Metric))
    rows = runs_rows(url)  # warm the file cache once, as a second `ortholab runs` finds it
    listing = median_seconds(lambda: runs_rows(url), args.repeats)
    summary = median_seconds(store.list_runs, args.repeats)
    command = [sys.executable, "-c", "from ortholab.training.cli import main; main()", "runs", "--db", url]
    process = median_seconds(lambda: subprocess.run(command, capture_output=True, check=True), max(args.repeats // 2, 1))
    result = {"runs": n_runs, "points": n_points, "listed": len(rows), "db": str(path),
              "db_mb": round(os.path.getsize(path) / 2**20, 1), "load_average": round(os.getloadavg()[0], 1)}
    for name, (wall, cpu) in (("runs_rows", listing), ("list_runs", summary), ("ortholab_runs_process", process)):
        result[f"{name}_s"], result[f"{name}_cpu_s"] = round(wall, 3), round(cpu, 3)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{n_runs} runs, {n_points} points ({result['db_mb']} MB), load average {result['load_average']}: "
              f"`ortholab runs` listing {listing[0]:.3f} s ({listing[1]:.3f} s CPU); its summary query "
              f"{summary[0]:.3f} s ({summary[1]:.3f} s CPU); a whole `ortholab runs` process {process[0]:.2f} s "
              f"({process[1]:.2f} s CPU, mostly imports)")
    if not args.db:
        shutil.rmtree(path.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
