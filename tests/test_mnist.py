"""Pixel MNIST: the IDX reader, sequence layout, splits, scaling, permutations, variants and download."""

from pathlib import Path

import numpy as np
import pytest
import torch
from standins import mnist_standin, write_idx
from tolerances import roundoff

from ortholab.datamodules.idx import load_idx_set, read_idx
from ortholab.datamodules.mnist import PixelMNIST
from ortholab.errors import ConfigError

FASHION = Path("/usr/share/datasets/fashion-mnist")


@pytest.mark.parametrize("name", ["a-idx3-ubyte", "a-idx3-ubyte.gz"])
def test_idx_roundtrip_plain_and_gzipped(tmp_path, name):
    array = np.arange(2 * 3 * 5, dtype=np.uint8).reshape(2, 3, 5)
    assert np.array_equal(read_idx(write_idx(tmp_path / name, array)), array)


def test_idx_set_accepts_dotted_names(tmp_path):
    written = mnist_standin(tmp_path, gz=False)
    (tmp_path / "t10k-images-idx3-ubyte").rename(tmp_path / "t10k-images.idx3-ubyte")
    found = load_idx_set(tmp_path)
    assert np.array_equal(found["test_images"], written["test_images"])


def test_scornn_permutation_and_its_gather(tmp_path):
    written = mnist_standin(tmp_path)
    plain = PixelMNIST(dataset="idx", path=str(tmp_path))
    permuted = PixelMNIST(dataset="idx", path=str(tmp_path), permute=True)
    perm = permuted.permutation()
    assert perm[:4].tolist() == [319, 576, 323, 107]  # np.random.RandomState(92916).permutation(784), scoRNN's code
    x, _ = plain.make_split("test")
    xp, _ = permuted.make_split("test")
    assert torch.equal(xp, x[:, torch.from_numpy(perm)])  # x'[t] = x[perm[t]]
    assert torch.equal(x[3], torch.from_numpy(written["test_images"][3].reshape(-1)))  # row-major


def test_layout_scaling_and_tf_split(tmp_path):
    written = mnist_standin(tmp_path, n_train=40)
    task = PixelMNIST(dataset="idx", path=str(tmp_path), val_size=10, batch_size=8)
    assert len(task.dataset("train")) == 30 and len(task.dataset("val")) == 10 and len(task.dataset("test")) == 12
    inputs, labels = task.dataset("val").batch(range(10))
    assert inputs.shape == (10, 784, 1) and inputs.dtype == torch.float32
    expected = torch.from_numpy(written["train_images"][:10].reshape(10, 784, 1)).float() / 255  # the head validates
    assert torch.allclose(inputs, expected) and labels.tolist() == written["train_labels"][:10].tolist()
    assert task.dataset("train").stored[0].dtype == torch.uint8  # stored compact, scaled per batch
    batch = next(iter(task.train_dataloader()))
    assert batch[0].shape == (8, 784, 1) and batch[1].dtype == torch.int64
    assert task.spec.readout == "last_step" and task.spec.input_size == 1 and task.spec.main_metric == "val/acc"


def test_srnn_split_and_standard_scaling(tmp_path):
    written = mnist_standin(tmp_path, n_train=40)
    task = PixelMNIST(
        dataset="idx", path=str(tmp_path), val_size=10, val_from="tail", scaling="standard", mean=0.1307, std=0.3081
    )
    inputs, labels = task.dataset("val").batch(range(10))
    expected = (torch.from_numpy(written["train_images"][30:].reshape(10, 784, 1)).float() / 255 - 0.1307) / 0.3081
    # float32: 3 roundings (scale, shift, divide) of values <= (1 - 0.1307) / 0.3081 ~ 2.8
    assert torch.allclose(inputs, expected, rtol=0, atol=roundoff(torch.float32, 3, scale=2.83))
    assert labels.tolist() == written["train_labels"][30:].tolist()
    measured = PixelMNIST(dataset="idx", path=str(tmp_path), val_size=10, scaling="standard")
    pixels = written["train_images"][10:].astype(np.float64) / 255
    # float64 mean and standard deviation over the training pixels: a sum of pixels.size terms each
    assert measured.standardization == pytest.approx(
        (pixels.mean(), pixels.std()), rel=roundoff(torch.float64, 2 * pixels.size)
    )


def test_big_padded_variant_and_permutation_of_its_length(tmp_path):
    written = mnist_standin(tmp_path, n_train=20, n_test=4)
    task = PixelMNIST(dataset="idx", path=str(tmp_path), pad=14, val_size=5, permute=True)
    assert task.sequence_length() == 3136 and len(task.permutation()) == 3136
    unpermuted = PixelMNIST(dataset="idx", path=str(tmp_path), pad=14, val_size=5)
    x, _ = unpermuted.make_split("test")
    image = x[0].reshape(56, 56)
    assert image[:14].sum() == 0 and image[:, -14:].sum() == 0
    assert torch.equal(image[14:42, 14:42], torch.from_numpy(written["test_images"][0]))
    assert x.dtype == torch.uint8


