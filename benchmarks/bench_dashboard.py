"""Dashboard page load times on a large generated store: 100 runs × 10,000 metric points each.

    python benchmarks/bench_dashboard.py [--runs 100] [--points 10000] [--selected 10] [--db sqlite:////tmp/bench.db]

Runs are created through db.Store; the metric points are bulk-inserted into the `metrics` table (one
executemany instead of a million logger calls). Each page is then loaded with Streamlit's AppTest, as a
user would open it: first with empty caches (cold), then again (warm, what every rerun after a widget
change costs). Curves, Eigenvalues and Compare show `--selected` runs (W&B's default is 10 per chart).
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
from sqlalchemy import create_engine, insert
from streamlit.testing.v1 import AppTest

from ortholab.app.data import clear_caches
from ortholab.db import Store
from ortholab.db.artifacts import EIGENVALUES, GRAD_NORMS, NPY_MEDIA_TYPE, array_to_bytes
from ortholab.db.schema import Metric

APP = str(Path(__file__).resolve().parents[1] / "app" / "main.py")
PAGES = ["runs", "curves", "eigenvalues", "gradients", "compare"]
KEYS = ("train/loss", "train/acc", "val/loss", "val/acc")  # points split evenly among them


def generate(url: str, runs: int, points: int) -> list[int]:
    store = Store(url)
    rng = np.random.default_rng(0)
    per_key = points // len(KEYS)
    ids, rows = [], []
    t0 = time.time()
    for i in range(runs):
        run = store.create_run(
            name=f"bench-{i}", family=("scornn", "lstm", "gru", "rnn")[i % 4], task="copying", main_metric="val/loss",
            baseline=10 * math.log(8) / 120, config={"model": {"hidden_size": 64 + i}}, tags=["bench"],
        )  # fmt: skip
        store.log_params(
            run, {"model": {"hidden_size": 64 + i, "lr": 1e-3 * (1 + i % 5)}, "data": {"init_args": {"batch_size": 20}}}
        )
        for k in range(3):
            store.add_artifact(
                run,
                EIGENVALUES,
                "W",
                step=k * per_key,
                data=array_to_bytes(np.exp(1j * rng.uniform(-np.pi, np.pi, 64))),
                meta={"near_minus_one": k},
                media_type=NPY_MEDIA_TYPE,
            )
            store.add_artifact(
                run,
                GRAD_NORMS,
                "dL/dh_t",
                step=k * per_key,
                data=array_to_bytes(rng.uniform(0.1, 1, 120)),
                media_type=NPY_MEDIA_TYPE,
            )
        curve = np.exp(-np.arange(per_key) / (per_key / 5)) + 0.05 * rng.random(per_key)
        for key in KEYS:
            rows += [
                {
                    "run_id": run,
                    "key": key,
                    "step": s,
                    "epoch": s // 1000,
                    "value": float(v),
                    "wall_time": t0 + s * 0.01,
                }
                for s, v in enumerate(curve)
            ]
        store.set_status(run, "finished")
        ids.append(run)
    engine = create_engine(url)
    with engine.begin() as connection:
        connection.execute(insert(Metric), rows)
    engine.dispose()
    store.close()
    return ids


def load(page: str, selected: list[int]) -> float:
    at = AppTest.from_file(APP, default_timeout=600)
    at.session_state["run"] = selected
    start = time.perf_counter()
    at.run()
    if page != "runs":
        at.switch_page(f"views/{page}.py").run()
    elapsed = time.perf_counter() - start
    assert not at.exception, [e.value for e in at.exception]
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--points", type=int, default=10_000, help="metric points per run")
    parser.add_argument("--selected", type=int, default=10)
    parser.add_argument("--db", default=None, help="SQLAlchemy URL to generate into (default: a temporary file)")
    args = parser.parse_args()
    url = args.db or f"sqlite:///{Path(tempfile.mkdtemp()) / 'bench.db'}"
    logging.getLogger("streamlit").setLevel(logging.ERROR)  # 'no runtime' notes from clearing caches outside one
    os.environ["ORTHOLAB_DB"] = url
    start = time.perf_counter()
    ids = generate(url, args.runs, args.points)
    print(f"generated {args.runs} runs × {args.points:,} points in {time.perf_counter() - start:.1f} s into {url}")
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; {args.selected} runs selected")
    selected = ids[: args.selected]
    load("runs", selected)  # imports (streamlit, plotly, pandas) out of the measurement
    print(f"{'page':<12} {'cold (s)':>9} {'warm (s)':>9}")
    for page in PAGES:
        clear_caches()
        cold = load(page, selected)
        warm = load(page, selected)
        print(f"{page:<12} {cold:>9.2f} {warm:>9.2f}")


if __name__ == "__main__":
    main()
