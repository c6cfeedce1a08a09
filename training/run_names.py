"""A run's name where --name gives none: the config file's name, adjusted when the command line swaps the family or
the task (copying_scornn.yaml run with the LSTM is copying_lstm)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import yaml

from ortholab.datamodules import TASKS


def config_file_mappings(config) -> list[dict]:
    """The --config files as the mappings they hold, in order; a file the parser read already but that is no
    mapping here (or cannot be read again) is left out: there is nothing in it to compare."""
    mappings = []
    for path in [p for p in (config.get("config") or []) if p is not None]:
        with contextlib.suppress(OSError, yaml.YAMLError, UnicodeDecodeError):
            mapping = yaml.safe_load(Path(os.fspath(path)).read_text())
            if isinstance(mapping, dict):
                mappings.append(mapping)
    return mappings


def swapped_task(config) -> tuple[str, str | None] | None:
    """When data.class_path names another task than the --config files do: a one-line note naming the options of
    theirs that the task dropped, and the run's name after the task it runs (None with --name); None: no swap."""
    given, options = None, {}
    for mapping in config_file_mappings(config):
        data = mapping.get("data")
        if not isinstance(data, dict):
            continue
        if data.get("class_path") and data["class_path"] != given:
            given, options = data["class_path"], {}
        options.update({k: v for k, v in data.items() if k not in ("class_path", "init_args")})
        options.update(data.get("init_args") or {})
    chosen = str(config.data.get("class_path") or "") if config.get("data") else ""
    if given is None or not chosen or given.rsplit(".", 1)[-1] == chosen.rsplit(".", 1)[-1]:
        return None
    init_args = config.data.get("init_args")
    kept = set(init_args.keys()) if init_args is not None else set()
    dropped = [key for key in options if key not in kept]
    cls_name = chosen.rsplit(".", 1)[-1]
    name = None if config.name else task_run_name(chosen, config.model.get("family"))
    carried = [f"{key}: {init_args[key]}" for key in options if key not in dropped]  # as the run takes them
    what = (
        f"its options {', '.join(dropped)} do not apply to {cls_name} and were dropped"
        if dropped
        else f"all of its options apply to {cls_name}"
    ) + (f"; kept: {', '.join(carried)}" if carried else "")  # e.g. copying's val_size: 500 for MNIST, seq_len: 100
    named = f"; the run is named {name} (--name sets another)" if name else ""
    return f"note: data.class_path {chosen} replaces the config's {given}: {what}{named}", name


def task_run_name(class_path: str, family: str) -> str:
    """A run's name after its task and family where no config file names it: `mnist_scornn`."""
    cls_name = str(class_path).rsplit(".", 1)[-1]
    task = next((name for name, cls in TASKS.items() if cls.__name__ == cls_name), cls_name.lower())
    return f"{task}_{family}"


def name_for_family(name: str | None, config, family: str) -> str:
    """A config file's name for a run of `family`: a run of the LSTM from copying_scornn.yaml is copying_lstm (the
    config's family replaced where the name holds it, else appended), not named after a family it does not run.
    No config file: the task and the family (`--data mnist --model.family scornn`: mnist_scornn)."""
    if not name:
        chosen = config.data.get("class_path") if config.get("data") else None
        return task_run_name(chosen, family) if chosen else family
    given = None
    for mapping in config_file_mappings(config):  # the last file's model.family stands
        model = mapping.get("model")
        given = (model.get("family") if isinstance(model, dict) else None) or given
    if not isinstance(given, str) or given.lower() == family.lower():
        return name
    parts = name.split("_")
    renamed = [family if part.lower() == given.lower() else part for part in parts]
    return "_".join(renamed) if renamed != parts else f"{name}_{family}"


UNNAMED_CONFIG = "unnamed-config.yaml"  # training/api.py writes a config dict there: it names no run


def name_from_config_files(paths) -> str | None:
    """The last config file's name; a run folder's own config.yaml (NAME/ID/config.yaml) gives its run's NAME."""
    paths = [p for p in (paths or []) if p is not None]
    if not paths:
        return None
    path = Path(str(paths[-1]))
    if path.name == UNNAMED_CONFIG:
        return None
    if path.name == "config.yaml" and path.parent.name.isdigit() and path.parent.parent.name:
        return path.parent.parent.name
    return path.stem