@pytest.mark.parametrize("crop", [8, 16])
def test_random_label_capacity_experiment(tmp_path, crop):
    written = mnist_standin(tmp_path, n_train=40)
    task = PixelMNIST(dataset="idx", path=str(tmp_path), crop=crop, random_labels=25, random_label_seed=3)
    x, y = task.make_split("train")
    top = (28 - crop) // 2
    assert x.shape == (25, crop * crop)
    assert torch.equal(
        x[0], torch.from_numpy(written["train_images"][0, top : top + crop, top : top + crop].reshape(-1))
    )
    shuffled = np.random.RandomState(3).permutation(written["train_labels"])[:25]
    assert y.tolist() == shuffled.tolist() and y.tolist() != written["train_labels"][:25].tolist()
    for split in ("val", "test"):  # accuracy is measured on the training samples
        xs, ys = task.make_split(split)
        assert torch.equal(xs, x) and torch.equal(ys, y)


def test_permutation_files(tmp_path):
    mnist_standin(tmp_path / "set", n_train=12, n_test=2)
    order = np.random.RandomState(7).permutation(784)
    np.save(tmp_path / "perm.npy", order)
    (tmp_path / "perm.txt").write_text(" ".join(map(str, order)))
    for file in ("perm.npy", "perm.txt"):
        task = PixelMNIST(
            dataset="idx", path=str(tmp_path / "set"), val_size=2, permute=True, permutation_file=str(tmp_path / file)
        )
        assert np.array_equal(task.permutation(), order)
    np.save(tmp_path / "bad.npy", np.zeros(784, dtype=int))
    with pytest.raises(ConfigError, match="bad.npy.*is not a permutation of 0..783"):
        PixelMNIST(
            dataset="idx",
            path=str(tmp_path / "set"),
            val_size=2,
            permute=True,
            permutation_file=str(tmp_path / "bad.npy"),
        )


def test_sklearn_digits_default_split():
    task = PixelMNIST()
    sizes = [len(task.dataset(s)) for s in ("train", "val", "test")]
    assert sizes == [1257, 180, 360]
    from sklearn.datasets import load_digits

    digits = load_digits()
    x, y = task.make_split("test")
    assert x.shape == (360, 64) and torch.equal(y, torch.from_numpy(digits.target[-360:]))
    inputs, _ = task.dataset("val").batch([0])
    assert torch.allclose(inputs[0, :, 0], torch.from_numpy(digits.images[0].reshape(-1) / 16).float())


@pytest.mark.skipif(not FASHION.is_dir(), reason="apt-get install dataset-fashion-mnist")
def test_reads_fashion_mnist_from_debian():
    found = load_idx_set(FASHION)
    assert found["train_images"].shape == (60000, 28, 28) and found["test_labels"].shape == (10000,)
    assert set(np.unique(found["train_labels"])) == set(range(10))


REAL_MNIST = Path(__file__).resolve().parents[2] / "shared" / "data" / "mnist"
PUBLISHED_TEST_LABEL_COUNTS = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]  # LeCun's t10k set


@pytest.mark.skipif(
    not REAL_MNIST.is_dir(),
    reason="the real MNIST IDX files lie beside this checkout only in the project's machines (../shared/data/mnist)",
)
def test_the_real_mnist_follows_the_scornn_protocol():
    """scoRNN Table 1 as its code ran it (reference-impl-facts 4.3): 55,000 training images after TF's 5,000-image
    head, the 10,000 test images, pixels / 255, and the seeded permutation applied to every split alike."""
    task = PixelMNIST(
        dataset="idx",
        path=str(REAL_MNIST),
        val_size=5000,
        val_from="head",
        permute=True,
        batch_size=50,
        eval_batch_size=1000,
    )
    train, val, test = (task.dataset(split) for split in ("train", "val", "test"))
    assert (len(train), len(val), len(test)) == (55_000, 5_000, 10_000)
    assert len(task.train_dataloader()) == 1_100  # the paper's 1,100 steps per epoch at batch 50
    raw = load_idx_set(REAL_MNIST)
    assert np.bincount(raw["test_labels"]).tolist() == PUBLISHED_TEST_LABEL_COUNTS
    perm = task.permutation()
    assert perm[:4].tolist() == [319, 576, 323, 107]
    first_val, labels = val.batch([0])  # TF's validation is the head of the training file
    expected = raw["train_images"][0].reshape(-1)[perm] / 255.0
    assert torch.equal(first_val[0, :, 0], torch.from_numpy(expected).float()) and labels[0] == raw["train_labels"][0]
    first_train, _ = train.batch([0])  # training starts right after it
    assert torch.equal(
        first_train[0, :, 0], torch.from_numpy(raw["train_images"][5000].reshape(-1)[perm] / 255.0).float()
    )
    inputs, targets = next(iter(task.train_dataloader()))
    assert inputs.shape == (50, 784, 1) and 0.0 <= float(inputs.min()) and float(inputs.max()) <= 1.0
    again, _ = next(
        iter(
            PixelMNIST(
                dataset="idx", path=str(REAL_MNIST), val_size=5000, permute=True, batch_size=50
            ).train_dataloader()
        )
    )
    assert torch.equal(inputs, again)  # the shuffled order is seeded: a re-run sees the same first batch


def test_a_path_the_built_in_digits_would_not_read_is_refused(tmp_path):
    """`--data.path DIR` with the demo's built-in digits trained on them and kept DIR in the config, even when DIR
    did not exist (walk-through 3)."""
    with pytest.raises(ConfigError, match=r"data.path = '.*nosuch' is not read by data.dataset = 'sklearn_digits'"):
        PixelMNIST(dataset="sklearn_digits", path=str(tmp_path / "nosuch"))
    assert PixelMNIST(dataset="sklearn_digits").path is None
