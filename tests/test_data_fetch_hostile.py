"""`ortholab data fetch` and `download.fetch` against hostile input (issue 47): mirrors that send too much, drip,
end short or are no URL at all; a data root that cannot be written; a full disk; files left by a broken fetch; and
file names that would lead out of the data root. Each case is one line (exit code 2 on the command line)."""

import errno
import hashlib
import http.server
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from test_data_fetch import PAYLOAD, Served, leftovers, ortholab, own_data_root, server  # noqa: F401 - fixtures

from ortholab.datamodules import catalog, download
from ortholab.datamodules.catalog import CATALOG, DataFile, DataSet
from ortholab.datamodules.download import fetch
from ortholab.errors import ConfigError

BLOB = DataSet(
    "blob",
    "a test blob",
    "blobs",
    "none",
    "",
    (DataFile("blob.bin", hashlib.sha256(PAYLOAD).hexdigest(), len(PAYLOAD), ()),),
)
PORTAL = b"<html><body>Please log in to use this network.</body></html>\n"  # what a captive portal answers


class Hostile:
    """What one local server did: the Range header of each request and the body bytes it sent."""

    def __init__(self, respond):
        self.respond, self.ranges, self.sent, self.stop = respond, [], 0, threading.Event()


@pytest.fixture
def hostile():
    """start(respond) -> (Hostile, mirror URL): a local HTTP/1.0 server answering every GET with respond(handler)."""
    started = []

    def start(respond) -> tuple[Hostile, str]:
        state = Hostile(respond)

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):  # http.server's name
                state.ranges.append(self.headers.get("Range"))
                try:
                    respond(self, state)
                except (BrokenPipeError, ConnectionResetError):  # the client stopped reading: what it should do
                    pass

        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        started.append((httpd, state))
        return state, f"http://127.0.0.1:{httpd.server_address[1]}/"

    yield start
    for httpd, state in started:
        state.stop.set()
        httpd.shutdown()


def send(handler, state: Hostile, data: bytes) -> None:
    state.sent += len(data)
    handler.wfile.write(data)


def endless(handler, state: Hostile) -> None:
    """200 with no Content-Length, then bytes until the client hangs up (at most 64 MB)."""
    handler.send_response(200)
    handler.end_headers()
    while state.sent < 64 << 20 and not state.stop.is_set():
        send(handler, state, b"\xab" * 65536)


def dripping(handler, state: Hostile) -> None:
    """The right Content-Length, then one byte every 50 ms."""
    handler.send_response(200)
    handler.send_header("Content-Length", str(len(PAYLOAD)))
    handler.end_headers()
    for i in range(len(PAYLOAD)):
        if state.stop.wait(0.05):
            return
        send(handler, state, PAYLOAD[i : i + 1])


def portal(handler, state: Hostile) -> None:
    """A captive portal: a short HTML page, complete (Content-Length honoured), whatever was asked."""
    handler.send_response(200)
    handler.send_header("Content-Type", "text/html")
    handler.send_header("Content-Length", str(len(PORTAL)))
    handler.end_headers()
    send(handler, state, PORTAL)


def error_line(code: int, err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("ortholab: error:")]
    assert code == 2 and "Traceback" not in err and len(lines) == 1, err
    return lines[0]


def mirror_with(tmp_path: Path, dataset: DataSet, data: bytes) -> str:
    """A file:// mirror holding `data` as the first file of `dataset`."""
    path = tmp_path / "mirror" / dataset.folder / dataset.files[0].name
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    return (tmp_path / "mirror").as_uri()


# more than the file -----------------------------------------------------------------------------------------------
def test_a_mirror_sending_past_the_size_is_stopped_there_and_refused(hostile, own_data_root):
    state, url = hostile(endless)
    with pytest.raises(ConfigError) as err:
        fetch(BLOB, mirror=url)
    message = str(err.value)
    assert "\n" not in message and f"{url}blobs/blob.bin" in message and "blob.bin" in message
    assert f"sends more than the file's {len(PAYLOAD):,} bytes" in message and "SHA-256 checksum" in message
    assert state.sent < 32 << 20  # it stopped reading at the size (the rest is the sockets' buffers), not at 64 MB
    assert leftovers(own_data_root) == [] and not (own_data_root / "blobs" / "blob.bin").exists()


def test_a_longer_file_on_a_file_mirror_is_refused_without_reading_it(own_data_root, tmp_path):
    mirror = mirror_with(tmp_path, BLOB, PAYLOAD + b"x" * 100_000)  # the right bytes, then more
    with pytest.raises(ConfigError, match=f"{mirror}/blobs/blob.bin .*sends more than the file's 10,244 bytes"):
        fetch(BLOB, mirror=mirror)
    assert leftovers(own_data_root) == [] and not (own_data_root / "blobs" / "blob.bin").exists()


