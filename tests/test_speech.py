"""The speech task: TIMIT's splits from a stand-in tree of NIST SPHERE files, FSDD utterances, features against an
independent numpy oracle, batches, both MSE definitions, the feature cache, and bad input as one clear message."""

import math
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch
from tolerances import roundoff

from ortholab.datamodules import TASKS
from ortholab.datamodules.recordings import RecordingReader
from ortholab.datamodules.spectral import DB_FLOOR, SpectralFrames
from ortholab.datamodules.speech import SpeechPrediction
from ortholab.datamodules.speech_corpora import TIMIT_CORE_SPEAKERS, TIMIT_DEV_SPEAKERS, fsdd_splits
from ortholab.datamodules.torchaudio_check import torchaudio_transforms
from ortholab.errors import ConfigError
from ortholab.training.objectives import OBJECTIVES

RATE = 16000


def write_sphere(path: Path, seconds: float = 0.1, rate: int = RATE, seed: int = 0) -> np.ndarray:
    """A TIMIT-like recording: NIST SPHERE, 16-bit PCM, mono."""
    path.parent.mkdir(parents=True, exist_ok=True)
    samples = (np.random.default_rng(seed).standard_normal(int(seconds * rate)) * 0.1).astype(np.float32)
    soundfile.write(str(path), samples, rate, format="NIST", subtype="PCM_16")
    return samples


def timit_tree(root: Path) -> Path:
    """TRAIN: an ordinary speaker and one whose ID contains 'SA'; TEST: a dev speaker, a core speaker, another.
    Letter case varies as it does between TIMIT distributions."""
    files = [
        "TRAIN/DR1/FAKE0/SA1.WAV",
        "TRAIN/DR1/FAKE0/SA2.WAV",
        "TRAIN/DR1/FAKE0/SI1.WAV",
        "TRAIN/DR1/FAKE0/SX1.WAV",
        "TRAIN/DR1/FAKE0/SX2.WAV",
        "TRAIN/DR2/FSAH0/SI3.WAV",
        "TRAIN/DR2/FSAH0/SX4.WAV",
        "TRAIN/DR2/FSAH0/SA1.WAV",
        "TRAIN/DR2/FSAH0/README.TXT",
        "TEST/DR1/FAKS0/SA1.WAV",
        "TEST/DR1/FAKS0/SI5.WAV",
        "TEST/DR1/FAKS0/SX6.WAV",
        "TEST/dr3/mdab0/sa2.wav",
        "TEST/dr3/mdab0/si7.wav",
        "TEST/dr3/mdab0/sx8.wav",
        "TEST/DR4/MABC0/SI9.WAV",
    ]
    for number, name in enumerate(files):
        if name.endswith((".WAV", ".wav")):
            write_sphere(root / name, seed=number)
        else:
            (root / name).write_text("not audio")
    return root


def names(dm: SpeechPrediction, split: str) -> list[str]:
    return [u.name for u in dm.sources()[split]]


