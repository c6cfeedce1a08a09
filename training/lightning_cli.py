"""Lightning's CLI for fit/validate/test/predict: the parser's one-line errors, the run's record in the SQL store.

Every run is recorded: the CLI puts a `db.SQLLogger` first among the trainer's loggers and stores the full resolved
config with the run. Imported only by the training commands (Lightning takes seconds to import); `ortholab runs`,
`list`, `db` and the other readers start from ortholab/cli/main.py without it.
"""

from __future__ import annotations

import contextlib
import copy
import difflib
import errno
import importlib
import logging
import math
import os
import re
import shutil
import signal
import sys
import warnings
from pathlib import Path

import yaml
from jsonargparse._actions import _ActionPrintConfig  # the one hook of --print_config
from lightning.fabric.plugins import CheckpointIO
from lightning.fabric.utilities.rank_zero import _get_rank, rank_prefixed_message
from lightning.pytorch.callbacks import ModelCheckpoint, ProgressBar
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback
from lightning.pytorch.utilities import rank_zero_only

from ortholab import aliases
from ortholab.datamodules import TASKS, TaskDataModule, TaskSpec, task_class_path
from ortholab.db import SQLLogger, Store, StoreError, runs_root
from ortholab.db.logger import folder_name, is_run_name, runs_folder_of
from ortholab.db.masking import known_passwords, mask_secrets, mask_url
from ortholab.db.store import StoreMissing, db_flag
from ortholab.errors import ConfigError
from ortholab.extras import check_logger_extras
from ortholab.training.callbacks import AudioEvaluation, NonFiniteError, default_callbacks
from ortholab.training.callbacks.checkpoint_io import AtomicCheckpointIO
from ortholab.training.callbacks.last_checkpoint import LastCheckpoint
from ortholab.training.callbacks.lifecycle import ContinueRun, GracefulInterrupt, NameTheRun, StampCheckpoints
from ortholab.training.cuda_graphs import check_graphs_config
from ortholab.training.family_options import check_family_switch, recorded_family_args
from ortholab.training.limits import check_model_limits, check_trainer_devices, check_trainer_strategy
from ortholab.training.model_summary import replace_lightnings_summary
from ortholab.training.module import RecurrentModule
from ortholab.training.precision import check_precision
from ortholab.training.progress import PlainProgress, StepBudgetProgressBar
from ortholab.training.task_check import check_task
from ortholab.user_errors import crash_reason, user_error


class RecordConfig(SaveConfigCallback):
    """Stores the resolved config with the run in the SQL store and as config.yaml in the run folder."""

    def save_config(self, trainer, pl_module, stage: str) -> None:
        config = yaml.safe_load(self.parser.dump(self.config, skip_none=False))
        if config.get("db"):  # never store a database password
            config["db"] = mask_url(config["db"])
        config.pop("resume", None)  # which record to continue, not the run's configuration: `test --config` of
        # the run folder's config.yaml must not record into the run it was trained as
        data_args = (config.get("data") or {}).get("init_args") or {}
        for key, value in data_args.items():  # data.path, data.train_file, data.cache_dir, ...: a path relative to
            # the folder the run started in is recorded absolute, so `fit --resume` and `reproduce --resume` read
            # this config from any folder
            is_path = key == "path" or key.endswith(("_file", "_dir"))
            if key == "cache_dir" and getattr(trainer.datamodule, "cache_dir", None) is not None:
                data_args[key] = str(trainer.datamodule.cache_dir)  # where place_cache put it (the runs folder)
            elif is_path and isinstance(value, str) and value[:1] not in ("", "~"):  # "~/..." and "" stay as given
                data_args[key] = str(Path(value).absolute())
        model = config.get("model") or {}
        if model.get("family"):  # every family option with the value it ran with, defaults included: a resume or a
            # side-by-side comparison does not depend on the defaults of the OrthoLab version that reads it
            model["family_args"] = recorded_family_args(model["family"], model.get("family_args"))
        for logger in trainer.loggers:
            if isinstance(logger, SQLLogger):
                logger.log_config(config)
                os.makedirs(logger.log_dir, exist_ok=True)
                Path(logger.log_dir, "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


class OrthoLabArgumentParser(LightningArgumentParser):
    """Parse errors as one line that names the key and, for a misspelt key, the nearest valid one."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)  # a prefix (--trainer.max_step) is a typo to name, not a key to guess
        super().__init__(*args, **kwargs)

    def dump(self, cfg=None, *args, **kwargs):
        """`--print_config` shows the chosen family's options and each group's optimizer resolved, defaults filled."""
        model = cfg.get("model") if cfg is not None and _ActionPrintConfig.is_print_config_requested(self) else None
        if model is not None and model.get("family"):
            from ortholab.training.family_options import with_resolved_options

            resolved = with_resolved_options(
                {
                    "family": model.family,
                    "hidden_size": model.get("hidden_size"),
                    "family_args": model.get("family_args"),
                    "optimizers": model.get("optimizers"),
                }
            )
            cfg = cfg.clone()
            cfg["model.family_args"], cfg["model.optimizers"] = resolved["family_args"], resolved["optimizers"]
        return super().dump(cfg, *args, **kwargs)

    def error(self, message: str, ex: Exception | None = None):
        if not self.exit_on_error:
            return super().error(message, ex)
        parser = getattr(ex, "subcommand_parser", None) or self
        argv = getattr(self, "given_args", None)
        line = explain_parse_error(message, parser, sys.argv[1:] if argv is None else argv)
        print(
            f"ortholab: error: {mask_secrets(line, known_passwords(sys.argv))}",
            file=sys.stderr,
        )
        self.exit(2)


def _known_keys(parser) -> list[str]:
    keys = []
    for action in parser._actions:
        keys += [o[2:] for o in action.option_strings if o.startswith("--")]
        for sub in getattr(action, "choices", None) or {}:  # subcommands: their own options
            if isinstance(action.choices, dict) and hasattr(action.choices[sub], "_actions"):
                keys += _known_keys(action.choices[sub])
    return keys


def _flat_values(tree, prefix: str = "") -> dict[str, object]:
    """A YAML mapping's values by dotted key, `init_args` levels left out (`data.init_args.seq_len` is
    `data.seq_len`)."""
    values = {}
    for name, value in tree.items() if isinstance(tree, dict) else ():
        dotted = prefix if name == "init_args" else f"{prefix}.{name}" if prefix else str(name)
        values[dotted] = value
        values.update(_flat_values(value, dotted))
    return values


def where_given(key: str, argv: list[str], value: str | None = None, unknown: str = "", exact: bool = False) -> str:
    """Where the user wrote `key` (with `value`, when given): 'on the command line' or 'in FILE', the last place
    in argv's order, whose value stands; `unknown` when no place holds it (with `exact`, none holds that value)."""
    key, places = key.replace(".init_args.", "."), []
    argv = [str(arg) for arg in argv]
    for i, arg in enumerate(argv):
        flag, eq, given = arg.partition("=")
        given = given if eq else argv[i + 1] if i + 1 < len(argv) else ""
        if flag in ("--config", "-c"):
            with contextlib.suppress(OSError, yaml.YAMLError, UnicodeDecodeError):
                held = _flat_values(yaml.safe_load(Path(given).read_text()))
                if key in held:
                    places.append((f"in {given}", str(held[key])))
        elif flag.startswith("--") and flag[2:].replace(".init_args.", ".") == key:
            places.append(("on the command line", given))
            with contextlib.suppress(yaml.YAMLError):  # -1.0e-3 as the code reads it, -0.001
                places.append(("on the command line", str(yaml.safe_load(given))))
        elif flag.startswith("--") and key.startswith(flag[2:] + "."):  # --model.family_args '{rho: 300}'
            with contextlib.suppress(yaml.YAMLError):
                held = _flat_values(yaml.safe_load(given), flag[2:])
                if key in held:
                    places.append(("on the command line", str(held[key])))
    matching = [place for place, held in places if value is None or _same_value(held, value)]
    return (matching or ([] if exact else [place for place, _ in places]) or [unknown])[-1]