# a dripping source ------------------------------------------------------------------------------------------------
def test_a_dripping_mirror_is_stopped_by_the_minimum_rate_and_named(hostile, own_data_root, monkeypatch):
    monkeypatch.setattr(download, "MIN_RATE_BPS", 1000, raising=False)  # 20 bytes/s arrive: far below
    monkeypatch.setattr(download, "RATE_GRACE_S", 0.3, raising=False)
    state, url = hostile(dripping)
    outcome = []

    def run():
        try:
            fetch(BLOB, mirror=url)
        except ConfigError as err:
            outcome.append(str(err))

    fetching = threading.Thread(target=run, daemon=True)
    fetching.start()
    fetching.join(timeout=5)
    assert not fetching.is_alive(), "a source dripping one byte at a time kept the fetch alive"
    (message,) = outcome
    assert "\n" not in message and "too slow" in message and "minimum of 1,000 bytes/s" in message
    assert "after its first 0.3 s" in message and f"{url}blobs/blob.bin" in message and "again to resume" in message
    kept = (own_data_root / "blobs" / "blob.bin.part").read_bytes()  # what came is kept, as the message says
    assert 0 < len(kept) < len(PAYLOAD) and PAYLOAD.startswith(kept)


# a data root that cannot be written -------------------------------------------------------------------------------
def test_a_data_root_naming_a_file_is_one_line(tmp_path, monkeypatch, capsys):
    root = tmp_path / "not-a-folder"
    root.write_text("a file\n")
    monkeypatch.setenv(catalog.DATA_ENV, str(root))
    line = error_line(*ortholab(capsys, "data", "fetch", "jsb", "--mirror", tmp_path.as_uri())[::2])
    assert f"{root} is a file, not a folder" in line and f"set $ORTHOLAB_DATA (now {root})" in line
    assert root.read_text() == "a file\n"
    with pytest.raises(ConfigError, match="is a file, not a folder"):  # the library call too
        fetch("jsb", mirror=tmp_path.as_uri())


def test_a_read_only_data_root_is_one_line(own_data_root, tmp_path, monkeypatch, capsys):
    real_mkdir = Path.mkdir

    def read_only(self, *args, **kwargs):  # the data root's file system is mounted read-only
        if str(self).startswith(str(own_data_root)):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", read_only)
    line = error_line(*ortholab(capsys, "data", "fetch", "jsb", "--mirror", tmp_path.as_uri())[::2])
    assert f"cannot write the data into {own_data_root / 'poly_music'}" in line
    assert os.strerror(errno.EROFS) in line and "set $ORTHOLAB_DATA" in line and "writable folder" in line
    assert not own_data_root.exists()


# a full disk ------------------------------------------------------------------------------------------------------
class FillingDisk:
    """A file whose writes fail with ENOSPC once 3,000 bytes were written."""

    def __init__(self, handle):
        self.handle, self.written = handle, 0

    def write(self, data):
        if self.written + len(data) > 3000:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.written += len(data)
        return self.handle.write(data)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.handle.close()


def test_a_full_disk_says_so_and_deletes_the_partial_file(own_data_root, tmp_path, monkeypatch, capsys):
    real_open = open

    def filling_open(file, mode="r", *args, **kwargs):
        handle = real_open(file, mode, *args, **kwargs)
        return FillingDisk(handle) if str(file).endswith(".part") and mode in ("wb", "ab") else handle

    monkeypatch.setattr(download, "open", filling_open, raising=False)
    monkeypatch.setattr(download, "CHUNK_BYTES", 1000)
    jsb = CATALOG["jsb"]
    mirror = mirror_with(tmp_path, jsb, b"\x00" * jsb.files[0].size)
    line = error_line(*ortholab(capsys, "data", "fetch", "jsb", "--mirror", mirror)[::2])
    part = own_data_root / "poly_music" / "JSB_Chorales.mat.part"
    assert f"no space left on the device writing {part}" in line and "the partial file was deleted" in line
    assert "free space there" in line and "again to resume" not in line and "broke" not in line
    assert leftovers(own_data_root) == [] and not (own_data_root / "poly_music" / download.LOCK_NAME).exists()


# what a broken fetch left -----------------------------------------------------------------------------------------
def test_a_stale_part_of_full_size_and_a_stale_lock_are_not_trusted(server, own_data_root):
    served, dataset = server(Served(PAYLOAD))
    folder = own_data_root / "blobs"
    folder.mkdir(parents=True)
    (folder / "blob.bin.part").write_bytes(b"\x00" * len(PAYLOAD))  # the right size, other bytes
    (folder / download.LOCK_NAME).write_text("12345\n")  # left by a fetch that died
    fetch(dataset)  # verified, found wrong, received again from the start: no error blaming the server
    assert served.ranges == [None] and (folder / "blob.bin").read_bytes() == PAYLOAD
    assert leftovers(own_data_root) == [] and not (folder / download.LOCK_NAME).exists()


