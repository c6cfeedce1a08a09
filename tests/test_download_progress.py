"""A fetch shows one progress bar per data set, advanced chunk by chunk, and still verifies each file's checksum."""

import hashlib

import pytest
from tqdm import tqdm

import ortholab.datamodules.download as download
from ortholab.datamodules.catalog import DATA_ENV, DataFile, DataSet
from ortholab.datamodules.download import fetch
from ortholab.errors import ConfigError

NAME = "train-labels-idx1-ubyte.gz"


class RecordingBar(tqdm):
    """tqdm that keeps its total and every update, shown or not (pytest's output is no terminal)."""

    made: list = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.recorded_total, self.recorded_desc, self.updates = kwargs.get("total"), kwargs.get("desc"), []
        RecordingBar.made.append(self)

    def update(self, n=1):
        self.updates.append(n)
        return super().update(n)


@pytest.fixture
def bars(monkeypatch):
    RecordingBar.made = []
    monkeypatch.setattr(download, "tqdm", RecordingBar)
    monkeypatch.setattr(download, "CHUNK_BYTES", 1000)  # several chunks from a small file
    return RecordingBar.made


@pytest.fixture
def file_mirror(tmp_path, monkeypatch):
    """A copy of a data root holding two files of the set 'pair' (4,500 and 2,500 bytes), as a file:// URL."""
    monkeypatch.setenv(DATA_ENV, str(tmp_path / "root"))
    served = tmp_path / "served" / "pair"
    served.mkdir(parents=True)
    payloads = {"a.bin": bytes(range(256)) * 17 + b"x" * 148, "b.bin": b"y" * 2500}
    for name, payload in payloads.items():
        (served / name).write_bytes(payload)
    files = tuple(DataFile(name, hashlib.sha256(p).hexdigest(), len(p), ()) for name, p in payloads.items())
    return DataSet("pair", "two files", "pair", "none", "", files), served.parent.as_uri()


def test_one_bar_per_data_set_advances_through_every_file(file_mirror, bars, tmp_path):
    dataset, url = file_mirror
    fetch(dataset, mirror=url, workers=1)
    (bar,) = bars
    assert bar.recorded_total == 4500 + 2500 and "pair" in bar.recorded_desc
    assert sorted(bar.updates) == sorted([1000] * 4 + [500] + [1000] * 2 + [500]) and sum(bar.updates) == 7000
    assert (tmp_path / "root" / "pair" / "a.bin").stat().st_size == 4500


def test_a_file_failing_its_checksum_is_refused_after_its_bar(file_mirror, bars, tmp_path):
    dataset, url = file_mirror
    bad = DataSet("pair", "two files", "pair", "none", "", (DataFile("a.bin", "0" * 64, 4500, ()),))
    with pytest.raises(ConfigError, match="fail the SHA-256 checksum"):
        fetch(bad, mirror=url)
    assert sum(bars[0].updates) == 4500 and not (tmp_path / "root" / "pair" / "a.bin").exists()


def test_resumed_bytes_count_on_the_bar_once(file_mirror, bars, tmp_path, monkeypatch):
    """A resumed transfer starts the bar at what the partial file holds (here a server honouring Range is faked)."""
    dataset, url = file_mirror
    one = DataSet("pair", "one file", "pair", "none", "", dataset.files[:1])
    part = tmp_path / "root" / "pair" / "a.bin.part"
    part.parent.mkdir(parents=True)
    payload = (tmp_path / "served" / "pair" / "a.bin").read_bytes()
    part.write_bytes(payload[:3000])

    class Ranged:  # the rest of the file, as a 206 response
        status, headers = 206, {"Content-Length": "1500"}

        def __init__(self, request, timeout):
            assert request.headers["Range"] == "bytes=3000-"
            self.body = payload[3000:]

        def read(self, size):
            chunk, self.body = self.body[:size], self.body[size:]
            return chunk

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(download.urllib.request, "urlopen", Ranged)
    fetch(one, mirror="http://mirror.invalid/")
    assert bars[0].updates == [3000, 1000, 500] and sum(bars[0].updates) == 4500
    assert (tmp_path / "root" / "pair" / "a.bin").read_bytes() == payload
