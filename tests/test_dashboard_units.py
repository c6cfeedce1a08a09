"""The dashboard's pure parts: smoothing against TensorBoard's algorithm, tables, selection merging, curves'
axes and baselines, figures, WAV decoding and spectrograms, snapshot picking, and the launcher."""

import io
import math
import wave
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest
from dashboard_store import wav_bytes

from ortholab.app import launch
from ortholab.app.curves import Baseline, Curve, baselines_for, build_curve, x_values
from ortholab.app.figures import EigenPanel, curves_figure, eigenvalue_figure
from ortholab.app.smoothing import debiased_ema, thin
from ortholab.app.snapshots import at_step, by_step, no_snapshot_note, steps_of
from ortholab.app.tables import (
    ABSENT,
    filter_runs,
    merge_selection,
    parameter_groups_frame,
    params_compare_frame,
    runs_frame,
)
from ortholab.app.wav import clip_metrics, decode_wav, group_clips, spectrogram, speech_metric
from ortholab.db import ArtifactRecord, RunDetail, RunSummary

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def summary(run_id=1, **fields):
    base = dict(
        id=run_id, name=f"run{run_id}", family="scornn", task="copying", status="finished", reason=None, stage="fit",
        steps=10, main_metric="val/loss", main_metric_mode="min", best=0.1, last=0.2, baseline=0.17,
        created_at=NOW - timedelta(seconds=100), ended_at=NOW - timedelta(seconds=40),
        heartbeat_at=NOW - timedelta(seconds=40),
        parameter_count=100, tags=(),
    )  # fmt: skip
    return RunSummary(**{**base, **fields})


def detail(run_id, params, **fields):
    extra = dict(config=None, params=params, run_dir=None, hostname="h", world_size=1, info=None)
    return RunDetail(**{**summary(run_id, **fields).__dict__, **extra})


def artifact(artifact_id, step, kind="eigenvalues", meta=None, name="a"):
    return ArtifactRecord(artifact_id, 1, kind, name, step, 0, NOW, meta, None)


def tensorboard_smoothing(values, weight):
    """TensorBoard's scalar smoothing as written in its frontend (tensorboard PR #639), transcribed."""
    last, accumulated, out = 0.0, 0, []
    constant = all(v == values[0] for v in values)
    for value in values:
        if constant or not math.isfinite(value):
            out.append(value)
            continue
        last = last * weight + (1 - weight) * value
        accumulated += 1
        out.append(last / (1 - weight**accumulated))
    return out


@pytest.mark.parametrize("weight", [0.0, 0.3, 0.6, 0.99, 0.999])
def test_debiased_ema_is_tensorboards(weight):
    values = list(np.random.default_rng(0).normal(size=200).cumsum())
    values[5], values[50], values[51] = float("nan"), float("inf"), float("nan")
    assert np.allclose(debiased_ema(values, weight), tensorboard_smoothing(values, weight), equal_nan=True)


def test_debiased_ema_edges():
    assert debiased_ema([3.0, 3.0, 3.0], 0.9).tolist() == [3.0, 3.0, 3.0]
    assert debiased_ema([2.0, 4.0], 0.5)[0] == 2.0  # debiased: the first point is the data, not pulled to 0
    assert debiased_ema([], 0.5).size == 0
    with pytest.raises(ValueError, match="smoothing weight"):
        debiased_ema([1.0, 2.0], 1.0)


def test_thin_strides_and_keeps_the_last_point():
    assert thin(5, 10).tolist() == [0, 1, 2, 3, 4]
    index = thin(10_001, 2000)
    assert index[0] == 0 and index[-1] == 10_000 and len(index) <= 2001
    assert np.all(np.diff(index) > 0)


