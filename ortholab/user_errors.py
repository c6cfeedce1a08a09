"""`user_error`: the user's error behind an exception (its one line is what the command line prints, exit code 2),
or None for a bug (its traceback is shown)."""

from __future__ import annotations

import re
import sys

from ortholab.errors import ConfigError, ReportedError
from ortholab.extras import explain_missing_module


def _loaded_class(module: str, name: str) -> type | None:
    """A class from a module already imported, else None: an error of a class never imported was never raised, and
    importing it (Lightning, the store) only to test for it would cost seconds."""
    return getattr(sys.modules.get(module), name, None)


def disk_full(err: BaseException) -> ConfigError | None:
    """A write that ran out of space (ENOSPC, EDQUOT) as one line naming the file and the fix."""
    import errno

    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
        where = f" writing {err.filename}" if err.filename else ""
        return ConfigError(
            f"no space left on the device{where} ({err.strerror}); the run stopped and what it recorded "
            f"is kept; free space or give --runs_dir on another disk, then continue with `ortholab fit "
            f"--resume RUN_ID`"
        )
    return None


def user_error(err: BaseException | None) -> BaseException | None:
    """The user-facing error behind `err` (jsonargparse wraps errors raised while instantiating)."""
    seen, cause = set(), err
    while cause is not None and id(cause) not in seen:  # an optional package missing: name its extra
        if (missing := explain_missing_module(cause)) is not None:
            return missing
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    misconfigured = _loaded_class("lightning.fabric.utilities.exceptions", "MisconfigurationException")
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, ReportedError):  # ConfigError, the store's errors, the NaN guard's stop
            return err
        if (full := disk_full(err)) is not None:
            return full
        if isinstance(err, RuntimeError) and re.search(r"can't allocate memory|out of memory", str(err), re.I):
            asked = re.search(r"allocate (\d+) bytes", str(err))
            size = f" ({int(asked.group(1)) / 2**30:.3g} GiB in one piece)" if asked else ""
            return ConfigError(
                f"not enough memory{size}: lower model.hidden_size (or model.num_layers, data.batch_size, data.seq_len)"
            )
        if misconfigured is not None and isinstance(err, misconfigured):  # Lightning's verdict on the trainer settings
            import torch

            message = " ".join(str(err).split())
            if not re.search(r"accelerator|device|gpu|cuda|mps|tpu|strategy", message, re.IGNORECASE):
                return ConfigError(f"{message} (a --trainer.* setting; `ortholab fit --help` lists them)")
            return ConfigError(
                f"{message} — check --trainer.accelerator and --trainer.devices "
                f"(this machine has {torch.cuda.device_count()} CUDA device(s); "
                f"`--trainer.accelerator cpu` runs anywhere)"
            )
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return None


PEER_LOST = re.compile(r"(reset|closed) by peer|remote process exited|communicator was aborted", re.IGNORECASE)


def crash_reason(err: BaseException, step: int, limit: int = 300) -> str:
    """What a run records when a bug (not the user's error) stopped it: the exception's type, the step and the first
    line of its message, so that `ortholab runs` says why without the console that showed the traceback."""
    first = next((line.strip() for line in str(err).splitlines() if line.strip()), "")
    first = first if len(first) <= limit else first[: limit - 1] + "…"
    said = f": {first}" if first else ""
    if PEER_LOST.search(first):  # gloo's and NCCL's words when another process of a DDP run died
        return f"another process of this run was lost at step {step} (its own output says why){said}"
    return f"{type(err).__name__} at step {step}{said} (a traceback: the console or log of the command shows it)"
