"""Fetching the data sets of the catalog (datamodules/catalog.py) into the data root: every file verified by its
SHA-256, written atomically, a broken transfer resumed, one progress bar per data set.

- Each file is received into `<name>.part` beside its final place and renamed only once its checksum is right;
  a file failing its checksum is deleted, so nothing half-written ever looks complete.
- A transfer that breaks (an error, or fewer bytes than its Content-Length) is resumed where it stopped (HTTP Range,
  `bytes=N-`), a few times in a row; when the server ignores Range the file is received again from its start. A
  response that ends cleanly is complete and checked, however short. A `.part` left by an interrupted fetch is
  resumed the same way by the next one, and received again from the start if the whole then fails its checksum.
- Hostile sources: no more than a file's known size is read (a source sending more is refused at once), and a
  transfer slower than MIN_RATE_BPS on average after RATE_GRACE_S seconds stops (its `.part` kept).
- A full disk: the `.part` being written is deleted and the error says so.
- Sources: with a mirror (`--mirror` or $ORTHOLAB_DATA_MIRROR, a URL holding the data root's layout) only the
  mirror; otherwise each file's public URLs in order (gzip archives for MNIST and Fashion-MNIST, whose own
  SHA-256 is checked before they are decompressed).
- No source reachable: one line saying the machine seems to have no network and where to put the files by hand.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import hashlib
import http.client
import os
import shutil
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path, PureWindowsPath

from tqdm.auto import tqdm

from ortholab.datamodules.catalog import (
    DATA_ENV,
    MIRROR_ENV,
    DataFile,
    DataSet,
    Problem,
    data_root,
    get,
    gunzip_note,
    size_problem,
)
from ortholab.errors import ConfigError

CHUNK_BYTES = 1 << 16  # read, written and shown on the progress bar this many bytes at a time
RESUME_ATTEMPTS = 4  # a broken transfer is resumed this many times in a row before giving up
WORKERS = 8  # files received at once (FSDD has 3,000 small ones)
TIMEOUT_S = 30.0
MIN_RATE_BPS = 1024  # a file's transfer averaging fewer bytes a second than this (after RATE_GRACE_S) is stopped
RATE_GRACE_S = 60.0
SCHEMES = ("file", "http", "https")  # what a mirror URL may start with
LOCK_NAME = ".ortholab-fetch.lock"  # in the data set's folder while a fetch writes there
USER_AGENT = "ortholab-data-fetch"


class Unreachable(Exception):
    """No connection could be made to the source (no network, unknown host, refused)."""


class NotServed(Exception):
    """The source answered but does not serve the file (HTTP error, no such file at a file:// mirror)."""


class Broken(Exception):
    """The transfer started but could not be completed; the `.part` file keeps what was received."""


class TooLong(Exception):
    """The source sends more bytes than the file has: not this file (nothing past the file's size is read)."""


class FetchError(ConfigError):
    """A data set could not be fetched: the message says why and the fix; `reason` says why in a few words (the
    summary of `ortholab data fetch all`)."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


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


def _too_slow(url: str, counted: int, began: float) -> None:
    """Broken when the transfer of `url` averages less than MIN_RATE_BPS after RATE_GRACE_S (a dripping source)."""
    elapsed = time.monotonic() - began
    if elapsed > RATE_GRACE_S and counted < MIN_RATE_BPS * elapsed:
        raise Broken(
            f"{url}: too slow, {counted:,} bytes in {elapsed:.0f} s, below the minimum of {MIN_RATE_BPS:,} "
            f"bytes/s a fetch waits for after its first {RATE_GRACE_S:g} s; another mirror may be faster"
        )


def _disk_full(err: OSError, path: Path, done: str) -> ConfigError | None:
    """A write that ran out of space as one line naming the file, what was done with it and the fix; else None."""
    if err.errno not in (errno.ENOSPC, errno.EDQUOT):
        return None
    return FetchError(
        f"no space left on the device writing {path} ({err.strerror}); {done}; free space there, or "
        f"set ${DATA_ENV} to a folder on another disk, and fetch again",
        "no space left on the device",
    )


def transfer(url: str, part: Path, bar: SharedBar, size: int | None = None, timeout: float = TIMEOUT_S) -> None:
    """Receive `url` into `part`, continuing from the bytes `part` already holds when the server honours Range.

    Raises Unreachable when no connection is made at all, Broken when the transfer cannot be completed or is too
    slow (what was received stays in `part` for the next attempt to resume), TooLong when the source sends more than
    `size` bytes, ConfigError when the disk is full (`part` is deleted).
    """
    if part.is_symlink():  # never written through: a link left there may point anywhere
        part.unlink()
    reason, received, counted, began = "no attempt", 0, 0, time.monotonic()
    for attempt in range(RESUME_ATTEMPTS):
        _too_slow(url, counted, began)
        start = part.stat().st_size if part.exists() else 0
        if size is not None and start > size:  # not a prefix of this file: start again
            part.unlink()
            start = 0
        if size is not None and start == size:
            return  # complete already; the checksum decides
        headers = {"User-Agent": USER_AGENT, **({"Range": f"bytes={start}-"} if start else {})}
        try:
            request = urllib.request.Request(url, headers=headers)
            response = urllib.request.urlopen(request, timeout=timeout)  # http(s) and file:// only
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
            declared = start + int(length) if length and length.isdigit() else None  # where this response ends
            too_long = f"{url}: it sends more than the file's {size:,} bytes" if size is not None else ""
            if size is not None and declared is not None and declared > size:
                raise TooLong(too_long)
            received = start
            if resumed:
                bar.update(start)
            read = getattr(response, "read1", response.read)  # what has arrived: a dripping source is timed
            try:
                with open(part, "ab" if resumed else "wb") as out:
                    while chunk := read(CHUNK_BYTES if size is None else max(1, min(CHUNK_BYTES, size + 1 - received))):
                        if size is not None and received + len(chunk) > size:
                            raise TooLong(too_long)  # nothing past the file's size is read or written
                        out.write(chunk)
                        received += len(chunk)
                        counted += len(chunk)
                        bar.update(len(chunk))
                        _too_slow(url, counted, began)
            except (OSError, http.client.HTTPException) as err:
                if (
                    isinstance(err, OSError)
                    and (full := _disk_full(err, part, "the partial file was deleted to free the space")) is not None
                ):
                    part.unlink(missing_ok=True)
                    raise full from None
                bar.update(-received)  # what this attempt counted is counted again by the next
                reason = f"{_reason(err)} after {received:,} bytes"
                continue
            if declared is not None and received < declared:  # cut before its Content-Length: resumed
                bar.update(-received)
                reason = f"the connection closed after {received:,} of {declared:,} bytes"
                continue
            return  # ended cleanly: complete, however short; the checksum decides
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


def _checksum_line(name: str, source: Source, got: str | None, folder: Path) -> str:
    kind = {"sha256": "SHA-256", "md5": "MD5"}.get(source.algorithm, source.algorithm)
    why = (
        f"its bytes fail the {kind} checksum: got {got}, expected {source.digest}"
        if got is not None
        else f"it sends more than the file's {source.size:,} bytes, so they fail the {kind} checksum; no more was read"
    )
    return (
        f"{name}: the copy at {source.url} is damaged or another file ({why}); what was received was deleted and "
        f"nothing was written to {folder}. Fetch again, or from another mirror (--mirror URL or ${MIRROR_ENV})"
    )


def _unwritable(path: Path, err: OSError, fix: str) -> ConfigError:
    """One line for a folder that cannot be created or written: the path, why (a file in the way?) and `fix`."""
    blocker = next((p for p in (path, *path.parents) if os.path.lexists(p) and not os.path.isdir(p)), None)
    why = f"{blocker} is a file, not a folder" if blocker is not None else (err.strerror or _reason(err))
    return FetchError(f"cannot write the data into {path}: {why}; {fix}", f"cannot write into {path}: {why}")


def fetch_file(
    name: str,
    target: Path,
    sources: Sequence[Source],
    bar: SharedBar,
    stored_sha256: str | None = None,
    timeout: float = TIMEOUT_S,
) -> Path:
    """`target`, received from the first source that serves it intact, then renamed into place.

    Raises Unreachable (no source could be reached), NotServed (no source serves it), Broken (a transfer could
    not be completed) or ConfigError (every copy received fails its checksum; nothing is left behind).
    """
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise _unwritable(target.parent, err, "give a writable folder") from None
    unreachable, absent, failed = [], [], []
    for source in sources:
        part = target.with_name(target.name + (".gz.part" if source.gunzip else ".part"))
        earlier = part.stat().st_size if part.is_file() and not part.is_symlink() else 0  # left by an earlier fetch
        try:
            transfer(source.url, part, bar, source.size, timeout)
            got = digest_of(part, source.algorithm)
            if got != source.digest and earlier:  # the earlier bytes may be the wrong ones: once more from the start
                bar.update(-part.stat().st_size)
                part.unlink()
                transfer(source.url, part, bar, source.size, timeout)
                got = digest_of(part, source.algorithm)
        except Unreachable as err:
            unreachable.append(str(err))
            continue
        except NotServed as err:
            absent.append(str(err))
            continue
        except TooLong:
            part.unlink(missing_ok=True)
            failed.append(_checksum_line(name, source, None, target.parent))
            continue
        if got != source.digest:
            part.unlink()
            failed.append(_checksum_line(name, source, got, target.parent))
            continue
        if source.gunzip:
            stored = target.with_name(target.name + ".part")
            stored.unlink(missing_ok=True)  # whatever an earlier fetch left there (a link: never written through)
            try:
                with gzip.open(part, "rb") as packed, open(stored, "wb") as out:
                    shutil.copyfileobj(packed, out, CHUNK_BYTES)
            except OSError as err:
                if (
                    full := _disk_full(
                        err,
                        stored,
                        f"the partial file was deleted; the verified archive {part} is "
                        f"kept, so the next fetch only decompresses it",
                    )
                ) is None:
                    raise
                stored.unlink(missing_ok=True)
                raise full from None
            part.unlink()
            got = digest_of(stored)
            if stored_sha256 is not None and got != stored_sha256:
                stored.unlink()
                failed.append(
                    _checksum_line(
                        name, Source(source.url + " (decompressed)", stored_sha256, None), got, target.parent
                    )
                )
                continue
            part = stored
        os.replace(part, target)
        return target
    if failed:
        raise FetchError(failed[0], f"the source's copy of {name} fails its checksum")
    if absent:
        raise NotServed("; ".join(absent + unreachable))
    raise Unreachable("; ".join(unreachable))


def _check(folder: Path, file: DataFile) -> Problem | None:
    """What is wrong with `file` in `folder`, its SHA-256 computed when its size is right; None when intact."""
    problem = size_problem(folder, file)
    if problem is not None:
        return problem
    path = folder / file.name
    try:
        got = digest_of(path)
    except OSError:
        return Problem(file, path, "damaged")
    return None if got == file.sha256 else Problem(file, path, "damaged", file.size, got)


def _more(problems: Sequence[Problem]) -> str:
    return f" (and {len(problems) - 1} more file(s) like it)" if len(problems) > 1 else ""


def _whence(file: DataFile) -> str:
    """Where `file` is published: its first URL, and that it is served gzipped."""
    if not file.urls:
        return file.name
    return f"{file.name} from {file.urls[0]}{' (then gunzip it)' if file.gzip_sha256 else ''}"


def _by_hand(dataset: DataSet, folder: Path, problems: Sequence[Problem] = ()) -> str:
    """What is wrong with the files already there, and where to copy each file from by hand."""
    files = [p.file for p in problems] or list(dataset.files)
    damaged = [p for p in problems if p.kind == "damaged"]
    notes = f"{damaged[0].describe()}{_more(damaged)}; " if damaged else ""
    if gunzipped := gunzip_note(dataset, problems, fetch_hint=False):
        notes += f"{gunzipped}; "
    if len(files) <= 4:
        copy = f"copy {', '.join(_whence(f) for f in files)} by hand into {folder}"
    else:
        copy = f"copy its {len(files)} files by hand into {folder}, each from its own URL (e.g. {_whence(files[0])})"
    return (
        f"{notes}{copy}, or any copy with the same SHA-256 (`ortholab data list {dataset.name}` lists each file's "
        f"checksum and URL), or set ${DATA_ENV} to a folder holding {dataset.folder}/, or ${MIRROR_ENV} to a copy "
        f"of a data root"
    )


def check_mirror(url: str, key: str = "mirror") -> str:
    """`url` when it is a file://, http:// or https:// URL; else a ConfigError naming `key` (the flag or variable)."""
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme in SCHEMES and (scheme == "file" or parts.netloc):
        return url
    hint = f" (for a folder give {Path(url).expanduser().absolute().as_uri()})" if url and len(scheme) <= 1 else ""
    raise ConfigError(
        f"{key} = {url!r} is not a file://, http:// or https:// URL{hint}; give the URL of a copy of a "
        f"data root, e.g. file:///srv/ortholab-data or https://host/ortholab-data"
    )


def check_names(dataset: DataSet) -> None:
    """ValueError naming a folder or file name of `dataset` that would lead out of its folder in the data root."""
    for kind, name in (("folder", dataset.folder), *(("file name", f.name) for f in dataset.files)):
        path = PureWindowsPath(name)  # both separators, drives and roots, on every platform
        if not path.parts or path.anchor or ".." in path.parts:
            raise ValueError(
                f"data set {dataset.name!r}: {kind} {name!r} leaves the data root (or names no file); "
                f"give a relative path without '..'"
            )


def fetch(
    dataset: DataSet | str,
    root: Path | None = None,
    mirror: str | None = None,
    timeout: float = TIMEOUT_S,
    workers: int = WORKERS,
    folder: Path | None = None,
) -> Path:
    """Every file of `dataset` in its folder of the data root (or in `folder`), verified; files already there
    intact are kept. Returns the folder. Errors are ConfigErrors of one line (ValueError for a crafted `dataset`
    whose names leave its folder)."""
    dataset = get(dataset) if isinstance(dataset, str) else dataset
    check_names(dataset)
    if mirror:
        check_mirror(mirror)
    elif mirror is None and os.environ.get(MIRROR_ENV):
        mirror = check_mirror(os.environ[MIRROR_ENV], f"${MIRROR_ENV}")
    given = os.environ.get(DATA_ENV) if folder is None and root is None else None
    fix = (
        f"set ${DATA_ENV} (now {given}) to a writable folder, e.g. ~/ortholab-data"
        if given
        else f"set ${DATA_ENV} to a writable folder"
        if folder is None and root is None
        else "give a writable folder"
    )
    folder = Path(folder) if folder is not None else dataset.path(root)
    if not any(_check(folder, f) for f in dataset.files):  # stops at the first file missing or damaged
        return folder
    made = not folder.exists()
    try:
        with contextlib.ExitStack() as held:
            try:
                folder.mkdir(parents=True, exist_ok=True)
                held.enter_context(_exclusive(folder / LOCK_NAME))  # one fetch per folder at once (DDP's processes)
            except OSError as err:  # read-only, a file in the way, no permission, disk full
                raise _unwritable(folder, err, fix) from None
            return _fetch_into(dataset, folder, mirror, timeout, workers)
    except ConfigError:
        if made:  # nothing received (no network): no empty folder left to look like a data set
            _remove_empty_folders(folder)  # only empty ones: .part files of a broken transfer stay, to resume
        raise


def _remove_empty_folders(folder: Path) -> None:
    """`folder` and the folders under it (FSDD's recordings/), deepest first, where empty."""
    for path in sorted((p for p in folder.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        with contextlib.suppress(OSError):
            path.rmdir()
    with contextlib.suppress(OSError):
        folder.rmdir()


@contextlib.contextmanager
def _exclusive(path: Path):
    """An exclusive advisory lock on `path` (POSIX flock; nothing where fcntl is missing), deleted when released.

    A lock file left by a process that died holds no lock: it is taken over. A waiter whose file was deleted by
    the holder meanwhile opens the new one (so two never hold the lock at once); a symlink there is replaced."""
    try:
        import fcntl
    except ImportError:  # Windows: no lock
        yield
        return
    while True:
        try:
            handle = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
        except OSError as err:
            if err.errno != errno.ELOOP:
                raise
            path.unlink()  # a symlink: never followed
            continue
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            held = os.fstat(handle)
            now = os.stat(path, follow_symlinks=False)
            if (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino):
                break
        except FileNotFoundError:
            pass
        os.close(handle)  # the holder deleted this file while we waited: open the current one
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            path.unlink()  # while still held: a waiter then finds its file gone
        fcntl.flock(handle, fcntl.LOCK_UN)
        os.close(handle)


def _fetch_into(dataset: DataSet, folder: Path, mirror: str | None, timeout: float, workers: int) -> Path:
    problems = [p for p in (_check(folder, f) for f in dataset.files) if p]  # again: another process may have done it
    if not problems:
        return folder
    todo = [p.file for p in problems]
    damaged = [p for p in problems if p.kind == "damaged"]
    for problem in damaged[:3]:
        print(f"{dataset.name}: {problem.describe()}; fetching it again to replace it", file=sys.stderr)
    if len(damaged) > 3:
        print(f"{dataset.name}: and {len(damaged) - 3} more damaged file(s), fetched again", file=sys.stderr)
    jobs = [(f, _sources(dataset, f, (folder / f.name).parent, mirror)) for f in todo]
    print(
        f"fetching {dataset.name} ({dataset.license}): {len(todo)} file(s), {sum(f.size for f in todo) / 1e6:.1f} MB "
        f"into {folder}{f' from {mirror}' if mirror else ''}",
        file=sys.stderr,
    )
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
        raise FetchError(
            f"cannot fetch {dataset.name}: no source could be reached ({err}), so this machine seems "
            f"to have no network access; {_by_hand(dataset, folder, problems)}",
            f"no source could be reached{f' at {mirror}' if mirror else ''}",
        ) from None
    except NotServed as err:
        raise FetchError(
            f"cannot fetch {dataset.name}: no source serves its files ({err}); {_by_hand(dataset, folder, problems)}",
            f"not on the mirror {mirror}" if mirror else "not served at its public URLs",
        ) from None
    except Broken as err:
        raise FetchError(
            f"cannot fetch {dataset.name}: {err}; what was received is kept as .part files in "
            f"{folder}: run `ortholab data fetch {dataset.name}` again to resume",
            "the transfer broke (fetch it again to resume)",
        ) from None
    finally:
        bar.close()
    return folder


def ensure(name: str, download: bool = False, key: str = "data.download") -> Path:
    """The folder of data set `name` in the data root, fetched first when it is missing and `download` is set."""
    dataset = get(name)
    folder = dataset.path()
    problems = dataset.problems()  # sizes only: `fetch` checks the SHA-256 of every file
    if not problems:
        return folder
    if download:
        return fetch(dataset)
    damaged = [p for p in problems if p.kind == "damaged"]
    gzipped = [p for p in problems if p.kind == "gzipped"]
    if damaged:
        raise ConfigError(
            f"{dataset.name} cannot be read from the data root: {damaged[0].describe()}{_more(damaged)}; fetch it "
            f"again with `ortholab data fetch {dataset.name}` or {key}: true (the fetch replaces it), or copy "
            f"{_whence(damaged[0].file)} by hand (`ortholab data list {dataset.name}` lists each file's SHA-256)"
        )
    if gzipped:
        raise ConfigError(f"{dataset.name} cannot be read from the data root: {gunzip_note(dataset, gzipped)}")
    raise ConfigError(
        f"{dataset.name} is not in the data root: {folder} lacks {len(problems)} of its "
        f"{len(dataset.files)} files (e.g. {problems[0].file.name}); fetch it with `ortholab data fetch "
        f"{dataset.name}` or {key}: true, or set ${DATA_ENV} to the folder holding "
        f"{dataset.folder}/ (now {data_root()})"
    )
