"""The MNIST download shows a progress bar per file, and still verifies each file's checksum."""
import hashlib

import pytest
from tqdm import tqdm

import ortholab.datamodules.download as download
from ortholab.datamodules.download import download_verified
from ortholab.models.base import ConfigError

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
def file_mirror(tmp_path):
    """A local folder serving one 4,500-byte file through a file:// URL."""
    served = tmp_path / "served"
    served.mkdir()
    payload = bytes(range(256)) * 17 + b"x" * 148
    (served / NAME).write_bytes(payload)
    return payload, served.as_uri() + "/"


def test_the_bar_advances_through_the_file_and_the_checksum_is_checked(tmp_path, file_mirror, bars):
    payload, url = file_mirror
    (path,) = download_verified(tmp_path / "got", files={NAME: hashlib.md5(payload).hexdigest()}, mirrors=[url])
    assert path.read_bytes() == payload
    (bar,) = bars
    assert bar.recorded_total == len(payload) == 4500 and bar.updates == [1000] * 4 + [500]
    assert NAME in bar.recorded_desc


def test_a_file_failing_its_checksum_is_refused_after_its_bar(tmp_path, file_mirror, bars):
    payload, url = file_mirror
    with pytest.raises(ConfigError, match="fail the MD5 checksum"):
        download_verified(tmp_path / "got", files={NAME: "0" * 32}, mirrors=[url])
    assert sum(bars[0].updates) == len(payload) and not (tmp_path / "got" / NAME).exists()


def test_a_response_without_a_length_still_reads_in_chunks(bars):
    class Opened:  # a body served without Content-Length: the bar counts bytes with no total
        headers = {}

        def __init__(self, body):
            self.body = body

        def read(self, size):
            chunk, self.body = self.body[:size], self.body[size:]
            return chunk

    body, digest = download.read_with_progress(Opened(b"a" * 2500), NAME)
    assert body == b"a" * 2500 and digest == hashlib.md5(body).hexdigest()
    assert bars[0].recorded_total is None and bars[0].updates == [1000, 1000, 500]
