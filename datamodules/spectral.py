"""The speech task's spectral frames and their inverse (Wisdom et al. 2016, as scoRNN 5.4 and expRNN use them).

A waveform at 8 kHz becomes STFT frames of a 256-sample periodic Hann window with hop 128 (32 ms frames, 16 ms
hop, 129 one-sided bins); a frame's features are its log-magnitudes. The same object turns (predicted)
log-magnitudes plus a phase back into a waveform, so features and reconstruction can never disagree.

framing:
- 'wisdom' (default): the signal is zero-padded to a multiple of the hop, then 256 zeros are added at both ends
  and frames start at sample 0 of that, as Wisdom et al.'s `stft_mc` (librosa, center=False):
  ceil(L / 128) + 3 frames, the first and last covering only padding.
- 'centered': torch's centred STFT with 128 zeros at both ends: 1 + floor(L / 128) frames.
log_scale:
- 'db_power' (default): 10·log10(1e-5 + |X|²), Wisdom et al.'s and expRNN's features (dB of power, floor −50 dB).
  Inverse: |X| = sqrt(max(10^(y/10) − 1e-5, 0)).
- 'log1p_magnitude': ln(1 + |X|). Inverse: |X| = max(e^y − 1, 0).
|X| is the unnormalised DFT of the windowed frame of samples in [−1, 1] (int16 / 32768), as librosa's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ortholab.datamodules.torchaudio_check import torchaudio_transforms
from ortholab.errors import ConfigError

FRAMINGS = ("wisdom", "centered")
LOG_SCALES = ("db_power", "log1p_magnitude")
DB_FLOOR = 1e-5  # Wisdom et al.: 10*log10(1e-5 + |X|^2)


@dataclass(frozen=True)
class SpectralFrames:
    """STFT framing, log-magnitude features and their inverses (see the module docstring)."""

    n_fft: int = 256
    hop: int = 128
    framing: str = "wisdom"
    log_scale: str = "db_power"

    def __post_init__(self):
        if self.framing not in FRAMINGS:
            raise ConfigError(f"data.framing = {self.framing!r}; choose one of {list(FRAMINGS)}")
        if self.log_scale not in LOG_SCALES:
            raise ConfigError(f"data.log_scale = {self.log_scale!r}; choose one of {list(LOG_SCALES)}")

    @property
    def bins(self) -> int:
        return self.n_fft // 2 + 1

    # waveform <-> complex frames ------------------------------------------------------------------
    def _padding(self, length: int) -> tuple[int, int]:
        """Zeros added before and after the signal ahead of torch's centred STFT (which adds n_fft // 2 itself)."""
        if self.framing == "centered":
            return 0, 0
        to_multiple = -length % self.hop
        return self.n_fft // 2, to_multiple + self.n_fft // 2

    def stft(self, waveform: torch.Tensor) -> torch.Tensor:
        """Complex frames (frames, bins) of a (samples,) waveform."""
        before, after = self._padding(waveform.shape[-1])
        padded = torch.nn.functional.pad(waveform, (before, after))
        transforms = torchaudio_transforms()
        spectrogram = transforms.Spectrogram(
            n_fft=self.n_fft,
            hop_length=self.hop,
            power=None,
            center=True,
            pad_mode="constant",
            window_fn=torch.hann_window,
        )
        return spectrogram(padded).transpose(-1, -2)

    def frame_count(self, length: int) -> int:
        before, after = self._padding(length)
        return 1 + (before + length + after) // self.hop

    def stft_many(self, waveforms: list[torch.Tensor]) -> list[torch.Tensor]:
        """`stft` of each waveform, computed as one batch: zero-padding a waveform at its end changes none of its
        own frames, so each keeps the first `frame_count(its length)` frames of the batch's STFT."""
        frames = self.stft(torch.nn.utils.rnn.pad_sequence(waveforms, batch_first=True))
        return [f[: self.frame_count(len(w))] for f, w in zip(frames, waveforms, strict=True)]

    def waveform(self, frames: torch.Tensor, length: int) -> torch.Tensor:
        """The (length,) waveform of complex frames (frames, bins): the exact inverse of `stft`."""
        before, after = self._padding(length)
        inverse = torchaudio_transforms().InverseSpectrogram(
            n_fft=self.n_fft, hop_length=self.hop, center=True, pad_mode="constant", window_fn=torch.hann_window
        )
        return inverse(frames.transpose(-1, -2), length=before + length + after)[..., before : before + length]

    def griffin_lim(self, magnitude: torch.Tensor, length: int, iterations: int = 32, seed: int = 0) -> torch.Tensor:
        """A (length,) waveform whose STFT magnitude approximates `magnitude` (frames, bins), with no phase given
        (Griffin and Lim 1984, torchaudio's fast variant with momentum 0.99, random initial phase from `seed`)."""
        before, after = self._padding(length)
        griffin_lim = torchaudio_transforms().GriffinLim(
            n_fft=self.n_fft,
            hop_length=self.hop,
            n_iter=iterations,
            power=1.0,
            length=before + length + after,
            window_fn=torch.hann_window,
        )
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            samples = griffin_lim(magnitude.transpose(-1, -2).contiguous())
        return samples[..., before : before + length]

    # magnitude <-> features ---------------------------------------------------------------------------
    def features(self, frames: torch.Tensor) -> torch.Tensor:
        """Log-magnitude features (same shape, float32) of complex frames."""
        magnitude = frames.abs()
        if self.log_scale == "db_power":
            return 10.0 * torch.log10(DB_FLOOR + magnitude**2)
        return torch.log1p(magnitude)

    def magnitude(self, features: torch.Tensor) -> torch.Tensor:
        """|X| from log-magnitude features: the inverse of `features`, 0 where the features lie below the floor."""
        values = features.to(torch.float64)
        if self.log_scale == "db_power":
            power = torch.pow(10.0, values / 10.0) - DB_FLOOR
            return power.clamp(min=0.0).sqrt()
        return torch.expm1(values).clamp(min=0.0)

    def with_phase(self, features: torch.Tensor, phase: torch.Tensor) -> torch.Tensor:
        """Complex frames with the magnitudes of `features` and the given phase (radians)."""
        return torch.polar(self.magnitude(features), phase.to(torch.float64)).to(torch.complex64)
