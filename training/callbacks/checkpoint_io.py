"""Checkpoints written atomically in their own folder: a kill at any moment leaves the previous good checkpoint.

Lightning's own save writes into a temporary file of the system's temporary folder and moves it into place; with the
run folder on another filesystem the move becomes a copy that truncates the target first, so a kill during it
leaves a 0-byte or partial `last.ckpt` (and the temporary file behind). Here the temporary file lies beside the
target (`.<name>.<pid>.<random>.tmp`), is flushed and fsync'ed, then renamed over the target (atomic within one
filesystem), and the folder is fsync'ed so the rename survives a power cut. Temporary files of processes that died
mid-write are removed by the next save in that folder and by a resume.
"""

from __future__ import annotations

import os
import re
import tempfile
from contextlib import suppress
from pathlib import Path
from typing import Any

import torch
from fsspec.implementations.local import LocalFileSystem
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.fabric.utilities.cloud_io import get_filesystem
from lightning.fabric.utilities.types import _PATH

from ortholab.errors import ConfigError

TEMPORARY = re.compile(r"\.(?P<target>.+)\.(?P<pid>\d+)\.[A-Za-z0-9_]+\.tmp")


class CheckpointWriteError(ConfigError):
    """A checkpoint could not be written (a full disk, a read-only folder); the previous one is intact."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temporaries(folder: str | os.PathLike) -> list[Path]:
    """Delete the temporary checkpoint files in `folder` left by processes that no longer run; return them."""
    removed = []
    with suppress(OSError):
        for entry in os.scandir(folder):
            match = TEMPORARY.fullmatch(entry.name)
            if match and entry.is_file() and not _alive(int(match["pid"])):
                with suppress(FileNotFoundError):
                    os.unlink(entry.path)
                    removed.append(Path(entry.path))
    return removed


def _fsync_folder(folder: Path) -> None:
    """Make a rename in `folder` durable (where the platform lets a folder be opened)."""
    with suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _umask() -> int:
    """The process's umask (reading it means setting it: put straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_torch_save(obj: Any, path: str | os.PathLike) -> None:
    """torch.save(obj, path) such that `path` holds either its old content or all of the new, never a part."""
    path = Path(path)
    folder = path.parent
    folder.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(folder)
    fd, temporary = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp")
    try:
        os.chmod(temporary, 0o666 & ~_umask())  # mkstemp's 0600 would hide it from the dashboard's user on a volume
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    _fsync_folder(folder)


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's TorchCheckpointIO with atomic local writes (remote URLs keep Lightning's own path)."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: _PATH, storage_options: Any | None = None) -> None:
        if storage_options is not None or not isinstance(get_filesystem(path), LocalFileSystem):
            return super().save_checkpoint(checkpoint, path, storage_options)
        try:
            atomic_torch_save(checkpoint, path)
        except Exception as err:
            cause = _os_error(err)  # torch's zip writer reports a failed write as its own RuntimeError
            if cause is None:
                raise
            raise CheckpointWriteError(
                f"cannot write the checkpoint {path} ({cause.strerror or cause}); the previous checkpoint is kept; "
                f"free space or give a writable --runs_dir, then continue with `ortholab fit --resume RUN_ID`"
            ) from None


def _os_error(err: BaseException | None) -> OSError | None:
    """The OSError behind `err`, if any."""
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, OSError):
            return err
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return None
