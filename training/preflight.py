"""Checks of a run's settings made before it is recorded: each refusal one line naming the setting and the fix, so
that a command refused here leaves no run, folder or store behind."""

from __future__ import annotations

import errno
import math
import os
import re
import shutil
from pathlib import Path

from ortholab.datamodules import TASKS, TaskSpec, task_class_path
from ortholab.db.logger import is_run_name
from ortholab.db.store import RUNS_ENV_VAR
from ortholab.errors import ConfigError
from ortholab.training.checkpoint_choice import ckpt_files_in
from ortholab.training.parse_errors import where_given


def positive_norm(value) -> bool:
    """Whether `value` is a gradient norm to clip to: a finite number above zero."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def check_manual_optimization(trainer: dict) -> None:
    """Lightning's gradient clipping and accumulation, which the module's own optimizer steps (one per parameter
    group) rule out: one line with what to use, before a run is recorded (Lightning's own error left a failed run)."""
    clip, accumulate = trainer.get("gradient_clip_val"), trainer.get("accumulate_grad_batches")
    if clip is not None:
        raise ConfigError(
            f"trainer.gradient_clip_val = {clip!r} is not available: the model steps each parameter group's optimizer "
            f"itself; clip the gradients' total norm with --model.grad_clip_norm "
            f"{clip if positive_norm(clip) else 'NORM (> 0)'} "
            f"instead"
        )
    if accumulate not in (None, 1):
        raise ConfigError(
            f"trainer.accumulate_grad_batches = {accumulate!r} is not available: the model steps each parameter "
            f"group's optimizer itself at every batch; a larger --data.batch_size is the way to average more sequences"
        )


def check_max_time(trainer: dict, argv: list[str] | None = None) -> None:
    """trainer.max_time as Lightning's Timer reads it (DD:HH:MM:SS, a mapping of timedelta's keywords, a timedelta),
    and above zero, before a run is recorded: Lightning's refusal named no key (`Timer(duration='5 minutes')`, or
    `'hourz' is an invalid keyword argument`), and a duration of 0 or less recorded a run finished at step 0."""
    value = trainer.get("max_time")
    if value is None:
        return
    import sys
    from datetime import timedelta

    from ortholab.training.parse_errors import where_given

    seconds = None
    try:
        if isinstance(value, str) and (held := re.fullmatch(r"(\d+):(\d\d):(\d\d):(\d\d)", value.strip())):
            days, hours, minutes, secs = map(int, held.groups())
            seconds = timedelta(days=days, hours=hours, minutes=minutes, seconds=secs).total_seconds()
        elif isinstance(value, dict):
            seconds = timedelta(**value).total_seconds()
        elif isinstance(value, timedelta):
            seconds = value.total_seconds()
    except (TypeError, ValueError, OverflowError):
        seconds = None
    if seconds is not None and seconds > 0:
        return
    where = where_given("trainer.max_time", sys.argv[1:] if argv is None else argv)
    said = "is no time to train" if seconds is not None else "is not a duration"
    raise ConfigError(
        f"trainer.max_time = {value!r}{f' ({where})' if where else ''} {said}: give DD:HH:MM:SS above zero "
        f"(00:01:30:00 for 90 minutes), a mapping such as {{hours: 1, minutes: 30}}, or null for no time limit"
    )


CHECKPOINT_OVERHEAD_BYTES = 256 * 1024  # a checkpoint's bytes beyond the tensors (loops, callbacks, hparams): ~10 KiB
# measured for a tiny scoRNN, with room for the analysis callbacks' state


def checkpoint_bytes(model) -> int:
    """A generous estimate of one checkpoint's size: the weights, up to two optimizer moments of each, overhead."""
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    return 3 * weights + CHECKPOINT_OVERHEAD_BYTES


def check_free_space(folder: str, model) -> None:
    """--runs_dir has room for the run's checkpoints (last, best and the temporary file an atomic write needs),
    else one line now rather than an OSError and a failed run later."""
    needed = 3 * checkpoint_bytes(model)
    nearest = nearest_folder(folder)
    usage = shutil.disk_usage(nearest)
    if usage.total == 0:  # /proc, /sys: the kernel's views, where no file can be written
        raise ConfigError(
            f"--runs_dir {folder}: {nearest} is a virtual filesystem that stores no files; give --runs_dir on a disk"
        )
    free = usage.free
    if free < needed:
        raise ConfigError(
            f"--runs_dir {folder}: {free / 2**20:.2f} MiB free, and this model's checkpoints (last, best "
            f"and a temporary copy) need about {needed / 2**20:.2f} MiB; free space there or give "
            f"--runs_dir on another disk"
        )


LIGHTNINGS_CHECKPOINT_NAMES = ("last", "best", "hpc", "registry")  # --ckpt_path values that name no file


def ckpt_path_said(path: object, argv: list[str] | None, typed: list[str] | None = None) -> str:
    """How the user gave the checkpoint `path`, for its refusal to open with: `--checkpoint NAME` where `predict|test|
    validate --run ID --checkpoint NAME` chose it (`typed`: the command line as the user wrote it, before it became
    --ckpt_path), `ckpt_path = PATH (in FILE)` where a --config file of `argv` gives it, else `--ckpt_path PATH`."""
    typed = [str(arg) for arg in typed or ()]
    flags = [arg.split("=", 1)[0] for arg in typed]
    if "--checkpoint" in flags and "--ckpt_path" not in flags:
        at = len(flags) - 1 - flags[::-1].index("--checkpoint")  # the last one stands
        value = typed[at].split("=", 1)[1] if "=" in typed[at] else typed[at + 1] if at + 1 < len(typed) else path
        return f"--checkpoint {value}"
    place = where_given("ckpt_path", list(argv or ()), str(path), exact=True)
    return f"ckpt_path = {path} ({place})" if place.startswith("in ") else f"--ckpt_path {path}"


def check_ckpt_path(path: str | None, subcommand: str | None = None, said: str | None = None) -> None:
    """--ckpt_path names a checkpoint file (or a URL): one line otherwise, before a run is recorded; `said`: how the
    user gave it (`ckpt_path_said`; default `--ckpt_path PATH`), which the line opens with.

    Lightning's own names ('last', 'best', 'hpc', 'registry') name the checkpoints of the Trainer that runs them; every
    command is a new run with a Trainer of its own, which holds none: `best` and `hpc` were Lightning's ValueError (a
    traceback and a failed run recorded), and `last` loaded nothing, so `fit` trained from scratch and `test` scored
    an untrained model, silently."""
    said = said or f"--ckpt_path {path}"
    if path in LIGHTNINGS_CHECKPOINT_NAMES:
        choice = "last" if path == "last" else "best"
        if subcommand == "fit":
            way = "`ortholab fit --resume RUN_ID` continues a recorded run from its own last.ckpt"
        else:
            way = f"`ortholab {subcommand or 'test'} --run RUN_ID --checkpoint {choice}` takes a recorded run's"
        raise ConfigError(
            f"{said} names no file: this command is a new run, with no checkpoint of its own to load; "
            f"give the checkpoint file (RUN_FOLDER/checkpoints/last.ckpt or best-step<k>.ckpt), or {way}"
        )
    if not path or "://" in str(path) or Path(path).is_file():
        return
    if Path(path).is_dir():
        found = ckpt_files_in(path)
        held = f"it holds {', '.join(found)}" if found else "it holds no .ckpt file"
        raise ConfigError(
            f"{said} is a folder ({held}); give the checkpoint file, e.g. RUN_FOLDER/checkpoints/last.ckpt"
        )
    here = ""  # Lightning reads a config file's relative path from the current folder, not from the file's
    if said.startswith("ckpt_path = ") and not Path(path).is_absolute():
        here = f" (looked for relative to the current folder, {Path.cwd()}, not the config file's)"
    raise ConfigError(
        f"{said}: no such file{here}; give a .ckpt file written by `ortholab fit` (a run's folder holds "
        f"checkpoints/last.ckpt; `ortholab fit --resume RUN_ID` finds it for you)"
    )


def task_spec_of(datamodule) -> dict:
    """The model's `task`: the datamodule's TaskSpec; a class that describes no task (a base class) is refused."""
    spec = getattr(datamodule, "spec", None)
    if spec is None:
        cls = type(datamodule)
        tasks = ", ".join(task_class_path(task) for task in TASKS.values())
        raise ConfigError(
            f"data.class_path = '{cls.__module__}.{cls.__qualname__}' is a base class, not a task (it "
            f"sets no TaskSpec); choose a task: {tasks} (`ortholab list tasks`)"
        )
    if not isinstance(spec, TaskSpec):
        raise ConfigError(
            f"{type(datamodule).__name__}.spec is a {type(spec).__name__}, not a TaskSpec: set self.spec = "
            f"TaskSpec(name=..., input_size=..., ...) in its __init__ (docs/tasks.md#a-task-of-your-own)"
        )
    return spec.to_dict()


def tag_list(tags) -> list[str]:
    """--tags as given: comma-separated labels (a,b) or a list; a text opening a list that did not parse is refused."""
    if not isinstance(tags, str):
        return list(tags or [])
    if tags.lstrip().startswith("["):
        raise ConfigError(f"tags = {tags!r}: expected a list such as '[a, b]', or comma-separated labels: --tags a,b")
    labels = [tag.strip() for tag in tags.split(",") if tag.strip()]
    if tags.strip() and not labels:  # `--tags ,,`: no label, silently
        raise ConfigError(f"--tags {tags!r} names no label; give comma-separated labels: --tags a,b")
    return labels


def check_run_name(name: str | None) -> None:
    """A run's name is a folder under --runs_dir: one path component (letters of any script), 100 at most."""
    if name is not None and not is_run_name(name):
        example = re.sub(r"[^\w.+-]+", "-", name).strip(".-_")[:100] or "my-run"
        raise ConfigError(
            f"--name {name!r}: a run name is one folder name under --runs_dir: letters and digits of any "
            f"script and punctuation, starting with a letter or digit, without spaces, control "
            f'characters or /\\<>:"|?*, at most 100 characters; e.g. --name {example}'
        )


def runs_folder_source(runs_dir: str | None) -> str:
    """How a command was given its runs folder, as its errors name it."""
    if runs_dir:
        return "--runs_dir"
    return f"${RUNS_ENV_VAR}" if os.environ.get(RUNS_ENV_VAR) else "the default runs folder"


def check_writable_folder(folder: str, given_as: str = "--runs_dir", fix: str | None = None) -> None:
    """The run folders' parent exists or can be made, and accepts files (checkpoints go there); a folder not there
    yet is judged by the nearest one that is, so that a command refused later leaves no empty folder behind.
    given_as: where the folder came from (--runs_dir, $ORTHOLAB_RUNS, the default ./runs), as the error names it;
    fix: what gives another folder (default: --runs_dir or $ORTHOLAB_RUNS)."""
    path = Path(folder).absolute()
    existing = next(p for p in (path, *path.parents) if p.exists())
    try:
        if not existing.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
        if existing != path and not os.access(existing, os.W_OK | os.X_OK):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
        if existing == path:
            probe = Path(folder, f".ortholab-write-check-{os.getpid()}")
            probe.write_bytes(b"")
            probe.unlink()
    except OSError as err:
        raise ConfigError(
            f"{given_as} {folder}: cannot write run folders there ({err.strerror}); give a writable "
            f"folder with {fix or f'--runs_dir or ${RUNS_ENV_VAR}'}"
        ) from None


def nearest_folder(folder: str) -> Path:
    """`folder`, or the nearest folder above it that exists (the runs folder is made by the run's first write)."""
    path = Path(folder).absolute()
    return next(p for p in (path, *path.parents) if p.is_dir())


def check_validation_interval(trainer, datamodule) -> None:
    """An int trainer.val_check_interval past an epoch's training batches: one line now, not Lightning's ValueError
    once training began (a traceback and a failed run)."""
    interval, every = trainer.val_check_interval, trainer.check_val_every_n_epoch
    if not isinstance(interval, int) or every is None or not trainer.limit_val_batches or trainer.world_size > 1:
        return  # several processes share the batches as Lightning's sampler splits them: Lightning's check says it
    try:
        batches = len(datamodule.train_dataloader())
    except Exception:  # a loader of unknown length, or a task of one's own that needs its trainer: Lightning checks
        return
    limit = trainer.limit_train_batches
    batches = min(batches, limit) if isinstance(limit, int) else int(batches * limit)
    if batches and interval > batches:  # no training batch at all: Lightning skips training and the check
        raise ConfigError(
            f"trainer.val_check_interval = {interval} is more than the {batches} training batch(es) of an epoch; "
            f"give --trainer.val_check_interval {max(batches, 1)} or less, or --trainer.check_val_every_n_epoch null "
            f"to count the interval across epochs"
        )
