"""Audio artifacts for the Audio page: WAV decoding, spectrograms, clip grouping and speech metrics.
Pure functions; the WAV bytes themselves are played unchanged (st.audio would peak-normalise arrays)."""

from __future__ import annotations

import io
import re
import wave
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ortholab.db import ArtifactRecord

ROLE_ORDER = ("reference", "reconstruction", "baseline")
SCORED_ROLES = ("reconstruction", "baseline")
# speech scores as ortholab/evaluation/speech_quality.py records them (the scoRNN paper's Table 2: SegSNR, STOI, PESQ),
# each labelled with its variant; the last three are for keys written by other tools, whose variant is not recorded
SPEECH_LABELS = {
    "segsnr_voicebox": "SegSNR (dB; VOICEBOX v_snrseg 'Vq', 10 ms frames)",
    "segsnr_clamped_30ms": "SegSNR (dB; 30 ms Hann frames, clamped to [−10, 35])",
    "snr_global_voicebox": "global SNR (dB; VOICEBOX)",
    "stoi": "STOI",
    "pesq_nb_mos_lqo": "PESQ narrow band (MOS-LQO)",
    "pesq_wb_mos_lqo": "PESQ wide band (MOS-LQO)",
    "segsnr": "SegSNR (dB; variant not recorded)",
    "pesq": "PESQ (scale not recorded)",
}


def decode_wav(data: bytes) -> tuple[np.ndarray, int]:
    """PCM WAV bytes -> (samples in [−1, 1) as float64, mono mix, sample rate). ValueError if unreadable."""
    try:
        with wave.open(io.BytesIO(data)) as reader:
            width, channels, rate = reader.getsampwidth(), reader.getnchannels(), reader.getframerate()
            frames = reader.readframes(reader.getnframes())
    except (wave.Error, EOFError) as e:
        raise ValueError(f"not a PCM WAV file ({e})") from e
    if width == 1:
        samples = (np.frombuffer(frames, dtype=np.uint8).astype(float) - 128.0) / 128.0
    elif width in (2, 4):
        dtype = np.int16 if width == 2 else np.int32
        samples = np.frombuffer(frames, dtype=f"<i{width}").astype(float) / float(-np.iinfo(dtype).min)
    elif width == 3:
        raw = np.frombuffer(frames, dtype=np.uint8).reshape(-1, 3).astype(np.int32)
        ints = raw[:, 0] | (raw[:, 1] << 8) | (raw[:, 2] << 16)
        samples = np.where(ints >= 1 << 23, ints - (1 << 24), ints).astype(float) / float(1 << 23)
    else:
        raise ValueError(f"unsupported sample width {width} bytes")
    return samples.reshape(-1, channels).mean(axis=1), rate


