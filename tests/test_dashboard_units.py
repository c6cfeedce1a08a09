"""The dashboard's pure parts: smoothing against TensorBoard's algorithm, tables, selection merging, curves'
axes and baselines, figures, WAV decoding and spectrograms, snapshot picking, and the launcher."""

import io
import math
import socket
import sqlite3
import subprocess
import sys
import wave
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest
import streamlit
from dashboard_store import wav_bytes

from ortholab.app import launch
from ortholab.app.curves import Baseline, Curve, baselines_caption, baselines_for, build_curve, x_values
from ortholab.app.figures import EigenPanel, curves_figure, eigenvalue_figure
from ortholab.app.smoothing import debiased_ema, thin
from ortholab.app.snapshots import at_step, by_step, no_snapshot_note, steps_of
from ortholab.app.tables import (
    ABSENT,
    BY_DEFAULT,
    filter_runs,
    merge_selection,
    parameter_groups_frame,
    params_compare_frame,
    runs_frame,
)
from ortholab.app.wav import clip_scores, decode_wav, group_clips, spectrogram, speech_metric
from ortholab.db import ArtifactRecord, RunDetail, RunSummary, Store

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def summary(run_id=1, **fields):
    base = dict(
        id=run_id,
        name=f"run{run_id}",
        family="scornn",
        task="copying",
        status="finished",
        reason=None,
        stage="fit",
        steps=10,
        main_metric="val/loss",
        main_metric_mode="min",
        best=0.1,
        last=0.2,
        baseline=0.17,
        created_at=NOW - timedelta(seconds=100),
        ended_at=NOW - timedelta(seconds=40),
        heartbeat_at=NOW - timedelta(seconds=40),
        parameter_count=100,
        tags=(),
    )
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


def test_decimation_keeps_the_first_last_smallest_and_largest_points():
    from ortholab.app.smoothing import decimate

    rng = np.random.default_rng(5)
    y = rng.standard_normal(10_001)
    y[[17, 4_321, 9_876]] = [-50.0, 40.0, 60.0]  # one-point spikes an even stride of 10 would step over
    y[2_000:2_040] = np.nan  # a gap in the logging
    index = decimate(y, 1000)
    assert index[0] == 0 and index[-1] == 10_000  # both ends
    assert len(index) <= 1002 and np.all(np.diff(index) > 0)  # at most max_points + 2, in order, no repeats
    assert {17, 4_321, 9_876} <= set(index.tolist())  # every spike, and so the global min and max
    # every stretch of consecutive points keeps its own smallest and largest value
    starts = np.linspace(0, y.size, 500 + 1).astype(int)
    for low, high in zip(starts[:-1], starts[1:], strict=True):
        stretch = y[low:high]
        if np.isfinite(stretch).any():
            kept = y[index[(index >= low) & (index < high)]]
            assert np.nanmin(kept) == np.nanmin(stretch) and np.nanmax(kept) == np.nanmax(stretch)
    assert decimate(y[:50], 1000).tolist() == list(range(50))  # short series: every point
    assert len(decimate(np.full(3000, np.nan), 100)) <= 102  # all NaN: still bounded


def test_a_group_band_drawn_decimated_keeps_its_extremes():
    from ortholab.app.grouping import aggregate, decimated

    x = np.arange(8000.0)
    runs = {1: (x, np.sin(x / 50)), 2: (x, np.cos(x / 70)), 3: (x, np.sin(x / 30) + (x == 5555) * 9)}
    group = aggregate("g", runs, "min–max")
    drawn = decimated(group, 1000)
    assert len(drawn.x) <= 1000 + 6 and drawn.x[0] == 0 and drawn.x[-1] == 7999
    assert 5555 in drawn.x and drawn.high.max() == group.high.max() > 8  # the one-point spike stays drawn
    assert drawn.low.min() == group.low.min()
    assert drawn.mean.max() == group.mean.max() and drawn.mean.min() == group.mean.min()
    assert decimated(aggregate("g", {1: (x[:100], x[:100])}, "min–max"), 1000).x.size == 100  # short: unchanged


