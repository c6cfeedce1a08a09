"""Sequence generation (oRNN paper, after Koutnik et al. 2014): a network learns to generate an audio excerpt.

From a mono audio file (WAV, FLAC, or anything soundfile reads), `num_excerpts` consecutive excerpts of
`excerpt_samples` samples each are cut starting at sample `start`. The network outputs one sample per step
and is trained on the mean squared error; the reported metric is the normalised MSE (MSE / variance of the
target samples over the split), so 1.0 is the score of outputting the mean and the task's baseline.

What the network reads at each step (`inputs`):
- 'constant' (default): the value 1 at every step. The network receives nothing about the signal and has to
  encode the excerpt in its weights: the setting of Koutnik et al. (a network generating the signal without
  reading it) that the oRNN paper follows. A constant 1 rather than 0 lets families with a zero initial state and no
  bias in the recurrence (scoRNN) leave the zero state; its input weights act as a bias.
- 'previous_sample': the previous sample (0 before each excerpt's first), teacher forcing: one-step-ahead
  prediction.

The task is to fit the excerpts themselves: train, val and test all serve the same excerpts (one sequence
each), as the papers report the lowest NMSE reached on the excerpt during training. The oRNN paper trains one
network per excerpt (five consecutive excerpts, separate runs): vary `start`, or use num_excerpts > 1 to train
on several at once (then NMSE pools their samples). `peak_normalize` scales the excerpts so that their largest
magnitude is 1 (NMSE does not depend on it). The file is read once when the DataModule is built.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import soundfile
import torch

from ortholab.datamodules.base import require_positive
from ortholab.datamodules.batching import GatheredTaskDataModule
from ortholab.datamodules.download import ensure
from ortholab.datamodules.spec import TaskSpec
from ortholab.errors import ConfigError, did_you_mean, home_path

HOW_TO_FIX = (
    "a recording of the Free Spoken Digit Dataset (8 kHz mono, https://github.com/Jakobovski/"
    "free-spoken-digit-dataset) from the data root: data.fsdd_recording: 0_jackson_0.wav"
)


FSDD_NAMES = "{digit}_{speaker}_{index}.wav (digit 0-9, index 0-49; e.g. 0_jackson_0.wav)"


def fsdd_recording_path(folder: Path, name: str) -> Path:
    """The recording `name` (data.fsdd_recording) in FSDD's recordings `folder`; a ConfigError naming the key, the
    naming rule and the nearest existing name when there is no such recording."""
    path = folder / name
    if path.is_file():
        return path
    try:
        existing = sorted(p.name for p in folder.iterdir() if p.suffix.lower() == ".wav")
    except OSError:
        existing = []
    speakers = sorted({n.split("_")[1] for n in existing if n.count("_") == 2})
    who = f", speaker one of {', '.join(speakers)}" if speakers else ""
    raise ConfigError(
        f"data.fsdd_recording = {name!r}: there is no such recording in {folder}; FSDD names its recordings "
        f"{FSDD_NAMES}{who}; {did_you_mean(name, existing)}`ls {folder}` lists them"
    )


def read_mono(path: Path, sample_rate: int | None) -> np.ndarray:
    """The samples of a mono audio file as float32 in [-1, 1], checked against the expected sample rate."""
    if not path.is_file():  # said as it is: nothing there, or a folder
        what = "is a folder, not an audio file" if path.is_dir() else "does not exist"
        raise ConfigError(f"data.path = {str(path)!r} {what}; give a mono WAV/FLAC file, e.g. {HOW_TO_FIX}")
    try:
        info = soundfile.info(str(path))
    except (RuntimeError, soundfile.LibsndfileError) as err:
        raise ConfigError(
            f"{path} cannot be read as audio ({err}); give a WAV or FLAC file, e.g. {HOW_TO_FIX}"
        ) from err
    if info.channels != 1:
        raise ConfigError(
            f"{path} has {info.channels} channels; the task needs a mono file: mix it down first "
            f"(e.g. `sox {path.name} -c 1 mono.wav` or `ffmpeg -i {path.name} -ac 1 mono.wav`)"
        )
    if sample_rate is not None and info.samplerate != sample_rate:
        raise ConfigError(
            f"{path} is sampled at {info.samplerate} Hz, not data.sample_rate = {sample_rate} Hz: "
            f"resample it (e.g. `sox {path.name} -r {sample_rate} out.wav`) or set "
            f"data.sample_rate: {info.samplerate} (or null to accept any rate)"
        )
    samples, _ = soundfile.read(str(path), dtype="float32", always_2d=True)
    return samples[:, 0]


class SequenceGeneration(GatheredTaskDataModule):
    """Generate audio excerpts sample by sample; normalised MSE (docs/tasks.md describes it).

    path: the audio file; fsdd_recording: when no path is given, a recording of FSDD in the data root (e.g.
    0_jackson_0.wav; download: true fetches FSDD there first); sample_rate: the rate the file must have (null:
    any); start: first sample of the first excerpt; excerpt_samples: steps per excerpt (320 = 7.3 ms at 44.1 kHz,
    Koutnik et al.'s length).
    """

    def __init__(
        self,
        path: str | None = None,
        fsdd_recording: str | None = None,
        download: bool = False,
        sample_rate: int | None = None,
        start: int = 0,
        excerpt_samples: int = 320,
        num_excerpts: int = 1,
        inputs: str = "constant",
        peak_normalize: bool = True,
        batch_size: int = 1,
        eval_batch_size: int | None = None,
        shuffle: bool = False,
        num_workers: int = 0,
    ):
        super().__init__(batch_size, eval_batch_size, shuffle, num_workers)
        if inputs not in ("constant", "previous_sample"):
            raise ConfigError(
                f"data.inputs = {inputs!r}; choose 'constant' (no information, Koutnik et al.) or "
                f"'previous_sample' (teacher forcing)"
            )
        if start < 0:
            raise ConfigError(f"data.start = {start} must be 0 or more (a sample index)")
        if sample_rate is not None:
            require_positive(sample_rate, "sample_rate")
        self.excerpt_samples = require_positive(excerpt_samples, "excerpt_samples")
        self.num_excerpts = require_positive(num_excerpts, "num_excerpts")
        self.inputs = inputs
        if fsdd_recording is not None and path is None:  # a path given (e.g. on the command line) wins
            path = str(fsdd_recording_path(ensure("fsdd", download) / "recordings", fsdd_recording))
        self.path = home_path(path, "data.path") if path is not None else None
        self.excerpts = None
        if self.path is not None:
            self.excerpts = self._cut(read_mono(self.path, sample_rate), start, peak_normalize)
        source = self.path.name if self.path is not None else "set data.path"
        self.spec = TaskSpec(
            name="generation",
            input_size=1,
            output_size=1,
            readout="every_step",
            loss="nmse",
            main_metric="val/nmse",
            main_metric_mode="min",
            baseline=1.0,
            description=f"generate {num_excerpts} excerpt(s) of {excerpt_samples} samples of {source} ({inputs} "
            f"inputs); NMSE (1 = outputting the mean)",
        )

    def _cut(self, samples: np.ndarray, start: int, peak_normalize: bool) -> torch.Tensor:
        needed = start + self.num_excerpts * self.excerpt_samples
        if needed > len(samples):
            raise ConfigError(
                f"{self.path} has {len(samples)} samples; data.start + data.num_excerpts x "
                f"data.excerpt_samples = {needed}: lower them or give a longer file"
            )
        excerpts = torch.from_numpy(samples[start:needed].copy()).view(self.num_excerpts, self.excerpt_samples)
        peak = float(excerpts.abs().max())
        if peak == 0.0:
            raise ConfigError(f"{self.path}: samples {start}..{needed - 1} are silent; move data.start into the sound")
        return excerpts / peak if peak_normalize else excerpts

    def setup(self, stage: str) -> None:
        self.check_data()

    def check_data(self) -> None:
        if self.excerpts is None:
            raise ConfigError(f"data.path is not set: give a mono audio file, e.g. {HOW_TO_FIX}")

    def make_split(self, split: str) -> tuple[torch.Tensor, torch.Tensor]:
        """The same excerpts for every split: inputs (E, L, 1) and targets (E, L, 1)."""
        targets = self.excerpts.unsqueeze(-1)
        if self.inputs == "constant":
            inputs = torch.ones_like(targets)
        else:
            inputs = torch.nn.functional.pad(targets[:, :-1], (0, 0, 1, 0))
        return inputs, targets
