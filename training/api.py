"""`ortholab fit` from Python: the same run, recorded in the same store, its id returned.

from ortholab.training.api import fit
run_id = fit("configs/demo/copying_scornn.yaml", {"model.hidden_size": 64, "trainer.max_steps": 200})
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml


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