def test_curves_are_drawn_decimated_but_grouped_over_every_point():
    import pandas as pd

    from ortholab.app.curves import build_curve

    steps = np.arange(8000)
    values = np.exp(-steps / 2000.0)
    values[3333] = 5.0  # one bad batch
    frame = pd.DataFrame({"step": steps, "epoch": 0, "value": values, "wall_time": 0.0})
    curve = build_curve("#1 r", frame, "step", weight=0.6, max_points=1000)
    assert len(curve.x) <= 1002 and curve.total_points == 8000
    assert 5.0 in curve.y and curve.last == (7999.0, values[-1])  # the spike and the last raw point drawn
    assert len(curve.every_x) == 8000 and np.array_equal(curve.every_y, values)  # group means use every point


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


def test_durations_read_as_a_person_would():
    """db.progress.duration: minutes rounded, hours past 60; a run about to end is '<1m', never '0m' (read as over)."""
    from ortholab.db.progress import duration

    seconds = [None, 0, 10, 29, 31, 7 * 60, 59 * 60 + 40, 86 * 60]
    assert [duration(s) for s in seconds] == [None, "0m", "<1m", "<1m", "1m", "7m", "1h00m", "1h26m"]


def test_runs_frame_shows_progress_only_where_it_is_known():
    """Steps of the plan, epoch and ETA from db.progress.run_progress, blank where a piece is unknown: no plan, no
    pace yet, or silent (killed: no ETA)."""
    runs = [summary(1, status="running", steps=700), summary(2, status="running", steps=40), summary(3)]
    progress = {
        1: {"total_steps": 10_000, "epoch": "7/100", "eta_s": 5_580.0},
        2: {"total_steps": None, "silent": "silent 2.0 h: killed?"},
    }
    frame = runs_frame(runs, now=NOW, progress=progress).set_index("id")
    assert frame.loc[1, ["of plan", "epoch", "ETA"]].tolist() == ["700/10000", "7/100", "1h33m"]
    assert frame.loc[2, ["of plan", "epoch", "ETA"]].tolist() == ["", "", ""]
    assert frame.loc[3, ["of plan", "epoch", "ETA"]].tolist() == ["", "", ""]


def test_runs_frame_names_a_running_run_whose_process_ended_at_once():
    """Seconds after a SIGKILL on this machine, db.progress says its process ended: the activity column says so
    too, not 'live'."""
    runs = [summary(1, status="running", ended_at=None, heartbeat_at=NOW - timedelta(seconds=3))]
    frame = runs_frame(runs, now=NOW, progress={1: {"silent": "its process ended: killed?"}}).set_index("id")
    assert frame.loc[1, "activity"] == "its process ended: killed?"
    assert runs_frame(runs, now=NOW).set_index("id").loc[1, "activity"] == "live (3 s ago)"
    copied = runs_frame(runs, now=NOW, copied=True).set_index("id")  # an export's copy, NOW when it was made
    assert copied.loc[1, "activity"] == "training when copied (3 s before)"  # walk-through 9: it read 'live'


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


def test_an_optimizer_option_left_to_its_default_compares_equal_to_the_same_value_given():
    """Walk-through 5: a run of the demo config (lr only) and one of its `--print_config` copy (every option) were
    shown as differing in decay, eps and initial_accumulator, though both trained with the same values."""
    short = {"model.optimizers.other.name": "rmsprop_tf", "model.optimizers.other.lr": 0.001}
    spelt = {**short, "model.optimizers.other.decay": 0.9, "model.optimizers.other.eps": 1e-10}
    spelt["model.optimizers.other.initial_accumulator"] = 1.0
    runs = [detail(1, short), detail(2, spelt)]
    assert params_compare_frame(runs, only_differing=True).empty
    everything = params_compare_frame(runs, only_differing=False)
    assert everything.loc["model.optimizers.other.decay"].tolist()[:2] == ["0.9" + BY_DEFAULT, "0.9"]
    other = {**spelt, "model.optimizers.other.decay": 0.95}
    differing = params_compare_frame([detail(1, short), detail(3, other)], only_differing=True)
    assert list(differing.index) == ["model.optimizers.other.decay"]  # a value another than the default still shows
    sgd = {"model.optimizers.other.name": "sgd", "model.optimizers.other.lr": 0.1}
    given = {**sgd, "model.optimizers.other.momentum": 0.0, "model.optimizers.other.weight_decay": 0.0}
    assert params_compare_frame([detail(1, sgd), detail(2, given)], only_differing=True).empty  # 0 (default) is 0.0


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
    longer = [*runs, summary(5, task="copying", baseline=0.0935), summary(6, task="copying", baseline=0.0935)]
    labels = [b.label for b in baselines_for(longer, "val/loss")]  # walk-through 9: two 'baseline (copying)' lines
    assert labels == [
        "baseline (copying; runs 1, 2) 0.1733",
        "baseline (adding) 0.1667",
        "baseline (copying; runs 5, 6) 0.0935",
    ]
    said = baselines_caption(runs, "train/loss")
    assert (
        said
        == "Dashed: the task's analytic baseline (adding 1/6; copying 10 ln 8 / (T + 20)), as in the papers' figures."
    )
    text = [summary(5, task="text", baseline=4.7)]  # walk-through 3: a text run's caption spoke of copying and adding
    assert (
        baselines_caption(text, "val/loss")
        == "Dashed: the task's analytic baseline (text: its task's baseline (`ortholab list tasks`))."
    )
    assert baselines_caption(runs, "val/acc") is None


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
    assert curve.smoothed is None and curve.total_points == 2  # two points: too few to smooth


