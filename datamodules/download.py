"""Fetching the data sets of the catalog (datamodules/catalog.py) into the data root: every file verified by its
SHA-256, written atomically, a broken transfer resumed, one progress bar per data set.

- Each file is received into `<name>.part` beside its final place and renamed only once its checksum is right;
  a file failing its checksum is deleted, so nothing half-written ever looks complete.
- A transfer that breaks is resumed where it stopped (HTTP Range, `bytes=N-`), a few times in a row; when the
  server ignores Range the file is received again from its start. A `.part` left by an interrupted fetch is
  resumed the same way by the next one.
- Sources: with a mirror (`--mirror` or $ORTHOLAB_DATA_MIRROR, a URL holding the data root's layout) only the
  mirror; otherwise each file's public URLs in order (gzip archives for MNIST and Fashion-MNIST, whose own
  SHA-256 is checked before they are decompressed).
- No source reachable: one line saying the machine seems to have no network and where to put the files by hand.
"""
from __future__ import annotations

import contextlib
import gzip
import hashlib
import http.client
import os
import shutil
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

from ortholab.datamodules.catalog import MIRROR_ENV, DataFile, DataSet, data_root, get
from ortholab.errors import ConfigError

CHUNK_BYTES = 1 << 16  # read, written and shown on the progress bar this many bytes at a time
RESUME_ATTEMPTS = 4  # a broken transfer is resumed this many times in a row before giving up
WORKERS = 8  # files received at once (FSDD has 3,000 small ones)
TIMEOUT_S = 30.0
LOCK_NAME = ".ortholab-fetch.lock"  # in the data set's folder while a fetch writes there
USER_AGENT = "ortholab-data-fetch"


class Unreachable(Exception):
    """No connection could be made to the source (no network, unknown host, refused)."""


class NotServed(Exception):
    """The source answered but does not serve the file (HTTP error, no such file at a file:// mirror)."""


class Broken(Exception):
    """The transfer started but could not be completed; the `.part` file keeps what was received."""


@dataclass(frozen=True)
class Source:
    url: str
    digest: str  # hex digest of the bytes the URL serves
    size: int | None  # bytes the URL serves, when known
    gunzip: bool = False  # the URL serves a gzip archive of the stored file
    algorithm: str = "sha256"


def digest_of(path: Path, algorithm: str = "sha256") -> str:
    digest = hashlib.new(algorithm)
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def md5_of(path: Path) -> str:
    return digest_of(path, "md5")


class SharedBar:
    """A tqdm bar that several threads advance (shown on a terminal only)."""

    def __init__(self, total: int, desc: str):
        self.lock = threading.Lock()
        self.bar = tqdm(total=total or None, desc=desc, unit="B", unit_scale=True, unit_divisor=1024, disable=None)

    def update(self, n: int) -> None:
        with self.lock:
            self.bar.update(n)

    def close(self) -> None:
        self.bar.close()


def _reason(err: BaseException) -> str:
    reason = getattr(err, "reason", None) or err
    return " ".join(str(reason).split()) or type(reason).__name__


def transfer(url: str, part: Path, bar: SharedBar, size: int | None = None, timeout: float = TIMEOUT_S) -> None:
    """Receive `url` into `part`, continuing from the bytes `part` already holds when the server honours Range.

    Raises Unreachable when no connection is made at all, Broken when the transfer cannot be completed (what was
    received stays in `part` for the next attempt to resume).
    """
    reason, received = "no attempt", 0
    for attempt in range(RESUME_ATTEMPTS):
        start = part.stat().st_size if part.exists() else 0
        if size is not None and start > size:  # not a prefix of this file: start again
            part.unlink()
            start = 0
        if size is not None and start == size:
            return  # complete already; the checksum decides
        headers = {"User-Agent": USER_AGENT, **({"Range": f"bytes={start}-"} if start else {})}
        try:
            request = urllib.request.Request(url, headers=headers)
            response = urllib.request.urlopen(request, timeout=timeout)  # noqa: S310 - http(s) and file:// only
        except urllib.error.HTTPError as err:
            if err.code == 416 and start:  # the range lies past the end: the partial file is not a prefix
                part.unlink()
                continue
            raise NotServed(f"{url}: HTTP {err.code} {err.reason}") from None
        except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as err:
            if isinstance(getattr(err, "reason", None), (FileNotFoundError, IsADirectoryError, NotADirectoryError)):
                raise NotServed(f"{url}: no such file") from None
            if attempt == 0:
                raise Unreachable(f"{url}: {_reason(err)}") from None
            reason = _reason(err)
            continue
        with response:
            resumed = start > 0 and getattr(response, "status", None) == 206
            if start and not resumed:  # the server ignores Range (or a file:// URL): receive it all again
                start = 0
            length = response.headers.get("Content-Length")
            expected = size if size is not None else (start + int(length) if length and length.isdigit() else None)
            received = start
            if resumed:
                bar.update(start)
            try:
                with open(part, "ab" if resumed else "wb") as out:
                    for chunk in iter(lambda: response.read(CHUNK_BYTES), b""):
                        out.write(chunk)
                        received += len(chunk)
                        bar.update(len(chunk))
            except (OSError, http.client.HTTPException) as err:
                bar.update(-received)  # what this attempt counted is counted again by the next
                reason = f"{_reason(err)} after {received:,} bytes"
                continue
            if expected is not None and received < expected:
                bar.update(-received)
                reason = f"the connection closed after {received:,} of {expected:,} bytes"
                continue
            return
    raise Broken(f"{url}: the transfer broke ({reason})")