def test_runs_frame_summarises_and_flags_stale_running_runs():
    runs = [
        summary(1),
        summary(2, status="running", ended_at=None, heartbeat_at=NOW - timedelta(hours=2), best=0.5, tags=("a", "b")),
        summary(3, status="running", ended_at=None, heartbeat_at=NOW - timedelta(seconds=3), best=None, last=None),
    ]
    frame = runs_frame(runs, now=NOW).set_index("id")
    assert frame.loc[1, "duration (s)"] == 60.0 and frame.loc[1, "beats baseline"]
    assert frame.loc[2, "activity"] == "silent 2.0 h: killed?" and not frame.loc[2, "beats baseline"]
    assert frame.loc[3, "activity"] == "live (3 s ago)" and frame.loc[3, "beats baseline"] is None
    assert frame.loc[2, "tags"] == ["a", "b"]


def test_runs_beat_a_max_mode_baseline_by_being_above_it():
    frame = runs_frame([summary(1, main_metric_mode="max", best=0.9, baseline=0.5)], now=NOW)
    assert frame.loc[0, "beats baseline"]


def test_filter_runs_combines_filters_and_words():
    frame = runs_frame([summary(1), summary(2, family="lstm", tags=("sweep",)), summary(3, task="adding")], now=NOW)
    assert filter_runs(frame)["id"].tolist() == [1, 2, 3]
    assert filter_runs(frame, families=["lstm"])["id"].tolist() == [2]
    assert filter_runs(frame, text="SWEEP")["id"].tolist() == [2]
    assert filter_runs(frame, text="#3")["id"].tolist() == [3]
    assert filter_runs(frame, text="scornn adding")["id"].tolist() == [3]  # every word must match
    assert filter_runs(frame, tasks=["copying"], statuses=["failed"]).empty


def test_merge_selection_keeps_hidden_runs_and_follows_the_ticks():
    assert merge_selection([5, 1, 2], displayed=[1, 2, 3], chosen=[3]) == [5, 3]
    assert merge_selection([], displayed=[1, 2], chosen=[2, 1]) == [2, 1]
    assert merge_selection([4], displayed=[4], chosen=[]) == []


def test_parameter_groups_use_named_or_default_optimizers():
    info = {
        "parameter_counts": {"recurrent": 10, "other": 5},
        "optimizers": {
            "recurrent": {"name": "rmsprop_tf", "lr": 1e-4, "decay": 0.9},
            "default": {"name": "adam", "lr": 1e-3},
        },
    }
    rows = parameter_groups_frame(info).set_index("group")
    assert (
        rows.loc["recurrent", "optimizer"] == "rmsprop_tf"
        and rows.loc["recurrent", "other options"] == '{"decay": 0.9}'
    )
    assert (rows.loc["other", "optimizer"], rows.loc["other", "optimizer entry"], rows.loc["other", "parameters"]) == (
        "adam",
        "default",
        5,
    )
    assert parameter_groups_frame(None).empty


def test_params_compare_shows_differences_and_absent_keys():
    runs = [detail(1, {"lr": 0.001, "n": 8, "seed": 1}), detail(2, {"lr": 0.01, "seed": 1, "tags": ["x"]})]
    differing = params_compare_frame(runs, only_differing=True)
    assert set(differing.index) == {"lr", "n", "tags"}
    assert differing.loc["n"].tolist()[:2] == ["8", ABSENT]
    assert differing.loc["tags"].tolist()[:2] == [ABSENT, '["x"]']
    everything = params_compare_frame(runs, only_differing=False)
    assert not everything.loc["seed", "differs"] and everything.loc["lr", "differs"]


def test_baselines_apply_to_the_main_metrics_quantity():
    runs = [
        summary(1, task="copying", baseline=0.17328679513998632),
        summary(2, task="copying", baseline=0.1733),  # prints the same: one line
        summary(3, task="adding", baseline=1 / 6),
        summary(4, baseline=None),
    ]
    lines = baselines_for(runs, "train/loss")
    assert [b.label for b in lines] == ["baseline (copying) 0.1733", "baseline (adding) 0.1667"]
    assert lines[0].value == 0.17328679513998632
    assert baselines_for(runs, "val/acc") == []