def test_curves_figure_draws_dashed_baselines_across_the_data():
    curves = [
        Curve("a", np.array([0.0, 10.0]), np.array([1.0, 0.5]), None, 2),
        Curve("b", np.array([5.0, 20.0]), np.array([2.0, 1.0]), None, 2),
    ]
    figure = curves_figure(
        curves, x_title="step", y_title="loss", baselines=[Baseline("baseline (copying) 0.1733", 0.17)]
    )
    names = [t.name for t in figure.data]
    assert names == ["a", "a: last", "b", "b: last", "baseline (copying) 0.1733"]
    line = figure.data[4]
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
    assert clip_scores(records[0].meta) == {"segsnr": 4.0, "pesq": 2.5}  # keys of another making: variant unknown
    assert [speech_metric(k) for k in ("test/segsnr", "val/STOI", "pesq_nb", "val/loss")] == [
        "segsnr",
        "stoi",
        "pesq",
        None,
    ]
    # the names ortholab/evaluation/speech_quality.py records keep their variant; a 'scores' mapping wins over
    # top-level keys
    assert clip_scores({"segsnr_voicebox": 3.0, "scores": {"segsnr_voicebox": 3.0, "segsnr_clamped_30ms": 2.0}}) == {
        "segsnr_voicebox": 3.0,
        "segsnr_clamped_30ms": 2.0,
    }


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


def test_the_launchers_usage_names_a_module_that_runs_from_any_folder(tmp_path, capsys):
    """It said `python -m app.launch`, which runs only from a checkout's root; installed, app is ortholab.app."""
    with pytest.raises(SystemExit):
        launch.main(["--help"])
    usage = capsys.readouterr().out.split()[1:4]
    done = subprocess.run([sys.executable, *usage[1:], "--help"], capture_output=True, text=True, cwd=tmp_path)
    assert usage == ["python", "-m", "ortholab.app.launch"] and done.returncode == 0, done.stderr[-300:]