def _same_value(held: str, value: str) -> bool:
    """'1e-3' (a string to YAML) and 0.001 as the code printed it are one value; other text compares as it is."""
    if held == value:
        return True
    try:
        return float(held) == float(value)
    except ValueError:
        return False


LISTS = ("trainer.callbacks", "trainer.plugins")  # built from several places (files, `--key+`): no one place to name


def with_place(message: str, argv: list[str]) -> str:
    """A refusal that opens with the key it is about (`model.optimizers.recurent: ...`, `model.family = 'x' is ...`)
    but not with where it was given: the place put after the key and a one-word value, as the parser's own say it."""
    opening = re.match(r"((?:model|data|trainer)\.[\w.]+)((?: = (?:'[^']*'|[^\s;:,]+))?)(?=[\s;:,]|$)", message)
    if opening is None or opening.group(1) in LISTS or re.search(r"\(in [^)]*\)|on the command line", message):
        return message
    key, value = opening.group(1), opening.group(2).removeprefix(" = ").strip("'\"") or None
    inner = any(str(arg).partition("=")[0].startswith(f"--{key}.") for arg in argv)  # --model.optimizers.G.lr
    where = where_given(key, argv, value, exact=True) or ("on the command line" if inner else "")
    return f"{opening.group(0)} ({where}){message[opening.end() :]}" if where else message


def _unknown_task_option(class_path: str, key: str, argv: list[str]) -> str:
    """`data.KEY` that the task `class_path` does not take: where it was given, the nearest option, all of them."""
    import importlib
    import inspect

    module, _, name = class_path.rpartition(".")
    task_init = getattr(importlib.import_module(module), name).__init__
    options = [p for p in inspect.signature(task_init).parameters if p != "self"]
    close = difflib.get_close_matches(key, options, n=1, cutoff=0.6)
    hint = f"did you mean data.{close[0]}? " if close else ""
    where = where_given(f"data.{key}", argv, unknown=ANYWHERE)
    unknown = f"unknown config key data.{key} ({where}): {class_path} has no option {key!r}"
    return f"{unknown}; {hint}its options are {options}"


def _listed_classes(key: str, argv: list[str]) -> list[tuple[str, str, dict]]:
    """The classes given to the list `key` (trainer.callbacks), in argv's order: (where, class path, its options
    given there); a `--key.OPTION` after a class belongs to that class, as jsonargparse reads it."""
    given: list[tuple[str, str, dict]] = []
    argv = [str(arg) for arg in argv]
    for i, arg in enumerate(argv):
        flag, eq, value = arg.partition("=")
        value = value if eq else argv[i + 1] if i + 1 < len(argv) else ""
        if flag in ("--config", "-c"):
            with contextlib.suppress(OSError, yaml.YAMLError, UnicodeDecodeError, AttributeError):
                tree = yaml.safe_load(Path(value).read_text())
                for item in _flat_values(tree).get(key) or []:
                    item = {"class_path": item} if isinstance(item, str) else item
                    if isinstance(item, dict) and "class_path" in item:
                        options = item.get("init_args") or {k: v for k, v in item.items() if k != "class_path"}
                        given.append((f"in {value}", str(item["class_path"]), dict(options)))
        elif flag in (f"--{key}", f"--{key}+"):
            given.append(("on the command line", value, {}))
        elif flag.startswith(f"--{key}.") and given:
            given[-1][2][flag.removeprefix(f"--{key}.").removeprefix("init_args.")] = value
    return given


def _unknown_class_option(key: str, class_path: str, option: str, argv: list[str]) -> str:
    """`trainer.callbacks`' class `class_path` given an option it does not take: where, the nearest, all of them."""
    import inspect

    module, _, name = class_path.rpartition(".")
    try:
        init = getattr(importlib.import_module(module), name).__init__
        options = [p for p in inspect.signature(init).parameters if p not in ("self", "args", "kwargs")]
    except (ImportError, AttributeError, ValueError, TypeError):
        options = []
    close = difflib.get_close_matches(option, options, n=1, cutoff=0.6)
    places = [where for where, path, given in _listed_classes(key, argv) if option in given]
    where = f" ({places[-1]})" if places else ""
    hint = f"did you mean {close[0]}? " if close else ""
    return f"{key}: {class_path} has no option {option!r}{where}; {hint}its options are {options}"


def _expected(message: str) -> str | None:
    """What jsonargparse's type error says a value must be, in a user's words: 'int', 'a mapping such as ...', 'one
    of 64, 32, 16, 16-mixed, ...' (a Literal's values); None when it names no type."""
    names = {"dict": "a mapping such as '{rho: 4}'", "list": "a list such as '[a, b]'", "bool": "true/false"}
    types = [names.get(t, t) for t in re.findall(r"Expected an? <class '(\w+)'>", message) if t != "NoneType"]
    values = [
        v.strip(" '")
        for group in re.findall(r"Expected an? typing\.Literal\[([^\]]*)\]", message)
        for v in group.split(",")
    ]
    if values:
        types.append("one of " + ", ".join(dict.fromkeys(values)))
    return " or ".join(dict.fromkeys(types)) or None