def test_a_lock_held_by_a_killed_fetch_does_not_block_and_its_part_is_resumed_and_verified(server, own_data_root):
    served, dataset = server(Served(PAYLOAD))
    folder = own_data_root / "blobs"
    folder.mkdir(parents=True)
    (folder / "blob.bin.part").write_bytes(PAYLOAD[:3000])
    holder = subprocess.Popen(  # another fetch holding the lock, then killed (SIGKILL: no clean-up)
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time\n"
            "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\nfcntl.flock(fd, fcntl.LOCK_EX)\n"
            "print('locked', flush=True)\ntime.sleep(60)",
            str(folder / download.LOCK_NAME),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "locked"
    holder.kill()
    holder.wait(timeout=10)
    holder.stdout.close()
    fetching = threading.Thread(target=fetch, args=(dataset,), daemon=True)
    fetching.start()
    fetching.join(timeout=10)
    assert not fetching.is_alive() and served.ranges == ["bytes=3000-"]
    assert (folder / "blob.bin").read_bytes() == PAYLOAD and leftovers(own_data_root) == []
    assert not (folder / download.LOCK_NAME).exists()


def test_a_lock_file_that_is_a_symlink_is_not_followed(server, own_data_root, tmp_path):
    served, dataset = server(Served(PAYLOAD))
    folder = own_data_root / "blobs"
    folder.mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere.txt"
    (folder / download.LOCK_NAME).symlink_to(elsewhere)
    fetch(dataset)
    assert (folder / "blob.bin").read_bytes() == PAYLOAD and not elsewhere.exists()


# a complete response shorter than the file ------------------------------------------------------------------------
def test_a_captive_portal_page_is_checked_and_refused_by_checksum(hostile, own_data_root):
    state, url = hostile(portal)
    with pytest.raises(ConfigError) as err:
        fetch(BLOB, mirror=url)
    message = str(err.value)
    assert "\n" not in message and f"{url}blobs/blob.bin" in message and "fail the SHA-256 checksum" in message
    assert hashlib.sha256(PORTAL).hexdigest() in message and "again to resume" not in message
    assert state.ranges == [None]  # one complete response, checked at once
    assert leftovers(own_data_root) == [] and not (own_data_root / "blobs" / "blob.bin").exists()


def test_a_short_copy_on_a_mirror_is_refused_by_checksum_through_the_cli(own_data_root, tmp_path, capsys):
    jsb = CATALOG["jsb"]
    mirror = mirror_with(tmp_path, jsb, b"MATLAB 5.0 MAT-file" + b"\x00" * 1000)  # a truncated copy
    for _ in range(2):  # the rerun says the same: nothing is kept to resume
        line = error_line(*ortholab(capsys, "data", "fetch", "jsb", "--mirror", mirror)[::2])
        assert f"{mirror}/poly_music/JSB_Chorales.mat" in line and "fail the SHA-256 checksum" in line
        assert "again to resume" not in line and leftovers(own_data_root) == []
        assert not (own_data_root / "poly_music" / "JSB_Chorales.mat").exists()


# names that leave the data root -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "folder,name",
    [
        ("blobs", "../../escaped.txt"),
        ("blobs", "/tmp/escaped.txt"),
        ("blobs", "..\\..\\escaped.txt"),
        ("../outside", "escaped.txt"),
    ],
)
def test_a_file_name_leaving_the_data_root_is_refused(folder, name, own_data_root, tmp_path):
    mirror = tmp_path / "m" / "n"
    (mirror / "blobs").mkdir(parents=True)
    (tmp_path / "m" / "escaped.txt").write_bytes(PAYLOAD)  # where mirror/blobs/../../escaped.txt leads
    crafted = DataSet(
        "crafted",
        "a crafted set",
        folder,
        "none",
        "",
        (DataFile(name, hashlib.sha256(PAYLOAD).hexdigest(), len(PAYLOAD), ()),),
    )
    with pytest.raises(ValueError, match=f"{'file name' if folder == 'blobs' else 'folder'} .*leaves the data root"):
        fetch(crafted, mirror=mirror.as_uri())
    assert not (tmp_path / "escaped.txt").exists() and not (tmp_path / "outside").exists()
    assert not own_data_root.exists()


# a mirror that is no URL ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("given", ["/path/to/data", "gopher://example.org/data", "http://"])
def test_a_mirror_that_is_not_a_url_says_so(given, own_data_root, capsys):
    line = error_line(*ortholab(capsys, "data", "fetch", "jsb", "--mirror", given)[::2])
    assert f"--mirror = {given!r} is not a file://, http:// or https:// URL" in line and "no network" not in line
    assert ("for a folder give file:///path/to/data" in line) == given.startswith("/")
    assert not own_data_root.exists()


def test_a_mirror_variable_that_is_not_a_url_is_named(own_data_root, monkeypatch):
    monkeypatch.setenv(catalog.MIRROR_ENV, "gopher://example.org/data")
    with pytest.raises(ConfigError, match=r"\$ORTHOLAB_DATA_MIRROR = 'gopher://example.org/data' is not a file://"):
        fetch("jsb")
    assert not own_data_root.exists()
