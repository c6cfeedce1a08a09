"""One split of the speech task, computed once: every utterance's log-magnitude frames, and, for the evaluation
splits, its waveform, which is what audio evaluation needs (the phase is the angle of the same STFT of it).

Features of all utterances lie end to end in one (total frames, bins) float32 tensor with each utterance's start
and length, the layout `RaggedSequences` batches from. A split can be saved to and loaded from a cache file
(torch.save of tensors, strings and integers only; loaded with weights_only=True).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

CACHE_FORMAT = 1  # bump when what is stored, or how features are computed, changes


@dataclass
class SpeechSplit:
    names: list[str]
    sources: list[list[str]]  # the recordings (file names) joined into each utterance
    features: torch.Tensor  # (total frames, bins) float32
    starts: torch.Tensor  # (N,) int64: first frame of each utterance in `features`
    lengths: torch.Tensor  # (N,) int64: frames per utterance
    samples: torch.Tensor  # (N,) int64: waveform length of each utterance
    sample_rate: int
    audio: torch.Tensor | None = None  # (total samples,) float32 waveforms end to end; None when not kept
    audio_starts: torch.Tensor | None = None  # (N,) int64

    def __len__(self) -> int:
        return len(self.names)

    def frames_of(self, index: int) -> torch.Tensor:
        start, length = int(self.starts[index]), int(self.lengths[index])
        return self.features[start : start + length]

    def waveform(self, index: int) -> torch.Tensor:
        if self.audio is None:
            raise ValueError("this split keeps no waveforms (only val and test do)")
        start = int(self.audio_starts[index])
        return self.audio[start : start + int(self.samples[index])]

    @classmethod
    def build(
        cls,
        names: Sequence[str],
        sources: Sequence[Sequence[str]],
        features: Iterable[torch.Tensor],
        waveforms: Sequence[torch.Tensor],
        sample_rate: int,
        keep_audio: bool,
    ) -> SpeechSplit:
        features = list(features)
        lengths = torch.tensor([len(f) for f in features], dtype=torch.long)
        samples = torch.tensor([len(w) for w in waveforms], dtype=torch.long)
        split = cls(
            list(names),
            [list(s) for s in sources],
            torch.cat(features),
            torch.cumsum(lengths, 0) - lengths,
            lengths,
            samples,
            sample_rate,
        )
        if keep_audio:
            split.audio = torch.cat(list(waveforms))
            split.audio_starts = torch.cumsum(samples, 0) - samples
        return split

    # cache files -------------------------------------------------------------------------------------------
    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        torch.save({"format": CACHE_FORMAT, **self.__dict__}, partial)
        partial.replace(path)  # a reader never sees a half-written file

    @classmethod
    def load(cls, path: Path) -> SpeechSplit | None:
        """The split saved at `path`, or None when there is none (or it has another format)."""
        if not path.is_file():
            return None
        try:
            stored = torch.load(path, weights_only=True)
        except (RuntimeError, EOFError, ValueError, OSError):
            return None
        if stored.pop("format", None) != CACHE_FORMAT:
            return None
        return cls(**stored)


def cache_key(settings: dict, files: Iterable[Path]) -> str:
    """A hash of the settings that shape the features and of each recording's path, size and modification time."""
    digest = hashlib.sha256(json.dumps({"format": CACHE_FORMAT, **settings}, sort_keys=True, default=str).encode())
    for file in files:
        stat = file.stat()
        digest.update(f"{file.resolve()}|{stat.st_size}|{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:20]