def _extra_module_of(missing: str) -> str | None:
    """The $ORTHOLAB_CONFIG_MODULES entry that the module Python could not find belongs to (None: not the user's)."""
    extra = aliases.allowed_config_imports()[len(aliases.CONFIG_IMPORTS_ALLOWED) :]
    return next((m for m in extra if m == missing or m.startswith(missing + ".")), None)


def _wrong_type(message: str, argv: list[str]) -> str | None:
    """A value of the wrong type as 'KEY = VALUE (where): expected TYPE (where it is described)'; a task's option
    is named as data.KEY with its own value, not as jsonargparse's whole `data` union. None: not a type error."""
    nested = re.search(  # a task's option of the wrong type: its own key and value, not the whole `data` union's
        r'Parser key "([^"]+)":.*?Problem with given class_path \'([\w.]+)\':\s*'
        r'Parser key "([^"]+)":\s*(.*?Got value: [^\n]*)',
        message,
        re.DOTALL,
    )
    wrong_type = re.search(r'Parser key "([^"]+)":', message)
    key = wrong_type.group(1) if wrong_type else None
    given = re.search(r"(?:Given|Got) value: (.*?)\s*$", message, re.DOTALL)
    example, described = _expected(message), "`ortholab fit --help` describes"
    if nested and _expected(nested.group(4)):
        key = f"{nested.group(1)}.{nested.group(3)}"
        example, given = _expected(nested.group(4)), re.search(r"Got value: (.*)$", nested.group(4))
        described = f"`ortholab fit --data.help {nested.group(2).rpartition('.')[2]}` describes"
    if key and example and given:
        value = " ".join(given.group(1).split())
        where = where_given(key, argv, value)
        return f"{key} = {value[:80]!r}{f' ({where})' if where else ''}: expected {example} ({described} {key})"
    return None


def _no_such_class(key: str, path: str, argv: list[str]) -> str:
    """'trainer.callbacks names 'lightning.pytorch.callbacks.EarlyStoping' (on the command line), which
    lightning.pytorch.callbacks does not hold; did you mean ...EarlyStopping?'"""
    module, _, name = path.rpartition(".")
    try:
        held = [n for n in vars(importlib.import_module(module)) if not n.startswith("_")]
    except ImportError:
        held = []
    close = difflib.get_close_matches(name, held, n=1)
    if key in LISTS:  # a list built from several places: the one that names this class
        where = next((w for w, given, _ in reversed(_listed_classes(key, argv)) if given == path), "")
    else:
        where = where_given(key, argv, path)
    hint = f"; did you mean {module}.{close[0]}?" if close else ""
    return f"{key} names {path!r}{f' ({where})' if where else ''}, which {module} does not hold{hint}"


def _config_meant(given: str) -> str:
    """'did you mean configs/demo/copying_scornn.yaml? ' for a mistyped config's name, else ''."""
    from ortholab.training.config_files import PACKAGE_ROOT

    by_name = {p.name: str(p.relative_to(PACKAGE_ROOT)) for p in sorted((PACKAGE_ROOT / "configs").rglob("*.yaml"))}
    close = difflib.get_close_matches(Path(given).name, by_name, n=1, cutoff=0.8)
    return f"did you mean {by_name[close[0]]}? " if close else ""


COMMAND_FLAGS = {"fit": ["resume"], "validate": [], "test": [], "predict": ["run", "checkpoint"]}  # cli/train.py's own


def explain_parse_error(message: str, parser, argv: list[str] = ()) -> str:
    """jsonargparse's message rewritten for a user: the unknown key (and where it was given) with a suggestion, a
    refused class path."""
    unknown = re.search(r"unrecognized arguments: --?(\S+)", message) or re.search(
        r"does not accept option '([^']+)'", message
    )
    if unknown:
        key = unknown.group(1).split("=")[0]
        command = next((a for a in argv if a in COMMAND_FLAGS), "fit")
        close = difflib.get_close_matches(key, _known_keys(parser) + COMMAND_FLAGS[command], n=1, cutoff=0.6)
        hint = (
            f"; did you mean {'--' if close and close[0] in COMMAND_FLAGS[command] else ''}{close[0]}?" if close else ""
        )
        return (
            f"unknown config key {key} ({where_given(key, argv, unknown=ANYWHERE)}){hint + ' ' if hint else '; '}"
            f"`ortholab {command} --help` lists every key"
        )
    stray = re.search(r"unrecognized arguments: ([^-\s]\S*)", message)
    if stray:  # `--tags a b`: a second value where a flag takes one
        return (
            f"unexpected value {stray.group(1)!r} on the command line: each --key takes one value (several tags: "
            f"--tags a,b; a value holding spaces goes in quotes)"
        )
    config_file = re.search(r'Parser key "config": (File does not exist|Path is not a file): \'(.*)\'', message)
    if config_file:
        why = "no such file" if config_file.group(1).startswith("File") else "not a file"
        return (
            f"--config {config_file.group(2)}: {why}; {_config_meant(config_file.group(2))}give a YAML config "
            f"(`ortholab list configs` shows the installed ones)"
        )
    task_option = re.search(r"class_path '([\w.]+)':\s*(?:Option|Key) '([^']+)' is not (?:accepted|expected)", message)
    listed = re.match(r'Parser key "([^"]+)"', message)  # before `denied`: jsonargparse also tries lightning.Callback
    if task_option and listed and listed.group(1) in LISTS:
        return _unknown_class_option(listed.group(1), task_option.group(1), task_option.group(2), argv)
    if task_option:
        return _unknown_task_option(task_option.group(1), task_option.group(2), argv)
    denied = re.search(r"Importing '([\w.]+)' is not allowed", message)
    if denied:
        key = re.search(r'Parser key "([^"]+)"', message)
        where = {"data": "data.class_path"}.get(key.group(1), key.group(1)) if key else "a config value"
        return (
            f"{where} names {denied.group(1)!r}, which a config may not "
            f"import: configs name only OrthoLab's tasks and callbacks and Lightning's callbacks, loggers and "
            f"profilers, never a function (`ortholab list tasks`; a package of your own: "
            f"${aliases.EXTRA_MODULES_VAR}=yourpackage)"
        )
    unimportable = re.search(r"No module named '([\w.]+)'", message)
    if unimportable and (extra := _extra_module_of(unimportable.group(1))):
        key = re.search(r'Parser key "([^"]+)"', message)
        return (
            f"{key.group(1) if key else 'a config value'} names a class of {extra!r} (allowed by "
            f"${aliases.EXTRA_MODULES_VAR}), which Python cannot import here ({unimportable.group(0)}): install its "
            f"package (`pip install -e .` in its folder) or add the folder holding it to PYTHONPATH"
        )
    missing = re.search(r"given class_path '([\w.]+)':\s*module '[\w.]+' has no attribute", message)
    key = re.match(r'Parser key "([^"]+)"', message)
    if missing and key and key.group(1) != "data":  # a callback's, a logger's, ...: not a task
        return _no_such_class(key.group(1), missing.group(1), argv)
    if missing:
        from ortholab.datamodules import TASKS

        close = difflib.get_close_matches(missing.group(1), [task_class_path(c) for c in TASKS.values()], 1)
        hint = f"did you mean {close[0]}? " if close else ""
        return (
            f"data.class_path = {missing.group(1)!r} is not a registered task; {hint}`ortholab list tasks` shows them"
        )
    undotted = re.search(r"Expected a dot import path string: (\S+)", message)
    helped = message.startswith("--data.help")  # `--data.help copyng`: a task name mistyped
    if undotted and ('Parser key "data"' in message or helped):  # a task's short name in a config file
        # (task_short_names maps it on the command line)
        from ortholab.datamodules import TASKS

        paths = {name: task_class_path(cls) for name, cls in TASKS.items()}
        close = difflib.get_close_matches(undotted.group(1), [*paths, *paths.values()], 1)
        hint = f"did you mean {close[0] if helped else paths.get(close[0], close[0])}? " if close else ""
        return (
            f"{'--data.help' if helped else 'data.class_path ='} {undotted.group(1)!r} is not a task's class path"
            f"{' or name' if helped else ''}; {hint}`ortholab list tasks` names the tasks and their classes"
        )
    refused = re.search(r"Import path (\S+) does not correspond to a subclass of (\w+)", message)
    if refused:
        from ortholab.datamodules import TASKS

        tasks = ", ".join(task_class_path(cls) for cls in TASKS.values())
        return (
            f"data.class_path = {refused.group(1)!r} is not an OrthoLab task; a config may only name a "
            f"registered task ({tasks}; `ortholab list tasks`)"
        )
    wrong = _wrong_type(message, argv)
    if wrong:
        return wrong
    if re.search(r"the following arguments are required: \w+\.data", message):  # `ortholab fit` with no config
        predicting = "predict" in argv  # its own form first: a recorded run's checkpoint and config
        return (
            NO_TASK.replace("given: name", "given: give a recorded run with --run ID, or name")
            if predicting
            else NO_TASK
        )
    return " ".join(message.split()) + " (see `ortholab fit --help`)"