def test_the_launch_flags_are_taken_by_a_streamlit_installed_outside_a_site_packages(tmp_path):
    """Streamlit takes itself for a source checkout, in its development mode, unless its path holds site-packages or
    dist-packages (`pip install --target DIR`, a PYTHONPATH folder): there `ortholab dashboard` ended in a traceback,
    'RuntimeError: server.port does not work when global.developmentMode is true'."""
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "streamlit").symlink_to(Path(streamlit.__file__).parent)
    command = launch.streamlit_command(port=9123, host="127.0.0.1")
    flags = {
        key[2:].replace(".", "_"): {"true": True, "false": False}.get(value, int(value) if value.isdigit() else value)
        for key, value in zip(command[5::2], command[6::2], strict=True)
    }
    check = (
        f"import sys; sys.path.insert(0, {str(tmp_path / 'lib')!r}); import streamlit; "
        "assert 'site-packages' not in streamlit.__file__, streamlit.__file__; "
        f"from streamlit.web import bootstrap; bootstrap.load_config_options(flag_options={flags!r}); print('taken')"
    )
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == "taken", done.stderr[-500:]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_run_dashboard_checks_the_database_then_becomes_the_server(tmp_path, monkeypatch, capsys):
    calls = []

    class Served(Exception):
        pass

    def execve(program, command, env):  # stands in for turning this process into the streamlit server
        calls.append((program, command, env))
        raise Served

    monkeypatch.setattr(launch.os, "execve", execve)
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    assert launch.main(["--db", url]) == 2 and not (tmp_path / "runs.db").exists()  # a reader makes no store
    assert "does not exist" in capsys.readouterr().err
    Store(url).close()
    with sqlite3.connect(tmp_path / "runs.db") as connection:  # as an export's runs.db is committed
        connection.execute("PRAGMA journal_mode=DELETE")
    before = (tmp_path / "runs.db").read_bytes()
    port = _free_port()
    with pytest.raises(Served):
        launch.main(["--db", url, "--port", str(port)])
    assert (tmp_path / "runs.db").read_bytes() == before  # not switched to WAL: a reader writes nothing
    ((program, command, env),) = calls
    assert program == command[0] and command[1:4] == ["-m", "streamlit", "run"]
    assert env["ORTHOLAB_DB"] == url and str(port) in command and "127.0.0.1" in command
    assert f"http://127.0.0.1:{port}" in capsys.readouterr().out
    monkeypatch.chdir(tmp_path)  # a file by its relative path: the server is handed its absolute URL
    with pytest.raises(Served):
        launch.main(["--db", "runs.db", "--port", str(port)])
    assert calls[-1][2]["ORTHOLAB_DB"] == url
    capsys.readouterr()
    with socket.create_server(("127.0.0.1", port)):  # another server on the port: one line before any start line
        assert launch.main(["--db", url, "--host", "localhost", "--port", str(port)]) == 2  # every address it names
        assert f"--port {port}: localhost:{port} is in use" in capsys.readouterr().err
        assert launch.main(["--db", url, "--port", str(port)]) == 2
        said = capsys.readouterr()
    assert said.err.strip() == (
        f"ortholab dashboard: error: --port {port}: 127.0.0.1:{port} is in use (another dashboard?); give another, "
        f"e.g. --port {port + 1}"
    )
    assert said.out == "" and len(calls) == 2
    assert launch.main(["--db", url, "--host", "192.0.2.1"]) == 2  # TEST-NET-1: no interface of this machine
    assert "error: --host 192.0.2.1: cannot serve there (" in capsys.readouterr().err

    blocker = tmp_path / "file"
    blocker.write_text("")
    assert launch.main(["--db", f"sqlite:///{blocker}/runs.db"]) == 2  # a file where a directory should be
    assert "ortholab dashboard: error: The run database" in capsys.readouterr().err
    assert len(calls) == 2  # nothing started for the bad database


def test_sweeps_and_their_best_trial_follow_the_metric_mode():
    import pandas as pd

    from ortholab.app.tables import best_run, sweep_names

    frame = pd.DataFrame(
        {
            "id": [1, 2, 3],
            "name": ["a", "b", "c"],
            "best": [0.9, 0.95, None],
            "mode": ["max", "max", "max"],
            "tags": [["sweep:acc", "trial:0"], ["sweep:acc", "trial:1"], ["sweep:other"]],
        }
    )
    assert sweep_names(frame) == ["acc", "other"]
    assert best_run(frame)["name"] == "b"  # accuracy: higher is better
    assert best_run(frame.assign(mode="min"))["name"] == "a"
    assert best_run(frame.iloc[2:]) is None


# ---- issue 25: pictures that were wrong -------------------------------------------------------------------


def test_log_ticks_label_every_tick_with_its_full_value():
    from ortholab.app.logaxis import log_ticks

    for low, high in [(1e-7, 4e-7), (2e-6, 9e-6), (1e-6, 3e-4), (3e-4, 0.5), (1e-12, 1e12), (0.1234, 0.13)]:
        values, texts = log_ticks(low, high)
        assert len(values) >= 2 or low == high
        for value, text in zip(values, texts, strict=True):
            assert float(text) == value  # '2e-6', never a bare '2' for 2e-6 (plotly's minor-tick labels)
    assert log_ticks(2e-6, 9e-6)[1][:3] == ["2e-6", "3e-6", "4e-6"]
    with pytest.raises(ValueError, match="positive"):
        log_ticks(0.0, 1.0)


