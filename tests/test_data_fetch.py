"""`ortholab data fetch/list` and `data.download: true`: every data set through a file:// mirror built from
../shared/data (correct and corrupted files), the no-network message, and resumed or restarted transfers."""

import gzip
import hashlib
import http.server
import json
import socket
import threading
from pathlib import Path

import pytest
from standins import SHARED_DATA

from ortholab.datamodules import catalog, download
from ortholab.datamodules.catalog import CATALOG, DataFile, DataSet
from ortholab.datamodules.download import fetch
from ortholab.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
DEBIAN_FASHION = Path("/usr/share/datasets/fashion-mnist")  # `apt-get install dataset-fashion-mnist` (gzipped)
needs_shared = pytest.mark.skipif(not SHARED_DATA.is_dir(), reason="needs ../shared/data (the project's machines)")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def leftovers(root: Path) -> list[Path]:
    """Temporary files a fetch must never leave behind after a checksum failure."""
    return [p for p in root.rglob("*") if p.name.endswith(".part")]


@pytest.fixture(autouse=True)
def own_data_root(tmp_path, monkeypatch):
    """Every test fetches into its own data root; no mirror unless the test sets one."""
    root = tmp_path / "data-root"
    monkeypatch.setenv(catalog.DATA_ENV, str(root))
    monkeypatch.delenv(catalog.MIRROR_ENV, raising=False)
    return root


@pytest.fixture(scope="module")
def mirror(tmp_path_factory) -> Path:
    """A copy of a data root: ../shared/data's folders linked, Fashion-MNIST decompressed from Debian's package."""
    if not SHARED_DATA.is_dir():
        pytest.skip("needs ../shared/data (the project's machines) to build the mirror")
    folder = tmp_path_factory.mktemp("mirror")
    for name in ("mnist", "fsdd", "poly_music"):
        if (SHARED_DATA / name).is_dir():
            (folder / name).symlink_to(SHARED_DATA / name)
    if DEBIAN_FASHION.is_dir():
        (folder / "fashion_mnist").mkdir()
        for packed in DEBIAN_FASHION.glob("*.gz"):
            (folder / "fashion_mnist" / packed.stem).write_bytes(gzip.decompress(packed.read_bytes()))
    return folder


def held_by(mirror: Path, dataset: DataSet) -> bool:
    return all((mirror / dataset.folder / f.name).is_file() for f in dataset.files)