SEED_LOGGER = "lightning.fabric.utilities.seed"  # Lightning's "Seed set to N"
ANYWHERE = "on the command line or in a --config file"
NO_TASK = (
    "no task given: name a config with --config FILE (configs/demo/copying_scornn.yaml, or one that "
    "`ortholab list configs` shows), or the task with --data CLASS (`ortholab list tasks`)"
)


def task_short_names(argv: list[str]) -> list[str]:
    """`--data.class_path mnist` or `--data.help mnist` (the name `ortholab list tasks` prints) as that task's class
    path."""
    out = list(argv)
    for i, arg in enumerate(argv):
        key, eq, value = arg.partition("=")
        if key not in ("--data.class_path", "--data", "--data.help"):
            continue
        if not eq and i + 1 < len(argv):
            value = argv[i + 1]
        if value in TASKS:
            path = task_class_path(TASKS[value])
            out[i if eq else i + 1] = f"{key}={path}" if eq else path
    return out


class OrthoLabCLI(LightningCLI):
    def __init__(self, args=None, run: bool = True):
        aliases.restrict_config_imports()  # class paths outside the allow-list are refused before any import
        super().__init__(
            RecurrentModule,
            TaskDataModule,
            subclass_mode_data=True,
            parser_class=OrthoLabArgumentParser,
            auto_configure_optimizers=False,  # the model owns its per-group optimizers
            save_config_callback=RecordConfig,
            save_config_kwargs={"save_to_log_dir": False},
            trainer_defaults={"logger": False},  # the SQL logger is added in instantiate_trainer
            seed_everything_default=5544,
            args=args,
            run=run,
        )

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_argument(
            "--db",
            type=str | None,
            default=None,
            help="the run store: a SQLite file's path or an SQLAlchemy URL (default: $ORTHOLAB_DB, else the SQLite "
            "file ortholab.db in $ORTHOLAB_RUNS, else in ./runs)",
        )
        parser.add_argument(
            "--name", type=str | None, default=None, help="run name in the store (default: the config file's name)"
        )
        parser.add_argument(
            "--tags",
            type=list[str] | str,
            default=[],
            help="labels stored with the run: --tags a,b (comma-separated) or --tags '[a, b]' (a "
            "YAML list); in a config file, tags: [a, b]",
        )
        parser.add_argument(
            "--runs_dir",
            type=str | None,
            default=None,  # resolved when used: a printed or stored config does not pin this machine's folder
            help="folder for run folders (checkpoints, config.yaml); default: $ORTHOLAB_RUNS, else ./runs",
        )
        parser.add_argument(
            "--resume",
            type=int | None,
            default=None,
            help="continue the recorded run with this id (or the newest run of this name not finished) from its "
            "last checkpoint (`ortholab fit --resume ID` alone reuses the run's stored config)",
        )
        parser.add_argument(
            "--analysis",
            type=bool,
            default=True,
            help="add the default analysis callbacks (orthogonality, eigenvalues, gradient "
            "profile, timing, NaN guard) that trainer.callbacks does not already configure",
        )
        parser.add_argument(
            "--test_every_validation",
            type=bool,
            default=False,
            help="fit: also evaluate the test split at every validation, logged as test/* (the "
            "scoRNN/scuRNN papers report the best test figure over the epoch ends); the "
            "checkpoints are still chosen on the validation split",
        )
        parser.add_argument(
            "--predict_split",
            type=str,
            default="test",
            help="predict: the split whose predictions are written (train, val or test); `ortholab "
            "predict --run ID [--checkpoint best|last|PATH]` takes a recorded run's config and "
            "checkpoint",
        )
        parser.link_arguments("data", "model.task", apply_on="instantiate", compute_fn=task_spec_of)

    def _parse_ckpt_path(self) -> None:
        """Lightning rebuilds the model from the checkpoint's hyperparameters, which would silently override the
        config's model: refuse a checkpoint of another model instead, naming the key that differs."""
        sub = self.config.get("subcommand")
        path = self.config[sub].get("ckpt_path") if sub else None
        check_ckpt_path(path)
        if path and Path(path).is_file():
            import torch

            try:
                self._checkpoint_to_check = torch.load(path, weights_only=True, map_location="cpu")
                saved = self._checkpoint_to_check.get("hyper_parameters") or {}
            except Exception as err:  # any unreadable file is the same user error
                raise ConfigError(
                    f"--ckpt_path {path}: cannot read it as a checkpoint ({err.__class__.__name__}); "
                    f"give a .ckpt file written by `ortholab fit`"
                ) from None
            model = self.config[sub].model
            for key, default in (("family", None), ("hidden_size", None), ("num_layers", 1)):
                theirs, ours = saved.get(key, default), model.get(key, default)
                if theirs is not None and ours != "auto" and theirs != ours:
                    refusal = (
                        f"--ckpt_path {path}: the checkpoint holds a model with model.{key} = {theirs!r}, the config "
                        f"builds model.{key} = {ours!r}; use the config the checkpoint was trained with (`ortholab "
                        f"fit --resume RUN_ID` reuses a run's own config) or a checkpoint of this model"
                    )
                    resume = self.config[sub].get("resume") if sub == "fit" else None  # (a test of an old config.yaml)
                    raise ConfigError(refusal if resume is None else _as_said_by_resume(refusal, resume))
        model = self.config[sub].model if path else None
        keys = set(getattr(self, "_command_line_model_keys", ()))
        if sub == "fit" and self.config[sub].get("resume") is not None:  # the run's config.yaml holds its latest
            # settings, and its last checkpoint may predate them: the config's model keys win too
            models = [mapping.get("model") for mapping in config_file_mappings(self.config[sub])]
            keys |= {key for model_keys in models if isinstance(model_keys, dict) for key in model_keys}
        given = {key: copy.deepcopy(model.get(key)) for key in sorted(keys)} if model else {}
        super()._parse_ckpt_path()
        for key, value in given.items():  # a --model.* flag wins over the checkpoint's hyperparameters: a resume
            # with another setting (`fit --resume ID --model.optimizers.default.eps 1e-10`) trains with it, and so
            # does the next resume (killed before its first checkpoint, the checkpoint still holds the old setting)
            self.config[sub].model[key] = value

    def parse_arguments(self, parser, args) -> None:
        """Remember which model options the command line gives (`--model.KEY ...`): those win over a checkpoint's."""
        argv = sys.argv[1:] if args is None else args if isinstance(args, (list, tuple)) else []
        flags = (str(arg).split("=", 1)[0] for arg in argv)
        self._command_line_model_keys = sorted(
            {f[len("--model.") :].split(".")[0] for f in flags if f.startswith("--model.")}
        )
        subcommands = getattr(parser, "_subcommands_action", None)
        for each in (parser, *(subcommands.choices.values() if subcommands else ())):  # a key's error says whether
            each.given_args = list(argv)  # the command line or which --config file has it
        super().parse_arguments(parser, args)

    def _runs_dir(self) -> str:
        """--runs_dir; else, for `fit --resume`, the runs folder the run was recorded in (its folder's checks and a
        relative cache go there, whatever the current folder and $ORTHOLAB_RUNS); else the runs root
        ($ORTHOLAB_RUNS, else ./runs) as this process finds it."""
        config = self._subconfig()
        if config.runs_dir:
            return config.runs_dir
        if self.subcommand == "fit" and config.get("resume") is not None:
            if (recorded := self._recorded_runs_dir(config)) is not None:
                return recorded
        return str(runs_root())

    def _recorded_runs_dir(self, config) -> str | None:
        """The runs folder holding the resumed run's folder (RUNS/store-ID/NAME/RUN, or RUNS/NAME/RUN of older runs);
        None where the store or the run cannot be read (the resume itself then says why)."""
        if not hasattr(self, "_recorded_runs_folder"):
            try:
                folder = Store(config.db, access="read").get_run(config.resume).run_dir
            except StoreError:
                folder = None
            self._recorded_runs_folder = str(runs_folder_of(folder)) if folder else None
        return self._recorded_runs_folder

    def _subconfig(self):
        return self.config[self.subcommand] if self.subcommand else self.config

    def _set_seed(self) -> None:
        """Deferred to the end of `before_instantiate_classes`, and said once the trainer is built: a config, model or
        task refused says one line, without Lightning's "Seed set to ..." before it; the classes are still built
        after seeding."""

    def before_instantiate_classes(self) -> None:
        config = self._subconfig()
        aliases.refuse_callables(config)  # a function a value resolved to is never called
        config.tags = tag_list(config.tags)
        check_run_name(config.name)
        self._task_swap = swapped_task(config)  # (the note, the run's name) when the command line swapped the task
        check_family_switch(config.model, getattr(self, "_command_line_model_keys", ()))  # all of it in one line
        check_precision(config.trainer.get("precision"), config.trainer.get("accelerator"), config.model.get("family"))
        check_model_limits(config.model)  # a stack of 10^8 layers, 64 processes on 2 cores: refused, not started
        check_graphs_config(config.model, config.trainer)  # CUDA graphs: one CUDA device, full precision
        check_trainer_devices(config.trainer)
        check_trainer_strategy(config.trainer)  # ddp_spawn: a ghost run, children failing on it
        check_logger_extras(config.trainer.get("logger"))  # MLFlowLogger without mlflow: one line, not a traceback
        clip = config.model.get("grad_clip_norm")
        if clip is not None and not positive_norm(clip):  # a negative norm would flip gradients
            raise ConfigError(
                f"model.grad_clip_norm = {clip!r} must be a positive finite number (e.g. 1.0), or null for no clipping"
            )
        check_manual_optimization(config.trainer)
        interval = config.trainer.get("val_check_interval")
        if interval is not None and not isinstance(interval, bool) and interval <= 0:
            raise ConfigError(
                f"trainer.val_check_interval = {interval} must be positive: a number of training steps "
                f"(int) or a fraction of an epoch in (0, 1]"
            )
        if rank_zero_only.rank == 0:
            try:  # fail now, before any training, if the store cannot be written
                Store(self._subconfig().db, access="write")
                self._store_to_create = False
            except StoreMissing:  # made once the model and task are built (instantiate_trainer): a refused
                self._store_to_create = True  # config leaves no new, empty store behind
            _check_writable_folder(self._runs_dir())
        seed_log = logging.getLogger(SEED_LOGGER)
        level = seed_log.level
        seed_log.setLevel(logging.WARNING)  # "Seed set to N" is said once the trainer is built (instantiate_trainer)
        try:
            super()._set_seed()  # the config passed every check: seed, then Lightning builds the classes
        finally:
            seed_log.setLevel(level)

    def instantiate_trainer(self, **kwargs):
        config = self._subconfig()
        checkpoint, self._checkpoint_to_check = getattr(self, "_checkpoint_to_check", None), None
        if checkpoint is not None:  # the model and task are built: refuse another's checkpoint before the run is
            try:  # recorded (a refused resume changes nothing of it)
                self.model.refuse_foreign_checkpoint(checkpoint, continues_training=self.subcommand == "fit")
            except ConfigError as refused:
                if config.resume is None or self.subcommand != "fit":
                    raise
                raise ConfigError(_as_said_by_resume(str(refused), config.resume)) from None
        self._check_task_data(config)
        if rank_zero_only.rank == 0 and self.subcommand == "fit":
            check_free_space(self._runs_dir(), self.model)  # before the run is recorded: a full disk is one line
        _make_store(config.db, getattr(self, "_store_to_create", False))  # every check passed: the run is recorded
        note, swapped_name = getattr(self, "_task_swap", None) or (None, None)
        if note and rank_zero_only.rank == 0:  # once the task is built: a task refused says only why
            print(note, file=sys.stderr)
        family = self.model.hparams.family
        derived = swapped_name or _name_for_family(_name_from_config_files(config.get("config")), config, family)
        name = config.name or folder_name(derived)  # a config file's name may hold anything: as a folder name
        resume = config.resume if self.subcommand == "fit" else None  # only training continues a recorded run:
        # testing with a run folder's config.yaml (older resumes wrote `resume: ID` into it) records a run of its own
        logger = SQLLogger(
            db_url=config.db,
            name=name,
            root_dir=self._runs_dir(),
            stage=self.subcommand or "fit",
            run_id=resume,
            tags=config.tags,
        )
        configured = list(self._get(self.config_init, "trainer").get("callbacks") or [])
        extra = [GracefulInterrupt(), *([NameTheRun()] if self.subcommand == "fit" else [])]
        if (
            self.subcommand == "predict"
        ):  # training/callbacks/predictions.py: the split's predictions into the run folder
            from ortholab.training.callbacks.predictions import PredictionWriter

            if not config.get("ckpt_path"):
                raise ConfigError(
                    "predict needs trained weights: `ortholab predict --run RUN_ID` (its best "
                    "checkpoint) or --ckpt_path FILE with the config it was trained with"
                )
            self.datamodule.predict_split = config.predict_split
            extra.append(PredictionWriter(config.predict_split, config.ckpt_path))
            # predicting restores weights only: the training callbacks Lightning asks for have nothing to restore
            warnings.filterwarnings("ignore", message="Be aware that when using `ckpt_path`, callbacks used")
        if self.subcommand in ("predict", "test", "validate"):
            # the checkpoint callback's state: an evaluation saves no checkpoint, so the training run's folder
            # differing from this run's changes nothing (Lightning warns that it will not reload best_k_models)
            warnings.filterwarnings("ignore", message="The dirpath has changed from")
        if (
            config.trainer.enable_checkpointing is not False
            and self.subcommand != "predict"
            and not any(isinstance(c, ModelCheckpoint) for c in configured)
        ):
            spec = self.model.spec  # best by the task's main metric, in the run folder; {step}: the optimizer
            # steps taken, the step of the val point that chose it and of the analyses of those weights
            extra.append(
                ModelCheckpoint(
                    monitor=spec.main_metric,
                    mode=spec.main_metric_mode,
                    filename="best-step{step}",
                    auto_insert_metric_name=False,
                )
            )
            extra.append(LastCheckpoint())  # last.ckpt at every validation and at the end of training
        if config.trainer.enable_progress_bar is not False and not any(isinstance(c, ProgressBar) for c in configured):
            # Lightning's rich bar on a terminal (rich is a dependency); plain lines in a log file or a scheduler's
            extra.append(StepBudgetProgressBar() if sys.stdout.isatty() else PlainProgress())
        plugins = self._get(self.config_init, "trainer").get("plugins") or []
        plugins = list(plugins) if isinstance(plugins, (list, tuple)) else [plugins]
        if not any(isinstance(p, CheckpointIO) for p in plugins):  # checkpoints written atomically in their folder
            plugins.append(AtomicCheckpointIO())
        if not config.trainer.get("default_root_dir"):  # not the current folder: under SLURM, Lightning loads the
            kwargs.setdefault("default_root_dir", self._runs_dir())  # hpc_ckpt_N.ckpt it finds there into a new run
        try:
            trainer = super().instantiate_trainer(callbacks=configured + extra, plugins=plugins, **kwargs)
        except (ValueError, TypeError) as err:  # Lightning refuses a trainer.* value (`accelerator='gpuu'`)
            if user_error(err) is not None:  # already one line (a MisconfigurationException: user_errors.py)
                raise
            raise ConfigError(trainer_refusal(err, config.trainer, getattr(self.parser, "given_args", None))) from None
        _prepare_evaluation(self.datamodule, trainer.world_size, self.subcommand, config)
        trainer.callbacks = replace_lightnings_summary(trainer.callbacks, configured)  # no 'Total FLOPs: 0'
        trainer.loggers = [logger, *trainer.loggers]
        first = [StampCheckpoints()]  # every checkpoint names its store and run, and how far their record went
        if resume is not None:
            first.append(ContinueRun())  # rewinds the record before anything records again
        if config.analysis:
            first += default_callbacks(trainer.callbacks)
        trainer.callbacks[:0] = first
        for callback in trainer.callbacks:  # a speech task without PESQ/STOI, or a user's one on another task: one line
            if isinstance(callback, AudioEvaluation):  # before the run is recorded
                callback.check_task(self.datamodule, given=any(callback is c for c in configured))
        seed = config.get("seed_everything")
        if seed is not False and seed is not None:  # said now: a model or task refused above says only why
            logging.getLogger(SEED_LOGGER).info(rank_prefixed_message(f"Seed set to {seed}", _get_rank()))
        return trainer

    def _check_task_data(self, config) -> None:
        """The task's data there and its first batches as its TaskSpec says, before the run is recorded."""
        place_cache = getattr(self.datamodule, "place_cache", None)
        if place_cache is not None:  # a relative cache_dir lies under the runs folder, not the current one
            place_cache(self._runs_dir())
        check_data = getattr(self.datamodule, "check_data", None)
        if check_data is not None:  # a corpus not there: one line, and no failed run left behind
            check_data()
        check_task(self.datamodule, self.subcommand, config.get("predict_split") or "test")  # training/task_check.py

    def _run_subcommand(self, subcommand: str) -> None:
        """A run stopped by a user error (a full disk, a bad checkpoint) keeps the one-line reason with its status."""
        try:
            super()._run_subcommand(subcommand)
        except SystemExit as stop:  # Lightning's exit 1 after a Ctrl-C it caught itself: before GracefulInterrupt
            trainer = getattr(self, "trainer", None)  # listens (the first moments of a fit), or a second Ctrl-C
            if stop.code != 1 or trainer is None or not trainer.interrupted:
                raise
            self._interrupted_at_once(trainer)
            raise SystemExit(128 + signal.SIGINT) from None  # the shell's convention, as a first Ctrl-C exits
        except Exception as err:  # re-raised; main() prints the same line, or the traceback of a bug
            logger = self.trainer.loggers[0] if getattr(self, "trainer", None) and self.trainer.loggers else None
            reported = user_error(err)
            if (
                isinstance(logger, SQLLogger)
                and not isinstance(reported, NonFiniteError)  # the NaN guard recorded its own reason
                and getattr(logger, "_run_id", None) is not None
            ):  # only a run that exists (no new row)
                reason = str(reported) if reported is not None else crash_reason(err, self.trainer.global_step)
                with contextlib.suppress(Exception):  # the original error matters more than its record
                    logger.record_failure(mask_secrets(" ".join(reason.split())))
            raise

    def _interrupted_at_once(self, trainer) -> None:
        """A Ctrl-C that stopped the fit at once: the run says so, and how (or whether) it goes on."""
        logger = trainer.loggers[0] if trainer.loggers else None
        if not isinstance(logger, SQLLogger) or getattr(logger, "_run_id", None) is None or not trainer.is_global_zero:
            return
        run, step = logger.run_id, trainer.global_step
        if step == 0:
            reason = "stopped by Ctrl-C before its first training step"
            said = f"run {run} holds nothing to continue; run the same command again (`ortholab runs delete {run}`)"
        else:
            reason = f"stopped at once by a second Ctrl-C at step {step}; continue from its last checkpoint"
            said = f"continue run {run} from its last checkpoint with `ortholab fit --resume {run}`"
        with contextlib.suppress(Exception):  # the stop matters more than its record
            logger.mark_interrupted(reason)
        print(f"Interrupted by SIGINT: {said}", file=sys.stderr)

    def after_fit(self) -> None:
        interrupt = next((c for c in self.trainer.callbacks if isinstance(c, GracefulInterrupt)), None)
        if interrupt is None or interrupt.stopped_at is None:  # a stopped run validates once it goes on
            self._note_no_validation()
        self._print_record()
        if interrupt is not None and interrupt.stopped_at is not None:  # the shell's convention: 128 + the signal
            if self.trainer.is_global_zero:  # the other ranks know no run id
                where, said = db_flag(self.trainer.loggers[0].store.url)
                print(
                    f"Interrupted by {interrupt.requested}; checkpoint saved, continue with "
                    f"`ortholab fit --resume {self.trainer.loggers[0].version}{where}`{said}."
                )
            sys.exit(128 + int(getattr(signal, interrupt.requested)))

    def _note_no_validation(self) -> None:
        """A fit shorter than its validation interval (`--trainer.max_steps 20` on a config validating every 100
        steps) records no best value and keeps no best checkpoint: said, with the key that changes it."""
        trainer, logger = self.trainer, self.trainer.loggers[0] if self.trainer.loggers else None
        if not (trainer.is_global_zero and isinstance(logger, SQLLogger)) or trainer.global_step == 0:
            return
        if trainer.limit_val_batches == 0:  # validation turned off on purpose
            return
        if logger.store.get_run(logger.run_id).best is None:
            every = trainer.check_val_every_n_epoch
            key = f"trainer.check_val_every_n_epoch = {every}" if every and every > 1 else None
            key = key or f"trainer.val_check_interval = {trainer.val_check_interval}"
            sooner = f"a smaller --{key.split(' = ')[0]} validates sooner"
            if key.startswith("trainer.val_check_interval") and isinstance(trainer.val_check_interval, float):
                sooner = "--trainer.val_check_interval K (an int: every K steps) validates sooner"  # not a fraction
            print(
                f"No validation ran in its {trainer.global_step} steps ({key}), so the run has no best value and no "
                f"best checkpoint; {sooner}."
            )

    def after_validate(self) -> None:
        self._print_record()

    def after_test(self) -> None:
        self._print_record()

    def after_predict(self) -> None:
        from ortholab.training.callbacks.predictions import PredictionWriter

        writer = next((c for c in self.trainer.callbacks if isinstance(c, PredictionWriter)), None)
        if writer is not None and writer.path is not None:
            print(f"Predictions on the {writer.split} split written to {writer.path}")
        self._print_record()

    def _print_record(self) -> None:
        logger = self.trainer.loggers[0]
        if not (self.trainer.is_global_zero and isinstance(logger, SQLLogger)):
            return
        run = logger.store.get_run(logger.run_id)
        if run.best is not None:
            split = run.main_metric.split("/")[0]  # each split against its own baseline
            baseline = f" (baseline on the {split} split: {run.baseline:.4g})" if run.baseline is not None else ""
            print(f"Best {run.main_metric}: {run.best:.4g}{baseline}")
        where, said = db_flag(logger.store.url)
        print(
            f"Run {run.id} ({run.name}, {run.status}) recorded in {mask_url(logger.store.url)}; "
            f"run folder {logger.log_dir}. List runs with `{console_command()} runs{where}`{said}."
        )