def test_a_log_axis_draws_zeros_at_a_labelled_floor():
    from ortholab.app.logaxis import lift, log_axis_layout, log_scale

    scale = log_scale([np.array([0.0, 0.0, 0.0]), np.array([1.2e-6, 3.5e-6]), np.array([np.nan])])
    assert (scale.floor, scale.low, scale.at_floor) == (1e-7, 1e-7, 3)  # a decade below the smallest value
    drawn, low = lift(np.array([0.0, 2e-6, -1.0, np.nan]), scale.floor)
    assert (
        drawn[:3].tolist() == [1e-7, 2e-6, 1e-7] and np.isnan(drawn[3]) and low.tolist() == [True, False, True, False]
    )
    axis = log_axis_layout(scale)
    assert axis["type"] == "log" and axis["tickvals"][0] == 1e-7 and axis["ticktext"][0] == "0"
    assert axis["range"][0] < -7 < -5.5 < axis["range"][1]
    assert log_scale([np.array([1e-3, 1e-1])]).low == 1e-3  # nothing at the floor: the axis starts at the data


def test_curves_figure_puts_a_zero_run_on_the_log_axis_and_says_so():
    zero = Curve("#12 srnn", np.array([0.0, 100.0, 200.0]), np.zeros(3), None, 3, run_id=12)
    drift = Curve("#2 scornn", np.array([0.0, 100.0, 200.0]), np.array([1e-7, 2e-7, 4e-7]), None, 3, run_id=2)
    figure = curves_figure([zero, drift], x_title="step", y_title="drift", log_y=True)
    drawn = {t.name: t for t in figure.data}
    assert list(drawn["#12 srnn"].y) == [1e-8] * 3  # on the axis, at its floor
    assert drawn["#12 srnn: ≤ 0 at the floor"].marker.symbol == "triangle-down-open"
    assert figure.layout.yaxis.type == "log" and figure.layout.yaxis.ticktext[0] == "0"
    assert figure.layout.meta["at_floor"] == 3 and figure.layout.meta["floor"] == 1e-8


def test_smoothing_leaves_sparse_curves_raw_and_marks_the_last_raw_value():
    import pandas as pd

    from ortholab.app.curves import SMOOTH_MIN_POINTS

    def frame(n):
        return pd.DataFrame({"step": np.arange(n), "epoch": 0, "value": np.geomspace(1, 1e-4, n), "wall_time": 0.0})

    sparse = build_curve("#1 val", frame(12), "step", weight=0.6, run_id=1)
    dense = build_curve("#2 train", frame(SMOOTH_MIN_POINTS), "step", weight=0.6, run_id=2)
    assert sparse.smoothed is None and sparse.smoothing == 0.0
    assert dense.smoothed is not None and dense.smoothing == 0.6
    assert dense.smoothed[-1] > dense.y[-1]  # the EMA lags behind a falling curve: why the last raw value is marked
    figure = curves_figure([sparse, dense], x_title="step", y_title="loss", smoothing=0.6)
    drawn = {t.name: t for t in figure.data}
    assert set(drawn) >= {"#1 val", "#2 train", "#2 train (raw)", "#1 val: last", "#2 train: last"}
    last = drawn["#2 train: last"]
    assert list(last.y) == [1e-4] and "last raw value 0.0001" in last.hovertemplate


def test_a_run_looks_the_same_whatever_else_is_selected():
    from ortholab.app.style import PALETTE, run_style

    a = Curve("#3 a", np.array([0.0, 1.0]), np.array([1.0, 2.0]), None, 2, run_id=3)
    b = Curve("#7 b", np.array([0.0, 1.0]), np.array([1.0, 2.0]), None, 2, run_id=7)
    one = {t.name: t.line.color for t in curves_figure([a, b], x_title="x", y_title="y").data}
    two = {t.name: t.line.color for t in curves_figure([b], x_title="x", y_title="y").data}
    assert one["#7 b"] == two["#7 b"] == run_style(7).color != one["#3 a"]
    # 24 colours; ids closer than 144 differ in colour or dash, and neighbours in marker too
    looks = {(run_style(i).color, run_style(i).dash) for i in range(1, 145)}
    assert len(PALETTE) == 24 and len(looks) == 144
    assert all(run_style(i).symbol != run_style(i + 1).symbol for i in range(100))


