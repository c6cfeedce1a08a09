"""Audio evaluation: SegSNR against its definition, P.56 activity, STOI/PESQ extremes and failures, reconstruction,
failure accounting, and `ortholab fit` / `test` / `evaluate-audio` on FSDD recording metrics and clips in the store."""

import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch
from standins import SHARED_DATA
from tolerances import roundoff

from ortholab.app import wav as app_wav
from ortholab.cli.main import main
from ortholab.datamodules.spectral import SpectralFrames
from ortholab.db import Store
from ortholab.db.artifacts import AUDIO
from ortholab.evaluation.active_level import active_level
from ortholab.evaluation.audio import AUDIO_SCORES, AudioReport, UtteranceScores
from ortholab.evaluation.reconstruction import copy_input_frames, estimated_frames, reconstruct
from ortholab.evaluation.segsnr import segsnr_clamped, segsnr_voicebox
from ortholab.evaluation.speech_quality import Score, metric_names, score_utterance

FS = 8000
FSDD = SHARED_DATA / "fsdd" / "recordings"
REPO = Path(__file__).resolve().parents[1]
needs_fsdd = pytest.mark.skipif(not FSDD.is_dir(), reason=f"needs the Free Spoken Digit Dataset at {FSDD}")


def speech(count: int = 8) -> np.ndarray:
    """One FSDD speaker's first recordings joined: a few seconds of real speech at 8 kHz."""
    files = sorted(FSDD.glob("*_jackson_*.wav"))[:count]
    return np.concatenate([soundfile.read(str(f), dtype="float64")[0] for f in files])


def at_snr(reference: np.ndarray, snr_db: float, seed: int = 0) -> np.ndarray:
    """reference + white noise scaled so that sum r^2 / sum n^2 is exactly snr_db."""
    noise = np.random.default_rng(seed).standard_normal(len(reference))
    noise *= np.sqrt(np.sum(reference**2) / np.sum(noise**2) / 10 ** (snr_db / 10))
    return reference + noise


# SegSNR ------------------------------------------------------------------------------------------------
def test_segsnr_of_identical_signals_is_the_definitions_cap():
    r = np.random.default_rng(1).standard_normal(FS)
    assert segsnr_voicebox(r, r, FS).segmental == 100.0  # v_snrseg: zero-error frames count +100 dB
    assert segsnr_voicebox(r, r, FS, mode="wz").segmental == 100.0
    assert segsnr_clamped(r, r, FS) == 35.0  # the clamped variant's upper limit


@pytest.mark.parametrize("snr_db", [0.0, 10.0, 20.0])
def test_segsnr_of_white_noise_at_a_known_snr(snr_db):
    reference = np.random.default_rng(2).standard_normal(8 * FS) * 0.1  # stationary: every frame has that SNR
    test = at_snr(reference, snr_db, seed=3)
    # at_snr fixes the global SNR, so the frames' mean log-ratio departs from it only at second order: a standard
    # deviation about (10 / ln 10) (2 / k) sqrt(2 / K) = 0.005 dB for k = 80-sample frames, K = 800 of them (0.003
    # measured over 20 seeds, worst 0.008); 0.05 dB is ten of it (the clamped variant's 240-sample frames: less)
    assert segsnr_voicebox(test, reference, FS, mode="wz").segmental == pytest.approx(snr_db, abs=0.05)
    assert segsnr_clamped(test, reference, FS) == pytest.approx(snr_db, abs=0.05)
    default = segsnr_voicebox(test, reference, FS)  # 'Vq': the +-1 sample interpolation also removes some noise,
    assert default.kept[2:].all()  # stationary noise is active speech to P.56 once its envelope has risen (20 ms)
    assert snr_db <= default.segmental < snr_db + (1.6 if snr_db == 0 else 0.5)  # +1.5 dB at 0 dB, < 0.3 dB from 10