def trainer_refusal(err: Exception, trainer: dict, argv: list[str] | None = None) -> str:
    """Lightning's refusal of a trainer setting (`accelerator='gpuu'`, `strategy='foo'`) as one line naming the key
    and where it was given."""
    text = " ".join(str(err).split())
    named = re.search(r"`(\w+)(?:=|`)", text)
    key = named.group(1) if named and named.group(1) in trainer else None
    if key is None:
        return f"the trainer settings were refused by Lightning: {text} (`ortholab fit --help` describes trainer.*)"
    where = where_given(f"trainer.{key}", sys.argv[1:] if argv is None else argv)
    value = trainer[key]
    return f"trainer.{key} = {value!r}{f' ({where})' if where else ''}: {text}"


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


def console_command() -> str:
    """How to type this installation's `ortholab`: the bare name where PATH finds it, its path otherwise (a venv
    not activated, as after `make demo`)."""
    script = Path(sys.executable).parent / "ortholab"
    found = shutil.which("ortholab")
    if not script.exists() or (found is not None and Path(found).resolve() == script.resolve()):
        return "ortholab"
    with contextlib.suppress(ValueError):  # under the current folder: as typed there, e.g. .venv/bin/ortholab
        return str(script.relative_to(Path.cwd()))
    return str(script)


