"""What the analysis callbacks cost: training with every one of them at an interval of 100 steps against the
same training with none, both recorded in a SQLite store, alternating in one process.

    python benchmarks/bench_callbacks.py [--family scornn] [--hidden 170] [--seq-len 200] [--steps 400]
                                         [--interval 100] [--repeats 3] [--callbacks drift,nan_guard]

Prints the median wall time of each and their ratio (the target: < 1.05 at interval 100). The callbacks:
orthogonality drift and eigenvalue snapshots every `interval` steps, the gradient-norm profile and hidden
trajectory probes at every multiple of `interval`, timing every `interval` steps, and the NaN guard (which
looks at the loss and the gradients every step).
"""
from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
import time
from pathlib import Path

import lightning.pytorch as pl
import torch

from ortholab.datamodules import AddingTask
from ortholab.db import SQLLogger
from ortholab.training.callbacks import (EigenvalueSnapshots, GradientNormProfile, HiddenTrajectory, NaNGuard,
                                OrthogonalityDrift, Timing)
from ortholab.training.module import RecurrentModule


def analysis_callbacks(interval: int, steps: int, names: list[str]) -> list[pl.Callback]:
    probe_steps = list(range(0, steps, interval))
    every = {"drift": lambda: OrthogonalityDrift(every_n_steps=interval),
             "eigenvalues": lambda: EigenvalueSnapshots(every_n_steps=interval, every_epoch=False),
             "gradients": lambda: GradientNormProfile(steps=probe_steps),
             "trajectory": lambda: HiddenTrajectory(steps=probe_steps),
             "timing": lambda: Timing(every_n_steps=interval), "nan_guard": NaNGuard}
    unknown = sorted(set(names) - set(every))
    if unknown:
        raise SystemExit(f"--callbacks: unknown {unknown}; choose from {sorted(every)}")
    return [every[name]() for name in names]


ALL = "drift,eigenvalues,gradients,trajectory,timing,nan_guard"


def fit_seconds(args, with_callbacks: bool, root: Path) -> float:
    torch.manual_seed(0)
    data = AddingTask(seq_len=args.seq_len, train_size=args.steps * 50, val_size=50, test_size=50, batch_size=50)
    module = RecurrentModule(task=data.spec, family=args.family, hidden_size=args.hidden,
                             optimizers={"default": {"name": "rmsprop_tf", "lr": 1e-4}})
    logger = SQLLogger(db_url=f"sqlite:///{root / 'bench.db'}", name="bench", root_dir=str(root))
    trainer = pl.Trainer(accelerator="cpu", max_steps=args.steps, limit_val_batches=0, logger=logger,
                         callbacks=analysis_callbacks(args.interval, args.steps, args.callbacks.split(","))
                         if with_callbacks else [],
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         log_every_n_steps=50)
    start = time.perf_counter()
    trainer.fit(module, datamodule=data)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--family", default="scornn")
    parser.add_argument("--hidden", type=int, default=170)
    parser.add_argument("--seq-len", type=int, default=200)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--interval", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--callbacks", default=ALL, help=f"comma-separated subset of {ALL}")
    args = parser.parse_args()
    times = {False: [], True: []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeats):
            for with_callbacks in (False, True):  # alternating, so a noisy machine slows both alike
                times[with_callbacks].append(fit_seconds(args, with_callbacks, Path(tmp)))
    plain, analysed = statistics.median(times[False]), statistics.median(times[True])
    print(f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}")
    print(f"{args.family} n={args.hidden}, adding T={args.seq_len}, batch 50, {args.steps} steps, callbacks "
          f"{args.callbacks} every {args.interval} steps; median of {args.repeats}")
    print(f"without callbacks {plain:.2f} s, with {analysed:.2f} s: ratio {analysed / plain:.3f} "
          f"({(analysed / plain - 1) * 100:+.1f}% of step time)")


if __name__ == "__main__":
    main()
