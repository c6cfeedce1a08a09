"""A refused command line or config as one line: the key, where it was given (which file, or the command line), the
nearest valid key or class, and how to fix it; jsonargparse's and Lightning's own messages rewritten for a user."""

from __future__ import annotations

import contextlib
import difflib
import importlib
import inspect
import math
import re
import sys
import typing

import yaml

from ortholab import aliases
from ortholab.datamodules import TASKS, task_class_path
from ortholab.training.config_files import config_file, missing_config


def _known_keys(parser) -> list[str]:
    keys = []
    for action in parser._actions:
        keys += [o[2:] for o in action.option_strings if o.startswith("--")]
        for sub in getattr(action, "choices", None) or {}:  # subcommands: their own options
            if isinstance(action.choices, dict) and hasattr(action.choices[sub], "_actions"):
                keys += _known_keys(action.choices[sub])
    return keys


READ_NO_SETTING = ("help", "config", "print_config")  # options that are no config key


def top_level_keys(parser) -> list[str]:
    """The keys a config of this parser may hold at its top (seed_everything, trainer, model, ...), in its order:
    every option's first part but those that read no setting (--help, --config, --print_config)."""
    keys = [a.dest.split(".")[0] for a in parser._actions if a.dest not in READ_NO_SETTING]
    return list(dict.fromkeys(keys))


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
    places = _places(key, argv)
    matching = [place for place, held in places if value is None or _same_value(held, value)]
    return (matching or ([] if exact else [place for place, _ in places]) or [unknown])[-1]


def _places(key: str, argv: list[str]) -> list[tuple[str, str]]:
    """Every (place, value as text) where argv gives `key`, in argv's order: the last one stands."""
    key, places = key.replace(".init_args.", "."), []
    argv = [str(arg) for arg in argv]
    for i, arg in enumerate(argv):
        flag, eq, given = arg.partition("=")
        given = given if eq else argv[i + 1] if i + 1 < len(argv) else ""
        if flag in ("--config", "-c"):
            with contextlib.suppress(OSError, yaml.YAMLError, UnicodeDecodeError):
                held = _flat_values(yaml.safe_load(config_file(given).read_text(encoding="utf-8")))
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
    return places


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


OPTION_SYNONYMS = (  # words for one option that tasks spell differently (or users bring from elsewhere)
    ("dataset", "corpus", "data_set", "data", "database"),
    ("path", "data_dir", "data_path", "root", "dir", "folder"),
    ("seq_len", "seq_length", "sequence_length", "length"),
    ("batch_size", "batchsize", "bs"),
    ("num_workers", "workers", "n_workers"),
)


def _option_choices(task: type, option: str) -> tuple:
    """The values a task's option takes: its Literal's, or those the task lists in OPTION_CHOICES; () if open."""
    listed = getattr(task, "OPTION_CHOICES", {}).get(option)
    if listed:
        return tuple(listed)
    try:  # a module with `from __future__ import annotations` holds them as text
        annotation = typing.get_type_hints(task.__init__).get(option)
    except (NameError, TypeError):  # a name only a type checker imports
        annotation = None
    return typing.get_args(annotation) if typing.get_origin(annotation) is typing.Literal else ()


def nearest_task_option(task: type, key: str, value: str | None) -> str | None:
    """The option of `task` a user meant by the unknown `key` given `value`: the one option whose choices hold the
    value (`source: timit` is the corpus), else a synonym of the key (speech's `dataset` is its `corpus`), else the
    nearest by spelling; None when nothing is near."""
    options = [p for p in inspect.signature(task.__init__).parameters if p != "self"]
    if value is not None:
        holding = [o for o in options if str(value).lower() in {str(c).lower() for c in _option_choices(task, o)}]
        if len(holding) == 1:
            return holding[0]
    for words in OPTION_SYNONYMS:
        if key.lower() in words:
            synonym = next((word for word in words if word in options), None)
            if synonym:
                return synonym
    close = difflib.get_close_matches(key, options, n=1, cutoff=0.6)
    return close[0] if close else None