CHECKPOINT_OVERHEAD_BYTES = 256 * 1024  # a checkpoint's bytes beyond the tensors (loops, callbacks, hparams): ~10 KiB
# measured for a tiny scoRNN, with room for the analysis callbacks' state


def checkpoint_bytes(model) -> int:
    """A generous estimate of one checkpoint's size: the weights, up to two optimizer moments of each, overhead."""
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    return 3 * weights + CHECKPOINT_OVERHEAD_BYTES


def check_free_space(folder: str, model) -> None:
    """--runs_dir has room for the run's checkpoints (last, best and the temporary file an atomic write needs),
    else one line now rather than an OSError and a failed run later."""
    import shutil

    needed = 3 * checkpoint_bytes(model)
    free = shutil.disk_usage(_nearest_folder(folder)).free
    if free < needed:
        raise ConfigError(
            f"--runs_dir {folder}: {free / 2**20:.2f} MiB free, and this model's checkpoints (last, best "
            f"and a temporary copy) need about {needed / 2**20:.2f} MiB; free space there or give "
            f"--runs_dir on another disk"
        )


def check_ckpt_path(path: str | None) -> None:
    """--ckpt_path names a checkpoint file (or Lightning's 'last', 'best', 'hpc', or a URL): one line otherwise,
    before a run is recorded."""
    if not path or path in ("last", "best", "hpc", "registry") or "://" in str(path) or Path(path).is_file():
        return
    if Path(path).is_dir():
        found = sorted(
            str(p.relative_to(path)) for pattern in ("*.ckpt", "checkpoints/*.ckpt") for p in Path(path).glob(pattern)
        )[:3]  # not a deep search: the folder may be huge
        held = f"it holds {', '.join(found)}" if found else "it holds no .ckpt file"
        raise ConfigError(
            f"--ckpt_path {path} is a folder ({held}); give the checkpoint file, e.g. RUN_FOLDER/checkpoints/last.ckpt"
        )
    raise ConfigError(
        f"--ckpt_path {path}: no such file; give a .ckpt file written by `ortholab fit` (a run's "
        f"folder holds checkpoints/last.ckpt; `ortholab fit --resume RUN_ID` finds it for you)"
    )


