"""Segmental SNR: VOICEBOX's `v_snrseg` (the default; Brookes, as Wisdom et al. and scoRNN report it) and the
common clamped variant (Loizou's / pysepm's SNRseg). No maintained Python library has either; both are
reimplemented from their definitions (VOICEBOX is GPL; nothing is copied).

`segsnr_voicebox(test, reference, fs)` = v_snrseg(s, r, fs) in its default mode 'Vq' with 10 ms frames:
- non-overlapping frames of kf = round(0.01 fs) samples; frame SNR = 10 log10(sum r^2 / sum (s - r)^2), set to
  +100 dB when the error is zero and -100 dB when the reference is silent (zero error wins when both hold);
- 'q': in each frame, s is replaced by its best linear interpolation towards s(i+1) or s(i-1)
  (s_m = s - a (s(i) - s(i+1)), a in [0, 1] minimising the error, likewise towards s(i-1); the smaller error is
  kept): this removes misalignments of up to one sample. Frames start at the second sample and end one sample
  before the end so both neighbours exist;
- 'V': only frames whose samples are more than half active in the reference (ITU-T P.56 activity, see
  ortholab/evaluation/active_level.py) are averaged. `mode='wz'` averages all frames without alignment;
- SegSNR = mean of the kept frame SNRs; the global SNR = 10 log10(sum r^2 / sum error^2) over the kept frames.
Identical signals give +100 dB (the definition's cap); a reference with no active frame has no SegSNR (NaN).

`segsnr_clamped(test, reference, fs)`: 30 ms frames with a Hann window (0.5 (1 - cos(2 pi n / (N + 1))), n = 1..N),
75 % overlap, frame SNR = 10 log10(sum r^2 / (sum (r - s)^2 + eps) + eps) clamped to [-10, 35] dB, the last
frame dropped, all other frames averaged (no VAD). Identical signals give 35 dB.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ortholab.evaluation.active_level import active_level

CAP_DB = 100.0  # v_snrseg's snmax


@dataclass(frozen=True)
class SegmentalSNR:
    segmental: float  # dB; NaN when no frame is kept
    global_snr: float  # dB over the kept frames
    frame_snr: np.ndarray  # dB of every frame
    kept: np.ndarray  # bool: the frames averaged


def _frames(values: np.ndarray, length: int) -> np.ndarray:
    """Non-overlapping rows of `length` samples (the trailing partial frame dropped)."""
    count = len(values) // length
    return values[: count * length].reshape(count, length)


def segsnr_voicebox(
    test: np.ndarray, reference: np.ndarray, fs: float, mode: str = "Vq", frame_s: float = 0.01
) -> SegmentalSNR:
    """v_snrseg(test, reference, fs, mode, frame_s) for modes made of 'V' or 'w' and 'q' or 'z' (see above)."""
    s, r = np.asarray(test, dtype=np.float64), np.asarray(reference, dtype=np.float64)
    length = min(len(s), len(r))
    s, r = s[:length], r[:length]
    align = "z" not in mode
    kf = round(frame_s * fs)
    count = (length - 2 * align) // kf  # frames end by sample length - align (1-based), starting after `align`
    if count < 1:
        raise ValueError(f"signals of {length} samples are shorter than one {kf}-sample frame")
    span = slice(align, align + count * kf)
    reference_energy = _frames(r[span] ** 2, kf).sum(axis=1)
    error = _frames(s[span] - r[span], kf)
    if align:  # best linear interpolation of s towards each neighbour, per frame
        errors = []
        for neighbour in (s[align + 1 : align + 1 + count * kf], s[: count * kf]):  # s(i+1), s(i-1)
            step = _frames(s[span] - neighbour, kf)
            with np.errstate(invalid="ignore", divide="ignore"):
                a = np.nan_to_num(np.sum(error * step, axis=1) / np.sum(step**2, axis=1), nan=0.0).clip(0.0, 1.0)
            errors.append(np.sum((error - a[:, None] * step) ** 2, axis=1))
        error_energy = np.minimum(*errors)
    else:
        error_energy = np.sum(error**2, axis=1)
    no_error, silent = error_energy == 0, reference_energy == 0
    frame_snr = 10 * np.log10((reference_energy + silent) / (error_energy + no_error))
    frame_snr[silent] = -CAP_DB
    frame_snr[no_error] = CAP_DB
    if "w" in mode:
        kept = np.ones(count, dtype=bool)
    else:
        active = active_level(r, fs).active[span]
        kept = _frames(active, kf).sum(axis=1) > kf / 2
    if not kept.any():
        return SegmentalSNR(float("nan"), float("nan"), frame_snr, kept)
    with np.errstate(divide="ignore"):
        global_snr = 10 * np.log10(reference_energy[kept].sum() / error_energy[kept].sum())
    return SegmentalSNR(float(frame_snr[kept].mean()), float(global_snr), frame_snr, kept)


def segsnr_clamped(
    test: np.ndarray,
    reference: np.ndarray,
    fs: float,
    frame_s: float = 0.03,
    overlap: float = 0.75,
    low: float = -10.0,
    high: float = 35.0,
) -> float:
    """Mean over Hann-windowed overlapping frames of the frame SNR clamped to [low, high] dB (see above)."""
    s, r = np.asarray(test, dtype=np.float64), np.asarray(reference, dtype=np.float64)
    length = min(len(s), len(r))
    window_length = round(frame_s * fs)
    hop = int(np.floor((1 - overlap) * frame_s * fs))
    if length < window_length + hop:
        raise ValueError(f"signals of {length} samples are shorter than two {window_length}-sample frames")
    window = 0.5 * (1 - np.cos(2 * np.pi * np.arange(1, window_length + 1) / (window_length + 1)))
    starts = np.arange(0, length - window_length + 1, hop)
    index = starts[:, None] + np.arange(window_length)
    clean, noisy = r[index] * window, s[index] * window
    eps = np.finfo(np.float64).eps
    frame_snr = 10 * np.log10(np.sum(clean**2, axis=1) / (np.sum((clean - noisy) ** 2, axis=1) + eps) + eps)
    return float(np.clip(frame_snr, low, high)[:-1].mean())