def _unknown_task_option(class_path: str, key: str, argv: list[str]) -> str:
    """`data.KEY` that the task `class_path` does not take: where it was given, the nearest option, all of them."""
    module, _, name = class_path.rpartition(".")
    task = getattr(importlib.import_module(module), name)
    options = [p for p in inspect.signature(task.__init__).parameters if p != "self"]
    places = _places(f"data.{key}", argv)
    close = nearest_task_option(task, key, places[-1][1] if places else None)
    hint = f"did you mean data.{close}? " if close else ""
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
                tree = yaml.safe_load(config_file(value).read_text(encoding="utf-8"))
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


MAPPING_EXAMPLES = {"model.optimizers": "'{default: {name: adam, lr: 1.0e-3}}'"}  # a mapping's example, by key


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
    given = re.search(r"Given value: ([^\n]*?)\s*$", message)  # a union's whole value, not its first subtype's
    given = given or re.search(r"(?:Given|Got) value: (.*?)\s*$", message, re.DOTALL)
    example, described = _expected(message), "`ortholab fit --help` describes"
    if nested and _expected(nested.group(4)):
        key = f"{nested.group(1)}.{nested.group(3)}"
        example, given = _expected(nested.group(4)), re.search(r"Got value: (.*)$", nested.group(4))
        described = f"`ortholab fit --data.help {nested.group(2).rpartition('.')[2]}` describes"
    if key and example and given:
        example = example.replace("'{rho: 4}'", MAPPING_EXAMPLES.get(key, "'{rho: 4}'"))
        value = " ".join(given.group(1).split())
        where = where_given(key, argv, value)
        whole = _whole_number(value) if example == "int" else None
        if whole is not None:  # 1e3 or 1000.0 where a count goes: the parser printed 1000.0, the user wrote 1e3
            value, fix = _as_written(key, argv, value), f"--{key} {whole}" if where == "on the command line" else whole
            example = f"a whole number, written without a point or an exponent: give {fix}"
        return f"{key} = {value[:80]!r}{f' ({where})' if where else ''}: expected {example} ({described} {key})"
    return None


def _whole_number(value: str) -> int | None:
    """1000 for '1000.0' or '1e3' (a float the parser will not take as an int); None for '2.5', 'abc', 'inf'."""
    try:
        number = float(value)
    except ValueError:
        return None
    return int(number) if math.isfinite(number) and number.is_integer() else None


def _as_written(key: str, argv: list[str], value: str) -> str:
    """The value of `--key` as the command line wrote it ('1e3' where the parser printed 1000.0), else `value`."""
    argv, written = [str(arg) for arg in argv], value
    for i, arg in enumerate(argv):
        flag, eq, given = arg.partition("=")
        given = given if eq else argv[i + 1] if i + 1 < len(argv) else ""
        if flag == f"--{key}" and _same_value(given, value):
            written = given
    return written


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


COMMAND_FLAGS = {"fit": ["resume"], "validate": [], "test": [], "predict": ["run", "checkpoint"]}  # cli/train.py's own


def _not_a_task_name(given: str, argv: list[str], helped: bool) -> str:
    """A task name no task has (`--data.help copyng`, `--data addingg`, `class_path: mnist` in a file), with the
    nearest: its short name where one is read (the command line, --data.help), else its class path."""
    paths = {name: task_class_path(cls) for name, cls in TASKS.items()}
    close = difflib.get_close_matches(given, [*paths, *paths.values()], 1)
    where = "" if helped else where_given("data.class_path", argv, given, exact=True)
    where = where or ("" if helped else where_given("data", argv, given, exact=True))
    hint = ""
    if close:
        named = close[0] if helped else paths.get(close[0], close[0])
        if where == "on the command line" and close[0] in paths:
            named = f"{close[0]} ({paths[close[0]]})"
        hint = f"did you mean {named}? "
    return (
        f"{'--data.help' if helped else 'data.class_path ='} {given!r}{f' ({where})' if where else ''} is not a "
        f"task's class path{' or name' if helped else ''}; {hint}`ortholab list tasks` names the tasks and their "
        f"classes{aliases.unimportable_note()}"
    )


