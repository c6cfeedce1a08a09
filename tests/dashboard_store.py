"""Run stores for the dashboard tests, written through db.Store: one real short training run (the CLI in a
subprocess) and hand-written runs covering every artifact kind and every run state; and the helpers that open
a page in Streamlit's AppTest and read what it drew."""

from __future__ import annotations

import base64
import io
import json
import math
import subprocess
import sys
import time
import wave
from pathlib import Path

import numpy as np
from streamlit.testing.v1 import AppTest
from test_cli import TINY

from ortholab.db import Store
from ortholab.db.artifacts import (
    AUDIO,
    EIGENVALUES,
    GRAD_NORMS,
    HIDDEN_TRAJECTORY,
    NPY_MEDIA_TYPE,
    PHASES,
    array_to_bytes,
)

REPO = Path(__file__).resolve().parents[1]
APP_MAIN = str(REPO / "app" / "main.py")


def registered_pages() -> list[dict]:
    """The pages app/main.py registers, as tools/screenshots.py reads them ([{name, url, title}], the default page
    first): the page tests take a new page from there, not from a list of their own."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("dashboard_screenshots", REPO / "tools" / "screenshots.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dashboard_pages()


COPYING_T = 100
COPYING_BASELINE = 10 * math.log(8) / (COPYING_T + 20)
ADDING_BASELINE = 1 / 6


def train_real_run(url: str, runs_dir: Path, name: str = "real-scornn") -> None:
    """A real scoRNN run on copying through `ortholab fit` (6 batches), recorded in `url`."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from ortholab.cli.main import main; main()",
            "fit",
            "--config",
            str(REPO / "configs" / "demo" / "copying_scornn.yaml"),
            *TINY,
            "--db",
            url,
            "--name",
            name,
            "--runs_dir",
            str(runs_dir),
        ],
        cwd=runs_dir,
        capture_output=True,
        text=True,
        timeout=300,
    )
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


TRAIN_STEPS = range(0, 500, 4)  # 125 points


def train_loss(step: int) -> float:
    """lstm-adding's noisy train/loss: a decay with a deterministic wiggle."""
    return 0.3 / (1 + step / 100) * (1 + 0.2 * math.sin(step))


def scurnn_phases(step: int) -> np.ndarray:
    """116 phases in [0, 2 pi), 58 of them above pi (the issue's run: 57 of 116 were not shown)."""
    return np.mod(np.linspace(0.0, 2.0 * np.pi, 116, endpoint=False) + 0.001 * step, 2.0 * np.pi)


# the speech run's metric points: means of the model and the baseline, and two utterances' own values
SPEECH_POINTS = {
    "test_audio/segsnr_voicebox": 6.5,
    "test_audio/stoi": 0.81,
    "test_audio/pesq_nb_mos_lqo": 2.2,
    "test_audio/segsnr_clamped_30ms": 4.0,
    "test_audio/n_utterances": 2.0,
    "test_audio_baseline/segsnr_voicebox": 1.5,
    "test_audio_baseline/stoi": 0.6,
    "test_audio/stoi/u1": 0.8,
    "test_audio/stoi/u2": 0.82,
    "test_audio_baseline/stoi/u1": 0.55,
    "test_audio_baseline/stoi/u2": 0.65,
}


OWN_STEPS = (0, 100, 200)


def add_own_artifacts(store: Store, run: int) -> None:
    """What a user's own callback records (docs/configs.md): an array per step, a number per step, a matrix, JSON,
    a PNG image and an artifact with meta only."""
    for k, step in enumerate(OWN_STEPS):
        values = np.linspace(1.0 + k, 0.5, 16)
        add = store.add_artifact
        add(run, "singular_values", "recurrent", step=step, data=array_to_bytes(values), media_type=NPY_MEDIA_TYPE)
        add(run, "spectral_norm", "recurrent", step=step, data=array_to_bytes(values[:1]), media_type=NPY_MEDIA_TYPE)
    for step in (100, 200):
        gram = array_to_bytes(own_gram(step))
        store.add_artifact(run, "gram", "recurrent", step=step, data=gram, media_type=NPY_MEDIA_TYPE)
    notes = json.dumps({"rank": 16, "condition": 3.0}).encode()
    store.add_artifact(run, "notes", "summary", step=200, data=notes, media_type="application/json")
    store.add_artifact(run, "picture", "weights", step=200, data=png_bytes(), media_type="image/png")
    store.add_artifact(run, "marker", "epoch-end", step=100, meta={"epoch": 1, "note": "learning rate halved"})