def test_phases_are_wrapped_to_zero_two_pi_and_every_one_is_binned():
    from ortholab.app.figures import phases_figure, wrap_phase

    theta = np.linspace(0.0, 2 * np.pi, 116, endpoint=False)  # as scuRNN stores them; 58 above pi
    figure = phases_figure([("#3 scurnn", theta, 3), ("#4 other convention", theta - np.pi, 4)])
    for trace in figure.data:
        bins = trace.xbins
        assert (bins.start, bins.end) == (0.0, 2 * np.pi)
        assert np.all((np.asarray(trace.x) >= bins.start) & (np.asarray(trace.x) < bins.end))
    assert tuple(figure.layout.xaxis.range) == (0.0, 2 * np.pi)
    assert np.allclose(wrap_phase([-np.pi / 2, 2 * np.pi, 7.0]), [1.5 * np.pi, 0.0, 7.0 - 2 * np.pi])


def test_titles_leave_room_for_plotlys_toolbar():
    from ortholab.app.figures import TITLED_TOP_MARGIN, spectrogram_figure

    panels = eigenvalue_figure([EigenPanel("#1 a · step 0", np.array([1j])), EigenPanel("#2 b", np.array([1.0]))])
    spectrogram = spectrogram_figure(np.arange(3.0), np.arange(2.0), np.zeros((2, 3)), title="reference · 0.5 s")
    for figure in (panels, spectrogram):
        assert figure.layout.margin.t >= TITLED_TOP_MARGIN > 30 + 20  # the toolbar, then a line of title text
    assert spectrogram.layout.title.x == 0.0 and spectrogram.layout.title.xanchor == "left"  # away from the toolbar


def test_epochs_from_the_recorded_plan_and_a_note_without_one():
    import pandas as pd

    from ortholab.app.curves import one_epoch_note, steps_per_epoch

    frame = pd.DataFrame({"step": [0, 50, 150], "epoch": [0, 0, 0], "value": 1.0, "wall_time": 0.0})
    assert steps_per_epoch({"plan": {"steps_per_epoch": 100}}) == 100 and steps_per_epoch({}) is None
    assert x_values(frame, "epoch", per_epoch=100).tolist() == [0.0, 0.5, 1.5]
    assert x_values(frame, "epoch").tolist() == [0, 0, 0]
    assert "all 3 points were logged in epoch 0" in one_epoch_note("#1 r", frame)
    assert one_epoch_note("#1 r", frame.assign(epoch=[0, 0, 1])) is None


def test_the_papers_page_opens_on_a_table_with_numbers():
    from ortholab.app.tables import default_table
    from ortholab.db.published import PaperRow, PaperTable

    def table(key, value):
        row = PaperRow(
            table=key,
            row="r",
            task="adding",
            family="scornn",
            metric="val/loss",
            mode="min",
            scale=1.0,
            value=value,
            outcome=None if value is not None else "beats the baseline",
        )
        return PaperTable(key, "p", key, "t", "val/loss", "min", 1.0, (row,))

    tables = {"a_text": table("a_text", None), "b_numbers": table("b_numbers", 0.5), "c_numbers": table("c", 0.1)}
    assert default_table(tables, []) == "b_numbers"  # not the first, whose values are statements
    assert default_table(tables, [summary(1, tags=("paper:c_numbers/r",))]) == "c_numbers"  # reproduced rows first


# ---- comparison ------------------------------------------------------------------------------------------


def test_metric_names_group_by_prefix_and_fold_per_clip_keys():
    from ortholab.app.metric_names import groups, split_per_clip

    keys = [
        "val/loss",
        "train/loss",
        "test_audio/stoi",
        "test_audio/stoi/u1",
        "test_audio/stoi/u2",
        "test_audio_baseline/stoi",
        "test_audio_baseline/stoi/u1",
        "loss",
        "analysis/orthogonality",
    ]
    main, clips = split_per_clip(keys)
    assert main == [
        "analysis/orthogonality",
        "loss",
        "test_audio/stoi",
        "test_audio_baseline/stoi",
        "train/loss",
        "val/loss",
    ]
    assert clips == {
        "test_audio/stoi": ["test_audio/stoi/u1", "test_audio/stoi/u2"],
        "test_audio_baseline/stoi": ["test_audio_baseline/stoi/u1"],
    }
    assert list(groups(main)) == ["train", "val", "analysis", "other", "test_audio", "test_audio_baseline"]


