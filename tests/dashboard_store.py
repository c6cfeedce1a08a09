"""Run stores for the dashboard tests, written through db.Store: one real short training run (the CLI in a
subprocess) and hand-written runs covering every artifact kind and every run state."""

from __future__ import annotations

import io
import math
import subprocess
import sys
import time
import wave
from pathlib import Path

import numpy as np

from ortholab.db import Store
from ortholab.db.artifacts import AUDIO, EIGENVALUES, GRAD_NORMS, HIDDEN_TRAJECTORY, NPY_MEDIA_TYPE, PHASES, array_to_bytes

REPO = Path(__file__).resolve().parents[1]
APP_MAIN = str(REPO / "app" / "main.py")
COPYING_T = 100
COPYING_BASELINE = 10 * math.log(8) / (COPYING_T + 20)
ADDING_BASELINE = 1 / 6
REAL_FIT = [
    "--model.hidden_size", "8", "--model.family_args", "{rho: 4}", "--data.seq_len", "5", "--data.train_size", "40",
    "--data.batch_size", "10", "--data.val_size", "20", "--data.eval_batch_size", "20", "--trainer.max_steps", "6",
    "--trainer.val_check_interval", "3", "--trainer.log_every_n_steps", "1", "--trainer.enable_progress_bar", "false",
    "--trainer.enable_model_summary", "false",
]  # fmt: skip


def train_real_run(url: str, runs_dir: Path, name: str = "real-scornn") -> None:
    """A real scoRNN run on copying through `ortholab fit` (6 batches), recorded in `url`."""
    done = subprocess.run(
        [sys.executable, "-c", "from ortholab.training.cli import main; main()", "fit",
         "--config", str(REPO / "configs" / "demo" / "copying_scornn.yaml"), *REAL_FIT,
         "--db", url, "--name", name, "--runs_dir", str(runs_dir)],
        cwd=runs_dir, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]