def own_gram(step: int) -> np.ndarray:
    return np.eye(4) + step / 1000 * np.arange(16).reshape(4, 4)


def png_bytes() -> bytes:
    """A 24 x 16 gradient as PNG bytes."""
    from PIL import Image

    pixels = np.linspace(0, 255, 24 * 16).reshape(16, 24).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def add_hand_written_runs(store: Store) -> dict[str, int]:
    """Runs covering what the pages show; returns name -> run id. Points are stamped from now on."""
    ids = {}
    t0 = time.time() + 1.0

    # an LSTM baseline on adding: curves, parameter groups through the 'default' optimizer, tags; no matrix
    run = ids["lstm-adding"] = store.create_run(
        name="lstm-adding",
        family="lstm",
        task="adding",
        main_metric="val/loss",
        baseline=ADDING_BASELINE,
        config={"model": {"family": "lstm", "hidden_size": 64}},
        tags=["baseline", "cpu"],
    )
    store.log_params(
        run, {"seed": 1, "model": {"family": "lstm", "hidden_size": 64}, "data": {"init_args": {"batch_size": 50}}}
    )
    for k, step in enumerate(range(99, 500, 100)):
        store.log_metrics(run, {"val/loss": 0.2 / (k + 1)}, step=step, epoch=k // 2, wall_time=t0 + 10 * k)
    for step in TRAIN_STEPS:  # a dense training curve (smoothing applies to it)
        store.log_metrics(run, {"train/loss": train_loss(step)}, step=step, epoch=step // 200, wall_time=t0 + step / 10)
    store.update_run(
        run,
        parameter_count=17_217,
        info={"parameter_counts": {"other": 17_217}, "optimizers": {"default": {"name": "adam", "lr": 0.001}}},
    )
    store.set_status(run, "finished")

    # scoRNN with every matrix analysis: eigenvalue snapshots, drift, gradient profiles, hidden trajectories
    run = ids["scornn-snapshots"] = store.create_run(
        name="scornn-snapshots",
        family="scornn",
        task="copying",
        main_metric="val/loss",
        baseline=COPYING_BASELINE,
        config={"model": {"family": "scornn", "hidden_size": 16}},
    )
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
    add_own_artifacts(store, run)
    store.update_run(run, parameter_count=1_500)
    store.set_status(run, "finished")

    # scuRNN: eigenvalues once, phases at two steps, theta in [0, 2 pi) as scuRNN stores it (58 of 116 above pi)
    run = ids["scurnn-phases"] = store.create_run(
        name="scurnn-phases", family="scurnn", task="copying", main_metric="val/loss", baseline=COPYING_BASELINE
    )
    store.log_metrics(run, {"val/loss": 0.4}, step=0, epoch=0, wall_time=t0)
    npy(store, run, EIGENVALUES, 0, unit_circle(8, 0.3), near_minus_one=0, tolerance=0.01)
    for step in (0, 100):
        npy(store, run, PHASES, step, scurnn_phases(step))
    store.set_status(run, "finished")

    # a speech run as ortholab/evaluation/audio.py records one: per split the mean score of the model's reconstruction
    # and of the baseline, per utterance its own key, and clips with their scores in meta
    run = ids["speech"] = store.create_run(name="speech", family="scornn", task="timit", main_metric="val/loss")
    store.log_metrics(run, {"val/loss": 1.2, **SPEECH_POINTS}, step=50, epoch=0, wall_time=t0)
    t = np.arange(4000) / 8000
    for utterance, pitch in (("u1", 440.0), ("u2", 880.0)):
        tone = 0.5 * np.sin(2 * np.pi * pitch * t)
        for role, samples, extra in (
            ("reference", tone, {}),
            ("reconstruction", 0.25 * tone, {"segsnr_voicebox": 5.0, "stoi": 0.8, "pesq_nb_mos_lqo": 2.0}),
            ("baseline", 0.1 * tone, {"segsnr_voicebox": 1.0, "stoi": 0.5, "pesq_nb_mos_lqo": 1.5}),
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


SEED_STEPS = (0, 100, 200, 300)
SEED_STEPS_PER_EPOCH = 100


def add_seed_runs(store: Store) -> dict[str, int]:
    """Runs for grouping and log axes: three seeds of a scoRNN on adding (one logged at other steps) and two of
    an LSTM, and an SRNN whose orthogonality drift is exactly 0. Returns name -> run id."""
    ids = {}
    t0 = time.time() + 1.0
    for family, seeds, hidden in (("scornn", (1, 2, 3), 32), ("lstm", (1, 2), 32)):
        for seed in seeds:
            name = f"{family}-seed{seed}"
            run = ids[name] = store.create_run(
                name=name,
                family=family,
                task="adding",
                main_metric="val/loss",
                baseline=ADDING_BASELINE,
                config={"model": {"family": family, "hidden_size": hidden}},
                tags=["seeds"],
            )
            store.log_params(run, {"seed_everything": seed, "model": {"family": family, "hidden_size": hidden}})
            if family == "scornn":  # recorded its plan: epochs are step / 100 (the LSTMs' all lie in epoch 0)
                store.update_run(run, info={"plan": {"steps_per_epoch": SEED_STEPS_PER_EPOCH}})
            steps = SEED_STEPS if seed != 3 else tuple(s + 50 for s in SEED_STEPS[:-1])
            for step in steps:
                store.log_metrics(
                    run, {"val/loss": seed_loss(family, seed, step)}, step=step, epoch=0, wall_time=t0 + step
                )
            store.set_status(run, "finished")
    run = ids["srnn-zero-drift"] = store.create_run(
        name="srnn-zero-drift", family="srnn", task="copying", main_metric="val/loss", baseline=COPYING_BASELINE
    )
    for k, step in enumerate((0, 100, 200)):
        store.log_metrics(
            run, {"val/loss": 0.3 / (k + 1), "analysis/orthogonality": 0.0}, step=step, epoch=0, wall_time=t0 + k
        )
    store.set_status(run, "finished")
    return ids


def seed_loss(family: str, seed: int, step: int) -> float:
    """The seed runs' val/loss: a decay per family, shifted per seed."""
    return (0.2 if family == "scornn" else 0.3) / (1 + step / 100) + 0.01 * seed


# ---- reading pages through AppTest ------------------------------------------------------------------------


def open_page(store, monkeypatch, page, selected=None):
    """The page (views/<page>.py; 'runs' is the default page) in AppTest, with `selected` run ids."""
    monkeypatch.setenv("ORTHOLAB_DB", store.url)
    at = AppTest.from_file(APP_MAIN, default_timeout=60)
    if selected is not None:
        at.session_state["run"] = list(selected)
    at.run()
    if page != "runs":
        at.switch_page(f"views/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def rerun(at):
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def charts(at):
    """The plotly figures on the page, as their JSON."""
    return [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]


def array(value):
    """A plotly data array: a list, or plotly's typed array {dtype, bdata[, shape]}."""
    if isinstance(value, dict) and "bdata" in value:
        data = np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"])
        shape = value.get("shape")
        return data.reshape([int(s) for s in str(shape).split(",")]) if shape else data
    return np.asarray(value, dtype=float)


def traces(spec):
    return {trace.get("name"): trace for trace in spec["data"]}


def notes(at):
    return [element.value for element in [*at.info, *at.caption, *at.warning, *at.error]]