def test_segsnr_frames_computed_by_hand():
    fs = 400  # 10 ms frames of 4 samples
    r = np.array([1.0, 1, 1, 1, 2, 2, 2, 2, 0, 0, 0, 0, 1, 1, 1, 1])
    s = r + np.array([0.1, -0.1, 0.1, -0.1, 0, 0, 0, 0.2, 0.5, 0, 0, 0, 0, 0, 0, 0])
    result = segsnr_voicebox(s, r, fs, mode="wz")
    expected = [10 * np.log10(4 / 0.04), 10 * np.log10(16 / 0.04), -100.0, 100.0]  # silent reference; no error
    assert np.allclose(result.frame_snr, expected) and result.segmental == pytest.approx(np.mean(expected))
    assert result.global_snr == pytest.approx(10 * np.log10(24 / (0.04 + 0.04 + 0.25)))


def test_segsnr_silent_frames_as_the_definition_says():
    rng = np.random.default_rng(4)
    reference = np.concatenate([rng.standard_normal(FS), np.zeros(FS), rng.standard_normal(FS)]) * 0.1
    test = reference + 0.01 * rng.standard_normal(len(reference))  # 20 dB where the reference sounds
    test[FS + 400 : FS + 480] = 0.0  # one frame of silence in both signals (frame 5 of the silent second)
    per_second = FS // 80
    all_frames = segsnr_voicebox(test, reference, FS, mode="wz")
    silent = all_frames.frame_snr[per_second : 2 * per_second]
    assert silent[5] == 100.0 and np.all(np.delete(silent, 5) == -100.0)  # no error wins; else silent -> -100
    active = segsnr_voicebox(test, reference, FS)  # default: P.56 activity of the reference picks the frames
    middle = slice(per_second + 30, 2 * per_second - 10)  # beyond the 200 ms hangover: dropped
    hangover = slice(per_second + 6, per_second + 15)  # silent but within the hangover: kept, at -100 dB
    assert not active.kept[middle].any() and active.kept[5 : per_second - 5].all()
    assert active.kept[hangover].all() and np.all(active.frame_snr[hangover] == -100.0)
    assert active.frame_snr[per_second + 5] == 100.0  # silent in both: +100 ('q' aligns the frame's last sample)
    assert active.segmental == pytest.approx(active.frame_snr[active.kept].mean())
    sounding = active.kept & (active.frame_snr > -100)
    assert active.frame_snr[sounding].mean() == pytest.approx(20.0, abs=0.6)
    assert math.isnan(segsnr_voicebox(test, np.zeros_like(reference), FS).segmental)  # no active frame at all


def test_segsnr_alignment_removes_a_one_sample_delay():
    reference = np.random.default_rng(5).standard_normal(2 * FS)
    delayed = np.concatenate([[0.0], reference[:-1]])  # s(i) = r(i - 1)
    assert segsnr_voicebox(delayed, reference, FS, mode="wz").segmental < 5.0
    assert segsnr_voicebox(delayed, reference, FS, mode="wq").segmental == 100.0  # 'q' interpolates it away


def test_p56_activity_of_a_tone_burst():
    t = np.arange(3 * FS) / FS
    tone = 0.5 * np.sin(2 * np.pi * 1000 * t)
    power_db = 10 * np.log10(0.125)
    assert 10 * np.log10(active_level(tone, FS).level) == pytest.approx(power_db, abs=0.5)  # continuous: its power
    signal = np.concatenate([tone[:FS], np.zeros(FS), tone[:FS]])
    result = active_level(signal, FS)
    # 2 s of tone; the 200 ms hangover and the envelope's decay count about 0.28 s more per burst as active
    assert 10 * np.log10(result.level) == pytest.approx(power_db + 10 * np.log10(2 / 2.56), abs=0.3)
    assert result.active[400:FS].all() and result.active[2 * FS + 400 :].all()  # after the envelope's 30 ms rise
    assert not result.active[FS + int(0.35 * FS) : 2 * FS].any()  # silence, after the 200 ms hangover and the decay
    assert active_level(np.zeros(FS), FS).level == 0.0


