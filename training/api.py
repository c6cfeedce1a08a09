"""`ortholab fit` from Python: the same run, recorded in the same store, its id returned; and a recorded run's
trained model with its task, rebuilt.

from ortholab.training.api import fit, load_run
run_id = fit("configs/demo/copying_scornn.yaml", {"model.hidden_size": 64, "trainer.max_steps": 200})
model, task = load_run(run_id)
"""

from __future__ import annotations

import contextlib
import numbers
import os
import signal
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from ortholab.datamodules import TaskDataModule
    from ortholab.training.module import RecurrentModule


def _flags(overrides: dict[str, Any] | list[str] | None) -> list[str]:
    """{'model.hidden_size': 64} -> ['--model.hidden_size', '64'] (values as YAML, as on the command line)."""
    if overrides is None:
        return []
    if isinstance(overrides, (list, tuple)):
        return [str(flag) for flag in overrides]
    if not isinstance(overrides, dict):
        raise TypeError(
            f"overrides must be a dict of dotted keys to values ({{'model.hidden_size': 64}}) or a list of "
            f"flags, got {overrides!r} ({type(overrides).__name__})"
        )
    flags = []
    for key, value in overrides.items():
        text = value if isinstance(value, str) else _yaml(value, f"overrides[{key!r}]", default_flow_style=True)
        flags += [f"--{key}", text.strip().removesuffix("\n...").strip()]
    return flags


def _yaml(value: Any, where: str, **options) -> str:
    """`value` as YAML; TypeError naming `where` when it holds something YAML cannot write (an object, a tensor)."""
    try:
        return yaml.safe_dump(value, **options)
    except yaml.representer.RepresenterError as error:
        bad = error.args[1] if len(error.args) > 1 else value
        raise TypeError(
            f"{where} holds {bad!r} ({type(bad).__name__}), which YAML cannot write; use str, int, "
            f"float, bool, None, and lists and dicts of them"
        ) from None


def fit(
    config: str | os.PathLike | dict,
    overrides: dict[str, Any] | list[str] | None = None,
    *,
    db: str | os.PathLike | None = None,
    name: str | None = None,
    runs_dir: str | os.PathLike | None = None,
) -> int:
    """Train as `ortholab fit --config CONFIG [overrides]` does, in this process; returns the run's id.

    config: a YAML file's path (an installed one as `ortholab list configs` shows it) or the config as a dict;
    overrides: dotted keys to values (or raw `--key value` flags); db, name, runs_dir: as the CLI's flags (paths may
    be os.PathLike). Bad input raises ConfigError;
    overrides that are not a dict or list, or a value YAML cannot write, and arguments of another type raise
    TypeError. Ctrl-C stops the run with its checkpoint (`interrupted`) and raises KeyboardInterrupt.
    """
    flags = _flags(overrides)  # before the imports: a mistake in them is reported at once
    if not isinstance(config, (str, os.PathLike, dict)):
        raise TypeError(f"config must be a YAML file's path or a dict, got {config!r} ({type(config).__name__})")
    places = {"db": db, "name": name, "runs_dir": runs_dir}
    for argument, value in places.items():
        kinds = (str,) if argument == "name" else (str, os.PathLike)
        if value is not None and not isinstance(value, kinds):
            what = "a str" if argument == "name" else "a str or a path"
            raise TypeError(f"{argument} must be {what}, got {value!r} ({type(value).__name__})")
    from ortholab import aliases
    from ortholab.errors import ConfigError
    from ortholab.training.config_files import packaged_configs
    from ortholab.training.console import quiet_third_party_noise
    from ortholab.training.lightning_cli import OrthoLabCLI, task_short_names
    from ortholab.training.mapping_flags import merge_deep_mapping_flags
    from ortholab.training.run_names import UNNAMED_CONFIG
    from ortholab.training.subnormals import flush_subnormals, subnormals_flushed

    aliases.install()  # the configs' short class paths (datamodules.CopyingTask), as the CLI's main() does
    quiet_third_party_noise()
    given = config
    with tempfile.TemporaryDirectory() as folder:
        if isinstance(config, dict):  # a file without a name of its own: the run is named as without one
            path = Path(folder) / UNNAMED_CONFIG
            path.write_text(_yaml(config, "config", sort_keys=False))
            config = path
        argv = packaged_configs(["fit", "--config", str(config)])
        for argument, value in places.items():
            if value is not None:
                argv += [f"--{argument}", os.fspath(value)]
        # as `ortholab fit` reads its flags: a task's listed name, one option of an optimizer group or family_args
        argv = merge_deep_mapping_flags(task_short_names(argv + flags))
        stderr = _Tail(sys.stderr)
        kept = not subnormals_flushed()  # the CPU's subnormal mode as the caller had it, given back after
        try:
            with contextlib.redirect_stderr(stderr):
                if kept and flush_subnormals():  # trained as the command trains (training/subnormals.py)
                    try:
                        cli = OrthoLabCLI(args=argv)
                    finally:
                        import torch

                        torch.set_flush_denormal(False)
                else:
                    cli = OrthoLabCLI(args=argv)
        except SystemExit as stop:  # the argument parser's error: raised here as the ConfigError it reports
            if stop.code in (0, None):
                raise
            if stop.code == 128 + signal.SIGINT:  # Ctrl-C: the run is `interrupted` with its checkpoint, as Python
                raise KeyboardInterrupt(stderr.last_line()) from None  # stops on one
            if isinstance(stop.code, int) and stop.code > 128:  # SIGTERM, SIGUSR1: the process was asked to stop
                raise
            message = stderr.last_line() or f"ortholab fit stopped with exit code {stop.code}"
            message = message.replace("on the command line", "in overrides")  # as fit() was given them
            if isinstance(given, dict):  # the dict, not the scratch file it was written to
                message = message.replace(str(config), "the config dict")
            raise ConfigError(message.removeprefix("ortholab: error: ")) from None
    return int(cli.trainer.loggers[0].version)