def _sources(dataset: DataSet, file: DataFile, folder: Path, mirror: str | None) -> list[Source]:
    if mirror:  # a copy of the data root: the stored form at the same relative path
        url = mirror.rstrip("/") + "/" + urllib.parse.quote(f"{dataset.folder}/{file.name}")
        return [Source(url, file.sha256, file.size)]
    sources = []
    archive = folder / f"{file.name}.gz"
    if file.gzip_sha256 and archive.is_file():  # an archive fetched by an older OrthoLab: used if intact
        sources.append(Source(archive.resolve().as_uri(), file.gzip_sha256, file.gzip_size, gunzip=True))
    if file.gzip_sha256:
        sources += [Source(url, file.gzip_sha256, file.gzip_size, gunzip=True) for url in file.urls]
    else:
        sources += [Source(url, file.sha256, file.size) for url in file.urls]
    return sources


def _checksum_line(name: str, source: Source, got: str, folder: Path) -> str:
    kind = {"sha256": "SHA-256", "md5": "MD5"}.get(source.algorithm, source.algorithm)
    return (f"{name}: the copy at {source.url} is damaged or another file (its bytes fail the {kind} checksum: got "
            f"{got}, expected {source.digest}); it was deleted and nothing was written to {folder}. Fetch again, or "
            f"from another mirror (--mirror URL or ${MIRROR_ENV})")