def explain_parse_error(message: str, parser, argv: list[str] = ()) -> str:
    """jsonargparse's message rewritten for a user: the unknown key (and where it was given) with a suggestion, a
    refused class path."""
    unknown = re.search(r"unrecognized arguments: --?(\S+)", message) or re.search(
        r"does not accept option '([^']+)'", message
    )
    if unknown:
        key = unknown.group(1).split("=")[0]
        command = next((a for a in argv if a in COMMAND_FLAGS), "fit")
        if key in SECTION_HELP:  # `--model.help`, by analogy with `--data.help copying`
            return f"--{key}: {SECTION_HELP[key].format(command=command)}"
        known = [k for k in _known_keys(parser) if k != "model.task.help"]  # the task's spec, filled in from data
        close = difflib.get_close_matches(key, known + COMMAND_FLAGS[command], n=1, cutoff=0.6)
        close = close or [k for k in known if k.endswith(f"_{key}") and "." not in k][:1]  # --split: predict_split
        flag_only = {"config", "print_config", *COMMAND_FLAGS[command]}  # no config key: named as typed, --config
        hint = f"; did you mean {'--' if close and close[0] in flag_only else ''}{close[0]}?" if close else ""
        tops = top_level_keys(parser)  # named where the first part is none of them and nothing is near
        top = "" if close or key.split(".")[0] in tops else f"a config's top-level keys are {', '.join(tops)}; "
        return (
            f"unknown config key {key} ({where_given(key, argv, unknown=ANYWHERE)}){hint + ' ' if hint else '; '}"
            f"{top}`ortholab {command} --help` lists every key"
        )
    stray = re.search(r"unrecognized arguments: ([^-\s]\S*)", message)
    if stray:  # `--tags a b`: a second value where a flag takes one
        return (
            f"unexpected value {stray.group(1)!r} on the command line: each --key takes one value (several tags: "
            f"--tags a,b; a value holding spaces goes in quotes)"
        )
    config_file = re.search(r'Parser key "config": (File does not exist|Path is not a file): \'(.*)\'', message)
    if config_file:
        return missing_config(config_file.group(2), config_file.group(1).startswith("File"))
    task_option = re.search(r"class_path '([\w.]+)':\s*(?:Option|Key) '([^']+)' is not (?:accepted|expected)", message)
    listed = re.match(r'Parser key "([^"]+)"', message)  # before `denied`: jsonargparse also tries lightning.Callback
    if task_option and listed and listed.group(1) in LISTS:
        return _unknown_class_option(listed.group(1), task_option.group(1), task_option.group(2), argv)
    if task_option:
        return _unknown_task_option(task_option.group(1), task_option.group(2), argv)
    denied = re.search(r"Importing '([\w.]+)' is not allowed", message)
    option = next((a.split("=")[0] for a in argv if re.match(r"--trainer\.callbacks\.\w", a)), None)
    if denied and denied.group(1).endswith(".Callback") and option:  # jsonargparse fell back to the base class
        return (
            f"{option} sets an option of the callback named before it on the command line, and none was: name it "
            f"first (--trainer.callbacks+=CLASS {option} VALUE), docs/configs.md#a-callback-of-your-own"
        )
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
        close = difflib.get_close_matches(missing.group(1), [task_class_path(c) for c in TASKS.values()], 1)
        hint = f"did you mean {close[0]}? " if close else ""
        return (
            f"data.class_path = {missing.group(1)!r} is not a registered task; {hint}`ortholab list tasks` shows them"
        )
    undotted = re.search(r"Expected a dot import path string: (\S+)", message)
    helped = message.startswith("--data.help")  # `--data.help copyng`: a task name mistyped
    if undotted and ('Parser key "data"' in message or helped):  # a task's short name in a config file
        return _not_a_task_name(undotted.group(1), argv, helped)  # (task_short_names maps it on the command line)
    refused = re.search(r"Import path (\S+) does not correspond to a subclass of (\w+)", message)
    if refused:
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


ANYWHERE = "on the command line or in a --config file"
SECTION_HELP = {  # the sections without a --SECTION.help of their own: where their options are described
    "model.help": (
        "the model's options are the --model.* lines of `ortholab {command} --help`; a family's own options: "
        "`ortholab fit --model.family_args.help FAMILY` (`ortholab list families` names them)"
    ),
    "trainer.help": (
        "the trainer's options (Lightning's Trainer) are the --trainer.* lines of `ortholab {command} --help`"
    ),
}
NO_TASK = (
    "no task given: name a config with --config FILE (configs/demo/copying_scornn.yaml, or one that "
    "`ortholab list configs` shows), or the task with --data CLASS (`ortholab list tasks`)"
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