def test_speech_scores_as_a_long_table_with_segsnrs_variant():
    from ortholab.app.wav import scores_table, speech_key

    assert speech_key("test_audio/segsnr_voicebox") == ("test", "reconstruction", "segsnr_voicebox")
    assert speech_key("val_audio_baseline/stoi") == ("val", "baseline", "stoi")
    assert speech_key("test_audio/stoi/u1") is None and speech_key("test_audio/n_utterances") is None
    rows = scores_table(
        {"reconstruction": {"stoi": 0.8, "segsnr_clamped_30ms": 2.0, "segsnr_voicebox": 3.0}, "baseline": {"stoi": 0.5}}
    )
    assert [r["metric"] for r in rows] == [
        "SegSNR (dB; VOICEBOX v_snrseg 'Vq', 10 ms frames)",
        "SegSNR (dB; 30 ms Hann frames, clamped to [−10, 35])",
        "STOI",
    ]
    assert rows[2] == {"metric": "STOI", "reconstruction": 0.8, "baseline": 0.5} and rows[0]["baseline"] is None


def test_grouping_takes_mean_and_band_over_seeds_on_the_union_of_their_steps():
    from ortholab.app.grouping import aggregate, group_runs

    params = {1: {"family": "scornn", "seed": 1}, 2: {"family": "scornn", "seed": 2}, 3: {"family": "lstm"}}
    assert group_runs(params, ["family"]) == {"family=scornn": [1, 2], "family=lstm": [3]}
    assert group_runs(params, ["seed"]) == {"seed=1": [1], "seed=2": [2], "seed=(absent)": [3]}
    curves = {
        1: (np.array([0.0, 10.0, 20.0]), np.array([1.0, 2.0, 3.0])),
        2: (np.array([0.0, 20.0]), np.array([3.0, 5.0])),
    }  # logged at fewer steps: interpolated (10 -> 4)
    band = aggregate("g", curves, "min–max")
    assert band.x.tolist() == [0.0, 10.0, 20.0] and band.n.tolist() == [2, 2, 2]
    assert band.mean.tolist() == [2.0, 3.0, 4.0] and band.low.tolist() == [1.0, 2.0, 3.0]
    assert band.high.tolist() == [3.0, 4.0, 5.0]
    std = aggregate("g", curves, "±1 std")
    assert np.allclose(std.high - std.mean, np.std([[1, 2, 3], [3, 4, 5]], axis=0, ddof=1))
    short = aggregate("g", {1: curves[1], 2: (np.array([0.0, 10.0]), np.array([3.0, 4.0]))}, "±1 std")
    assert short.n.tolist() == [2, 2, 1] and short.low[-1] == short.high[-1] == 3.0  # one run covers step 20


def test_group_bands_are_drawn_filled_behind_the_mean():
    from ortholab.app.grouping import aggregate

    band = aggregate(
        "family=scornn",
        {1: (np.array([0.0, 1.0]), np.array([1.0, 2.0])), 2: (np.array([0.0, 1.0]), np.array([3.0, 4.0]))},
        "min–max",
    )
    figure = curves_figure([], x_title="step", y_title="loss", aggregates=[band], spread="min–max")
    upper, lower, mean = figure.data
    assert list(upper.y) == [3.0, 4.0] and list(lower.y) == [1.0, 2.0] and lower.fill == "tonexty"
    assert list(mean.y) == [2.0, 3.0] and mean.name == "family=scornn (mean of 2 runs)"


def test_parallel_axes_for_mixed_runs():
    from ortholab.app.parallel import MISSING, differing_fields, parallel_axes

    rows = {
        1: {
            "family": "scornn",
            "task": "copying",
            "model.hidden_size": 64,
            "model.family_args.rho": 0.5,
            "db": "sqlite:///a.db",
            "seed_everything": 1,
        },
        2: {"family": "lstm", "task": "adding", "model.hidden_size": 128, "db": "sqlite:///b.db", "seed_everything": 2},
        3: {"family": "scornn", "task": "adding", "model.hidden_size": "auto"},
    }
    fields = differing_fields(rows)
    assert fields == ["family", "task", "model.family_args.rho", "model.hidden_size", "seed_everything"]  # no db
    family, task, rho, hidden, _ = parallel_axes(rows, fields, [1, 2, 3])
    assert family.ticktext == ["lstm", "scornn"] and family.values.tolist() == [1.0, 0.0, 1.0]
    assert rho.ticktext[0] == MISSING and rho.values[1] == rho.values[2] < 0.5 == rho.values[0]
    assert hidden.ticktext == ["128", "64", "auto"]  # a number in some runs and text in another: categories