def test_x_values_per_axis():
    import pandas as pd

    frame = pd.DataFrame({"step": [0, 9], "epoch": [0, 1], "value": [1.0, 0.5], "wall_time": [105.0, 110.0]})
    assert x_values(frame, "step").tolist() == [0, 9]
    assert x_values(frame, "epoch").tolist() == [0, 1]
    assert x_values(frame, "wall time", start=100.0).tolist() == [5.0, 10.0]
    assert x_values(frame, "wall time", start=200.0).tolist() == [0.0, 5.0]  # start after the points: first point
    assert x_values(frame, "examples seen", batch=20).tolist() == [0, 180]  # the weights at step s have seen s batches
    assert x_values(frame, "examples seen") is None
    assert x_values(frame.assign(epoch=[None, None]), "epoch") is None
    curve = build_curve("r", frame, "step", weight=0.5)
    assert curve.smoothed is not None and curve.total_points == 2


def test_curves_figure_draws_dashed_baselines_across_the_data():
    curves = [
        Curve("a", np.array([0.0, 10.0]), np.array([1.0, 0.5]), None, 2),
        Curve("b", np.array([5.0, 20.0]), np.array([2.0, 1.0]), None, 2),
    ]
    figure = curves_figure(
        curves, x_title="step", y_title="loss", baselines=[Baseline("baseline (copying) 0.1733", 0.17)]
    )
    names = [t.name for t in figure.data]
    assert names == ["a", "b", "baseline (copying) 0.1733"]
    line = figure.data[2]
    assert list(line.x) == [0.0, 20.0] and list(line.y) == [0.17, 0.17] and line.line.dash == "dash"


def test_eigenvalue_figure_keeps_the_plane_square():
    figure = eigenvalue_figure([EigenPanel("a", np.array([1j, -1j])), EigenPanel("b", np.array([2.0 + 0j]))])
    assert figure.layout.yaxis.scaleanchor == "x" and figure.layout.yaxis2.scaleanchor == "x2"
    assert figure.layout.xaxis2.range[1] == pytest.approx(2.1)  # reaches the eigenvalue outside the circle