def fetch_file(name: str, target: Path, sources: Sequence[Source], bar: SharedBar, stored_sha256: str | None = None,
               timeout: float = TIMEOUT_S) -> Path:
    """`target`, received from the first source that serves it intact, then renamed into place.

    Raises Unreachable (no source could be reached), NotServed (no source serves it), Broken (a transfer could
    not be completed) or ConfigError (every copy received fails its checksum; nothing is left behind).
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    unreachable, absent, failed = [], [], []
    for source in sources:
        part = target.with_name(target.name + (".gz.part" if source.gunzip else ".part"))
        try:
            transfer(source.url, part, bar, source.size, timeout)
        except Unreachable as err:
            unreachable.append(str(err))
            continue
        except NotServed as err:
            absent.append(str(err))
            continue
        got = digest_of(part, source.algorithm)
        if got != source.digest:
            part.unlink()
            failed.append(_checksum_line(name, source, got, target.parent))
            continue
        if source.gunzip:
            stored = target.with_name(target.name + ".part")
            with gzip.open(part, "rb") as packed, open(stored, "wb") as out:
                shutil.copyfileobj(packed, out, CHUNK_BYTES)
            part.unlink()
            got = digest_of(stored)
            if stored_sha256 is not None and got != stored_sha256:
                stored.unlink()
                failed.append(_checksum_line(name, Source(source.url + " (decompressed)", stored_sha256, None), got,
                                             target.parent))
                continue
            part = stored
        os.replace(part, target)
        return target
    if failed:
        raise ConfigError(failed[0])
    if absent:
        raise NotServed("; ".join(absent + unreachable))
    raise Unreachable("; ".join(unreachable))


def _intact(path: Path, file: DataFile) -> bool:
    try:
        return path.stat().st_size == file.size and digest_of(path) == file.sha256
    except OSError:
        return False


def _by_hand(dataset: DataSet, folder: Path) -> str:
    return (f"copy the files by hand into {folder} (from {dataset.homepage}, or any copy with the same SHA-256: "
            f"`ortholab data list {dataset.name}` lists each file's checksum and URL), or set $ORTHOLAB_DATA to a "
            f"folder holding {dataset.folder}/, or ${MIRROR_ENV} to a copy of a data root")


def fetch(dataset: DataSet | str, root: Path | None = None, mirror: str | None = None, timeout: float = TIMEOUT_S,
          workers: int = WORKERS, folder: Path | None = None) -> Path:
    """Every file of `dataset` in its folder of the data root (or in `folder`), verified; files already there
    intact are kept. Returns the folder. Errors are ConfigErrors of one line."""
    dataset = get(dataset) if isinstance(dataset, str) else dataset
    mirror = mirror if mirror is not None else os.environ.get(MIRROR_ENV) or None
    folder = Path(folder) if folder is not None else dataset.path(root)
    if all(_intact(folder / f.name, f) for f in dataset.files):  # stops at the first file missing
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    with _exclusive(folder / LOCK_NAME):  # one fetch per folder at a time (e.g. the processes of a DDP run)
        return _fetch_into(dataset, folder, mirror, timeout, workers)


@contextlib.contextmanager
def _exclusive(path: Path):
    """An exclusive advisory lock on `path` (POSIX flock; nothing where fcntl is missing)."""
    try:
        import fcntl
    except ImportError:  # Windows: no lock
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _fetch_into(dataset: DataSet, folder: Path, mirror: str | None, timeout: float, workers: int) -> Path:
    todo = [f for f in dataset.files if not _intact(folder / f.name, f)]  # again: another process may have done it
    if not todo:
        return folder
    jobs = [(f, _sources(dataset, f, (folder / f.name).parent, mirror)) for f in todo]
    print(f"fetching {dataset.name} ({dataset.license}): {len(todo)} file(s), {sum(f.size for f in todo) / 1e6:.1f} MB "
          f"into {folder}{f' from {mirror}' if mirror else ''}", file=sys.stderr)
    bar = SharedBar(sum(sources[0].size or 0 for _, sources in jobs), f"fetch {dataset.name}")

    def one(job) -> Path:
        file, sources = job
        return fetch_file(file.name, folder / file.name, sources, bar, file.sha256, timeout)

    try:
        one(jobs[0])  # alone first: with no network, one attempt and one message
        if len(jobs) > 1:
            with ThreadPoolExecutor(min(workers, len(jobs) - 1)) as pool:
                done, pending = wait([pool.submit(one, job) for job in jobs[1:]], return_when=FIRST_EXCEPTION)
                for future in pending:
                    future.cancel()
                for future in done:
                    future.result()  # the first error, if any
    except Unreachable as err:
        raise ConfigError(f"cannot fetch {dataset.name}: no source could be reached ({err}), so this machine seems "
                          f"to have no network access; {_by_hand(dataset, folder)}") from None
    except NotServed as err:
        raise ConfigError(f"cannot fetch {dataset.name}: no source serves its files ({err}); "
                          f"{_by_hand(dataset, folder)}") from None
    except Broken as err:
        raise ConfigError(f"cannot fetch {dataset.name}: {err}; what was received is kept as .part files in "
                          f"{folder}: run `ortholab data fetch {dataset.name}` again to resume") from None
    finally:
        bar.close()
    return folder


def ensure(name: str, download: bool = False, key: str = "data.download") -> Path:
    """The folder of data set `name` in the data root, fetched first when it is missing and `download` is set."""
    dataset = get(name)
    folder = dataset.path()
    missing = dataset.missing()
    if not missing:
        return folder
    if download:
        return fetch(dataset)
    raise ConfigError(f"{dataset.name} is not in the data root: {folder} lacks {len(missing)} of its "
                      f"{len(dataset.files)} files (e.g. {missing[0].name}); fetch it with `ortholab data fetch "
                      f"{dataset.name}` or {key}: true, or set $ORTHOLAB_DATA to the folder holding "
                      f"{dataset.folder}/ (now {data_root()})")


# A list of files with MD5 checksums at base URLs (MNIST's published MD5s): the same verified, atomic transfer.
MNIST_MD5 = {
    "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
    "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
    "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
    "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c",
}
MNIST_MIRRORS = (
    "https://ossci-datasets.s3.amazonaws.com/mnist/",  # torchvision's
    "https://storage.googleapis.com/cvdf-datasets/mnist/",  # TensorFlow's
)


def download_verified(directory: Path, files: Mapping[str, str] = MNIST_MD5,
                      mirrors: Sequence[str] = MNIST_MIRRORS, timeout: float = TIMEOUT_S) -> list[Path]:
    """Each file of `files` (name -> MD5) into `directory`, from the first of `mirrors` that serves it intact;
    files already present with the right checksum are kept."""
    directory = Path(directory)
    paths = []
    for name, md5 in files.items():
        target = directory / name
        if not (target.is_file() and md5_of(target) == md5):
            sources = [Source(m.rstrip("/") + "/" + name, md5, None, algorithm="md5") for m in mirrors]
            bar = SharedBar(0, f"download {name}")
            try:
                fetch_file(name, target, sources, bar, timeout=timeout)
            except (Unreachable, NotServed) as err:
                raise ConfigError(f"cannot download {name} into {directory}: no mirror could be reached ({err}), "
                                  f"this machine seems to have no network access. Copy the files into {directory} "
                                  f"by hand and keep data.download: false, or use data.dataset: sklearn_digits, "
                                  f"which needs no download") from None
            except Broken as err:
                raise ConfigError(f"cannot download {name}: {err}; run again to resume") from None
            finally:
                bar.close()
        paths.append(target)
    return paths
