"""Character-level language modelling (oRNN paper, Penn Treebank): predict the character `shift` steps ahead.

Files: `path` is a folder holding a training, a validation and a test file in one of the usual layouts
(ptb.char.{train,valid,test}.txt, ptb.{train,valid,test}.txt, or {train,valid,test}.txt), or give the three
files as train_file / val_file / test_file. Two file formats (`file_format`):
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
per character on the validation text of predicting every character with its training frequency.
Texts are read and encoded once (vectorised) when the DataModule is built, and kept in memory as int32 ids: they
are not streamed, because the vocabulary needs the whole training text and the encoded corpus exists only in
memory (there is no encoded file to memory-map); Penn Treebank's ~5 M training characters take ~20 MB of ids.
A batch is one gather from the ids (windows are views of them; lines are gathered and padded in one indexing).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from datamodules.base import require_positive
from datamodules.batching import Batch, GatheredTaskDataModule, RaggedSequences
from datamodules.spec import TaskSpec
from models.base import ConfigError

UNKNOWN = "<unk>"
LAYOUTS = (  # (train, valid, test) file names looked for in data.path, in this order
    ("ptb.char.train.txt", "ptb.char.valid.txt", "ptb.char.test.txt"),
    ("ptb.train.txt", "ptb.valid.txt", "ptb.test.txt"),
    ("train.txt", "valid.txt", "test.txt"),
)
HOW_TO_OBTAIN = ("Penn Treebank character data: ptb.char.*.txt of Mikolov's simple-examples archive "
                 "(http://www.fit.vutbr.cz/~imikolov/rnnlm/simple-examples.tgz, folder data/); any UTF-8 text "
                 "files work with file_format: plain")


def find_text_files(path: str | None, train_file: str | None, val_file: str | None,
                    test_file: str | None) -> dict[str, Path]:
    """The train / val / test files: given one by one, or found in the folder `path`."""
    given = {"train": train_file, "val": val_file, "test": test_file}
    if all(given.values()):
        files = {split: Path(name).expanduser() for split, name in given.items()}
    elif any(given.values()):
        missing = [f"data.{split}_file" for split, name in given.items() if not name]
        raise ConfigError(f"give all three text files or none (then data.path); missing {', '.join(missing)}")
    elif path is None:
        raise ConfigError(f"data.path is not set: give the folder of the train/valid/test text files "
                          f"(or data.train_file, data.val_file, data.test_file). {HOW_TO_OBTAIN}")
    else:
        folder = Path(path).expanduser()
        if not folder.is_dir():
            raise ConfigError(f"data.path = {path!r} is not a directory; give the folder of the train/valid/test text "
                              f"files. {HOW_TO_OBTAIN}")
        names = next((names for names in LAYOUTS if all((folder / n).is_file() for n in names)), None)
        if names is None:
            expected = "; ".join(", ".join(names) for names in LAYOUTS)
            raise ConfigError(f"data.path = {path!r} holds none of the usual file sets ({expected}); give the files "
                              f"with data.train_file, data.val_file, data.test_file. {HOW_TO_OBTAIN}")
        files = dict(zip(("train", "val", "test"), (folder / n for n in names)))
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
            raise ConfigError(f"{path} is not in the space-separated character format (it holds the token "
                              f"{long_token!r}); set data.file_format: plain")
        lines = ["".join(line).replace("_", " ") for line in tokens]
    return lines


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
    """Character-level text prediction, 1 (or `shift`) steps ahead, in bits per character."""

    def __init__(self, path: str | None = None, train_file: str | None = None, val_file: str | None = None,
                 test_file: str | None = None, file_format: str = "auto", layout: str = "windows",
                 seq_len: int = 100, shift: int = 1, batch_size: int = 32, eval_batch_size: int | None = 256,
                 shuffle: bool = True, num_workers: int = 0, seed: int = 5544):
        super().__init__(batch_size, eval_batch_size, shuffle, num_workers)
        self.seed = seed  # training order: epoch e is shuffled with seed + e
        if file_format not in ("auto", "char", "plain"):
            raise ConfigError(f"data.file_format = {file_format!r}; choose 'auto', 'char' (ptb.char.*) or 'plain'")
        if layout not in ("windows", "lines"):
            raise ConfigError(f"data.layout = {layout!r}; choose 'windows' (fixed-length) or 'lines' (oRNN code)")
        self.seq_len = require_positive(seq_len, "seq_len")
        self.shift = require_positive(shift, "shift")
        self.layout = layout
        self.files = find_text_files(path, train_file, val_file, test_file)  # the vocabulary needs the data now
        if file_format == "auto":
            file_format = "char" if ".char." in self.files["train"].name else "plain"
        self.file_format = file_format
        lines = {split: read_lines(file, file_format) for split, file in self.files.items()}
        if layout == "windows":
            texts = {split: "\n".join(split_lines) + "\n" for split, split_lines in lines.items()}
        else:
            lines = {split: [line.rstrip() for line in split_lines] for split, split_lines in lines.items()}
            texts = {split: "".join(split_lines) for split, split_lines in lines.items()}
        self.vocabulary = Vocabulary(texts["train"])
        self.ids = {split: self.vocabulary.encode(text) for split, text in texts.items()}
        self.lengths = {split: torch.tensor([len(line) for line in split_lines], dtype=torch.long)
                        for split, split_lines in lines.items()} if layout == "lines" else None
        for split in self.files:
            self._check_not_too_short(split)
        size = len(self.vocabulary)
        self.spec = TaskSpec(
            name="text", input_size=size, output_size=size, readout="every_step", loss="cross_entropy_bits",
            symbolic=True, main_metric="val/bpc", main_metric_mode="min",
            baseline=unigram_bits(self.ids["train"], self.ids["val"], size),
            description=f"characters of {self.files['train'].name} ({size} symbols incl. <unk>), predict {shift} "
                        f"step(s) ahead, {layout}; bits per character (baseline: training frequencies)",
        )

    def _check_not_too_short(self, split: str) -> None:
        if self.layout == "windows" and len(self.ids[split]) < self.seq_len + self.shift:
            raise ConfigError(f"{self.files[split]} has {len(self.ids[split])} characters, fewer than data.seq_len + "
                              f"data.shift = {self.seq_len + self.shift}; lower data.seq_len or give a longer text")
        if self.layout == "lines" and not bool((self.lengths[split] >= self.shift + 2).any()):
            raise ConfigError(f"{self.files[split]} has no line of {self.shift + 2} characters or more; "
                              f"use data.layout: windows or a longer text")

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
