"""Recordings read into waveforms at the task's sample rate: soundfile to read (WAV, FLAC, NIST SPHERE), torchaudio
to resample (its windowed-sinc Resample with default settings: Hann window, 6 zero crossings, rolloff 0.99; Wisdom
et al. used MATLAB's resample, a Kaiser-windowed FIR, so resampled samples differ slightly from theirs)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import soundfile
import torch

from ortholab.datamodules.sphere import sphere_header_problem
from ortholab.datamodules.torchaudio_check import torchaudio_transforms
from ortholab.errors import ConfigError

SUPPORTED_RATES = (8000, 16000)  # the rates PESQ scores (narrow band at 8 kHz, wide band at 16 kHz)


class RecordingReader:
    """Reads mono recordings as float32 samples in [-1, 1] (16-bit PCM / 32768) resampled to `sample_rate`.

    A recording sampled below `sample_rate` is refused (upsampling cannot restore the missing band), as are
    multi-channel and unreadable files; each error names the file.
    """

    def __init__(self, sample_rate: int, how_to_obtain: str):
        if sample_rate not in SUPPORTED_RATES:
            raise ConfigError(
                f"data.sample_rate = {sample_rate} is not supported; choose one of "
                f"{list(SUPPORTED_RATES)} (8000 as the papers; PESQ scores only these rates)"
            )
        self.sample_rate = sample_rate
        self.how_to_obtain = how_to_obtain
        self._resamplers: dict[int, torch.nn.Module] = {}

    def read(self, path: Path) -> torch.Tensor:
        try:
            samples, rate = soundfile.read(str(path), dtype="float32", always_2d=True)
        except (soundfile.LibsndfileError, RuntimeError) as err:
            problem = sphere_header_problem(path)  # libsndfile's words name no field: ours do, when we can tell
            if problem:
                raise ConfigError(
                    f"{path} cannot be read as audio: its NIST SPHERE header {problem}; the file is "
                    f"damaged, replace it ({self.how_to_obtain})"
                ) from err
            raise ConfigError(
                f"{path} cannot be read as audio ({err}); it should be a WAV or NIST SPHERE file: "
                f"replace it ({self.how_to_obtain})"
            ) from err
        if samples.shape[0] == 0:  # a header and no audio: an utterance of nothing would train on empty frames
            raise ConfigError(
                f"{path} holds no samples (0 frames of audio); remove it from data.path's folder or "
                f"replace it ({self.how_to_obtain})"
            )
        if samples.shape[1] != 1:
            raise ConfigError(
                f"{path} has {samples.shape[1]} channels; the speech task reads mono recordings ({self.how_to_obtain})"
            )
        if rate < self.sample_rate:
            raise ConfigError(
                f"{path} is sampled at {rate} Hz, below data.sample_rate = {self.sample_rate} Hz; "
                f"upsampling cannot restore the missing band: use recordings at {self.sample_rate} Hz or "
                f"more (TIMIT is 16 kHz, FSDD 8 kHz)"
            )
        waveform = torch.from_numpy(samples[:, 0])
        if rate != self.sample_rate:
            if rate not in self._resamplers:
                self._resamplers[rate] = torchaudio_transforms().Resample(rate, self.sample_rate)
            waveform = self._resamplers[rate](waveform)
        return waveform

    def join(self, paths: Sequence[Path]) -> torch.Tensor:
        """The recordings one after the other, as one waveform."""
        return torch.cat([self.read(path) for path in paths])