def test_decode_wav_and_spectrogram_find_the_tone():
    rate = 8000
    tone = 0.5 * np.sin(2 * np.pi * 1000 * np.arange(rate // 2) / rate)
    samples, decoded_rate = decode_wav(wav_bytes(tone, rate))
    # to one 16-bit step, 1/32767 at the positive full scale (a derived bound: the stored integers' quantisation)
    assert decoded_rate == rate and np.allclose(samples, tone, atol=1 / 32767)
    times, freqs, power = spectrogram(samples, rate)
    assert power.shape == (129, len(times)) and freqs[-1] == rate / 2
    assert freqs[power.mean(axis=1).argmax()] == pytest.approx(1000.0)
    short = spectrogram(samples[:100], rate)[2]
    assert short.shape == (129, 1)  # zero-padded to one frame
    with pytest.raises(ValueError, match="not a PCM WAV"):
        decode_wav(b"not audio")


def test_decode_wav_stereo_8_bit():
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as writer:
        writer.setnchannels(2)
        writer.setsampwidth(1)
        writer.setframerate(8000)
        writer.writeframes(bytes([128, 192, 128, 64]))  # (0, +0.5), (0, −0.5)
    samples, _ = decode_wav(buffer.getvalue())
    assert samples.tolist() == [0.25, -0.25]  # channels averaged


def test_group_clips_by_step_and_utterance_with_roles_in_order():
    records = [
        artifact(
            1, 5, "audio", {"utterance": "u1", "role": "reconstruction", "segsnr_db": 4.0, "PESQ": 2.5, "flag": True}
        ),
        artifact(2, 5, "audio", {"utterance": "u1", "role": "reference"}),
        artifact(3, 9, "audio", {"utterance": "u1", "role": "reference"}),
        artifact(4, 5, "audio", None, name="loose.wav"),
    ]
    clips = group_clips(records)
    assert [(c.utterance, c.step) for c in clips] == [("u1", 5), ("u1", 9), ("loose.wav", 5)]
    assert clips[0].ordered_roles() == ["reference", "reconstruction"]
    assert clip_metrics(records[0].meta) == {"segsnr": 4.0, "pesq": 2.5}
    assert [speech_metric(k) for k in ("test/segsnr", "val/STOI", "pesq_nb", "val/loss")] == [
        "segsnr",
        "stoi",
        "pesq",
        None,
    ]


def test_snapshot_at_step_takes_the_latest_at_or_before():
    records = [artifact(1, 0), artifact(2, 100), artifact(3, 100), artifact(4, 300)]
    assert [r.id for r in by_step(records)] == [1, 3, 4]  # the later snapshot of step 100 wins
    assert steps_of(records, [artifact(5, 50)]) == [0, 50, 100, 300]
    assert at_step(records, 299).id == 3 and at_step(records, 300).id == 4 and at_step(records[1:], 50) is None
    assert "no single recurrent matrix" in no_snapshot_note(summary(1, family="gru"), "eigenvalue snapshots")
    assert no_snapshot_note(summary(1, family="gru"), "audio clips") == "#1 run1: no audio clips recorded for this run."
    assert "local cell" in no_snapshot_note(summary(1, family="rtransformer"), "eigenvalue snapshots")


def test_launch_command_is_headless_local_and_without_telemetry():
    command = launch.streamlit_command(port=9123, host="127.0.0.1")
    flags = dict(zip(command[5::2], command[6::2], strict=True))
    assert command[1:4] == ["-m", "streamlit", "run"] and command[4].endswith("app/main.py")
    assert flags["--server.port"] == "9123" and flags["--server.address"] == "127.0.0.1"
    assert flags["--server.headless"] == "true" and flags["--browser.gatherUsageStats"] == "false"
    assert launch.dashboard_env("sqlite:///x.db")["ORTHOLAB_DB"] == "sqlite:///x.db"


def test_run_dashboard_checks_the_database_then_becomes_the_server(tmp_path, monkeypatch, capsys):
    calls = []

    class Served(Exception):
        pass

    def execve(program, command, env):  # stands in for turning this process into the streamlit server
        calls.append((program, command, env))
        raise Served

    monkeypatch.setattr(launch.os, "execve", execve)
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with pytest.raises(Served):
        launch.main(["--db", url, "--port", "8600"])
    ((program, command, env),) = calls
    assert program == command[0] and command[1:4] == ["-m", "streamlit", "run"]
    assert env["ORTHOLAB_DB"] == url and "8600" in command and "127.0.0.1" in command
    assert "http://127.0.0.1:8600" in capsys.readouterr().out

    blocker = tmp_path / "file"
    blocker.write_text("")
    assert launch.main(["--db", f"sqlite:///{blocker}/runs.db"]) == 2  # a file where a directory should be
    assert "ortholab dashboard: error: Cannot use the run database" in capsys.readouterr().err
    assert len(calls) == 1  # nothing started for the bad database


def test_sweeps_and_their_best_trial_follow_the_metric_mode():
    import pandas as pd

    from ortholab.app.tables import best_run, sweep_names

    frame = pd.DataFrame({"id": [1, 2, 3], "name": ["a", "b", "c"], "best": [0.9, 0.95, None],
                          "mode": ["max", "max", "max"],
                          "tags": [["sweep:acc", "trial:0"], ["sweep:acc", "trial:1"], ["sweep:other"]]})
    assert sweep_names(frame) == ["acc", "other"]
    assert best_run(frame)["name"] == "b"  # accuracy: higher is better
    assert best_run(frame.assign(mode="min"))["name"] == "a"
    assert best_run(frame.iloc[2:]) is None
