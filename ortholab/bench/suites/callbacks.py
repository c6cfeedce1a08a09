"""`ortholab bench --suite callbacks`: what the analysis callbacks cost. Training with them at an interval against
the same training without them, both recorded in a SQLite store, alternating in one process.

The callbacks: orthogonality drift and eigenvalue snapshots every `interval` steps, the gradient-norm profile and
hidden trajectory probes at every multiple of `interval`, timing every `interval` steps, and the NaN guard (which
looks at the loss and the gradients every step).
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import asdict
from functools import partial
from pathlib import Path

from ortholab.bench.families import machine
from ortholab.bench.suites.common import SuiteResult, alternating_medians
from ortholab.bench.suites.settings import Callbacks
from ortholab.errors import ConfigError

WITHOUT, WITH = "training without callbacks", "training with callbacks"


def analysis_callbacks(names: list[str], interval: int, steps: int) -> list:
    from ortholab.training.callbacks import (
        EigenvalueSnapshots,
        GradientNormProfile,
        HiddenTrajectory,
        NaNGuard,
        OrthogonalityDrift,
        Timing,
    )

    probe_steps = list(range(0, steps, interval))
    every = {
        "drift": lambda: OrthogonalityDrift(every_n_steps=interval),
        "eigenvalues": lambda: EigenvalueSnapshots(every_n_steps=interval, every_epoch=False),
        "gradients": lambda: GradientNormProfile(steps=probe_steps),
        "trajectory": lambda: HiddenTrajectory(steps=probe_steps),
        "timing": lambda: Timing(every_n_steps=interval),
        "nan_guard": NaNGuard,
    }
    unknown = sorted(set(names) - set(every))
    if unknown:
        raise ConfigError(f"--param callbacks: unknown {unknown}; choose from {', '.join(every)}")
    return [every[name]() for name in names]


def fit_seconds(with_callbacks: bool, settings: Callbacks, root: Path) -> float:
    import lightning.pytorch as pl
    import torch

    from ortholab.datamodules import AddingTask
    from ortholab.db import SQLLogger
    from ortholab.training.module import RecurrentModule

    torch.manual_seed(0)
    data = AddingTask(
        seq_len=settings.seq_len,
        train_size=settings.steps * settings.batch,
        val_size=settings.batch,
        test_size=settings.batch,
        batch_size=settings.batch,
    )
    module = RecurrentModule(
        task=data.spec,
        family=settings.family,
        hidden_size=settings.hidden,
        optimizers={"default": {"name": "rmsprop_tf", "lr": 1e-4}},
    )
    logger = SQLLogger(db_url=f"sqlite:///{root / 'bench.db'}", name="bench", root_dir=str(root))
    callbacks = (
        analysis_callbacks(settings.callbacks.split(","), settings.interval, settings.steps) if with_callbacks else []
    )
    trainer = pl.Trainer(
        accelerator="cpu",
        max_steps=settings.steps,
        limit_val_batches=0,
        logger=logger,
        callbacks=callbacks,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=50,
    )
    start = time.perf_counter()
    trainer.fit(module, datamodule=data)
    return time.perf_counter() - start


def run(settings: Callbacks) -> SuiteResult:
    from ortholab.models import FAMILIES

    if settings.family not in FAMILIES:
        raise ConfigError(f"--families {settings.family}: not registered; choose from {sorted(FAMILIES)}")
    analysis_callbacks(settings.callbacks.split(","), settings.interval, settings.steps)  # names checked first
    with tempfile.TemporaryDirectory() as tmp:
        runs = {WITHOUT: False, WITH: True}
        seconds = alternating_medians(runs, partial(fit_seconds, settings=settings, root=Path(tmp)), settings.repeats)
    result = SuiteResult("callbacks", machine(), asdict(settings), seconds, {})
    result.ratio(WITH, WITHOUT)
    share = result.ratios[f"{WITH} / {WITHOUT}"] - 1
    result.notes.append(f"the callbacks: {share * 100:+.1f}% of training time (target: under +5% at interval 100)")
    return result