# STOI, PESQ and failures -----------------------------------------------------------------------------------
@needs_fsdd
def test_stoi_and_pesq_are_at_their_maxima_on_clean_speech_and_drop_when_degraded():
    clean = speech()
    perfect = score_utterance(clean, clean, FS)
    # identical signals: every band's correlation is x.x / |x||x| = 1 to the float64 round-off of its 30 frames
    assert perfect["stoi"].value == pytest.approx(1.0, abs=roundoff(torch.float64, 30))
    assert perfect["pesq_nb_mos_lqo"].value == pytest.approx(4.549, abs=0.01)  # MOS-LQO's narrow-band maximum
    assert perfect["segsnr_voicebox"].value == 100.0 and perfect["segsnr_clamped_30ms"].value == 35.0
    # VOICEBOX's global SNR of no error at all is +inf: a reason, left out of the mean, as the module says of any
    # non-finite value (it was recorded as inf, and one such utterance made the mean inf)
    assert perfect["snr_global_voicebox"] == Score(None, "the global SNR is inf (the estimate equals the reference)")
    degraded = score_utterance(at_snr(clean, 0.0), clean, FS)
    assert degraded["segsnr_voicebox"].value < 5.0


@needs_fsdd
def test_stoi_and_pesq_are_the_reference_libraries_own_values_in_their_argument_order():
    """The values pystoi and the `pesq` package give for (reference, degraded), exactly: torchmetrics only passes the
    arrays on. The order matters (0 dB: STOI 0.60 against 0.43 swapped, PESQ 1.28 against 1.73), and each score
    rises with the SNR."""
    import pesq
    import pystoi

    clean = speech()
    scores = []
    for snr_db in (0.0, 10.0, 20.0):
        noisy = at_snr(clean, snr_db)
        score = score_utterance(noisy, clean, FS)
        assert score["stoi"].value == pystoi.stoi(clean, noisy, FS)
        assert score["pesq_nb_mos_lqo"].value == pesq.pesq(FS, clean, noisy, "nb")
        scores.append((score["stoi"].value, score["pesq_nb_mos_lqo"].value))
    swapped = score_utterance(clean, at_snr(clean, 0.0), FS)
    assert (swapped["stoi"].value, swapped["pesq_nb_mos_lqo"].value) != scores[0]
    assert [s for s, _ in scores] == sorted({s for s, _ in scores}) and [p for _, p in scores] == sorted(
        {p for _, p in scores}
    )  # strictly rising


@needs_fsdd
def test_silent_and_short_inputs_are_recorded_failures_not_crashes():
    clean = speech(2)
    silent_reference = score_utterance(clean, np.zeros_like(clean), FS)
    assert set(silent_reference) == set(metric_names(FS))
    assert all(not s.ok and s.reason == "the reference is silent" for s in silent_reference.values())
    short = score_utterance(clean[:800], clean[:800], FS)  # 0.1 s
    assert not short["pesq_nb_mos_lqo"].ok and "BufferTooShortError" in short["pesq_nb_mos_lqo"].reason
    assert not short["stoi"].ok and "too short for STOI" in short["stoi"].reason
    assert short["segsnr_voicebox"].ok  # 10 ms frames: 0.1 s is enough
    silent_estimate = score_utterance(np.zeros_like(clean), clean, FS)
    assert not silent_estimate["pesq_nb_mos_lqo"].ok and silent_estimate["pesq_nb_mos_lqo"].reason


