"""Fetching MNIST's four files from public mirrors, each verified against its published MD5 checksum, with a
progress bar per file on a terminal."""
from __future__ import annotations

import hashlib
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

from tqdm.auto import tqdm

from ortholab.models.base import ConfigError

# The checksums published with MNIST (also used by torchvision and TensorFlow's loaders).
MNIST_MD5 = {
    "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
    "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
    "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
    "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c",
}
MNIST_MIRRORS = (
    "https://ossci-datasets.s3.amazonaws.com/mnist/",  # torchvision's
    "https://storage.googleapis.com/cvdf-datasets/mnist/",  # TensorFlow's
    "http://yann.lecun.com/exdb/mnist/",  # the original site
)
CHUNK_BYTES = 1 << 16  # read and shown on the progress bar this many bytes at a time


def md5_of(path: Path) -> str:
    digest = hashlib.md5()  # noqa: S324 - the published checksums are MD5; integrity, not security
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download_verified(directory: Path, files: Mapping[str, str] = MNIST_MD5,
                      mirrors: Sequence[str] = MNIST_MIRRORS, timeout: float = 30.0) -> list[Path]:
    """Each file of `files` (name -> MD5) into `directory`, from the first mirror that serves it intact.

    Files already present with the right checksum are kept. A file is written under a temporary name and
    renamed once verified, so an interrupted download never leaves a file that looks complete.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, md5 in files.items():
        target = directory / name
        if not (target.is_file() and md5_of(target) == md5):
            _fetch_one(name, md5, target, mirrors, timeout)
        paths.append(target)
    return paths


def read_with_progress(response, name: str) -> tuple[bytes, str]:
    """The response's whole body and its MD5, read in chunks with a progress bar (shown on a terminal only)."""
    digest = hashlib.md5()  # noqa: S324
    chunks = []
    size = getattr(response, "headers", {}).get("Content-Length")  # absent: the bar counts bytes without a total
    with tqdm(total=int(size) if size and size.isdigit() else None, desc=f"download {name}", unit="B",
              unit_scale=True, unit_divisor=1024, disable=None) as progress:
        for chunk in iter(lambda: response.read(CHUNK_BYTES), b""):
            digest.update(chunk)
            chunks.append(chunk)
            progress.update(len(chunk))
    return b"".join(chunks), digest.hexdigest()


def _fetch_one(name: str, md5: str, target: Path, mirrors: Sequence[str], timeout: float) -> None:
    unreachable, corrupt = [], []
    for mirror in mirrors:
        url = mirror.rstrip("/") + "/" + name
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - http(s) mirrors only
                payload, payload_md5 = read_with_progress(response, name)
        except (urllib.error.URLError, OSError, ValueError) as err:
            unreachable.append(f"{url} ({getattr(err, 'reason', err)})")
            continue
        if payload_md5 != md5:
            corrupt.append(url)
            continue
        partial = target.with_name(target.name + ".part")
        partial.write_bytes(payload)
        partial.replace(target)
        return
    if corrupt:
        raise ConfigError(f"{name}: the copies at {', '.join(corrupt)} fail the MD5 checksum {md5}; nothing was "
                          f"written to {target.parent}. Fetch the file from another mirror (data.mirrors) or copy "
                          f"a verified copy there by hand")
    raise ConfigError(f"cannot download {name} into {target.parent}: no mirror could be reached, this machine seems to "
                      f"have no network access ({'; '.join(unreachable)}). Copy the four MNIST files into "
                      f"{target.parent} by hand (from a machine with network) and keep data.download: false, or use "
                      f"data.dataset: sklearn_digits, which needs no download")
