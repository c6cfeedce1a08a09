"""Small stand-ins for the tasks' data, written in the real distributed formats (IDX, .mat, pickle, text, audio)."""

from __future__ import annotations

import gzip
import pickle
import struct
from pathlib import Path

import numpy as np
import scipy.io
import soundfile

from ortholab.datamodules.idx import IDX_FILES

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def write_idx(path: Path, array: np.ndarray) -> Path:
    """An IDX file (uint8 values), gzipped when the name ends in .gz."""
    array = np.ascontiguousarray(array, dtype=np.uint8)
    raw = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape) + array.tobytes()
    path.write_bytes(gzip.compress(raw) if path.suffix == ".gz" else raw)
    return path


def mnist_standin(
    directory: Path, n_train: int = 40, n_test: int = 12, side: int = 28, gz: bool = True, seed: int = 0
) -> dict[str, np.ndarray]:
    """The four IDX files of a tiny MNIST-like set in `directory`; returns the arrays written."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    arrays = {
        "train_images": rng.integers(0, 256, (n_train, side, side)),
        "train_labels": np.arange(n_train) % 10,
        "test_images": rng.integers(0, 256, (n_test, side, side)),
        "test_labels": (np.arange(n_test) * 3) % 10,
    }
    for role, stem in IDX_FILES.items():
        write_idx(directory / (stem + (".gz" if gz else "")), arrays[role])
    return {role: a.astype(np.uint8) for role, a in arrays.items()}


def piano_pieces(count: int, seed: int) -> list[list[list[int]]]:
    """`count` pieces, each a list of steps, each the list of sounding MIDI notes (21-108)."""
    rng = np.random.default_rng(seed)
    return [
        [
            sorted(rng.choice(np.arange(21, 109), size=rng.integers(0, 4), replace=False).tolist())
            for _ in range(rng.integers(3, 9))
        ]
        for _ in range(count)
    ]


def roll(piece: list[list[int]]) -> np.ndarray:
    out = np.zeros((len(piece), 88), dtype=np.uint8)
    for t, notes in enumerate(piece):
        out[t, [n - 21 for n in notes]] = 1
    return out


def write_music_mat(path: Path, splits: dict[str, list[list[list[int]]]]) -> Path:
    """A TCN-style .mat: cell arrays traindata/validdata/testdata of (time, 88) uint8 piano rolls."""
    cells = {}
    for key, pieces in zip(("traindata", "validdata", "testdata"), (splits["train"], splits["valid"], splits["test"])):
        cell = np.empty((1, len(pieces)), dtype=object)
        for i, piece in enumerate(pieces):
            cell[0, i] = roll(piece)
        cells[key] = cell
    scipy.io.savemat(path, cells)
    return path


def write_music_pickle(path: Path, splits: dict[str, list[list[list[int]]]]) -> Path:
    path.write_bytes(pickle.dumps(splits, protocol=2))
    return path


def write_text_set(
    directory: Path,
    train: str,
    valid: str,
    test: str,
    names=("train.txt", "valid.txt", "test.txt"),
    char_format: bool = False,
) -> Path:
    """Three text files; in the char format every character is followed by a space and spaces become '_'."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in zip(names, (train, valid, test)):
        if char_format:
            text = "\n".join(" ".join(line.replace(" ", "_")) for line in text.split("\n"))
        (directory / name).write_text(text, encoding="utf-8")
    return directory


def write_audio(path: Path, samples: np.ndarray, rate: int) -> Path:
    """A WAV/FLAC (by suffix) of float samples; (N,) mono or (N, channels)."""
    soundfile.write(str(path), samples, rate, subtype="PCM_16")
    return path