def test_report_excludes_failures_from_means_counts_them_and_keeps_reasons():
    def scores(pesq: Score) -> dict:
        return {
            "segsnr_voicebox": Score(5.0),
            "snr_global_voicebox": Score(6.0),
            "segsnr_clamped_30ms": Score(4.0),
            "stoi": Score(0.5),
            "pesq_nb_mos_lqo": pesq,
        }

    utterances = [
        UtteranceScores("a", ["1.wav"], scores(Score(2.0)), scores(Score(3.0))),
        UtteranceScores("b", ["2.wav"], scores(Score(None, "BufferTooShortError: too short")), scores(Score(1.0))),
        UtteranceScores("c", ["3.wav"], scores(Score(4.0)), scores(Score(2.0))),
    ]
    report = AudioReport("val", FS, "true_phase", "copy the previous frame", utterances, [])
    points = report.metric_points()
    assert points["val_audio/pesq_nb_mos_lqo"] == 3.0 and points["val_audio/n_failed_pesq_nb_mos_lqo_utterances"] == 1
    assert points["val_audio_baseline/pesq_nb_mos_lqo"] == 2.0 and points["val_audio/n_utterances"] == 3
    assert points["val_audio_baseline/n_failed_pesq_nb_mos_lqo_utterances"] == 0
    assert points["val_audio_baseline/n_failed_stoi_utterances"] == 0 and app_wav.failed_key(
        "val_audio_baseline/n_failed_stoi_utterances"
    ) == ("val", "baseline", "stoi")
    assert math.isnan(points["val_audio/pesq_nb_mos_lqo/b"]) and points["val_audio/pesq_nb_mos_lqo/c"] == 4.0
    table = json.loads(json.dumps(report.table(), allow_nan=False))
    assert table["utterances"][1]["failures"]["model"] == {"pesq_nb_mos_lqo": "BufferTooShortError: too short"}
    assert table["failed"]["model"]["pesq_nb_mos_lqo"] == 1 and table["means"]["model"]["stoi"] == 0.5
    said = report.summary()  # the count, and the reason the artifact holds: a diverged model's -421 dB needs it
    assert "1 failed" in said and said.endswith(
        "failed scores: 1; the most common reason (1): BufferTooShortError: too short"
    )
    assert "failed scores" not in AudioReport("val", FS, "true_phase", "-", utterances[:1], []).summary()


# reconstruction ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("framing", ["wisdom", "centered"])
@pytest.mark.parametrize("log_scale", ["db_power", "log1p_magnitude"])
def test_reconstruction_from_true_magnitudes_and_phase_returns_the_original(framing, log_scale):
    waveform = torch.from_numpy(np.random.default_rng(6).standard_normal(5000) * 0.3).float()
    frames = SpectralFrames(framing=framing, log_scale=log_scale)
    rebuilt = reconstruct(frames, frames.features(frames.stft(waveform)), waveform)
    assert rebuilt.shape == waveform.shape
    # float32 STFT, features, magnitude and the inverse STFT: 2 log2(256) eps32 ||frame|| for the FFTs, and the
    # log and its inverse (~4 roundings times the dB scale's condition, <= ln 10 / 20 * 50 dB ~ 6)
    frame_norm = waveform.unfold(0, 256, 128).norm(dim=1).max().item()
    assert torch.allclose(
        rebuilt[256:-256], waveform[256:-256], rtol=0, atol=roundoff(torch.float32, 2 * 8 + 4 * 6, scale=frame_norm)
    )


def test_estimates_keep_the_one_frame_a_model_cannot_predict():
    true = torch.arange(12.0).reshape(4, 3)
    predicted = torch.full((3, 3), -1.0)
    assert torch.equal(estimated_frames(true, predicted, "next_frame"), torch.cat([true[:1], predicted]))
    assert torch.equal(estimated_frames(true, predicted, "previous_frame"), torch.cat([predicted, true[-1:]]))
    assert torch.equal(copy_input_frames(true, "next_frame"), torch.cat([true[:1], true[:-1]]))  # repeat previous


@needs_fsdd
def test_griffin_lim_reconstruction_matches_the_magnitudes():
    waveform = torch.from_numpy(speech(4)).float()
    frames = SpectralFrames()
    rebuilt = reconstruct(frames, frames.features(frames.stft(waveform)), waveform, method="griffin_lim")
    target, achieved = frames.stft(waveform).abs(), frames.stft(rebuilt).abs()
    assert rebuilt.shape == waveform.shape and float((achieved - target).norm() / target.norm()) < 0.2


