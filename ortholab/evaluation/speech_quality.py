"""Per-utterance speech scores of an estimate against its reference, each either a value or the reason it failed.

- `segsnr_voicebox`, `snr_global_voicebox`: VOICEBOX v_snrseg, mode 'Vq', 10 ms frames (ortholab/evaluation/segsnr.py),
  dB.
- `segsnr_clamped_30ms`: 30 ms Hann frames, 75 % overlap, clamped to [-10, 35] dB (Loizou / pysepm), dB.
- `stoi`: short-time objective intelligibility (Taal et al. 2011) through torchmetrics' functional (pystoi), 0-1.
- `pesq_nb_mos_lqo`: PESQ narrow band (ITU-T P.862) through torchmetrics' functional (the `pesq` package, one
  process: with several, torchmetrics drops failed items and the list no longer lines up), reported by `pesq` as
  MOS-LQO (the P.862.1 mapping, about 1.0-4.55), not the raw P.862 score (-0.5-4.5) that Wisdom et al.'s MATLAB
  toolbox gave. Needs fs = 8000 (narrow band); at 16 kHz this is wide band, named `pesq_wb_mos_lqo`.

A failure never raises: a silent reference, an utterance too short (PESQ needs 0.25 s; pystoi warns "Not enough
STFT frames" and returns 1e-5 below about 30 frames of active speech), a library error or a non-finite value is
recorded as its reason, and the mean excludes it.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch

from ortholab.evaluation.segsnr import segsnr_clamped, segsnr_voicebox
from ortholab.extras import require_extra


@dataclass(frozen=True)
class Score:
    value: float | None
    reason: str | None = None  # why there is no value

    @property
    def ok(self) -> bool:
        return self.value is not None


def pesq_name(fs: int) -> str:
    return "pesq_nb_mos_lqo" if fs == 8000 else "pesq_wb_mos_lqo"


def metric_names(fs: int) -> tuple[str, ...]:
    return ("segsnr_voicebox", "snr_global_voicebox", "segsnr_clamped_30ms", "stoi", pesq_name(fs))


def _attempt(compute) -> Score:
    """compute() -> float, with warnings that mean 'no valid score' and exceptions turned into reasons."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            value = float(compute())
        except Exception as err:  # a library failure is a recorded reason, never a crash
            message = err.args[0].decode() if err.args and isinstance(err.args[0], bytes) else str(err)
            return Score(None, f"{type(err).__name__}: {message}")
    for warning in caught:
        if "Not enough STFT frames" in str(warning.message):
            return Score(None, f"too short for STOI: {warning.message}")
    if not np.isfinite(value):
        return Score(None, f"the metric returned {value}")
    return Score(value)


def score_utterance(estimate: np.ndarray, reference: np.ndarray, fs: int) -> dict[str, Score]:
    """Every metric of `estimate` against `reference` (same rate; truncated to the shorter, as Wisdom et al.)."""
    from torchmetrics.functional.audio import perceptual_evaluation_speech_quality as pesq
    from torchmetrics.functional.audio import short_time_objective_intelligibility as stoi

    require_extra("speech")  # a missing package is an error naming the extra, never a reason per utterance
    length = min(len(estimate), len(reference))
    estimate = np.asarray(estimate[:length], dtype=np.float64)
    reference = np.asarray(reference[:length], dtype=np.float64)
    if not np.any(reference):
        return {name: Score(None, "the reference is silent") for name in metric_names(fs)}
    if not np.all(np.isfinite(estimate)):
        return {name: Score(None, "the estimate holds non-finite samples") for name in metric_names(fs)}
    voicebox = _attempt_voicebox(estimate, reference, fs)
    preds, target = torch.from_numpy(estimate), torch.from_numpy(reference)
    mode = "nb" if fs == 8000 else "wb"
    return {
        **voicebox,
        "segsnr_clamped_30ms": _attempt(lambda: segsnr_clamped(estimate, reference, fs)),
        "stoi": _attempt(lambda: stoi(preds, target, fs)),
        pesq_name(fs): _attempt(lambda: pesq(preds, target, fs, mode, n_processes=1)),
    }


def _attempt_voicebox(estimate: np.ndarray, reference: np.ndarray, fs: int) -> dict[str, Score]:
    try:
        result = segsnr_voicebox(estimate, reference, fs)
    except ValueError as err:
        return {"segsnr_voicebox": Score(None, str(err)), "snr_global_voicebox": Score(None, str(err))}
    if not np.isfinite(result.segmental):
        reason = "no frame of the reference is active speech (P.56)"
        return {"segsnr_voicebox": Score(None, reason), "snr_global_voicebox": Score(None, reason)}
    global_snr = (  # +inf only where the estimate equals the reference: recorded as why, as any non-finite value
        Score(result.global_snr)
        if np.isfinite(result.global_snr)
        else Score(None, f"the global SNR is {result.global_snr} (the estimate equals the reference)")
    )
    return {"segsnr_voicebox": Score(result.segmental), "snr_global_voicebox": global_snr}