def load_run(
    run_id: int,
    *,
    db: str | os.PathLike | None = None,
    checkpoint: str | os.PathLike = "last",
    map_location: Any = "cpu",
) -> tuple[RecurrentModule, TaskDataModule]:
    """A recorded run's trained model and its task: `(RecurrentModule, LightningDataModule)`.

    The model is loaded from the run's checkpoint ('last', 'best': the best-step one it kept, a file name in its
    checkpoints folder, or a path), in the dtype it trained in (float64 for `trainer.precision: 64-true`), in eval
    mode, on `map_location` (any torch.load takes). The task is rebuilt from the run's stored config, whatever the
    task, as the command line resolves its class path (a task of your own: its module named by
    $ORTHOLAB_CONFIG_MODULES). The store is only read (db: a URL or a SQLite file's path; None: the default store).
    An argument of another type is a TypeError naming it; an unknown run id, a run without checkpoints or a
    checkpoint it does not hold is a ValueError, in one line saying what there is.
    """
    from ortholab import aliases
    from ortholab.datamodules import TaskDataModule
    from ortholab.db import Store
    from ortholab.db.store_errors import InvalidArgument, RunMissing
    from ortholab.errors import ConfigError
    from ortholab.training.checkpoint_choice import run_checkpoint
    from ortholab.training.module import RecurrentModule

    if isinstance(run_id, bool) or not isinstance(run_id, numbers.Integral):  # numpy's ints, as frames gives ids
        raise TypeError(f"run_id must be a run's id (int), got {run_id!r} ({type(run_id).__name__})")
    run_id = int(run_id)
    for argument, value in (("db", db), ("checkpoint", checkpoint)):
        if value is not None and not isinstance(value, (str, os.PathLike)):
            raise TypeError(f"{argument} must be a str or a path, got {value!r} ({type(value).__name__})")
    store = Store(None if db is None else os.fspath(db), access="read")  # a reader: never creates a store
    try:
        run = store.get_run(run_id)
    except RunMissing as error:  # a store that fails to answer stays the store's StoreError
        raise InvalidArgument(f"run_id: {error}") from None
    aliases.import_user_modules()  # as the CLI does: a family or task of the user's own is registered first
    data = (run.config or {}).get("data") or {}
    class_path = str(data.get("class_path", ""))
    task_class = aliases.config_class(class_path, f"run {run_id}'s data.class_path")
    if task_class is None or not issubclass(task_class, TaskDataModule):
        raise ConfigError(f"run {run_id}'s data.class_path = {class_path!r} names no task (a TaskDataModule)")
    path = run_checkpoint(run.id, run.run_dir, checkpoint)  # a ValueError naming checkpoint= and what there is
    model = RecurrentModule.load_from_checkpoint(path, map_location=map_location, weights_only=True)
    task = task_class(**(data.get("init_args") or {}))  # a recorded config's paths are absolute (RecordConfig)
    if model.spec.name != task.spec.name:
        raise ValueError(
            f"checkpoint={os.fspath(checkpoint)!r} was trained on task {model.spec.name!r}, run {run_id} on "
            f"{task.spec.name!r}; give one of run {run_id}'s checkpoints"
        )
    return model.eval(), task


class _Tail:
    """A stream that passes everything on and keeps the last few kilobytes (the parser's one-line error)."""

    def __init__(self, stream, keep: int = 4096):
        self.stream, self.keep, self.text = stream, keep, ""

    def write(self, text: str) -> int:
        self.text = (self.text + text)[-self.keep :]
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()

    def __getattr__(self, name):  # isatty, fileno, encoding: the wrapped stream's
        return getattr(self.stream, name)

    def last_line(self) -> str:
        lines = [line.strip() for line in self.text.splitlines() if line.strip()]
        return lines[-1] if lines else ""