def test_torchaudio_transforms_work_on_this_torch():
    transforms = torchaudio_transforms()
    signal = torch.randn(4000)
    assert transforms.Resample(16000, 8000)(signal).shape == (2000,)
    frames = transforms.Spectrogram(n_fft=256, hop_length=128, power=None)(signal)
    assert frames.shape == (129, 4000 // 128 + 1)
    back = transforms.InverseSpectrogram(n_fft=256, hop_length=128)(frames, length=4000)
    # float32 FFT there and back: log2(256) eps32 ||frame|| each way (FFT's normwise stability), plus a few
    # roundings for the window and the overlap-add
    frame_norm = signal.unfold(0, 256, 128).norm(dim=1).max().item()
    assert torch.allclose(back, signal, rtol=0, atol=roundoff(torch.float32, 2 * 8 + 4, scale=frame_norm))
    assert transforms.GriffinLim(n_fft=256, hop_length=128, n_iter=2, power=1.0)(frames.abs()).shape[-1] > 3000


# TIMIT -------------------------------------------------------------------------------------------------
def test_timit_splits_follow_the_speaker_lists_and_exclude_sa(tmp_path):
    assert len(TIMIT_DEV_SPEAKERS) == 50 and len(TIMIT_CORE_SPEAKERS) == 24
    assert not TIMIT_DEV_SPEAKERS & TIMIT_CORE_SPEAKERS
    root = timit_tree(tmp_path / "timit")
    dm = SpeechPrediction(corpus="timit", path=str(root))
    with pytest.warns(UserWarning, match="is the copy complete"):
        dm.setup("fit")
    assert names(dm, "train") == ["FAKE0_SI1", "FSAH0_SI3", "FAKE0_SX1", "FSAH0_SX4", "FAKE0_SX2"]  # round robin
    assert names(dm, "val") == ["FAKS0_SI5", "FAKS0_SX6"]  # Wisdom et al.: validate on the development set
    assert names(dm, "test") == ["MDAB0_SI7", "MDAB0_SX8"]  # and report the core test set

    swapped = SpeechPrediction(corpus="timit", path=str(root), timit_naming="exprnn", timit_train="exprnn_3640")
    with pytest.warns(UserWarning):
        swapped.setup("fit")
    assert names(swapped, "train") == ["FAKE0_SI1", "FAKE0_SX1", "FAKE0_SX2"]  # speakers with "SA" in their ID go
    assert names(swapped, "val") == ["MDAB0_SI7", "MDAB0_SX8"] and names(swapped, "test") == ["FAKS0_SI5", "FAKS0_SX6"]

    val = dm.speech("val")  # 0.1 s at 16 kHz -> 800 samples at 8 kHz -> ceil(800 / 128) + 3 frames
    assert val.sample_rate == 8000 and val.samples.tolist() == [800, 800] and val.lengths.tolist() == [10, 10]
    assert val.features.shape == (20, 129) and val.waveform(1).shape == (800,)
    assert dm.speech("train").audio is None  # waveforms are kept for the evaluation splits only


def test_timit_found_one_folder_down(tmp_path):
    timit_tree(tmp_path / "corpus" / "TIMIT")
    dm = SpeechPrediction(corpus="timit", path=str(tmp_path / "corpus"))
    with pytest.warns(UserWarning):
        assert len(dm.sources()["train"]) == 5


def test_timit_sphere_file_with_a_bad_header_names_the_file(tmp_path):
    root = timit_tree(tmp_path / "timit")
    bad = root / "TEST" / "DR1" / "FAKS0" / "SX6.WAV"
    data = bad.read_bytes()
    bad.write_bytes(b"NIST_1A\n   1024\nsample_rate -i sixteen\n" + data[38:])
    dm = SpeechPrediction(corpus="timit", path=str(root))
    with pytest.warns(UserWarning), pytest.raises(ConfigError, match="SX6.WAV cannot be read as audio"):
        dm.speech("val")


def test_timit_folder_that_is_not_timit_names_the_path(tmp_path):
    (tmp_path / "recordings" / "DR1").mkdir(parents=True)
    write_sphere(tmp_path / "recordings" / "DR1" / "SA1.WAV")
    with pytest.raises(ConfigError, match=r"recordings' is not TIMIT's layout: expected TRAIN/ and TEST/"):
        SpeechPrediction(corpus="timit", path=str(tmp_path / "recordings")).setup("fit")
    with pytest.raises(ConfigError, match="is not a folder"):
        SpeechPrediction(corpus="timit", path=str(tmp_path / "missing")).setup("fit")
    with pytest.raises(ConfigError, match="data.path is not set.*LDC93S1"):
        SpeechPrediction(corpus="timit").setup("fit")


def test_audio_at_an_unsupported_rate_is_a_clear_error(tmp_path):
    root = timit_tree(tmp_path / "timit")
    write_sphere(root / "TEST" / "DR1" / "FAKS0" / "SI5.WAV", rate=4000)
    dm = SpeechPrediction(corpus="timit", path=str(root))
    refused = r"SI5.WAV is sampled at 4000 Hz, below data.sample_rate"
    with pytest.warns(UserWarning), pytest.raises(ConfigError, match=refused):
        dm.speech("val")
    with pytest.raises(ConfigError, match="data.sample_rate = 22050 is not supported"):
        SpeechPrediction(sample_rate=22050)


# FSDD --------------------------------------------------------------------------------------------------
def fsdd_tree(root: Path, speakers=("ann", "bob", "cyd"), indices=range(12), seconds=0.05) -> Path:
    """FSDD-named stand-ins: {digit}_{speaker}_{index}.wav, 8 kHz mono, each a tone of its own length."""
    root.mkdir(parents=True)
    for s, speaker in enumerate(speakers):
        for digit in range(10):
            for index in indices:
                length = int(seconds * 8000) + 8 * digit + index + 100 * s
                tone = 0.3 * np.sin(np.arange(length) * 0.05 * (1 + digit)).astype(np.float32)
                soundfile.write(str(root / f"{digit}_{speaker}_{index}.wav"), tone, 8000, subtype="PCM_16")
    return root


def test_fsdd_utterances_join_recordings_of_one_speaker_deterministically(tmp_path):
    root = fsdd_tree(tmp_path / "recordings")
    splits = fsdd_splits(root, per_utterance=8, seed=1)
    for split, indices in (("test", set(range(5))), ("val", set(range(5, 10))), ("train", {10, 11})):
        used = [name for u in splits[split] for name in (f.name for f in u.files)]
        expected = sorted(p.name for p in root.iterdir() if int(p.stem.split("_")[2]) in indices)
        assert sorted(used) == expected  # every recording of the split exactly once
        sizes = {}
        for utterance in splits[split]:
            speaker = utterance.name.split("-")[0]
            assert {f.name.split("_")[1] for f in utterance.files} == {speaker}
            sizes.setdefault(speaker, []).append(len(utterance.files))
        assert all(max(s) <= 8 and max(s) - min(s) <= 1 for s in sizes.values())  # ceil(n / 8) near-equal groups
    assert [u.name for u in splits["val"]][:4] == ["ann-val-000", "bob-val-000", "cyd-val-000", "ann-val-001"]
    assert splits == fsdd_splits(root, per_utterance=8, seed=1)
    assert splits["train"] != fsdd_splits(root, per_utterance=8, seed=2)["train"]

    by_speaker = fsdd_splits(root, split_by="speaker", val_speakers=("bob",), test_speakers=("cyd",), per_utterance=8)
    assert {u.name.split("-")[0] for u in by_speaker["val"]} == {"bob"}
    assert {u.name.split("-")[0] for u in by_speaker["train"]} == {"ann"}
    assert sum(len(u.files) for u in by_speaker["test"]) == 120

    dm = SpeechPrediction(path=str(root), seed=1, max_utterances=2)
    speech = dm.speech("val")
    first = splits["val"][0]
    joined = np.concatenate([soundfile.read(str(f), dtype="float32")[0] for f in first.files])
    assert speech.names == [u.name for u in splits["val"][:2]] and speech.sources[0] == [f.name for f in first.files]
    assert torch.equal(speech.waveform(0), torch.from_numpy(joined))


def test_fsdd_bad_options_name_the_key(tmp_path):
    root = fsdd_tree(tmp_path / "recordings", speakers=("ann", "bob"))
    with pytest.raises(ConfigError, match="fsdd_val_speakers"):
        fsdd_splits(root, split_by="speaker", val_speakers=("zed",), test_speakers=("bob",))
    with pytest.raises(ConfigError, match="holds no FSDD recordings"):
        fsdd_splits(tmp_path)
    with pytest.raises(ConfigError, match="data.target"):
        SpeechPrediction(target="two_frames_ahead")


# features and batches ----------------------------------------------------------------------------------
def wisdom_oracle(x: np.ndarray) -> np.ndarray:
    """Wisdom et al.'s stft_mc framing in plain numpy: pad to a multiple of 128, 256 zeros at both ends, periodic
    Hann frames every 128 samples from sample 0; then 10 log10(1e-5 + |X|^2)."""
    padded = np.concatenate([np.zeros(256), x, np.zeros(-len(x) % 128), np.zeros(256)])
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(256) / 256)
    starts = np.arange(0, len(padded) - 256 + 1, 128)
    spectrum = np.fft.rfft(padded[starts[:, None] + np.arange(256)] * window, axis=1)
    return 10 * np.log10(1e-5 + np.abs(spectrum) ** 2)


