"""The IDX file format of MNIST (LeCun et al.), gzipped or not, and the four files of an MNIST-style set.

An IDX file is: two zero bytes, a type byte (0x08 = uint8, ...), the number of dimensions, each dimension as
a big-endian uint32, then the values in C order. Fashion-MNIST, KMNIST and others ship the same four files.

Uncompressed files can be memory-mapped (`MappedIdx`): indexing reads only the rows asked for, so a set larger
than memory is streamed from disk. A gzipped file has no random access: it is decompressed into memory whole.
"""

from __future__ import annotations

import gzip
import math
import struct
import zlib
from pathlib import Path

import numpy as np

from ortholab.errors import ConfigError

IDX_TYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}

# The four files by role; each may be gzipped (.gz) and may use '.' instead of '-' before 'idx' (the names an
# unzip tool on some systems gives).
IDX_FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}

HOW_TO_OBTAIN = (
    "MNIST: set data.download: true (fetches the four files with checksums) or copy them from "
    "https://ossci-datasets.s3.amazonaws.com/mnist/; Fashion-MNIST on Debian: "
    "`apt-get install dataset-fashion-mnist` puts them in /usr/share/datasets/fashion-mnist"
)


def read_idx(path: Path) -> np.ndarray:
    """The array stored in one IDX file (native byte order). ConfigError naming the file when it is damaged."""
    path = Path(path)
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as stream:
                raw = stream.read()
        else:
            raw = path.read_bytes()
    except (OSError, EOFError, zlib.error) as err:  # a cut gzip stream raises EOFError
        raise ConfigError(
            f"{path} cannot be read ({err}); the file is damaged or incomplete: replace it. {HOW_TO_OBTAIN}"
        ) from err
    header, shape, dtype = parse_header(path, raw, len(raw))
    return np.frombuffer(raw, dtype, offset=header).reshape(shape).astype(dtype.newbyteorder("="))


def parse_header(path: Path, head: bytes, size: int) -> tuple[int, tuple[int, ...], np.dtype]:
    """(header length, shape, stored dtype) from a file's first bytes `head`, checked against its `size` in bytes."""
    if len(head) < 4 or head[0] != 0 or head[1] != 0 or head[2] not in IDX_TYPES:
        raise ConfigError(
            f"{path} is not an IDX file (its first bytes are not 00 00 <type> <ndim>); "
            f"give the original MNIST-format files. {HOW_TO_OBTAIN}"
        )
    ndim = head[3]
    header = 4 + 4 * ndim
    if len(head) < header:
        raise ConfigError(f"{path} is truncated inside its header; replace the file. {HOW_TO_OBTAIN}")
    shape = struct.unpack(f">{ndim}I", head[4:header])
    dtype = np.dtype(IDX_TYPES[head[2]])
    expected = header + math.prod(shape) * dtype.itemsize
    if size != expected:
        state = "truncated" if size < expected else "longer than its header says"
        raise ConfigError(
            f"{path} is {state}: {size:,} bytes, its header {shape} needs {expected:,}; "
            f"replace the file. {HOW_TO_OBTAIN}"
        )
    return header, shape, dtype


class MappedIdx:
    """An uncompressed IDX file's array, memory-mapped: `mapped[rows]` reads just those rows from disk.

    Checked like `read_idx` when opened. The map itself is opened on first use and not pickled, so a
    DataLoader worker reopens the file instead of receiving a copy of the whole array.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        try:
            with open(self.path, "rb") as stream:
                head = stream.read(4 + 4 * 255)
            size = self.path.stat().st_size
        except OSError as err:
            raise ConfigError(f"{self.path} cannot be read ({err}); replace it. {HOW_TO_OBTAIN}") from err
        self.offset, self.shape, self.stored_dtype = parse_header(self.path, head, size)
        self.dtype = self.stored_dtype.newbyteorder("=")
        self._map: np.memmap | None = None

    def __len__(self) -> int:
        return self.shape[0]

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, rows) -> np.ndarray:
        """A copy of the indexed rows in memory (native byte order); only their pages are read from disk."""
        if self._map is None:
            self._map = np.memmap(self.path, dtype=self.stored_dtype, mode="r", offset=self.offset, shape=self.shape)
        return np.array(self._map[rows], dtype=self.dtype)  # np.array copies: no tensor is left backed by the file

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_map": None}


def open_idx(path: Path, memory_map: bool = True) -> np.ndarray | MappedIdx:
    """The array of one IDX file: memory-mapped when it is uncompressed and `memory_map`, else read whole."""
    path = Path(path)
    return MappedIdx(path) if memory_map and path.suffix != ".gz" else read_idx(path)


def idx_shape(path: Path) -> tuple[int, ...]:
    """The shape in an IDX file's header, reading only the header."""
    path = Path(path)
    try:
        with gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb") as stream:
            head = stream.read(4)
            if len(head) < 4 or head[0] != 0 or head[1] != 0 or head[2] not in IDX_TYPES:
                raise ConfigError(
                    f"{path} is not an IDX file (its first bytes are not 00 00 <type> <ndim>); "
                    f"give the original MNIST-format files. {HOW_TO_OBTAIN}"
                )
            dims = stream.read(4 * head[3])
    except (OSError, EOFError, zlib.error) as err:
        raise ConfigError(f"{path} cannot be read ({err}); replace it. {HOW_TO_OBTAIN}") from err
    if len(dims) < 4 * head[3]:
        raise ConfigError(f"{path} is truncated inside its header; replace the file. {HOW_TO_OBTAIN}")
    return struct.unpack(f">{head[3]}I", dims)


def find_idx_files(directory: Path, key: str = "data.path") -> dict[str, Path]:
    """The four files of an MNIST-style set in `directory`, by role (see IDX_FILES)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ConfigError(
            f"{key} = {str(directory)!r} is not a directory; give the folder holding the four IDX "
            f"files ({', '.join(IDX_FILES.values())}, gzipped or not). {HOW_TO_OBTAIN}"
        )
    found, missing = {}, []
    for role, stem in IDX_FILES.items():
        dotted = stem.replace("-idx", ".idx")
        candidates = [directory / name for name in (stem, f"{stem}.gz", dotted, f"{dotted}.gz")]
        match = next((c for c in candidates if c.is_file()), None)
        if match is None:
            missing.append(f"{stem}[.gz]")
        else:
            found[role] = match
    if missing:
        raise ConfigError(f"{key} = {str(directory)!r} lacks {', '.join(missing)}. {HOW_TO_OBTAIN}")
    return found


def load_idx_set(directory: Path, key: str = "data.path", memory_map: bool = False) -> dict[str, np.ndarray]:
    """The four arrays of an MNIST-style set: images (N, H, W) and labels (N,) for train and test.

    memory_map: uncompressed image files become `MappedIdx` (rows read on demand); labels are always read whole.
    """
    arrays = {
        role: open_idx(path, memory_map and role.endswith("images"))
        for role, path in find_idx_files(directory, key).items()
    }
    for part in ("train", "test"):
        images, labels = arrays[f"{part}_images"], arrays[f"{part}_labels"]
        if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
            raise ConfigError(
                f"{directory}: the {part} files hold images {images.shape} and labels {labels.shape}; "
                f"expected (N, H, W) images and N labels. {HOW_TO_OBTAIN}"
            )
    return arrays