def corrupted_copy(mirror: Path, dataset: DataSet, bad: DataFile, tmp_path: Path) -> Path:
    """A mirror serving `dataset` with one byte of `bad` flipped (every other file linked to the good mirror)."""
    copy = tmp_path / "corrupted-mirror"
    for file in dataset.files:
        path = copy / dataset.folder / file.name
        path.parent.mkdir(parents=True, exist_ok=True)
        if file is bad:
            data = bytearray((mirror / dataset.folder / file.name).read_bytes())
            data[len(data) // 2] ^= 0xFF
            path.write_bytes(bytes(data))
        else:
            path.symlink_to((mirror / dataset.folder / file.name).resolve())
    return copy


@pytest.mark.parametrize("name", list(CATALOG))
def test_every_data_set_through_a_file_mirror(name, mirror, own_data_root):
    dataset = CATALOG[name]
    if not held_by(mirror, dataset):
        pytest.skip(
            f"{name} is not in ../shared/data (nor Debian's datasets) to build a mirror from; its checksums "
            f"were taken from the canonical files"
        )
    assert not dataset.present()
    folder = fetch(name, mirror=mirror.as_uri())
    assert folder == own_data_root / dataset.folder and dataset.present()
    for file in dataset.files:  # the bytes of the canonical files, byte for byte
        assert sha256(folder / file.name) == file.sha256
    assert leftovers(own_data_root) == []


@pytest.mark.parametrize("name", list(CATALOG))
def test_a_corrupted_file_is_refused_in_one_line_and_nothing_is_left_half_written(
    name, mirror, own_data_root, tmp_path
):
    dataset = CATALOG[name]
    if not held_by(mirror, dataset):
        pytest.skip(f"{name} is not in ../shared/data to build a mirror from")
    bad = dataset.files[0]
    corrupted = corrupted_copy(mirror, dataset, bad, tmp_path)
    with pytest.raises(ConfigError) as err:
        fetch(dataset, mirror=corrupted.as_uri())
    message = str(err.value)
    assert "\n" not in message and "fail the SHA-256 checksum" in message and bad.name in message
    assert bad.sha256 in message and "nothing was written" in message
    assert not (own_data_root / dataset.folder / bad.name).exists() and leftovers(own_data_root) == []
    assert not dataset.present()


def test_a_corrupted_file_among_many_in_flight_leaves_no_part_behind(own_data_root, tmp_path):
    """Files received in parallel: the failing one stops the fetch; the others end renamed or not at all."""
    served = tmp_path / "served" / "many"
    served.mkdir(parents=True)
    files = []
    for i in range(40):
        (served / f"f{i}.bin").write_bytes(bytes([i]) * (5000 + i))
        files.append(DataFile(f"f{i}.bin", sha256(served / f"f{i}.bin"), 5000 + i, ()))
    (served / "f39.bin").write_bytes(b"\xff" * 5039)  # the last one, received while others are in flight
    with pytest.raises(ConfigError, match="f39.bin.*fail the SHA-256 checksum"):
        fetch(
            DataSet("many", "forty files", "many", "none", "", tuple(files)), mirror=served.parent.as_uri(), workers=4
        )
    assert leftovers(own_data_root) == [] and not (own_data_root / "many" / "f39.bin").exists()
    for kept in (own_data_root / "many").glob("*.bin"):  # whatever was renamed into place is intact
        assert sha256(kept) == next(f.sha256 for f in files if f.name == kept.name)


def test_a_fetch_waits_while_another_writes_the_same_folder(own_data_root, tmp_path):
    """The processes of a DDP run each build the task: one fetch writes, the next waits, then finds it intact."""
    served = tmp_path / "served" / "few"
    served.mkdir(parents=True)
    files = []
    for i in range(3):
        (served / f"f{i}.bin").write_bytes(bytes([i]) * 2000)
        files.append(DataFile(f"f{i}.bin", sha256(served / f"f{i}.bin"), 2000, ()))
    dataset = DataSet("few", "three files", "few", "none", "", tuple(files))
    (own_data_root / "few").mkdir(parents=True)
    waiting = threading.Thread(target=fetch, args=(dataset,), kwargs={"mirror": served.parent.as_uri()})
    with download._exclusive(own_data_root / "few" / download.LOCK_NAME):  # another fetch is writing there
        waiting.start()
        waiting.join(timeout=1.0)
        assert waiting.is_alive() and not any((own_data_root / "few").glob("*.bin*"))  # it waits, writes nothing
    waiting.join(timeout=60)
    assert not waiting.is_alive() and dataset.present() and leftovers(own_data_root) == []


def ortholab(capsys, *args: str) -> tuple[int, str, str]:
    """`ortholab ARGS` in this process: (exit code, stdout, stderr)."""
    from ortholab.cli.main import main

    try:
        main(list(args))
        code = 0
    except SystemExit as done:
        code = done.code
    out, err = capsys.readouterr()
    return code, out, err


@needs_shared
def test_the_cli_fetches_from_a_mirror_and_lists_what_is_present(mirror, own_data_root, monkeypatch, capsys):
    monkeypatch.setenv(catalog.MIRROR_ENV, mirror.as_uri())
    code, out, err = ortholab(capsys, "data", "fetch", "jsb")
    assert code == 0, err
    assert f"jsb: fetched and verified (0.1 MB) in {own_data_root / 'poly_music'}" in out
    code, out, _ = ortholab(capsys, "data", "list", "--json")
    rows = {row["name"]: row for row in json.loads(out)["datasets"]}
    assert rows["jsb"]["state"] == "present" and rows["nottingham"]["state"] == "missing"
    assert rows["fsdd"]["license"] == "CC BY-SA 4.0" and rows["fsdd"]["files"] == 3000
    assert rows["mnist"]["size"] == 47040016 + 60008 + 7840016 + 10008  # the four uncompressed IDX files
    assert rows["timit"]["state"] == "path only" and rows["ptb"]["state"] == "path only"
    _, table, _ = ortholab(capsys, "data", "list")
    assert f"data root: {own_data_root}" in table and "present" in table and "CC BY-SA 3.0" in table
    _, files, _ = ortholab(capsys, "data", "list", "jsb")  # checksums to check a copy made by hand
    assert f"{CATALOG['jsb'].files[0].sha256}  JSB_Chorales.mat" in files


@needs_shared
def test_a_corrupted_file_through_the_cli_exits_2_with_one_line(mirror, own_data_root, tmp_path, capsys):
    corrupted = corrupted_copy(mirror, CATALOG["jsb"], CATALOG["jsb"].files[0], tmp_path)
    code, _, err = ortholab(capsys, "data", "fetch", "jsb", "--mirror", corrupted.as_uri())
    errors = [line for line in err.splitlines() if line.startswith("ortholab: error:")]
    assert code == 2 and "Traceback" not in err and len(errors) == 1
    assert "JSB_Chorales.mat" in errors[0] and "SHA-256" in errors[0]
    assert leftovers(own_data_root) == [] and not (own_data_root / "poly_music" / "JSB_Chorales.mat").exists()


def closed_port() -> int:
    with socket.socket() as probe:  # bound then closed: nothing listens there afterwards
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_mistyped_data_set_names_the_nearest(own_data_root, capsys):
    code, _, err = ortholab(capsys, "data", "fetch", "mnst")
    assert code == 2 and "no data set 'mnst'; did you mean 'mnist'?" in err and leftovers(own_data_root) == []


def test_no_network_says_so_and_where_to_put_the_files(own_data_root, capsys):
    unreachable = f"http://127.0.0.1:{closed_port()}/"
    code, _, err = ortholab(capsys, "data", "fetch", "nottingham", "--mirror", unreachable)
    errors = [line for line in err.splitlines() if line.startswith("ortholab: error:")]
    assert code == 2 and "Traceback" not in err and len(errors) == 1
    line = errors[0]
    assert "no network" in line and str(own_data_root / "poly_music") in line and "by hand" in line
    assert "ortholab data list nottingham" in line and "refused" in line.lower()
    assert leftovers(own_data_root) == []
    assert not (own_data_root / "poly_music").exists()  # nothing received: no empty folder left (walk-through 3)


def test_the_public_locations_unreachable_name_them_all(own_data_root, monkeypatch):
    unreachable = f"http://127.0.0.1:{closed_port()}/"
    file = CATALOG["mnist"].files[1]
    moved = DataSet(
        "mnist",
        "MNIST",
        "mnist",
        "CC BY-SA 3.0",
        "http://yann.lecun.com/exdb/mnist/",
        (
            DataFile(
                file.name,
                file.sha256,
                file.size,
                (unreachable + "a.gz", unreachable + "b.gz"),
                file.gzip_sha256,
                file.gzip_size,
            ),
        ),
    )
    with pytest.raises(ConfigError) as err:
        fetch(moved)
    assert "a.gz" in str(err.value) and "b.gz" in str(err.value) and "no network" in str(err.value)


def test_a_missing_data_set_says_how_to_get_it(own_data_root):
    from ortholab.datamodules import PixelMNIST, PolyphonicMusic

    with pytest.raises(ConfigError) as err:
        PixelMNIST(dataset="mnist")
    assert "ortholab data fetch mnist" in str(err.value) and str(own_data_root / "mnist") in str(err.value)
    with pytest.raises(ConfigError, match="ortholab data fetch piano"):
        PolyphonicMusic(dataset="piano")


@needs_shared
def test_download_true_fetches_into_the_data_root_before_reading(mirror, own_data_root, monkeypatch):
    from ortholab.datamodules import PolyphonicMusic, SequenceGeneration

    monkeypatch.setenv(catalog.MIRROR_ENV, mirror.as_uri())
    music = PolyphonicMusic(dataset="nottingham", download=True)
    assert music.file == own_data_root / "poly_music" / "Nottingham.mat"
    assert (music.pieces("train"), music.pieces("val"), music.pieces("test")) == (694, 173, 170)
    monkeypatch.setenv(catalog.DATA_ENV, str(SHARED_DATA))  # FSDD is there already: nothing to fetch
    generation = SequenceGeneration(fsdd_recording="0_jackson_0.wav", download=True, sample_rate=8000, start=1300)
    assert generation.path == SHARED_DATA / "fsdd" / "recordings" / "0_jackson_0.wav"
    assert generation.excerpts.shape == (1, 320)


@needs_shared
def test_the_real_mnist_read_from_the_data_root(monkeypatch):
    from ortholab.datamodules import PixelMNIST

    monkeypatch.setenv(catalog.DATA_ENV, str(SHARED_DATA))
    task = PixelMNIST(dataset="mnist")
    assert task.path == SHARED_DATA / "mnist"
    assert (len(task.dataset("train")), len(task.dataset("val")), len(task.dataset("test"))) == (55_000, 5_000, 10_000)


def test_the_demos_name_data_sets_not_paths_beside_the_checkout():
    for config in (REPO / "configs" / "demo").glob("*.yaml"):
        assert "../shared" not in config.read_text(), config.name


# resumed and restarted transfers ---------------------------------------------------------------------
PAYLOAD = bytes(range(256)) * 40 + b"tail"  # 10,244 bytes


class Served:
    """What the local server does: honour Range or not, cut the first `breaks` responses after half the body."""

    def __init__(self, payload: bytes, honour_range: bool = True, breaks: int = 0):
        self.payload, self.honour_range, self.breaks = payload, honour_range, breaks
        self.ranges: list[str | None] = []  # the Range header of each request
        self.sent = 0  # body bytes sent in all


@pytest.fixture
def server():
    state = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):  # http.server's name
            served: Served = state["served"]
            asked = self.headers.get("Range")
            served.ranges.append(asked)
            start = int(asked.removeprefix("bytes=").rstrip("-")) if asked and served.honour_range else 0
            body = served.payload[start:]
            self.send_response(206 if start else 200)
            if start:
                self.send_header("Content-Range", f"bytes {start}-{len(served.payload) - 1}/{len(served.payload)}")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if served.breaks:  # half the body, then the connection drops
                served.breaks -= 1
                body = body[: len(body) // 2]
                self.close_connection = True
            served.sent += len(body)  # counted before it goes out: the client may finish before this thread resumes
            self.wfile.write(body)

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()

    def serve(served: Served) -> tuple[Served, DataSet]:
        state["served"] = served
        url = f"http://127.0.0.1:{httpd.server_address[1]}/blob.bin"
        digest = hashlib.sha256(served.payload).hexdigest()
        return served, DataSet(
            "blob", "a test blob", "blobs", "none", url, (DataFile("blob.bin", digest, len(served.payload), (url,)),)
        )

    yield serve
    httpd.shutdown()


def test_a_partial_file_is_resumed_with_a_range_request(server, own_data_root):
    served, dataset = server(Served(PAYLOAD))
    part = own_data_root / "blobs" / "blob.bin.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(PAYLOAD[:4000])  # what an interrupted fetch left
    fetch(dataset)
    assert served.ranges == ["bytes=4000-"] and served.sent == len(PAYLOAD) - 4000
    assert (own_data_root / "blobs" / "blob.bin").read_bytes() == PAYLOAD and not part.exists()


def test_a_server_ignoring_range_restarts_the_transfer(server, own_data_root):
    served, dataset = server(Served(PAYLOAD, honour_range=False))
    part = own_data_root / "blobs" / "blob.bin.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(PAYLOAD[:4000])
    fetch(dataset)
    assert served.ranges == ["bytes=4000-"] and served.sent == len(PAYLOAD)  # asked to resume, got it all
    assert (own_data_root / "blobs" / "blob.bin").read_bytes() == PAYLOAD


def test_a_transfer_that_breaks_is_resumed_in_the_same_fetch(server, own_data_root):
    served, dataset = server(Served(PAYLOAD, breaks=1))
    fetch(dataset)
    half = len(PAYLOAD) // 2
    assert served.ranges == [None, f"bytes={half}-"] and served.sent == len(PAYLOAD)
    assert (own_data_root / "blobs" / "blob.bin").read_bytes() == PAYLOAD


def test_a_transfer_that_keeps_breaking_keeps_what_came_for_the_next_fetch(server, own_data_root):
    served, dataset = server(Served(PAYLOAD, breaks=download.RESUME_ATTEMPTS))
    with pytest.raises(ConfigError) as err:
        fetch(dataset)
    assert "\n" not in str(err.value) and "ortholab data fetch blob` again to resume" in str(err.value)
    part = own_data_root / "blobs" / "blob.bin.part"
    kept = part.read_bytes()
    assert 0 < len(kept) < len(PAYLOAD) and PAYLOAD.startswith(kept)  # a prefix: what came, nothing invented
    assert not (own_data_root / "blobs" / "blob.bin").exists()
    fetch(dataset)  # the server works again: the next fetch resumes from the kept bytes
    assert served.ranges[-1] == f"bytes={len(kept)}-"
    assert (own_data_root / "blobs" / "blob.bin").read_bytes() == PAYLOAD and not part.exists()


def test_a_partial_file_of_other_bytes_fails_its_checksum_then_restarts(server, own_data_root):
    served, dataset = server(Served(PAYLOAD))
    part = own_data_root / "blobs" / "blob.bin.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(b"\x00" * 4000)  # not a prefix of the file: the resumed whole fails its checksum
    fetch(dataset)  # the earlier bytes are not trusted: received again from the start in the same fetch
    assert served.ranges == ["bytes=4000-", None] and leftovers(own_data_root) == []
    assert (own_data_root / "blobs" / "blob.bin").read_bytes() == PAYLOAD


def test_a_gzip_archive_is_checked_then_decompressed_and_checked_again(server, own_data_root):
    packed = gzip.compress(PAYLOAD, mtime=0)
    served, plain = server(Served(packed))
    stored = DataFile(
        "blob.bin",
        hashlib.sha256(PAYLOAD).hexdigest(),
        len(PAYLOAD),
        plain.files[0].urls,
        hashlib.sha256(packed).hexdigest(),
        len(packed),
    )
    fetch(DataSet("blob", "a gzipped blob", "blobs", "none", "", (stored,)))
    assert (own_data_root / "blobs" / "blob.bin").read_bytes() == PAYLOAD and leftovers(own_data_root) == []
    wrong = DataFile("other.bin", "0" * 64, len(PAYLOAD), stored.urls, stored.gzip_sha256, stored.gzip_size)
    with pytest.raises(ConfigError, match="decompressed.*fail the SHA-256 checksum"):  # the archive is right, its
        fetch(DataSet("blob", "a gzipped blob", "blobs", "none", "", (wrong,)))  # content is not the file
    assert not (own_data_root / "blobs" / "other.bin").exists() and leftovers(own_data_root) == []


# what is wrong with a file already there, and fetch all past a set the mirror lacks --------------------------
DEMOS = REPO / "configs" / "demo"


def fit_fails(capsys, tmp_path, config: str, *args: str) -> str:
    """`ortholab fit --config DEMOS/config ARGS` that must stop at its data: its one `ortholab: error:` line."""
    code, _, err = ortholab(
        capsys,
        "fit",
        "--config",
        str(DEMOS / config),
        "--db",
        f"sqlite:///{tmp_path / 'runs.db'}",
        "--runs_dir",
        str(tmp_path / "runs"),
        "--trainer.max_steps",
        "1",
        *args,
    )
    errors = [line for line in err.splitlines() if line.startswith("ortholab: error:")]
    assert code == 2 and "Traceback" not in err and len(errors) == 1, err
    return errors[0]


def test_a_damaged_file_is_reported_as_damaged_naming_its_size_not_as_missing(own_data_root, tmp_path, capsys):
    damaged = own_data_root / "poly_music" / "JSB_Chorales.mat"
    damaged.parent.mkdir(parents=True)
    damaged.write_bytes(b"\x00" * 5000)
    code, out, _ = ortholab(capsys, "data", "list", "--json")
    row = {row["name"]: row for row in json.loads(out)["datasets"]}["jsb"]
    assert code == 0 and row["state"] == "damaged (1 file)"
    assert f"{damaged} is damaged or another file: 5,000 bytes, expected 96,095 bytes" in row["problems"][0]
    _, table, _ = ortholab(capsys, "data", "list")
    assert "damaged (1 file)" in table and "5,000 bytes, expected 96,095 bytes" in table
    line = fit_fails(capsys, tmp_path, "music_jsb_lstm.yaml", "--data.download", "false")
    assert "not in the data root" not in line and "lacks" not in line
    assert str(damaged) in line and "5,000 bytes, expected 96,095 bytes" in line
    assert "ortholab data fetch jsb" in line and CATALOG["jsb"].files[0].urls[0] in line
    assert damaged.read_bytes() == b"\x00" * 5000  # nothing deleted


def test_a_file_of_the_right_size_failing_its_sha256_is_named_when_it_cannot_be_fetched(own_data_root, tmp_path):
    good = b"the right bytes " * 64
    unreachable = f"http://127.0.0.1:{closed_port()}/"
    file = DataFile("blob.bin", hashlib.sha256(good).hexdigest(), len(good), (unreachable + "blob.bin",))
    dataset = DataSet("blob", "a blob", "blobs", "none", "http://example.org/old-page", (file,))
    there = own_data_root / "blobs" / "blob.bin"
    there.parent.mkdir(parents=True)
    there.write_bytes(b"x" * len(good))  # the right size, other bytes
    assert dataset.present()  # sizes only: `data list` and the tasks never hash a file
    with pytest.raises(ConfigError) as err:
        fetch(dataset)
    message = str(err.value)
    assert "\n" not in message and "no network" in message
    assert f"{there} is damaged or another file: 1,024 bytes as expected but its SHA-256 is" in message
    assert hashlib.sha256(b"x" * len(good)).hexdigest() in message and file.sha256 in message
    assert there.read_bytes() == b"x" * len(good) and leftovers(own_data_root) == []  # kept as it was


def test_the_offline_message_points_at_each_files_own_url(own_data_root):
    unreachable = f"http://127.0.0.1:{closed_port()}/"
    with pytest.raises(ConfigError) as err:
        fetch("nottingham", mirror=unreachable)
    message = str(err.value)
    assert "Nottingham.mat from " + CATALOG["nottingham"].files[0].urls[0] in message
    assert CATALOG["nottingham"].homepage not in message  # its pickles never match the .mat's checksum
    with pytest.raises(ConfigError) as err:
        fetch("mnist", mirror=unreachable)
    first = CATALOG["mnist"].files[0]
    assert f"{first.name} from {first.urls[0]} (then gunzip it)" in str(err.value)


def test_mnist_copied_gzipped_says_gunzip_it(own_data_root, tmp_path, capsys):
    folder = own_data_root / "mnist"
    folder.mkdir(parents=True)
    for file in CATALOG["mnist"].files:  # as `data list mnist` links to them (only their sizes are looked at)
        (folder / f"{file.name}.gz").write_bytes(gzip.compress(b"\x00" * 100))
    code, out, _ = ortholab(capsys, "data", "list", "--json")
    row = {row["name"]: row for row in json.loads(out)["datasets"]}["mnist"]
    assert row["state"] == "gzipped (4 files)" and f"gunzip -k {folder}/*.gz" in row["problems"][0]
    line = fit_fails(
        capsys, tmp_path, "mnist_digits_scornn.yaml", "--data.dataset", "mnist", "--data.download", "false"
    )
    assert "gzipped" in line and f"gunzip -k {folder}/*.gz" in line and "train-images-idx3-ubyte.gz" in line
    assert "not in the data root" not in line


def fake_fsdd(root: Path) -> Path:
    """FSDD's 3,000 recordings as empty files of their sizes (sparse: nothing is read but the one asked for)."""
    folder = root / "fsdd"
    (folder / "recordings").mkdir(parents=True)
    for file in CATALOG["fsdd"].files:
        with open(folder / file.name, "wb") as out:
            out.truncate(file.size)
    return folder / "recordings"


def test_a_misspelt_fsdd_recording_names_the_key_the_naming_rule_and_the_nearest_name(own_data_root, tmp_path, capsys):
    from ortholab.datamodules import SequenceGeneration

    recordings = fake_fsdd(own_data_root)
    with pytest.raises(ConfigError) as err:
        SequenceGeneration(fsdd_recording="0_jackson_99.wav", sample_rate=8000)
    message = str(err.value)
    assert message.startswith("data.fsdd_recording = '0_jackson_99.wav': there is no such recording in ")
    assert str(recordings) in message and "{digit}_{speaker}_{index}.wav" in message and "index 0-49" in message
    assert "did you mean '0_jackson_9.wav'?" in message and "data.path" not in message
    line = fit_fails(capsys, tmp_path, "generation_fsdd_scornn.yaml", "--data.fsdd_recording", "0_jackson_99.wav")
    assert "data.fsdd_recording = '0_jackson_99.wav'" in line and "not an audio file" not in line


def test_fetch_all_goes_on_past_a_set_the_mirror_lacks_then_exits_2_naming_it(
    own_data_root, tmp_path, monkeypatch, capsys
):
    served = tmp_path / "served"
    sets = {}
    for name in ("first", "lacking", "last"):
        payload = name.encode() * 100
        if name != "lacking":
            (served / name).mkdir(parents=True)
            (served / name / "f.bin").write_bytes(payload)
        where = "recordings/f.bin" if name == "lacking" else "f.bin"  # FSDD's layout: a folder under the set's
        file = DataFile(where, hashlib.sha256(payload).hexdigest(), len(payload), ())
        sets[name] = DataSet(name, name, name, "none", "", (file,))
    monkeypatch.setattr(catalog, "CATALOG", sets)
    code, out, err = ortholab(capsys, "data", "fetch", "all", "--mirror", served.as_uri())
    errors = [line for line in err.splitlines() if line.startswith("ortholab: error:")]
    assert code == 2 and "Traceback" not in err and len(errors) == 1, err
    lines = out.splitlines()
    assert len(lines) == 3, out  # one line per set, the last one too
    assert lines[0].startswith("first: fetched and verified") and lines[2].startswith("last: fetched and verified")
    assert lines[1].startswith("lacking: not fetched: no source serves its files (")  # the set named once
    assert lines[1].count("lacking:") == 1 and "cannot fetch" not in lines[1], lines[1]
    assert errors[0] == (
        f"ortholab: error: could not fetch 1 of 3 data sets: lacking (not on the mirror {served.as_uri()}); the "
        f"other 2 are in place; the lines above say how to get each (`ortholab data list` shows what is there)"
    )
    assert sets["first"].present() and sets["last"].present() and not sets["lacking"].present()
    assert not (own_data_root / "lacking").exists()  # nothing received: no empty folders left, recordings/ either
