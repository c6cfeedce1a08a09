"""Character-level language modelling (oRNN paper, Penn Treebank): predict the character `shift` steps ahead.

Files: `path` is a folder holding a training, a validation and a test file in one of the usual layouts
(ptb.char.{train,valid,test}.txt, ptb.{train,valid,test}.txt, or {train,valid,test}.txt), or give the three
files as train_file / val_file / test_file, or a single file as `path` with `split: [0.9, 0.05, 0.05]`: the
fractions of it that train, validate and test, cut in that order into contiguous chunks (of characters in the
'windows' layout, of lines in the 'lines' layout). Two file formats (`file_format`):
- 'char': Mikolov's ptb.char.*.txt, characters separated by spaces and '_' standing for a space;
- 'plain': ordinary text (e.g. ptb.*.txt, which the oRNN code reads character by character);
'auto' picks 'char' for files named *.char.*, else 'plain'.

Vocabulary: '<unk>' (id 0) followed by the training file's characters in sorted order; characters of the
validation or test text that the training text lacks become '<unk>'. Inputs are symbol ids (fed one-hot).

Layout of the sequences (`layout`):
- 'windows' (default): the file as one stream of characters (line ends included as '\\n'), cut into
  consecutive non-overlapping windows of seq_len inputs; target t is the character `shift` steps after input t;
- 'lines': as the oRNN code, every line (without its trailing whitespace and line end) is one sequence,
  inputs line[:-shift] and targets line[shift:], lines with fewer than shift + 2 characters dropped;
  batches are zero-padded with a mask.
`shift` 1 is next-character prediction; the oRNN paper also predicts 5 characters ahead (shift: 5).
Loss and main metric: bits per character (cross-entropy / ln 2) over the valid steps; the baseline is the bits
per character on the validation text (test text, for a test run) of predicting every character with its
training frequency.
Texts are read and encoded once (vectorised) when the DataModule is built, and kept in memory as int32 ids: they
are not streamed, because the vocabulary needs the whole training text and the encoded corpus exists only in
memory (there is no encoded file to memory-map); Penn Treebank's ~5 M training characters take ~20 MB of ids.
A batch is one gather from the ids (windows are views of them; lines are gathered and padded in one indexing).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ortholab.datamodules.base import require_positive
from ortholab.datamodules.batching import Batch, GatheredTaskDataModule, RaggedSequences
from ortholab.datamodules.spec import TaskSpec
from ortholab.errors import ConfigError, home_path

UNKNOWN = "<unk>"
LAYOUTS = (  # (train, valid, test) file names looked for in data.path, in this order
    ("ptb.char.train.txt", "ptb.char.valid.txt", "ptb.char.test.txt"),
    ("ptb.train.txt", "ptb.valid.txt", "ptb.test.txt"),
    ("train.txt", "valid.txt", "test.txt"),
)
HOW_TO_OBTAIN = (
    "Penn Treebank: Mikolov's simple-examples archive (http://www.fit.vutbr.cz/~imikolov/rnnlm/simple-examples.tgz), "
    "folder data/: ptb.train.txt, ptb.valid.txt, ptb.test.txt (file_format: plain, as the oRNN code reads them) or "
    "ptb.char.*.txt (file_format: char: characters spaced, '_' for a space); any UTF-8 text files work with "
    "file_format: plain"
)
SPLITS = ("train", "val", "test")
FILE_KEYS = "data.train_file, data.val_file and data.test_file"
SPLIT_EXAMPLE = "data.split: [0.9, 0.05, 0.05]"


def check_fractions(split) -> tuple[float, float, float]:
    """data.split: three positive fractions (train, val, test) that sum to 1."""
    fine = (
        isinstance(split, (list, tuple))
        and len(split) == 3
        and all(isinstance(f, (int, float)) and not isinstance(f, bool) and f > 0 for f in split)
    )
    if not fine or abs(sum(split) - 1) > 1e-6:  # fractions as written in a config: 1e-6 forgives their rounding
        raise ConfigError(
            f"data.split = {split!r}; give three positive fractions of the file for train, val and "
            f"test that sum to 1, e.g. {SPLIT_EXAMPLE}"
        )
    return tuple(float(f) for f in split)


def contiguous_chunks(items, fractions: tuple[float, ...]) -> list:
    """`items` (a string or a list) cut in order into consecutive chunks of the given fractions."""
    bounds = np.rint(np.cumsum([0.0, *fractions]) * len(items)).astype(int)
    bounds[-1] = len(items)
    return [items[start:end] for start, end in zip(bounds[:-1], bounds[1:])]


def find_single_file(path: str | None, given: dict[str, str | None]) -> dict[str, Path]:
    """With data.split: the one file `path` that every split is cut from."""
    if any(given.values()):
        raise ConfigError(
            f"data.split cuts the one file data.path into train/val/test; with {FILE_KEYS} given, leave data.split out"
        )
    if path is None:
        raise ConfigError(f"data.split is set but data.path is not: give the one text file to cut. {HOW_TO_OBTAIN}")
    file = home_path(path, "data.path")
    if not file.is_file():
        state = "is a folder" if file.is_dir() else "does not exist"
        raise ConfigError(
            f"data.path = {path!r} {state}; data.split cuts one text file, so give that file (or "
            f"leave data.split out to read a folder's train/valid/test files)"
        )
    return {split: file for split in SPLITS}


def find_text_files(
    path: str | None,
    train_file: str | None,
    val_file: str | None,
    test_file: str | None,
    single: bool = False,
    file_format: str = "auto",
) -> dict[str, Path]:
    """The train / val / test files: given one by one, found in the folder `path`, or (`single`) `path` itself. A
    folder is searched in LAYOUTS' order; for file_format 'plain' the spaced ptb.char.* files are never taken."""
    given = {"train": train_file, "val": val_file, "test": test_file}
    if single:
        return find_single_file(path, given)
    if all(given.values()):
        files = {split: home_path(name, f"data.{split}_file") for split, name in given.items()}
    elif any(given.values()):
        missing = [f"data.{split}_file" for split, name in given.items() if not name]
        raise ConfigError(f"give all three text files or none (then data.path); missing {', '.join(missing)}")
    elif path is None:
        raise ConfigError(
            f"data.path is not set: give the folder of the train/valid/test text files "
            f"(or {FILE_KEYS}). {HOW_TO_OBTAIN}"
        )
    else:
        folder = home_path(path, "data.path")
        if folder.is_file():
            raise ConfigError(
                f"data.path = {path!r} is one file, not a folder of train/valid/test files; cut it in "
                f"order with {SPLIT_EXAMPLE} (train, val, test fractions), or give the three files as "
                f"{FILE_KEYS}"
            )
        if not folder.is_dir():
            raise ConfigError(
                f"data.path = {path!r} is not a directory (nothing is there); give the folder of the "
                f"train/valid/test text files, the three files as {FILE_KEYS}, or one file with "
                f"{SPLIT_EXAMPLE}. {HOW_TO_OBTAIN}"
            )
        layouts = [names for names in LAYOUTS if file_format != "plain" or ".char." not in names[0]]
        names = next((names for names in layouts if all((folder / n).is_file() for n in names)), None)
        if names is None and file_format == "plain" and all((folder / n).is_file() for n in LAYOUTS[0]):
            raise ConfigError(  # read as plain text, the spaced files are another task (another vocabulary, baseline)
                f"data.path = {path!r} holds ptb.char.*.txt (characters spaced, '_' for a space), but "
                f"data.file_format is plain, which reads ptb.train.txt, ptb.valid.txt and ptb.test.txt of the same "
                f"archive: put those there, or set data.file_format: char to train on the spaced files (another "
                f"task than this config's)"
            )
        if names is None:
            expected = "; ".join(", ".join(names) for names in layouts)
            raise ConfigError(
                f"data.path = {path!r} holds none of the usual file sets ({expected}); give the files "
                f"with {FILE_KEYS}. {HOW_TO_OBTAIN}"
            )
        files = dict(zip(SPLITS, (folder / n for n in names)))
    for split, file in files.items():
        if not file.is_file():
            raise ConfigError(f"the {split} text file {str(file)!r} does not exist. {HOW_TO_OBTAIN}")
    return files