def test_features_match_wisdom_et_al_definition():
    x = np.random.default_rng(3).standard_normal(1000) * 0.2
    frames = SpectralFrames()
    features = frames.features(frames.stft(torch.from_numpy(x).float()))
    oracle = wisdom_oracle(x)
    assert features.shape == oracle.shape == (int(np.ceil(1000 / 128)) + 3, 129)
    # float32 STFT against numpy's float64: a bin errs by dX = log2(256) eps32 ||frame|| (+ the input's rounding),
    # which 10 log10(DB_FLOOR + |X|^2) turns into at most 10 / ln 10 dX / sqrt(DB_FLOOR) dB (where |X|^2 = DB_FLOOR),
    # plus the float32 rounding of values down to -50 dB
    frame_norm = float(np.linalg.norm(np.lib.stride_tricks.sliding_window_view(x, 256)[::128], axis=1).max())
    dx = roundoff(torch.float32, 8 + 1, scale=frame_norm)
    assert np.allclose(
        features.numpy(),
        oracle,
        rtol=0,
        atol=10 / math.log(10) * dx / math.sqrt(DB_FLOOR) + roundoff(torch.float32, 4, scale=50),
    )
    assert features[0].max() == pytest.approx(-50.0)  # the first frame covers only padding: the -50 dB floor
    centered = SpectralFrames(framing="centered", log_scale="log1p_magnitude")
    values = centered.features(centered.stft(torch.from_numpy(x).float()))
    assert values.shape == (1 + 1000 // 128, 129) and float(values.min()) >= 0.0
    magnitude = torch.tensor([0.0, 1e-4, 0.5, 30.0])
    for scale in ("db_power", "log1p_magnitude"):  # the documented inverse of the log
        f = SpectralFrames(log_scale=scale)
        # float32 log and back: ~4 roundings amplified by the inverse's condition at the largest value (|X| = 30:
        # ln 31 ~ 3.4 for both scales), and the floor's cancellation sqrt(eps32 1e-5) at |X| = 0
        assert torch.allclose(
            f.magnitude(f.features(magnitude.to(torch.complex64))).float(),
            magnitude,
            rtol=roundoff(torch.float32, 4, scale=math.log(31)),
            atol=math.sqrt(roundoff(torch.float32, 2, scale=DB_FLOOR)),
        )


def test_batches_targets_masks_and_both_mse_definitions(tmp_path):
    root = fsdd_tree(tmp_path / "recordings", speakers=("ann", "bob"))
    dm = SpeechPrediction(path=str(root), max_utterances=3, batch_size=3, shuffle=False)
    speech = dm.speech("train")
    inputs, targets, mask = next(iter(dm.train_dataloader()))
    lengths = speech.lengths[:3]
    assert inputs.shape == (3, int(lengths.max()) - 1, 129) and mask.sum(1).tolist() == (lengths - 1).tolist()
    first = speech.frames_of(0)
    assert torch.equal(inputs[0, : len(first) - 1], first[:-1]) and torch.equal(targets[0, : len(first) - 1], first[1:])
    assert not inputs[~mask].any() and not targets[~mask].any()  # zero padding

    swapped = SpeechPrediction(path=str(root), max_utterances=3, target="previous_frame")
    x, y, _ = swapped.dataset("train").batch([0])
    assert torch.equal(x[0], first[1:]) and torch.equal(y[0], first[:-1])  # expRNN: read t + 1, output t

    padded = SpeechPrediction(path=str(root), max_utterances=3, mse="with_padding")
    longest = int(padded.speech("train").lengths.max()) - 1
    assert padded.dataset("train").batch([0])[0].shape[1] == longest  # every batch padded to the split's longest
    assert padded.spec.loss == "frame_mse_padded" and padded.spec.main_metric == "val/mse_with_padding"
    assert dm.spec.loss == "frame_mse" and dm.spec.main_metric == "val/mse_valid_frames"

    outputs = torch.randn(2, 4, 3)
    truth = torch.randn(2, 4, 3)
    valid = torch.tensor([[True, True, True, True], [True, True, False, False]])
    squared = ((outputs - truth) ** 2).sum(-1)
    valid_frames = OBJECTIVES["frame_mse"](dm.spec)
    with_padding = OBJECTIVES["frame_mse_padded"](padded.spec)
    assert valid_frames.loss(outputs, truth, valid) == pytest.approx(float(squared[valid].sum() / (6 * 3)))
    assert with_padding.loss(outputs, truth, valid) == pytest.approx(float(squared[valid].sum() / (8 * 3)))
    metrics = with_padding.metrics()
    with_padding.update(metrics, outputs, truth, valid)
    assert float(metrics["mse_valid_frames"].compute()) == pytest.approx(float(squared[valid].sum() / 18))
    assert float(metrics["mse_with_padding"].compute()) == pytest.approx(float(squared[valid].sum() / 24))


def test_predict_padding_adds_the_last_frames_prediction_of_silence_as_wisdoms_script_trains(tmp_path):
    """stwisdom/urnn timit_prediction.py (num_pred_steps 1) trains L predictions from L frames, the last one of
    the zero padding's features; the default trains L - 1, of real frames only."""
    root = fsdd_tree(tmp_path / "recordings", speakers=("ann", "bob"))
    dm = SpeechPrediction(path=str(root), max_utterances=3, batch_size=3, shuffle=False, predict_padding=True)
    speech = dm.speech("train")
    inputs, targets, mask = next(iter(dm.train_dataloader()))
    lengths = speech.lengths[:3]
    assert inputs.shape == (3, int(lengths.max()), 129) and mask.sum(1).tolist() == lengths.tolist()
    silence = 10.0 * torch.log10(torch.tensor(1e-5))  # 10·log10(1e-5 + 0²): the -50 dB floor
    for row in range(3):
        frames, last = speech.frames_of(row), int(lengths[row]) - 1
        assert torch.equal(inputs[row, : last + 1], frames) and torch.equal(targets[row, :last], frames[1:])
        assert torch.allclose(targets[row, last], silence.expand(129), rtol=0, atol=0)
    assert not inputs[~mask].any() and not targets[~mask].any()  # still zero beyond every row's last step

    padded = SpeechPrediction(path=str(root), max_utterances=3, mse="with_padding", predict_padding=True)
    assert padded.dataset("train").batch([0])[0].shape[1] == int(padded.speech("train").lengths.max())
    with pytest.raises(ConfigError, match="data.predict_padding = true needs data.target: next_frame"):
        SpeechPrediction(path=str(root), target="previous_frame", predict_padding=True)


def test_the_audio_evaluation_hears_frames_only_with_predict_padding(tmp_path):
    """The prediction of the padding is no frame to reconstruct: each utterance keeps L - 1 predicted frames."""
    from ortholab.evaluation.audio import predict

    root = fsdd_tree(tmp_path / "recordings", speakers=("ann", "bob"))
    dm = SpeechPrediction(path=str(root), max_utterances=2, predict_padding=True)
    echo = torch.nn.Linear(129, 129)  # any model of (B, T, 129) -> (B, T, 129)
    predicted = predict(echo, dm, "val", 2)
    assert [len(p) for p in predicted] == (dm.speech("val").lengths[:2] - 1).tolist()


@pytest.mark.parametrize("padding", [False, True])
def test_predict_writes_each_utterances_audio_with_or_without_predict_padding(tmp_path, padding):
    """`ortholab predict`'s audio kept every masked prediction: with predict_padding, L of them for L - 1 frames to
    reconstruct, and the run failed on the lengths (73 against 72 frames)."""
    import soundfile

    from ortholab.training.callbacks.predictions import write_speech_audio

    root = fsdd_tree(tmp_path / "recordings", speakers=("ann", "bob"))
    dm = SpeechPrediction(path=str(root), max_utterances=2, predict_padding=padding)
    inputs, _, mask = dm.dataset("val").batch(range(2))
    arrays = {"predictions": inputs.numpy(), "mask": mask.numpy()}  # as the writer gathers outputs and mask
    assert write_speech_audio(tmp_path / "audio", dm, "val", arrays) == 2
    speech = dm.speech("val")
    for index, wav in enumerate(sorted((tmp_path / "audio").glob("*.wav"))):
        assert len(soundfile.read(wav)[0]) == len(speech.waveform(index)), wav  # the utterance's own length


def test_features_are_cached_under_cache_dir_keyed_by_settings(tmp_path, monkeypatch):
    root = fsdd_tree(tmp_path / "recordings", speakers=("ann", "bob"))
    cache = tmp_path / "cache"
    first = SpeechPrediction(path=str(root), max_utterances=2, cache_dir=str(cache)).speech("val")
    (saved,) = cache.glob("speech-fsdd-val-*.pt")

    def no_reading(self, path):
        raise AssertionError("features should come from the cache")

    monkeypatch.setattr(RecordingReader, "read", no_reading)
    again = SpeechPrediction(path=str(root), max_utterances=2, cache_dir=str(cache)).speech("val")
    assert torch.equal(again.features, first.features) and torch.equal(again.audio, first.audio)
    assert again.names == first.names
    monkeypatch.undo()
    SpeechPrediction(path=str(root), max_utterances=2, cache_dir=str(cache), log_scale="log1p_magnitude").speech("val")
    assert len(list(cache.glob("speech-fsdd-val-*.pt"))) == 2 and saved.is_file()


def test_registered_and_listable_without_data():
    spec = TASKS["speech"](corpus="timit").spec  # `ortholab list tasks` builds every task with no data at hand
    assert (spec.name, spec.input_size, spec.output_size, spec.readout) == ("speech", 129, 129, "every_step")


def test_the_torchaudio_hint_names_the_checkouts_installer_or_a_wheels_two_steps(tmp_path):
    from ortholab.datamodules.torchaudio_check import INSTALLER, install_hint

    assert INSTALLER.is_file() and f"`{sys.executable} {INSTALLER}`" in install_hint()  # this checkout ships it
    from_a_wheel = install_hint(tmp_path / "tools" / "install_torchaudio.py")  # a wheel has no tools/
    assert "pip install --no-deps torchaudio==2.11.0" in from_a_wheel and "torchaudio/lib/*.so" in from_a_wheel
    assert "tools/" not in from_a_wheel
    # this Python's pip and the folder to empty, by their paths: a wheel's venv is often not the activated one
    # (`~/ortholab/bin/ortholab fit ...`), so `pip` alone installed into another environment
    assert f"`{sys.executable} -m pip install --no-deps torchaudio==2.11.0`" in from_a_wheel
    lib = re.search(r"`rm (\S+)/\*\.so`", from_a_wheel).group(1)
    assert Path(lib).is_absolute() and Path(lib).parts[-2:] == ("torchaudio", "lib")
    assert (Path(lib) / "__init__.py").is_file()  # this environment's torchaudio, found without importing it


def test_the_torchaudio_hint_quotes_a_python_whose_path_has_a_space(tmp_path, monkeypatch):
    from ortholab.datamodules.torchaudio_check import install_hint

    monkeypatch.setattr(sys, "executable", "/home/me/my envs/bin/python3")  # pasted into a shell as given
    assert "`'/home/me/my envs/bin/python3' -m pip install --no-deps" in install_hint(tmp_path / "absent.py")


def test_a_torchaudio_that_cannot_work_is_said_before_the_corpus_is_downloaded(tmp_path, monkeypatch):
    """`--data.download true` fetched FSDD (21 MB) and only then said torchaudio could not load."""
    from ortholab.datamodules import speech

    monkeypatch.setenv("ORTHOLAB_DATA", str(tmp_path / "data"))  # an empty data root: FSDD would be fetched
    fetched = []
    monkeypatch.setattr(speech, "ensure", lambda *args: fetched.append(args))

    def broken():
        raise ConfigError("torchaudio cannot be imported here: ...")

    monkeypatch.setattr(speech, "torchaudio_transforms", broken)
    with pytest.raises(ConfigError, match="torchaudio cannot be imported"):
        SpeechPrediction(download=True).setup("fit")
    assert fetched == []
