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


def refuse_limits_the_checkpoint_reached(checkpoint: object, trainer: object, said: str) -> None:
    """`fit --config F --ckpt_path C` (a new run from C) with trainer.max_steps at or below C's step, or max_epochs
    at or below the epochs C had ended (below those it had begun, from inside an epoch): Lightning would restore C,
    train no step and record the new run finished. ConfigError before the run is recorded; `fit --resume ID`, which
    may end a run at its checkpoint, has its own check (cli/train.py)."""
    from ortholab.training.callbacks.lifecycle import fit_loop_epochs

    step = checkpoint.get("global_step") if isinstance(checkpoint, dict) else None
    max_steps, max_epochs = getattr(trainer, "max_steps", None), getattr(trainer, "max_epochs", None)
    counts = "steps count on from the checkpoint's, not from 0"
    if _a_limit(max_steps) and isinstance(step, int) and max_steps <= step:
        raise ConfigError(
            f"{said}: the checkpoint is at step {step}, and trainer.max_steps = {max_steps} ends training there, so "
            f"the new run would train no step; give --trainer.max_steps above {step} ({counts})"
        )
    begun, ended = fit_loop_epochs(checkpoint)
    if not _a_limit(max_epochs) or begun is None or ended is None:
        return
    inside = begun > ended  # checkpointed inside its epoch `begun`, which a limit of `begun` lets it end
    if max_epochs < begun or (not inside and max_epochs <= ended):
        need, where = (begun, f"inside epoch {begun}") if inside else (ended + 1, f"after epoch {ended}")
        raise ConfigError(
            f"{said}: the checkpoint is at step {step}, {where} (counted from 1), and trainer.max_epochs = "
            f"{max_epochs} ends training there, "
            f"so the new run would train no step; give --trainer.max_epochs {need} or more (epochs count from the "
            f"checkpoint's too)"
        )


def _a_limit(value: object) -> bool:
    """A trainer limit that stops training (-1 and None are none)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