def spectrogram(
    samples: np.ndarray, rate: int, *, n_fft: int = 256, hop: int = 128
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Power spectrogram in dB with a periodic Hann window (the TIMIT experiment's 32 ms / 16 ms at 8 kHz):
    (frame times in s, frequencies in Hz, power_db[freq, frame]). Clips shorter than n_fft are zero-padded."""
    x = np.asarray(samples, dtype=float)
    if x.size < n_fft:
        x = np.pad(x, (0, n_fft - x.size))
    frames = 1 + (x.size - n_fft) // hop
    window = 0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(n_fft) / n_fft)
    index = np.arange(n_fft)[None, :] + hop * np.arange(frames)[:, None]
    power = np.abs(np.fft.rfft(x[index] * window, axis=1)) ** 2
    power_db = 10.0 * np.log10(power.T + 1e-10)
    times = (np.arange(frames) * hop + n_fft / 2) / rate
    freqs = np.fft.rfftfreq(n_fft, d=1.0 / rate)
    return times, freqs, power_db


@dataclass
class Clip:
    """One utterance at one snapshot step: its audio artifacts by role."""

    utterance: str
    step: int | None
    roles: dict[str, ArtifactRecord] = field(default_factory=dict)

    def ordered_roles(self) -> list[str]:
        known = [r for r in ROLE_ORDER if r in self.roles]
        return known + sorted(r for r in self.roles if r not in ROLE_ORDER)


def group_clips(records: Sequence[ArtifactRecord]) -> list[Clip]:
    """Audio artifacts grouped by (step, utterance), in the order first recorded; the utterance and role
    come from meta (falling back to the artifact's name and 'clip'); a later duplicate replaces an earlier."""
    clips: dict[tuple[int | None, str], Clip] = {}
    for record in records:
        meta = record.meta or {}
        utterance = str(meta.get("utterance") or record.name)
        role = str(meta.get("role") or "clip")
        clip = clips.setdefault((record.step, utterance), Clip(utterance, record.step))
        clip.roles[role] = record
    return list(clips.values())


def speech_metric(key: str) -> str | None:
    """Which speech score a metric key or meta key reports, by its recorded name ('segsnr_voicebox', 'stoi',
    'pesq_nb_mos_lqo', ...; see ortholab/evaluation/speech_quality.py), or for keys of another making 'segsnr', 'stoi'
    or 'pesq' (variant unknown); None for any other key."""
    name = key.rsplit("/", 1)[-1].lower()
    if name in SPEECH_LABELS:
        return name
    squashed = re.sub(r"[^a-z]", "", name)
    for short in ("segsnr", "stoi", "pesq"):
        if squashed.startswith(short) or squashed.endswith(short):
            return short
    return None


def speech_label(name: str) -> str:
    """The score's label with its variant: 'SegSNR (dB; VOICEBOX v_snrseg 'Vq', 10 ms frames)'."""
    return SPEECH_LABELS.get(name, name)


def speech_key(key: str) -> tuple[str, str, str] | None:
    """(split, role, score) of a run-level speech metric key: 'test_audio/stoi' -> ('test', 'reconstruction',
    'stoi'), 'val_audio_baseline/stoi' -> ('val', 'baseline', 'stoi'), 'test/segsnr' -> ('test',
    'reconstruction', 'segsnr'); None for per-utterance keys and every other key."""
    head, _, name = key.rpartition("/")
    score = speech_metric(name) if head and "/" not in head else None
    if score is None:
        return None
    match = re.fullmatch(r"(\w+?)_audio(_baseline)?", head)
    if match:
        return match.group(1), "baseline" if match.group(2) else "reconstruction", score
    return head, "reconstruction", score


def clip_scores(meta: Mapping[str, Any] | None) -> dict[str, float]:
    """The speech scores an audio artifact's meta carries (its 'scores' mapping, else its top-level score keys),
    by score name."""
    meta = meta or {}
    source = meta.get("scores") if isinstance(meta.get("scores"), Mapping) else meta
    found = {}
    for key, value in source.items():
        name = speech_metric(key)
        if name and isinstance(value, (int, float)) and not isinstance(value, bool):
            found[name] = float(value)
    return found


def clip_failures(meta: Mapping[str, Any] | None) -> dict[str, str]:
    """The speech scores an audio artifact's meta says could not be computed (its 'failures' mapping, as
    ortholab/evaluation/audio.py records it), by score name: the reason each failed."""
    failures = (meta or {}).get("failures")
    if not isinstance(failures, Mapping):
        return {}
    return {name: str(reason) for key, reason in failures.items() if (name := speech_metric(str(key)))}


def failed_key(key: str) -> tuple[str, str, str] | None:
    """(split, role, score) of a run-level count of the utterances a score could not be computed on:
    'val_audio/n_failed_pesq_nb_mos_lqo_utterances' -> ('val', 'reconstruction', 'pesq_nb_mos_lqo'); None for any
    other key."""
    match = re.fullmatch(r"(\w+?)_audio(_baseline)?/n_failed_(\w+)_utterances", key)
    if not match or speech_metric(match.group(3)) is None:
        return None
    return match.group(1), "baseline" if match.group(2) else "reconstruction", speech_metric(match.group(3))


def scores_table(by_role: Mapping[str, Mapping[str, float]]) -> list[dict[str, Any]]:
    """A long table: one row per score (in SPEECH_LABELS' order), a column per role (reconstruction, baseline)."""
    names = {n for scores in by_role.values() for n in scores}
    ordered = [n for n in SPEECH_LABELS if n in names] + sorted(names - set(SPEECH_LABELS))
    return [{"metric": speech_label(n), **{role: by_role[role].get(n) for role in by_role}} for n in ordered]
