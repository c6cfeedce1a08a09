"""Pixel-by-pixel MNIST and its variants (scoRNN Section 5.3, SRNN's pMNIST, big pMNIST and random labels).

An image becomes a sequence of its pixels in row-major order, one input channel per step; the class is
predicted from the last step. Images are kept as uint8 and scaled per batch. Uncompressed IDX files are
memory-mapped (`memory_map: true`, the default): a batch reads its rows from disk and becomes sequences (crop,
pad, permutation) as one vectorised operation, so no split is ever held whole and a set larger than memory is
streamed. Gzipped IDX files (no random access) and scikit-learn's digits are decompressed into memory, as
uint8 (N, T) sequences: the 3,136-step "big" variant of 55,000 images then takes 172 MB.

Sources (`dataset`):
- 'sklearn_digits' (default, no download): scikit-learn's 1,797 8x8 digits, 64 steps. Split by position in
  scikit-learn's order: the last 360 images are the test set, the first 1,437 the pool that train and
  validation are taken from (validation: `val_size`, default 180, from the head or tail of the pool).
- 'mnist', 'fashion-mnist': the four IDX files in the data set's folder of the data root ($ORTHOLAB_DATA, else
  the per-user cache; `ortholab data list`), or in `path` when given. `download: true` fetches them first
  (datamodules/download.py: every file's SHA-256 checked); otherwise a missing set is an error saying how to get it.
- 'idx': the four IDX files (gzipped or not) in the directory `path`: MNIST, Fashion-MNIST or any set in
  that format. `download: true` fetches MNIST there first, verified by checksum (`mirrors`: other base URLs
  serving MNIST's .gz archives). Pool = the 60,000 training images, test = the 10,000 test images. Validation
  defaults to the first 5,000 of the pool, as TensorFlow's `read_data_sets` that the scoRNN code uses (55k/5k/10k);
  SRNN takes the last 10,000 (`val_size: 10000, val_from: tail`).

Options:
- scaling 'unit': pixel / pixel_max (pixel_max 255 for IDX files, as scoRNN and expRNN; 16 for the digits;
  the oRNN code divided by 256). 'standard': (pixel / pixel_max - mean) / std, as SRNN with mean 0.1307, std
  0.3081; mean/std left empty are measured once on the training split.
- permute: a fixed permutation of the time steps, x'[t] = x[perm[t]], the same for every split:
  np.random.RandomState(permutation_seed).permutation(T) with scoRNN's seed 92916 by default (expRNN uses the
  same), any other seed, or a saved permutation (`permutation_file`: .npy or whitespace-separated text).
- pad: zero pixels added on each side before flattening (14 gives SRNN's 56x56 "big" variant, 3,136 steps);
  crop: keep the centre crop x crop pixels (8 or 16 in SRNN's random-label experiment).
- memory_map: false reads uncompressed IDX files whole too (the batches are the same either way).
- random_labels: N turns the task into SRNN's capacity experiment: the first N training images with labels
  drawn by shuffling all training labels once (np.random.RandomState(random_label_seed)); validation and
  test serve the same N samples, so val/acc is the accuracy on the training samples.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cached_property

import numpy as np
import torch

from ortholab.datamodules import catalog
from ortholab.datamodules.base import require_positive
from ortholab.datamodules.batching import (
    Batch,
    BatchedDataset,
    GatheredTaskDataModule,
    GatheredTensors,
)
from ortholab.datamodules.download import ensure, fetch
from ortholab.datamodules.idx import MappedIdx, find_idx_files, idx_shape, load_idx_set
from ortholab.datamodules.spec import TaskSpec
from ortholab.errors import ConfigError, home_path

SCORNN_PERMUTATION_SEED = 92916
DIGITS_TEST_SIZE = 360  # the last 360 of scikit-learn's 1,797 digits
DEFAULT_VAL_SIZE = {"idx": 5_000, "mnist": 5_000, "fashion-mnist": 5_000, "sklearn_digits": 180}
DEFAULT_PIXEL_MAX = {"idx": 255.0, "mnist": 255.0, "fashion-mnist": 255.0, "sklearn_digits": 16.0}
CATALOG_SETS = ("mnist", "fashion-mnist")  # fetched into the data root (datamodules/catalog.py)
HISTOGRAM_CHUNK = 10_000  # images per read when measuring the pixel histogram of a streamed split


class StreamedImages(BatchedDataset):
    """A split read batch by batch from a memory-mapped IDX file: `rows` of `images` with their `labels`.

    A batch is one fancy-indexed read of its rows, then `to_sequences` (crop, pad, permutation) on just those
    images: the same uint8 sequences the in-memory split stores, without the split ever being held whole.
    """

    def __init__(self, images: MappedIdx, rows: np.ndarray, labels: torch.Tensor, to_sequences, finish):
        if len(rows) != len(labels):
            raise ValueError("every row of a streamed split needs its label")
        self.images, self.rows, self.labels = images, rows, labels
        self.to_sequences, self.finish = to_sequences, finish
        self.stored = ()  # no tensor held in memory; uint8 pixels cannot be NaN, so check_finite has nothing to scan

    def __len__(self) -> int:
        return len(self.rows)

    def __getitems__(self, indices) -> Batch:
        picked = torch.as_tensor(indices, dtype=torch.long)
        return self.to_sequences(self.images[self.rows[picked.numpy()]]), self.labels[picked]


def pixel_histogram(data: BatchedDataset) -> torch.Tensor:
    """Counts of the 256 uint8 values over a split's gathered sequences, read HISTOGRAM_CHUNK rows at a time."""
    counts = torch.zeros(256, dtype=torch.float64)
    for start in range(0, len(data), HISTOGRAM_CHUNK):
        pixels = data.__getitems__(np.arange(start, min(start + HISTOGRAM_CHUNK, len(data))))[0]
        counts += torch.bincount(pixels.reshape(-1), minlength=256).double()  # exact, without a float copy
    return counts


