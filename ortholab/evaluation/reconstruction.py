"""Waveforms from log-magnitude frames, as Wisdom et al. (recon_timitpred.py) turn predictions back into audio.

An utterance has frames 0..T-1. A next-frame model reads frames 0..T-2 and predicts frames 1..T-1; the estimate
keeps the true frame 0 (there is nothing to predict it from) followed by the predictions. With expRNN's
`previous_frame` target the model reads frames 1..T-1 and predicts 0..T-2; the true last frame is appended.
Magnitudes are the inverse of the log (spectral.py `SpectralFrames.magnitude`), combined with:
- 'true_phase' (default, Wisdom et al.): the phase of the true STFT frame being predicted, then the inverse STFT
  with the same window and hop (torchaudio InverseSpectrogram);
- 'griffin_lim': no phase at all; Griffin-Lim's iterations (torchaudio GriffinLim, 32 iterations, seeded).
The "copy the input frame" baseline (for next-frame prediction: repeat the previous frame) is reconstructed the
same way, so a listener and the metrics have the trivial predictor's audio as a reference point.
"""

from __future__ import annotations

import torch

from ortholab.datamodules.spectral import SpectralFrames

METHODS = ("true_phase", "griffin_lim")


def estimated_frames(true_features: torch.Tensor, predicted: torch.Tensor, target: str) -> torch.Tensor:
    """(T, bins) estimate: the T-1 predictions with the one true frame they cannot predict (see above)."""
    if target == "next_frame":
        return torch.cat([true_features[:1], predicted])
    return torch.cat([predicted, true_features[-1:]])


def copy_input_frames(true_features: torch.Tensor, target: str) -> torch.Tensor:
    """(T, bins) estimate of the baseline that outputs its input frame (previous frame for next-frame targets)."""
    inputs = true_features[:-1] if target == "next_frame" else true_features[1:]
    return estimated_frames(true_features, inputs, target)


def reconstruct(
    frames: SpectralFrames, estimate: torch.Tensor, waveform: torch.Tensor, method: str = "true_phase"
) -> torch.Tensor:
    """The (samples,) waveform of log-magnitude `estimate` (T, bins) for an utterance whose true waveform is given."""
    if method == "true_phase":
        phase = frames.stft(waveform).angle()
        return frames.waveform(frames.with_phase(estimate, phase), len(waveform))
    if method == "griffin_lim":
        return frames.griffin_lim(frames.magnitude(estimate).to(torch.float32), len(waveform))
    raise ValueError(f"reconstruction method {method!r}; choose one of {list(METHODS)}")