# end to end --------------------------------------------------------------------------------------------------
@needs_fsdd
def test_fit_test_and_evaluate_run_on_fsdd_record_scores_and_clips(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path / 'store.db'}"
    tiny = [
        "--config",
        str(REPO / "configs" / "demo" / "speech_fsdd_scornn.yaml"),
        "--db",
        db,
        "--data.path",
        str(FSDD),
        "--data.max_utterances",
        "3",
        "--data.batch_size",
        "3",
        "--model.hidden_size",
        "8",
        "--model.family_args",
        "{rho: 1}",
        "--trainer.max_steps",
        "2",
        "--model.optimizers",
        "{default: {name: adam, lr: 1.0e-3}}",  # 2 small steps: predictions stay finite
        "--trainer.check_val_every_n_epoch",
        "1",
        "--trainer.enable_progress_bar",
        "false",
        "--trainer.enable_model_summary",
        "false",
        "--analysis",
        "false",
        "--trainer.callbacks",
        ("[{class_path: training.callbacks.audio.AudioEvaluation, init_args: {utterances: 2, clips: 1}}]"),
    ]
    main(["fit", *tiny])
    assert "Audio evaluation on 2 val utterances" in capsys.readouterr().out
    store = Store(db)
    (run,) = store.list_runs()
    keys = set(store.metric_keys(run.id))
    assert "val/mse_valid_frames" in keys  # the task's main metric
    for metric in ("segsnr_voicebox", "segsnr_clamped_30ms", "stoi", "pesq_nb_mos_lqo"):
        assert f"val_audio/{metric}" in keys and f"val_audio_baseline/{metric}" in keys
        failed = store.metric_series(run.id, f"val_audio/n_failed_{metric}_utterances")[0].value
        assert failed == 0, json.loads(store.artifact_data(store.artifacts(run.id, AUDIO_SCORES)[0].id))["utterances"]
    points = store.metric_series(run.id, "val_audio/stoi")
    assert [p.step for p in points] == [2] and 0.0 < points[0].value <= 1.0
    clips = {a.meta["role"]: a for a in store.artifacts(run.id, AUDIO)}
    assert set(clips) == {"reference", "reconstruction", "baseline"}
    samples, rate = soundfile.read(io.BytesIO(store.artifact_data(clips["reference"].id)))
    assert rate == FS == clips["reference"].meta["sample_rate"] and clips["reconstruction"].meta["stoi"] > 0
    utterance = clips["reference"].meta["utterance"]
    original = np.concatenate(
        [
            soundfile.read(str(FSDD / name))[0]
            for name in json.loads(store.artifact_data(store.artifacts(run.id, AUDIO_SCORES)[0].id))["utterances"][0][
                "sources"
            ]
        ]
    )
    # levels kept, to the 16-bit quantisation step 1/32768 (a derived bound: one step of the stored integers)
    assert utterance.startswith("george-val-") and np.allclose(samples, original, atol=1 / 32768)

    last = Path(store.get_run(run.id).run_dir) / "checkpoints"
    main(["test", *tiny, "--ckpt_path", str(last / "last.ckpt")])
    (tested,) = [r for r in store.list_runs() if r.stage == "test"]
    test_step = store.metric_series(tested.id, "test/mse_valid_frames")[0].step  # a test run's step, as Lightning's
    assert store.metric_series(tested.id, "test_audio/pesq_nb_mos_lqo")[0].step == test_step
    assert {a.meta["role"] for a in store.artifacts(tested.id, AUDIO)} == {"reference", "reconstruction", "baseline"}

    capsys.readouterr()
    main(
        [
            "evaluate-audio",
            str(run.id),
            "--db",
            db,
            "--split",
            "test",
            "--utterances",
            "1",
            "--clips",
            "0",
            "--checkpoint",
            "last",
            "--method",
            "griffin_lim",
        ]
    )  # the on-demand command, as a user types it
    said = capsys.readouterr().out
    assert "Audio evaluation on 1 test utterances (griffin lim reconstruction)" in said
    assert said.rstrip().endswith(
        f"recorded in run {run.id} (`ortholab runs show {run.id}`; the dashboard's Audio page plays its clips)"
    )
    assert store.metric_series(run.id, "test_audio/segsnr_voicebox")[0].step == 2

    # the fit's own val scores (2 utterances at step 2) are not replaced by a re-evaluation unless asked
    again = ["evaluate-audio", str(run.id), "--db", db, "--checkpoint", "last", "--clips", "0"]
    before = {key: store.metric_series(run.id, key) for key in store.metric_keys(run.id)}
    with pytest.raises(SystemExit) as refused:
        main(again)
    err = capsys.readouterr().err
    assert refused.value.code == 2 and "already holds its val audio scores at step 2 (2 utterances)" in err
    assert {key: store.metric_series(run.id, key) for key in store.metric_keys(run.id)} == before
    main([*again, "--replace", "--utterances", "1"])
    assert [p.value for p in store.metric_series(run.id, "val_audio/n_utterances")] == [1.0]
    scored = {k.rsplit("/", 1)[1] for k in store.metric_keys(run.id) if k.startswith("val_audio/stoi/")}
    assert len(scored) == 1  # the second utterance's points of the earlier evaluation went with it
    assert {a.meta["role"] for a in store.artifacts(run.id, AUDIO) if a.name.startswith("val/")} == set()  # --clips 0
    main([*again, "--replace"])  # as many utterances as the run's own evaluation (its callback: 2), not 16
    assert [p.value for p in store.metric_series(run.id, "val_audio/n_utterances")] == [2.0]
    assert len({k for k in store.metric_keys(run.id) if k.startswith("val_audio/stoi/")}) == 2