def test_runs_table_columns_sort_and_pages():
    from ortholab.app.tables import page_of, sort_runs, typed_column

    assert typed_column([1, None, 2.5]).tolist()[::2] == [1.0, 2.5] and typed_column([1, "a", None]).tolist() == [
        "1",
        "a",
        None,
    ]
    frame = runs_frame(
        [summary(1, best=0.3), summary(2, best=None), summary(3, best=0.1), summary(4, best=0.3)], now=NOW
    )
    assert sort_runs(frame, "best", descending=False)["id"].tolist() == [3, 1, 4, 2]  # missing last, ties by id
    assert sort_runs(frame, "best", descending=True)["id"].tolist() == [4, 1, 3, 2]
    assert sort_runs(frame, "name", descending=False)["id"].tolist() == [1, 2, 3, 4]
    assert page_of(frame, 2, 3)["id"].tolist() == [4] and page_of(frame, 9, 3)["id"].tolist() == [4]


def test_the_full_series_csv_has_every_point():
    import pandas as pd

    from ortholab.app.curves import series_csv

    points = pd.DataFrame({"step": range(5000), "epoch": 0, "value": np.arange(5000) / 7, "wall_time": 1.5})
    table = pd.read_csv(io.BytesIO(series_csv([(3, "run a", "train/loss", points)])))
    assert list(table.columns) == ["run", "name", "metric", "step", "epoch", "wall_time", "value"]
    assert len(table) == 5000 and table["value"].tolist() == points["value"].tolist()  # neither thinned nor rounded


def test_the_report_export_draws_each_run_in_its_dashboard_style():
    from ortholab.app.export import MATPLOTLIB_DASHES, MATPLOTLIB_MARKERS
    from ortholab.app.style import DASHES, SYMBOLS

    assert set(MATPLOTLIB_MARKERS) == set(SYMBOLS)  # every marker a run can have, in matplotlib's words
    assert set(MATPLOTLIB_DASHES) == set(DASHES)  # and every dash


def test_a_log_axis_of_one_value_has_ticks_to_read_it_by():
    """Walk-through 5: a 30-step run's orthogonality drift (one point, 1.1e-6) was drawn on a log axis with no tick
    labels; the axis now spans the enclosing decade, its ticks readable, and holds the value."""
    from ortholab.app.logaxis import log_axis_layout, log_scale

    drift = 1.1e-6  # the walk-through's value, not a tolerance
    layout = log_axis_layout(log_scale([np.array([drift])]))
    assert layout["ticktext"][0] == "1e-6" and layout["ticktext"][-1] == "1e-5" and len(layout["tickvals"]) >= 2
    low, high = layout["range"]
    assert low < np.log10(drift) < high
    spread = log_axis_layout(log_scale([np.array([1e-3, 1e-1])]))
    assert spread["tickvals"][0] == 1e-3 and spread["tickvals"][-1] == 0.1  # a range with ticks stays as it was


def test_heatmap_ticks_fall_on_whole_rows_and_columns():
    from ortholab.app.figures import heatmap_figure, index_tick_step

    assert [index_tick_step(n) for n in (1, 4, 10, 11, 25, 50, 100, 170, 784)] == [1, 1, 1, 2, 5, 5, 10, 20, 100]
    figure = heatmap_figure(np.ones((4, 30)), x_title="t", y_title="unit")
    assert (figure.layout.xaxis.tick0, figure.layout.xaxis.dtick, figure.layout.yaxis.dtick) == (0, 5, 1)


def test_a_seeds_label_says_its_seed_as_its_runs_share_one_name():
    """Review: three seeds of a row all read '#1 cpu_checks.copyi…' in the sidebar and legends."""
    from ortholab.app.labels import run_label

    assert run_label(summary(3, tags=("paper:t/r", "seed:5546"))) == "#3 run3 · seed 5546"
    assert run_label(summary(4, tags=("paper:t/r",))) == "#4 run4"