def wav_bytes(samples: np.ndarray, rate: int = 8000) -> bytes:
    """Mono 16-bit PCM WAV bytes of samples in [−1, 1]."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as writer:
        writer.setnchannels(1)
        writer.setsampwidth(2)
        writer.setframerate(rate)
        writer.writeframes(np.round(np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes())
    return buffer.getvalue()


def npy(store: Store, run_id: int, kind: str, step: int, array: np.ndarray, **meta) -> None:
    store.add_artifact(run_id, kind, kind, step=step, data=array_to_bytes(array), meta=meta, media_type=NPY_MEDIA_TYPE)


def unit_circle(n: int, turn: float) -> np.ndarray:
    return np.exp(1j * (np.linspace(0.0, 2.0 * np.pi, n, endpoint=False) + turn))


def add_hand_written_runs(store: Store) -> dict[str, int]:
    """Runs covering what the pages show; returns name -> run id. Points are stamped from now on."""
    ids = {}
    t0 = time.time() + 1.0

    # an LSTM baseline on adding: curves, parameter groups through the 'default' optimizer, tags; no matrix
    run = ids["lstm-adding"] = store.create_run(
        name="lstm-adding", family="lstm", task="adding", main_metric="val/loss", baseline=ADDING_BASELINE,
        config={"model": {"family": "lstm", "hidden_size": 64}}, tags=["baseline", "cpu"],
    )  # fmt: skip
    store.log_params(
        run, {"seed": 1, "model": {"family": "lstm", "hidden_size": 64}, "data": {"init_args": {"batch_size": 50}}}
    )
    for k, step in enumerate(range(99, 500, 100)):
        store.log_metrics(
            run,
            {"train/loss": 0.3 / (k + 1), "val/loss": 0.2 / (k + 1)},
            step=step,
            epoch=k // 2,
            wall_time=t0 + 10 * k,
        )
    store.update_run(
        run,
        parameter_count=17_217,
        info={"parameter_counts": {"other": 17_217}, "optimizers": {"default": {"name": "adam", "lr": 0.001}}},
    )
    store.set_status(run, "finished")

    # scoRNN with every matrix analysis: eigenvalue snapshots, drift, gradient profiles, hidden trajectories
    run = ids["scornn-snapshots"] = store.create_run(
        name="scornn-snapshots", family="scornn", task="copying", main_metric="val/loss", baseline=COPYING_BASELINE,
        config={"model": {"family": "scornn", "hidden_size": 16}},
    )  # fmt: skip
    store.log_params(run, {"seed": 1, "model": {"family": "scornn", "hidden_size": 16}})  # no batch size recorded
    for k, step in enumerate((0, 100, 200)):
        store.log_metrics(
            run,
            {"val/loss": 0.5 / (k + 1), "analysis/orthogonality": 1e-7 * 2**k},
            step=step,
            epoch=0,
            wall_time=t0 + k,
        )
        npy(store, run, EIGENVALUES, step, unit_circle(16, 0.1 * k), near_minus_one=4 - k, tolerance=0.01)
        npy(store, run, GRAD_NORMS, step, np.exp(-np.arange(30) / (5.0 + 10 * k)), probe_size=50)
    for step in (0, 200):
        npy(
            store,
            run,
            HIDDEN_TRAJECTORY,
            step,
            np.linspace(-1, 1, 30 * 16, dtype=np.float32).reshape(30, 16),
            unshifted=False,
        )
    store.update_run(run, parameter_count=1_500)
    store.set_status(run, "finished")

    # scuRNN: eigenvalues once, phases at two steps
    run = ids["scurnn-phases"] = store.create_run(
        name="scurnn-phases", family="scurnn", task="copying", main_metric="val/loss", baseline=COPYING_BASELINE
    )
    store.log_metrics(run, {"val/loss": 0.4}, step=0, epoch=0, wall_time=t0)
    npy(store, run, EIGENVALUES, 0, unit_circle(8, 0.3), near_minus_one=0, tolerance=0.01)
    for step in (0, 100):
        npy(store, run, PHASES, step, np.linspace(-np.pi, np.pi, 8, endpoint=False) + 0.01 * step)
    store.set_status(run, "finished")

    # a speech run: two utterances, reference and reconstruction each, per-clip and run-level metrics
    run = ids["speech"] = store.create_run(name="speech", family="scornn", task="timit", main_metric="val/loss")
    store.log_metrics(
        run, {"val/loss": 1.2, "test/segsnr": 6.5, "test/stoi": 0.81, "test/pesq": 2.2}, step=50, epoch=0, wall_time=t0
    )
    t = np.arange(4000) / 8000
    for utterance, pitch in (("u1", 440.0), ("u2", 880.0)):
        tone = 0.5 * np.sin(2 * np.pi * pitch * t)
        for role, samples, extra in (
            ("reference", tone, {}),
            ("reconstruction", 0.25 * tone, {"segsnr": 5.0, "stoi": 0.8, "pesq": 2.0}),
        ):
            meta = {"utterance": utterance, "role": role, "sample_rate": 8000, **extra}
            store.add_artifact(
                run, AUDIO, f"{utterance}-{role}", step=50, data=wav_bytes(samples), meta=meta, media_type="audio/wav"
            )
    store.set_status(run, "finished")

    # a run that has only just started: no config, family, metrics or artifacts
    ids["half-written"] = store.create_run(name="half-written")

    # a GRU run that crashed after two points
    run = ids["crashed"] = store.create_run(
        name="crashed", family="gru", task="adding", main_metric="val/loss", baseline=ADDING_BASELINE
    )
    store.log_metrics(run, {"train/loss": 0.5}, step=0, epoch=0, wall_time=t0)
    store.log_metrics(run, {"train/loss": float("nan")}, step=1, epoch=0, wall_time=t0 + 1)
    store.set_status(run, "failed")
    store.update_run(run, reason="non-finite loss at step 1")
    return ids
