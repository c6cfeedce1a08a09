"""Pixel MNIST streamed from memory-mapped IDX files serves the very batches the in-memory path serves."""

import pickle

import numpy as np
import pytest
import torch
from standins import mnist_standin
from tolerances import roundoff

from ortholab.datamodules.batching import GatheredTensors
from ortholab.datamodules.idx import MappedIdx, load_idx_set
from ortholab.datamodules.mnist import PixelMNIST, StreamedImages

VARIANTS = {
    "plain": {},
    "permuted, standard scaling measured": {"permute": True, "scaling": "standard"},
    "padded and permuted": {"pad": 3, "permute": True, "val_from": "tail"},
    "centre crop": {"crop": 16},
    "random labels": {"random_labels": 25, "crop": 8},
}


def both_paths(directory, **options):
    """The same task read through the memory map and read whole."""
    common = {"dataset": "idx", "path": str(directory), "val_size": 10, "batch_size": 8, "eval_batch_size": 7}
    return (PixelMNIST(**common, **options, memory_map=True), PixelMNIST(**common, **options, memory_map=False))


@pytest.mark.parametrize("options", VARIANTS.values(), ids=VARIANTS.keys())
def test_memmap_batches_equal_in_memory_batches(tmp_path, options):
    mnist_standin(tmp_path, n_train=40, n_test=12, gz=False)
    streamed, in_memory = both_paths(tmp_path, **options)
    for split in ("train", "val", "test"):
        assert isinstance(streamed.dataset(split), StreamedImages)
        assert isinstance(in_memory.dataset(split), GatheredTensors)
        assert len(streamed.dataset(split)) == len(in_memory.dataset(split))
        rows = np.random.default_rng(1).permutation(len(in_memory.dataset(split)))[:9].tolist()  # any order
        for got, expected in zip(streamed.dataset(split).batch(rows), in_memory.dataset(split).batch(rows)):
            assert got.dtype == expected.dtype and torch.equal(got, expected)
        for got, expected in zip(
            streamed.test_dataloader() if split == "test" else streamed.val_dataloader(),
            in_memory.test_dataloader() if split == "test" else in_memory.val_dataloader(),
        ):
            assert all(torch.equal(a, b) for a, b in zip(got, expected))
    for got, expected in zip(streamed.train_dataloader(), in_memory.train_dataloader()):  # same shuffled order
        assert all(torch.equal(a, b) for a, b in zip(got, expected))
    if options.get("scaling") == "standard":
        # float64 mean and standard deviation, summed in another order: <= 40 x 784 pixels each
        assert streamed.standardization == pytest.approx(
            in_memory.standardization, rel=roundoff(torch.float64, 2 * 40 * 784)
        )


def test_streamed_split_reads_only_batches(tmp_path, monkeypatch):
    mnist_standin(tmp_path, n_train=40, n_test=12, gz=False)
    task = PixelMNIST(dataset="idx", path=str(tmp_path), val_size=10, batch_size=8, permute=True)
    assert isinstance(task.images["train_images"], MappedIdx)
    assert isinstance(task.images["train_labels"], np.ndarray)  # labels are small: read whole
    reads = []
    original = MappedIdx.__getitem__
    monkeypatch.setattr(
        MappedIdx, "__getitem__", lambda self, rows: reads.append(len(original(self, rows))) or original(self, rows)
    )
    batches = list(task.train_dataloader())
    assert len(batches) == 4 and reads and max(reads) <= 8  # never more than one batch of images at a time


def test_gzipped_files_are_read_into_memory(tmp_path):
    written = mnist_standin(tmp_path, n_train=20, n_test=4, gz=True)  # gzip has no random access
    task = PixelMNIST(dataset="idx", path=str(tmp_path), val_size=5, memory_map=True)
    assert isinstance(task.images["train_images"], np.ndarray)
    assert isinstance(task.dataset("train"), GatheredTensors)
    assert np.array_equal(load_idx_set(tmp_path, memory_map=True)["test_images"], written["test_images"])


def test_mapped_file_pickles_without_its_contents(tmp_path):
    written = mnist_standin(tmp_path, n_train=300, n_test=4, gz=False)
    mapped = MappedIdx(tmp_path / "train-images-idx3-ubyte")
    assert mapped.shape == (300, 28, 28) and len(mapped) == 300 and mapped.ndim == 3
    assert np.array_equal(mapped[[5, 2]], written["train_images"][[5, 2]])
    copy = pickle.loads(pickle.dumps(mapped))  # what a DataLoader worker started by spawn receives
    assert len(pickle.dumps(mapped)) < 2_000 < written["train_images"].nbytes
    assert np.array_equal(copy[10:12], written["train_images"][10:12])
    assert mapped[0:2].flags.writeable  # an in-memory copy, not a view of the read-only map