@needs_fsdd
def test_a_64_true_speech_run_is_scored_by_its_float64_model(tmp_path, monkeypatch, capsys):
    """The fit's AudioEvaluation and evaluate-audio (which loads the checkpoint in float64) cast the frames to the
    model's dtype: a 64-true run's float32 frames were a dtype error, and its loaded weights were rounded to float32."""
    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path / 'store.db'}"
    main(
        [
            "fit",
            *("--config", str(REPO / "configs" / "demo" / "speech_fsdd_scornn.yaml"), "--db", db),
            *("--data.path", str(FSDD), "--data.max_utterances", "3", "--data.batch_size", "3"),
            *("--model.hidden_size", "8", "--model.family_args", "{rho: 1}", "--trainer.max_steps", "2"),
            *("--trainer.precision", "64-true", "--trainer.check_val_every_n_epoch", "1", "--analysis", "false"),
            *("--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"),
            "--trainer.callbacks",
            "[{class_path: training.callbacks.audio.AudioEvaluation, init_args: {utterances: 1, clips: 0}}]",
        ]
    )
    assert "Audio evaluation on 1 val utterances" in capsys.readouterr().out
    (run,) = Store(db, access="read").list_runs()
    main(["evaluate-audio", str(run.id), "--db", db, "--split", "test", "--utterances", "1", "--clips", "0"])
    assert "Audio evaluation on 1 test utterances" in capsys.readouterr().out
    assert [p.step for p in Store(db, access="read").metric_series(run.id, "test_audio/stoi")] == [2]


def test_clips_keep_levels_and_count_what_had_to_be_clipped():
    from ortholab.evaluation.audio import wav_bytes

    samples = np.array([0.5, -0.25, 1.5, -2.0, np.inf, np.nan, 0.0])
    data, clipped = wav_bytes(samples, FS)
    decoded, rate = soundfile.read(io.BytesIO(data))
    assert rate == FS and clipped == 4
    # to the 16-bit quantisation step 1/32768 (a derived bound: one step of the stored integers)
    assert np.allclose(decoded, [0.5, -0.25, 32767 / 32768, -1.0, 0.0, 0.0, 0.0], atol=1 / 32768)