def task_spec_of(datamodule) -> dict:
    """The model's `task`: the datamodule's TaskSpec; a class that describes no task (a base class) is refused."""
    spec = getattr(datamodule, "spec", None)
    if spec is None:
        from ortholab.datamodules import TASKS

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
    return [tag.strip() for tag in tags.split(",") if tag.strip()]


def check_run_name(name: str | None) -> None:
    """A run's name is a folder under --runs_dir: one path component (letters of any script), 100 at most."""
    if name is not None and not is_run_name(name):
        example = re.sub(r"[^\w.+-]+", "-", name).strip(".-_")[:100] or "my-run"
        raise ConfigError(
            f"--name {name!r}: a run name is one folder name under --runs_dir: letters and digits of any "
            f"script and punctuation, starting with a letter or digit, without spaces, control "
            f'characters or /\\<>:"|?*, at most 100 characters; e.g. --name {example}'
        )


def _prepare_evaluation(datamodule, world_size: int, subcommand: str | None, config) -> None:
    """`--test_every_validation` handed to the task; a split smaller than the DDP processes refused before the run is
    recorded (datamodules/sharding.py)."""
    if subcommand == "fit":
        datamodule.test_every_validation = bool(config.get("test_every_validation"))
    check_split_sizes = getattr(datamodule, "check_evaluation_shards", None)
    if check_split_sizes is not None and world_size > 1:
        check_split_sizes(world_size, subcommand)