def check_options(dataset: str, path, scaling: str, val_from: str, std, pixel_max, pad: int) -> None:
    """PixelMNIST's options that can be checked before any file is read; one ConfigError naming the key otherwise."""
    if dataset not in DEFAULT_VAL_SIZE:
        raise ConfigError(
            f"data.dataset = {dataset!r}; choose 'sklearn_digits' (built in), 'mnist' or "
            f"'fashion-mnist' (from the data root, `ortholab data list`) or 'idx' (with data.path)"
        )
    if dataset == "idx" and path is None:
        raise ConfigError(
            "data.dataset = 'idx' needs data.path: the directory of the four IDX files "
            "(e.g. /usr/share/datasets/fashion-mnist after `apt-get install dataset-fashion-mnist`)"
        )
    if dataset == "sklearn_digits" and path is not None:  # built in: a path given was meant for another set
        raise ConfigError(
            f"data.path = {str(path)!r} is not read by data.dataset = 'sklearn_digits' (built in); give "
            f"data.dataset mnist, fashion-mnist or idx to read it, or drop data.path"
        )
    if scaling not in ("unit", "standard"):
        raise ConfigError(
            f"data.scaling = {scaling!r}; choose 'unit' (pixel / pixel_max) or 'standard' "
            f"((pixel / pixel_max - mean) / std)"
        )
    if val_from not in ("head", "tail"):
        raise ConfigError(f"data.val_from = {val_from!r}; choose 'head' (TF/scoRNN) or 'tail' (SRNN)")
    if std is not None and std <= 0:
        raise ConfigError(f"data.std = {std} must be positive")
    if pixel_max is not None and pixel_max <= 0:
        raise ConfigError(f"data.pixel_max = {pixel_max} must be positive (255 for 8-bit images)")
    if pad < 0:
        raise ConfigError(f"data.pad = {pad} must be 0 or more (14 gives the 56x56 'big' variant)")