class _Payload:
    """Unpickling this would run `touch pwned` (what a crafted checkpoint does under weights_only=False)."""

    def __reduce__(self):
        import os

        return os.system, ("touch pwned",)


def test_a_crafted_checkpoint_is_refused_without_running_its_code(tmp_path, monkeypatch):
    from ortholab.cli.evaluate_audio import load_checkpoint
    from ortholab.errors import ConfigError

    monkeypatch.chdir(tmp_path)
    crafted = tmp_path / "crafted.ckpt"
    torch.save({"state_dict": {}, "hyper_parameters": {}, "payload": _Payload()}, crafted)
    with pytest.raises(ConfigError, match="refused, not run"):
        load_checkpoint(crafted)
    assert not (tmp_path / "pwned").exists()
    (tmp_path / "text.ckpt").write_text("not a checkpoint")
    with pytest.raises(ConfigError, match="text.ckpt: cannot be read as a checkpoint of weights"):
        load_checkpoint(tmp_path / "text.ckpt")
    torch.save({"weights": torch.zeros(2)}, tmp_path / "bare.ckpt")
    with pytest.raises(ConfigError, match="not a checkpoint written by `ortholab fit`"):
        load_checkpoint(tmp_path / "bare.ckpt")
    assert (
        "weights_only=False" not in Path(__import__("ortholab.evaluation.audio", fromlist=["x"]).__file__).read_text()
    )


def test_a_run_that_kept_no_checkpoint_is_named_as_such(tmp_path):
    """A predict run (or a fit stopped before its first checkpoint) keeps none: '--checkpoint last' was suggested
    for it, and failed the same way (walk-through 3). The command line's words (training/checkpoint_choice.py)."""
    from ortholab.training.checkpoint_choice import run_checkpoint

    for choice in ("best", "last"):
        with pytest.raises(ValueError, match=r"^--checkpoint .*: run 7 kept no checkpoint .* give a fit run that"):
            run_checkpoint(7, tmp_path, choice, flag="--checkpoint")
        with pytest.raises(ValueError, match=r"elsewhere is not on this machine .*ortholab restore DIR --runs-dir"):
            run_checkpoint(7, tmp_path / "elsewhere", choice, flag="--checkpoint")  # a store restored from an export
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"")
    with pytest.raises(ValueError) as refused:  # `best` is not suggested again
        run_checkpoint(7, tmp_path, "best", flag="--checkpoint")
    assert str(refused.value) == (
        "--checkpoint best: run 7 holds last.ckpt and no best-step file; give --checkpoint last, one of these names "
        "or a path"
    )
    # a choice the command made, not one the user typed, says so: "--checkpoint best" alone read as a typo of theirs
    with pytest.raises(ValueError, match=r"^--checkpoint best \(the default\): run 7 holds last.ckpt and no best"):
        run_checkpoint(7, tmp_path, "best", flag="--checkpoint", default=True)
    with pytest.raises(ValueError, match=r"^--checkpoint .*nowhere.ckpt: no such file; run 7 holds last.ckpt; give"):
        run_checkpoint(7, tmp_path, tmp_path / "nowhere.ckpt", flag="--checkpoint")


def test_best_skips_a_best_step_file_training_deletes_while_it_is_chosen(tmp_path, monkeypatch):
    """A run still training deletes a best-step file when a better one is saved: load_run and evaluate-audio sorted
    the folder by time and a file gone between listing and stat was a FileNotFoundError; it is passed over."""
    import os
    from pathlib import Path

    from ortholab.training.checkpoint_choice import run_checkpoint

    folder = tmp_path / "checkpoints"
    folder.mkdir()
    for step, name in enumerate(("best-step2.ckpt", "best-step4.ckpt", "last.ckpt")):
        (folder / name).write_bytes(b"")
        os.utime(folder / name, (step, step))
    stat = Path.stat

    def vanishing(path, *args, **kwargs):  # best-step2.ckpt is deleted after the listing
        if path.name == "best-step2.ckpt":
            raise FileNotFoundError(path)
        return stat(path, *args, **kwargs)

    monkeypatch.setattr(Path, "stat", vanishing)
    assert run_checkpoint(7, tmp_path, "best") == folder / "best-step4.ckpt"