def _as_said_by_resume(message: str, run_id: int) -> str:
    """A checkpoint's refusal worded for `fit --resume ID`, which reads the run's checkpoint itself (no --ckpt_path
    was given) and whose flags, not its config, changed the model."""
    message = re.sub(r"^--ckpt_path(?: .*?)?: (?:the|this) ", f"--resume {run_id}: the run's ", message)
    return message.replace(
        "(`ortholab fit --resume RUN_ID` reuses a run's own config)",
        f"(`ortholab fit --resume {run_id}` without the flag that changes it)",
    )


def _make_store(db: str, missing: bool) -> None:
    """Create the store a run records in where it was `missing`, saying so (rank 0): a first run, or a mistyped --db,
    shows where runs now go."""
    if not missing or rank_zero_only.rank != 0:
        return
    store = Store(db)
    if store.created:
        print(f"New run store {mask_url(store.url)}: nothing was recorded there before.", flush=True)


def _check_writable_folder(folder: str) -> None:
    """The run folders' parent exists or can be made, and accepts files (checkpoints go there); a folder not there
    yet is judged by the nearest one that is, so that a command refused later leaves no empty folder behind."""
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
            f"--runs_dir {folder}: cannot write run folders there ({err.strerror}); give a writable "
            f"folder with --runs_dir"
        ) from None


def _nearest_folder(folder: str) -> Path:
    """`folder`, or the nearest folder above it that exists (the runs folder is made by the run's first write)."""
    path = Path(folder).absolute()
    return next(p for p in (path, *path.parents) if p.is_dir())


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
        else "all of its options apply"
    ) + (f"; kept: {', '.join(carried)}" if dropped and carried else "")  # e.g. copying's val_size: 500 for MNIST
    named = f"; the run is named {name} (--name sets another)" if name else ""
    return f"note: data.class_path {chosen} replaces the config's {given}: {what}{named}", name


def task_run_name(class_path: str, family: str) -> str:
    """A run's name after its task and family where no config file names it: `mnist_scornn`."""
    cls_name = str(class_path).rsplit(".", 1)[-1]
    task = next((name for name, cls in TASKS.items() if cls.__name__ == cls_name), cls_name.lower())
    return f"{task}_{family}"


def _name_for_family(name: str | None, config, family: str) -> str:
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


def _name_from_config_files(paths) -> str | None:
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
