"""Whether a file is a Lightning checkpoint, told before Lightning reads it: Lightning's own load of a text file, a
config.yaml or a tensor saved by hand fails deep inside with `IndexError: pop from empty list`, a `KeyError` or an
`UnpicklingError` that names neither the file nor what it is."""

from __future__ import annotations

import os
import pickle
import zipfile
from pathlib import Path

from ortholab.errors import ConfigError

LIGHTNING_KEYS = ("state_dict", "pytorch-lightning_version")  # what every checkpoint Lightning writes holds
NOT_TORCH = "not a file torch.save writes"


def _written_by_torch(path: Path) -> bool:
    """torch.save's zip archive (a `.../data.pkl` in it) or its legacy pickle (opening with torch's magic number)."""
    import torch

    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            return any(name == "data.pkl" or name.endswith("/data.pkl") for name in archive.namelist())
    magic = pickle.dumps(torch.serialization.MAGIC_NUMBER, protocol=2)[:-1]  # without the pickle's STOP
    with open(path, "rb") as file:
        return file.read(len(magic)) == magic


def contents_problem(held: object) -> str | None:
    """Why what torch.load read is no Lightning checkpoint, in a few words; None when it is one."""
    if not isinstance(held, dict):
        return f"torch.save wrote a {type(held).__name__} there, not a checkpoint's mapping"
    missing = [key for key in LIGHTNING_KEYS if key not in held]
    return f"a torch file without {' or '.join(missing)}" if missing else None


def file_problem(path: str | os.PathLike) -> str | None:
    """Why the local file `path` is no Lightning checkpoint, in a few words; None when it is one, or when only a
    load that may run code could tell (a torch file holding other Python objects: Lightning's load says what).
    Tensors are not read (memory-mapped), so this costs little beside the load itself."""
    import torch

    path = Path(path)
    if path.stat().st_size == 0:
        return "an empty file"
    try:
        held = torch.load(path, map_location="cpu", weights_only=True, mmap=zipfile.is_zipfile(path))
    except pickle.UnpicklingError:  # refused objects, or no pickle at all (text, YAML, JSON)
        return None if _written_by_torch(path) else NOT_TORCH
    except Exception as err:  # a truncated archive, a text file read as a legacy pickle (KeyError, IndexError), ...
        if not _written_by_torch(path):
            return NOT_TORCH
        return f"torch.load cannot read it: {err.__class__.__name__}: {' '.join(str(err).split())[:120]}"
    return contents_problem(held)


def check_checkpoint_file(path: object, said: str | None = None) -> None:
    """ConfigError (a ValueError) naming `path` when it is a local file that is no Lightning checkpoint; `said`: how
    the user gave it (`--checkpoint PATH`, `ckpt_path = PATH (in FILE)`), for the command line's one line. A URL, a
    stream or a missing path is left to Lightning (a missing one: its FileNotFoundError)."""
    if not isinstance(path, (str, os.PathLike)) or "://" in os.fspath(path) or not Path(path).is_file():
        return
    if why := file_problem(path):
        where = f"{said}: not" if said else f"{os.fspath(path)!r} is not"
        raise ConfigError(
            f"{where} a Lightning checkpoint ({why}); give a .ckpt file that `ortholab fit` wrote (a run "
            f"folder's checkpoints/last.ckpt or best-step*.ckpt)"
        )