class PixelMNIST(GatheredTaskDataModule):
    """Sequential (pixel-by-pixel) image classification (docs/tasks.md describes it and its variants)."""

    def __init__(
        self,
        dataset: str = "sklearn_digits",
        path: str | None = None,
        download: bool = False,
        mirrors: list[str] | None = None,
        scaling: str = "unit",
        pixel_max: float | None = None,
        mean: float | None = None,
        std: float | None = None,
        permute: bool = False,
        permutation_seed: int = SCORNN_PERMUTATION_SEED,
        permutation_file: str | None = None,
        val_size: int | None = None,
        val_from: str = "head",
        pad: int = 0,
        crop: int | None = None,
        random_labels: int | None = None,
        random_label_seed: int = 1234,
        num_classes: int = 10,
        memory_map: bool = True,
        batch_size: int = 50,
        eval_batch_size: int | None = 1_000,
        shuffle: bool = True,
        num_workers: int = 0,
        seed: int = 5544,
    ):
        super().__init__(batch_size, eval_batch_size, shuffle, num_workers)
        self.seed = seed  # training order: epoch e is shuffled with seed + e
        check_options(dataset, path, scaling, val_from, std, pixel_max, pad)
        self.dataset_name = dataset
        if path is None and dataset in CATALOG_SETS:
            path = str(catalog.get(dataset).path())
        self.path = home_path(path, "data.path") if path is not None else None
        self.download = download
        self.mirrors = list(mirrors) if mirrors is not None else None
        self.scaling = scaling
        self.pixel_max = float(pixel_max) if pixel_max is not None else DEFAULT_PIXEL_MAX[dataset]
        self.mean, self.std = mean, std
        self.permute = permute
        self.permutation_seed = permutation_seed
        self.permutation_file = (
            home_path(permutation_file, "data.permutation_file") if permutation_file is not None else None
        )
        self.val_size = require_positive(val_size if val_size is not None else DEFAULT_VAL_SIZE[dataset], "val_size")
        self.val_from = val_from
        self.pad = pad
        self.crop = require_positive(crop, "crop") if crop is not None else None
        self.random_labels = require_positive(random_labels, "random_labels") if random_labels is not None else None
        self.random_label_seed = random_label_seed
        self.num_classes = require_positive(num_classes, "num_classes")
        self.memory_map = memory_map
        if dataset in CATALOG_SETS and not download and self.path == catalog.get(dataset).path():
            ensure(dataset, download=False)  # fail now, saying how to fetch it, rather than after the run has started
        if dataset != "sklearn_digits" and not download:
            find_idx_files(self.path)  # fail now, naming the path, rather than after the run has started
        if dataset == "sklearn_digits" or not download:  # the image side is known: check crop and permutation now
            self.sequence_length()
            self.permutation()
        variant = ", ".join(
            [f"{'permuted ' if permute else ''}pixel {dataset}"]
            + [
                text
                for text, used in (
                    (f"pad {pad}", pad),
                    (f"centre crop {crop}", crop),
                    (f"{random_labels} random labels", random_labels),
                )
                if used
            ]
        )
        self.spec = TaskSpec(
            name="mnist",
            input_size=1,
            output_size=num_classes,
            readout="last_step",
            loss="cross_entropy",
            main_metric="val/acc",
            main_metric_mode="max",
            baseline=1.0 / num_classes,
            description=f"{variant}: one pixel per step, class from the last step (chance = 1/{num_classes})",
        )

    # images ------------------------------------------------------------------------------------
    def source_set(self) -> catalog.DataSet:
        """The catalog's entry this task fetches (MNIST for 'idx'), with `mirrors` as its archives' base URLs."""
        chosen = catalog.get("mnist" if self.dataset_name == "idx" else self.dataset_name)
        if self.mirrors is None:
            return chosen
        files = tuple(
            replace(f, urls=tuple(m.rstrip("/") + f"/{f.name}.gz" for m in self.mirrors)) for f in chosen.files
        )
        return replace(chosen, files=files)

    def prepare_data(self) -> None:
        if self.dataset_name != "sklearn_digits" and self.download:
            fetch(self.source_set(), folder=self.path)

    @cached_property
    def images(self) -> dict[str, np.ndarray]:
        """uint8 images (N, H, W) and int64 labels of the training pool and the test set, read once."""
        if self.dataset_name == "sklearn_digits":
            from sklearn.datasets import load_digits

            digits = load_digits()
            pixels, labels = digits.images.astype(np.uint8), digits.target.astype(np.int64)
            cut = len(pixels) - DIGITS_TEST_SIZE
            found = {
                "train_images": pixels[:cut],
                "train_labels": labels[:cut],
                "test_images": pixels[cut:],
                "test_labels": labels[cut:],
            }
        else:
            if self.download:
                self.prepare_data()
            found = load_idx_set(self.path, memory_map=self.memory_map)
            found["train_labels"] = found["train_labels"].astype(np.int64)
            found["test_labels"] = found["test_labels"].astype(np.int64)
        for part in ("train", "test"):
            labels = found[f"{part}_labels"]
            if labels.min() < 0 or labels.max() >= self.num_classes:
                raise ConfigError(
                    f"the {part} labels of {self.path or self.dataset_name} lie in [{labels.min()}, "
                    f"{labels.max()}]; set data.num_classes to at least {labels.max() + 1}"
                )
        return found

    def image_side(self) -> int:
        """Side of the stored images before crop/pad (28 for MNIST) without reading the whole set."""
        if self.dataset_name == "sklearn_digits":
            return 8
        if "images" in self.__dict__:
            return self.images["train_images"].shape[1]
        path = find_idx_files(self.path)["train_images"]
        shape = idx_shape(path)
        if len(shape) != 3 or shape[1] != shape[2]:
            raise ConfigError(f"{path} holds an array of shape {shape}; PixelMNIST needs square images (N, H, H)")
        return shape[1]

    def sequence_length(self) -> int:
        side = self.image_side()
        if self.crop is not None:
            if self.crop > side:
                raise ConfigError(f"data.crop = {self.crop} exceeds the image side {side}")
            side = self.crop
        return (side + 2 * self.pad) ** 2

    def permutation(self) -> np.ndarray | None:
        """The fixed order of the time steps (None: row-major, unpermuted)."""
        if not self.permute:
            return None
        length = self.sequence_length()
        if self.permutation_file is None:
            return np.random.RandomState(self.permutation_seed).permutation(length)
        try:
            if self.permutation_file.suffix == ".npy":
                order = np.load(self.permutation_file)
            else:
                order = np.loadtxt(self.permutation_file, dtype=np.int64)
        except (OSError, ValueError) as err:
            raise ConfigError(
                f"data.permutation_file = {str(self.permutation_file)!r} cannot be read ({err}); give a "
                f".npy file or a text file of {length} whitespace-separated integers"
            ) from err
        order = np.asarray(order).reshape(-1)
        if len(order) != length or not np.array_equal(np.sort(order), np.arange(length)):
            raise ConfigError(
                f"data.permutation_file = {str(self.permutation_file)!r} is not a permutation of "
                f"0..{length - 1} (the sequence has {length} steps); save one with "
                f"np.save(file, np.random.permutation({length}))"
            )
        return order.astype(np.int64)

    @cached_property
    def time_order(self) -> np.ndarray | None:
        """The permutation, drawn or read once (batches of a streamed split apply it one by one)."""
        return self.permutation()

    def to_sequences(self, images: np.ndarray) -> torch.Tensor:
        """uint8 images (N, H, W) -> uint8 sequences (N, T): centre crop, zero padding, row-major, permutation."""
        if self.crop is not None:
            side = images.shape[1]
            if self.crop > side:
                raise ConfigError(f"data.crop = {self.crop} exceeds the image side {side}")
            top = int(round((side - self.crop) / 2))  # torchvision's CenterCrop offset
            images = images[:, top : top + self.crop, top : top + self.crop]
        if self.pad:
            images = np.pad(images, ((0, 0), (self.pad, self.pad), (self.pad, self.pad)))
        sequences = images.reshape(len(images), -1)
        order = self.time_order
        if order is not None:
            sequences = np.take(sequences, order, axis=1)  # a gather along time, 3x faster than [:, order]
        return torch.from_numpy(np.ascontiguousarray(sequences, dtype=np.uint8))

    # splits ------------------------------------------------------------------------------------
    def split_rows(self, split: str) -> tuple[np.ndarray | MappedIdx, slice, np.ndarray]:
        """(the images a split is taken from, which rows of them, their labels)."""
        found = self.images
        pool, pool_labels = found["train_images"], found["train_labels"]
        if self.random_labels is not None:
            if self.random_labels > len(pool):
                raise ConfigError(f"data.random_labels = {self.random_labels} exceeds the {len(pool)} training images")
            shuffled = np.random.RandomState(self.random_label_seed).permutation(pool_labels)
            return pool, slice(0, self.random_labels), shuffled[: self.random_labels]
        if split == "test":
            return found["test_images"], slice(None), found["test_labels"]
        if self.val_size >= len(pool):
            raise ConfigError(f"data.val_size = {self.val_size} leaves no training images out of {len(pool)}")
        if self.val_from == "head":
            val, train = slice(0, self.val_size), slice(self.val_size, None)
        else:
            val, train = slice(len(pool) - self.val_size, None), slice(0, len(pool) - self.val_size)
        rows = val if split == "val" else train
        return pool, rows, pool_labels[rows]

    def make_split(self, split: str) -> tuple[torch.Tensor, torch.Tensor]:
        """The whole split as uint8 sequences (N, T) and labels (N,), in memory."""
        images, rows, labels = self.split_rows(split)
        return self.to_sequences(images[rows]), torch.from_numpy(np.ascontiguousarray(labels))

    def make_dataset(self, split: str) -> BatchedDataset:
        """Memory-mapped images: streamed batch by batch; otherwise the split's sequences kept in memory."""
        images, rows, labels = self.split_rows(split)
        if isinstance(images, MappedIdx):
            return StreamedImages(
                images,
                np.arange(len(images))[rows],
                torch.from_numpy(np.ascontiguousarray(labels)),
                self.to_sequences,
                self.finish_batch,
            )
        return GatheredTensors(*self.make_split(split), finish=self.finish_batch)

    @cached_property
    def standardization(self) -> tuple[float, float]:
        """(mean, std) of the scaled pixels: as configured, else measured once on the training split."""
        if self.mean is not None and self.std is not None:
            return self.mean, self.std
        counts = pixel_histogram(self.dataset("train"))
        values = torch.arange(len(counts), dtype=torch.float64) / self.pixel_max
        mean = float((counts * values).sum() / counts.sum())
        std = float(((counts * (values - mean) ** 2).sum() / counts.sum()).sqrt())
        return (self.mean if self.mean is not None else mean), (self.std if self.std is not None else std)

    def finish_batch(self, gathered: Batch) -> Batch:
        pixels, labels = gathered
        inputs = pixels.to(torch.float32).div_(self.pixel_max)
        if self.scaling == "standard":
            mean, std = self.standardization
            inputs = inputs.sub_(mean).div_(std)
        return inputs.unsqueeze(-1), labels