def read_lines(path: Path, file_format: str) -> list[str]:
    """The file's lines (without line ends), decoded from the 'char' format when asked."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path} cannot be read as UTF-8 text ({err}); give a text file. {HOW_TO_OBTAIN}") from err
    if not text.strip():
        raise ConfigError(f"{path} is empty; give a text file with content (a truncated download?). {HOW_TO_OBTAIN}")
    lines = text.splitlines()
    if file_format == "char":
        tokens = [line.split() for line in lines]
        long_token = next((t for line in tokens for t in line if len(t) > 1), None)
        if long_token is not None:
            raise ConfigError(
                f"{path} is not in the space-separated character format (it holds the token "
                f"{long_token!r}); set data.file_format: plain"
            )
        lines = ["".join(line).replace("_", " ") for line in tokens]
    return lines


def joined(lines: list[str]) -> str:
    """Lines as one stream of characters, each ended by '\\n'."""
    return "\n".join(lines) + "\n"


class Vocabulary:
    """'<unk>' (id 0) then the sorted characters of a training text; encodes whole texts with one lookup."""

    def __init__(self, training_text: str):
        self.symbols = [UNKNOWN, *sorted(set(training_text))]
        codes = np.array([ord(c) for c in self.symbols[1:]], dtype=np.int64)
        self.lookup = np.zeros(int(codes.max()) + 1 if codes.size else 1, dtype=np.int32)  # code point -> id
        self.lookup[codes] = np.arange(1, len(codes) + 1, dtype=np.int32)

    def __len__(self) -> int:
        return len(self.symbols)

    def encode(self, text: str) -> torch.Tensor:
        codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32).astype(np.int64)
        known = codes < len(self.lookup)
        ids = np.zeros(len(codes), dtype=np.int32)
        ids[known] = self.lookup[codes[known]]
        return torch.from_numpy(ids)

    def decode(self, ids) -> str:
        return "".join(self.symbols[int(i)] if int(i) else "\ufffd" for i in ids)


def unigram_bits(train: torch.Tensor, val: torch.Tensor, size: int) -> float:
    """Bits per character on `val` of predicting each symbol with its (add-one) frequency in `train`."""
    counts = torch.bincount(train.long(), minlength=size).double() + 1.0
    log2p = (counts / counts.sum()).log2()
    return float(-log2p[val.long()].mean())


class CharText(GatheredTaskDataModule):
    """Character-level text prediction, 1 (or `shift`) steps ahead, in bits per character.

    split: with `path` one file, the fractions [train, val, test] it is cut into, in order (module docstring).
    """

    # what the spec holds before the data is read (`ortholab list tasks`); the vocabulary decides sizes and baseline
    known_without_data = {"readout": "every_step", "loss": "cross_entropy_bits"}

    def __init__(
        self,
        path: str | None = None,
        train_file: str | None = None,
        val_file: str | None = None,
        test_file: str | None = None,
        file_format: str = "auto",
        layout: str = "windows",
        seq_len: int = 100,
        shift: int = 1,
        batch_size: int = 32,
        eval_batch_size: int | None = 256,
        shuffle: bool = True,
        num_workers: int = 0,
        seed: int = 5544,
        split: list[float] | None = None,
    ):
        super().__init__(batch_size, eval_batch_size, shuffle, num_workers)
        self.seed = seed  # training order: epoch e is shuffled with seed + e
        if file_format not in ("auto", "char", "plain"):
            raise ConfigError(f"data.file_format = {file_format!r}; choose 'auto', 'char' (ptb.char.*) or 'plain'")
        if layout not in ("windows", "lines"):
            raise ConfigError(f"data.layout = {layout!r}; choose 'windows' (fixed-length) or 'lines' (oRNN code)")
        self.seq_len = require_positive(seq_len, "seq_len")
        self.shift = require_positive(shift, "shift")
        self.layout = layout
        self.fractions = None if split is None else check_fractions(split)
        # the vocabulary needs the data now
        self.files = find_text_files(
            path, train_file, val_file, test_file, single=self.fractions is not None, file_format=file_format
        )
        if file_format == "auto":
            file_format = "char" if ".char." in self.files["train"].name else "plain"
        self.file_format = file_format
        texts, lines = self._read_texts(file_format)
        self.vocabulary = Vocabulary(texts["train"])
        self.ids = {split: self.vocabulary.encode(text) for split, text in texts.items()}
        self.lengths = (
            {
                split: torch.tensor([len(line) for line in split_lines], dtype=torch.long)
                for split, split_lines in lines.items()
            }
            if layout == "lines"
            else None
        )
        for split in self.files:
            self._check_not_too_short(split)
        size = len(self.vocabulary)
        self.spec = TaskSpec(
            name="text",
            input_size=size,
            output_size=size,
            **self.known_without_data,
            symbolic=True,
            main_metric="val/bpc",
            main_metric_mode="min",
            baseline=unigram_bits(self.ids["train"], self.ids["val"], size),
            test_baseline=unigram_bits(self.ids["train"], self.ids["test"], size),  # each split its own baseline
            description=f"characters of {self.files['train'].name} ({size} symbols incl. <unk>), predict {shift} "
            f"step(s) ahead, {layout}; bits per character (baseline: training frequencies)",
        )

    def _read_texts(self, file_format: str) -> tuple[dict[str, str], dict[str, list[str]] | None]:
        """{split: text} to encode and, in the 'lines' layout, {split: its lines} (trailing whitespace stripped)."""
        if self.fractions is None:
            lines = {split: read_lines(file, file_format) for split, file in self.files.items()}
        else:
            whole = read_lines(self.files["train"], file_format)
            if self.layout == "windows":  # one stream of characters, cut anywhere
                return dict(zip(SPLITS, contiguous_chunks(joined(whole), self.fractions))), None
            lines = dict(zip(SPLITS, contiguous_chunks(whole, self.fractions)))  # whole lines to each split
        if self.layout == "windows":
            return {split: joined(split_lines) for split, split_lines in lines.items()}, None
        lines = {split: [line.rstrip() for line in split_lines] for split, split_lines in lines.items()}
        return {split: "".join(split_lines) for split, split_lines in lines.items()}, lines

    def source(self, split: str) -> str:
        """Where a split's text comes from, for messages."""
        if self.fractions is None:
            return str(self.files[split])
        return f"the {split} part of {self.files[split]} (data.split {list(self.fractions)})"

    def _check_not_too_short(self, split: str) -> None:
        if self.layout == "windows" and len(self.ids[split]) < self.seq_len + self.shift:
            raise ConfigError(
                f"{self.source(split)} has {len(self.ids[split])} characters, fewer than data.seq_len + "
                f"data.shift = {self.seq_len + self.shift}; lower data.seq_len or give a longer text"
            )
        if self.layout == "lines" and not bool((self.lengths[split] >= self.shift + 2).any()):
            raise ConfigError(
                f"{self.source(split)} has no line of {self.shift + 2} characters or more; "
                f"use data.layout: windows or a longer text"
            )

    def make_dataset(self, split: str):
        if self.layout == "windows":
            return super().make_dataset(split)  # the windows of make_split
        lengths = self.lengths[split]
        starts = torch.cumsum(lengths, 0) - lengths
        kept = lengths >= self.shift + 2  # as the oRNN code, which drops lines with fewer than 2 predicted steps
        return RaggedSequences(self.ids[split], starts[kept], lengths[kept], shift=self.shift, finish=self.finish_batch)

    def make_split(self, split: str) -> tuple[torch.Tensor, ...]:
        """Windows: (inputs, targets) views of the encoded text, (N, seq_len) each. Lines: the padded split."""
        if self.layout == "lines":
            data = self.dataset(split)
            return data.batch(range(len(data)))
        ids, length = self.ids[split], self.seq_len
        count = (len(ids) - self.shift) // length
        inputs, targets = ids[: count * length], ids[self.shift : self.shift + count * length]
        return inputs.view(count, length), targets.view(count, length)

    def finish_batch(self, gathered: Batch) -> Batch:
        return (gathered[0].long(), gathered[1].long(), *gathered[2:])