def tiny_speech_fit(tmp_path, callback: str, data_path: Path = FSDD) -> tuple[str, int]:
    """(store URL, run id) of a 2-step speech fit on 3 FSDD utterances with the AudioEvaluation `callback`'s
    init_args (YAML)."""
    db = f"sqlite:///{tmp_path / 'store.db'}"
    fit = ["fit", "--config", str(REPO / "configs" / "demo" / "speech_fsdd_scornn.yaml"), "--db", db]
    fit += ["--data.path", str(data_path), "--data.max_utterances", "3", "--data.batch_size", "3"]
    fit += ["--model.hidden_size", "8", "--model.family_args", "{rho: 1}", "--trainer.max_steps", "2"]
    fit += ["--trainer.check_val_every_n_epoch", "1", "--analysis", "false"]
    fit += ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]
    fit += ["--trainer.callbacks", f"[{{class_path: training.callbacks.audio.AudioEvaluation, init_args: {callback}}}]"]
    main(fit)
    (run,) = Store(db).list_runs()
    return db, run.id


@needs_fsdd
def test_evaluate_audio_keeps_the_runs_own_per_utterance_and_clips_settings(tmp_path, monkeypatch, capsys):
    """The TIMIT configs set `per_utterance: false` to keep 4,000 per-utterance keys out of the store; evaluate-audio
    recorded them anyway (and 3 clips where the run kept none): it takes both from the run, as `utterances`."""
    monkeypatch.chdir(tmp_path)
    db, run_id = tiny_speech_fit(tmp_path, "{utterances: 2, clips: 0, per_utterance: false}")
    store = Store(db)
    main(["evaluate-audio", str(run_id), "--db", db, "--checkpoint", "last", "--replace"])
    assert "Audio evaluation on 2 val utterances" in capsys.readouterr().out
    assert [k for k in store.metric_keys(run_id) if k.startswith("val_audio/stoi/")] == []
    assert store.artifacts(run_id, AUDIO) == []
    main(["evaluate-audio", str(run_id), "--db", db, "--checkpoint", "last", "--split", "test", "--clips", "1"])
    assert {a.meta["role"] for a in store.artifacts(run_id, AUDIO)} == {"reference", "reconstruction", "baseline"}


@needs_fsdd
def test_evaluate_audio_finds_a_corpus_that_moved_with_data_path(tmp_path, monkeypatch, capsys):
    """A corpus moved since the run trained: the error said `set data.path`, and evaluate-audio had no such flag
    (`ortholab test --run ID --data.path DIR` has). It takes --data.path, and its error names it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "corpus").symlink_to(FSDD, target_is_directory=True)
    db, run_id = tiny_speech_fit(tmp_path, "{utterances: 1, clips: 0}", tmp_path / "corpus")
    (tmp_path / "corpus").rename(tmp_path / "moved")
    capsys.readouterr()
    score = ["evaluate-audio", str(run_id), "--db", db, "--checkpoint", "last", "--split", "test"]
    with pytest.raises(SystemExit) as refused:
        main(score)
    err = capsys.readouterr().err
    assert refused.value.code == 2 and len(err.strip().splitlines()) == 1
    assert f"{tmp_path / 'corpus'}' is not a folder" in err and "give --data.path DIR where it is now" in err
    main([*score, "--data.path", str(tmp_path / "moved")])
    assert "Audio evaluation on 1 test utterances" in capsys.readouterr().out
    assert [p.step for p in Store(db).metric_series(run_id, "test_audio/n_utterances")] == [2]
