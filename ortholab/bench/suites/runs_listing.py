"""`ortholab bench --suite runs-listing`: how long `ortholab runs` takes on a large store (by default 1,000 runs of
10,000 metric points each; the target is under 1 s).

Each run has `keys` metrics (val/loss is the main one) over points/keys steps; 1 % of the runs are still running
(the listing also reads their plan and recent step times). Timed: the listing as `ortholab runs` computes it
(`ortholab.db.progress.runs_rows`: one summary query plus the running runs' progress), the summary query alone
(`Store.list_runs`) and, with process=1, a whole `ortholab runs` process (interpreter start-up included); each is
the median of `repeats` calls (of `repeats` // 2 for the process), wall and CPU time. The ratios are wall times.
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from ortholab.bench.families import machine
from ortholab.bench.suites.common import SuiteResult
from ortholab.bench.suites.settings import RunsListing
from ortholab.errors import ConfigError

CHUNK = 50_000  # metric rows per INSERT
METRICS = [
    "val/loss",
    "train/loss",
    "val/acc",
    "time/step_s",
    "memory/peak_mb",
    "analysis/orthogonality",
    "time/samples_per_s",
    "val/bpc",
    "test/loss",
    "train/acc",
]
TARGET_S = 1.0  # the target: `ortholab runs` lists 1,000 runs x 10,000 points in under a second
LISTING, SUMMARY, PROCESS = "listing (runs_rows)", "summary query (Store.list_runs)", "whole `ortholab runs` process"


def build(url: str, runs: int, points: int, keys: int) -> None:
    """A store of `runs` runs with `points` points each over `keys` metrics; every hundredth run still running."""
    from sqlalchemy import insert

    from ortholab.db import Store
    from ortholab.db.schema import Metric, Run

    store = Store(url)
    names, steps = METRICS[:keys], points // keys
    with store._engine.begin() as conn:
        for run_index in range(runs):
            running = run_index % 100 == 99
            run_id = conn.execute(
                insert(Run).values(
                    name=f"bench-{run_index}",
                    family="scornn",
                    task="copying",
                    status="running" if running else "finished",
                    stage="fit",
                    main_metric="val/loss",
                    main_metric_mode="min",
                    hostname="bench",
                    world_size=1,
                    tags=[],
                    info={"plan": {"total_steps": steps * 2, "steps_per_epoch": 100, "max_epochs": None}},
                )
            ).inserted_primary_key[0]
            rows = [
                {
                    "run_id": run_id,
                    "key": key,
                    "step": step,
                    "epoch": step // 100,
                    "value": 1.0 / (1 + step) + 0.001 * k + 0.0001 * run_index,
                    "wall_time": float(step),
                }
                for k, key in enumerate(names)
                for step in range(steps)
            ]
            for start in range(0, len(rows), CHUNK):
                conn.execute(insert(Metric), rows[start : start + CHUNK])
            if run_index % 100 == 0:
                print(f"  built {run_index + 1}/{runs} runs", file=sys.stderr, flush=True)
    store.close()


def _cpu() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def median_seconds(call, repeats: int) -> tuple[float, float]:
    """The median wall seconds and CPU seconds (this process and its children) of `repeats` calls: on a shared
    machine the CPU time is the one to compare."""
    walls, cpus = [], []
    for _ in range(repeats):
        start, cpu = time.perf_counter(), _cpu()
        call()
        walls.append(time.perf_counter() - start)
        cpus.append(_cpu() - cpu)
    return statistics.median(walls), statistics.median(cpus)


def run(settings: RunsListing) -> SuiteResult:
    from sqlalchemy import func, select

    from ortholab.db import Store
    from ortholab.db.progress import runs_rows
    from ortholab.db.schema import Metric, Run

    if settings.keys > len(METRICS):
        raise ConfigError(f"--param keys={settings.keys}: at most {len(METRICS)} metrics per run")
    if settings.process not in (0, 1):
        raise ConfigError(f"--param process={settings.process}: 1 times a whole `ortholab runs` process, 0 not")
    path = Path(settings.db) if settings.db else Path(tempfile.mkdtemp(prefix="ortholab-bench-")) / "runs.db"
    url = f"sqlite:///{path.absolute()}"
    notes = []
    try:
        if not path.exists():
            start = time.perf_counter()
            build(url, settings.runs, settings.points, settings.keys)
            notes.append(f"built {path} in {time.perf_counter() - start:.0f} s")
        store = Store(url, access="read")
        with store._engine.connect() as conn:
            n_runs = conn.scalar(select(func.count()).select_from(Run))
            n_points = conn.scalar(select(func.count()).select_from(Metric))
        runs_rows(url)  # untimed: the file cache warm, as a second `ortholab runs` finds it
        timed = {
            LISTING: median_seconds(lambda: runs_rows(url), settings.repeats),
            SUMMARY: median_seconds(store.list_runs, settings.repeats),
        }
        if settings.process:  # a few seconds each, nearly all of it importing torch and Lightning
            command = [sys.executable, "-c", "from ortholab.cli.main import main; main()", "runs", "--db", url]
            timed[PROCESS] = median_seconds(
                lambda: subprocess.run(command, capture_output=True, check=True), max(settings.repeats // 2, 1)
            )
        store.close()
        seconds = {name: wall for name, (wall, _) in timed.items()}
        cpu = {name: cpu_s for name, (_, cpu_s) in timed.items()}
        notes.append(
            f"{n_runs:,} runs, {n_points:,} points ({os.path.getsize(path) / 2**20:.1f} MB), load "
            f"average {os.getloadavg()[0]:.1f}; CPU seconds (the one to compare on a shared machine): "
            + ", ".join(f"{name} {value:.3f}" for name, value in cpu.items())
        )
    finally:
        if not settings.db:
            shutil.rmtree(path.parent, ignore_errors=True)
    result = SuiteResult("runs-listing", machine(), asdict(settings), seconds, {}, notes)
    result.ratios[f"{LISTING} / the {TARGET_S:g} s target"] = seconds[LISTING] / TARGET_S
    result.ratio(LISTING, SUMMARY)
    if settings.process:
        result.ratio(LISTING, PROCESS)
    return result
