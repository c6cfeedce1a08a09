"""`ortholab list families|tasks|configs`: what is registered; `list families --family NAME`: one family's options;
`list configs --family NAME`: the configs that train that family."""

from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path

import yaml

from ortholab import aliases
from ortholab.cli.common import table
from ortholab.command_name import as_typed
from ortholab.errors import OWN_FAMILY, ConfigError, did_you_mean
from ortholab.training.config_files import PACKAGE_ROOT

USAGE = "list [families|tasks|configs] [--json] | list families|configs [--family] NAME"
HELP = "what is registered; one family's options (model.family_args)"
WHAT = ("families", "tasks", "configs")


def add_arguments(parser) -> None:
    parser.add_argument("what", nargs="?", choices=WHAT, help="one list (default: all three, one after another)")
    parser.add_argument("name", nargs="?", default=None, help="a family: `list families scornn` is --family scornn")
    parser.add_argument("--db", default=None, help="accepted for symmetry; listing does not read the store")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--family",
        default=None,
        help="with `families`: that family's options (model.family_args) with types and defaults; "
        "with `configs`: only the configs whose model.family is NAME",
    )


def warn_unimportable() -> None:
    """Before a list is printed (a refusal cites them itself): what such modules would register is missing."""
    if aliases.UNIMPORTABLE:
        print(f"ortholab: warning: {aliases.unimportable_note().removeprefix('; ')}", file=sys.stderr)


def run(args, extra: list[str]) -> None:
    if args.name is not None and args.what == "tasks":  # `list tasks mnist`: a task's options are fit's to describe
        raise ConfigError(
            f"list tasks: a task's options are described by `ortholab fit --data.help {args.name}`; "
            f"`ortholab list tasks` names the tasks"
        )
    if args.name is not None:  # `list families scornn`, as a newcomer types it
        if args.family is not None and args.family != args.name:
            raise ConfigError(f"list: {args.name!r} and --family {args.family!r} name two families; give one")
        args.family = args.name
    if args.what is None:  # `ortholab list`: everything, each under its name ({name: rows} with --json)
        if args.family is not None:
            raise ConfigError(
                "--family needs `list families` or `list configs`: e.g. `ortholab list families --family NAME`"
            )
        warn_unimportable()
        if args.json:
            print(json.dumps({what: _rows(what, None)[0] for what in WHAT}, indent=2, default=str))
            return
        for what in WHAT:
            rows, columns = _rows(what, None)
            print(as_typed(f"{what} (`ortholab list {what}`):") + f"\n{table(rows, columns)}\n")
        return
    if args.family is not None:
        from ortholab.models import FAMILIES

        if args.family not in FAMILIES:
            given = repr(args.family) if args.name is not None else f"--family {args.family!r}"  # as it was typed
            raise ConfigError(
                f"{given} is not a registered family; {did_you_mean(args.family, FAMILIES)}"
                f"choose one of {sorted(FAMILIES)} (one of your own: {OWN_FAMILY}){aliases.unimportable_note()}"
            )
        if args.what == "tasks":
            raise ConfigError(
                "--family applies to `list families` (its options) and `list configs` (its configs), "
                "not to `list tasks`: drop --family"
            )
    warn_unimportable()
    if args.what == "families" and args.family is not None:
        from ortholab.training.family_options import describe_options, family_options_rows

        groups = family_groups(args.family)
        if args.json:
            rows = {"family": args.family, "groups": groups, "options": family_options_rows(args.family)}
            print(json.dumps(rows, indent=2, default=repr))
        else:
            print(describe_options(args.family))
            print(f"parameter groups (model.optimizers keys; `default` covers any not named): {', '.join(groups)}")
        return
    rows, columns = _rows(args.what, args.family)
    if args.json:
        print(json.dumps(rows, indent=2, default=str))
    else:
        print(table(rows, columns) if rows else nothing_listed(args))
        if args.what == "tasks" and unknown_until_data(rows):
            print(unknown_until_data(rows))


def _rows(what: str, family: str | None) -> tuple[list[dict], list[str]]:
    """One list's rows and the columns its table shows."""
    if what == "families":
        return family_rows(), ["family", "groups", "recurrent_matrix", "summary"]
    if what == "tasks":
        rows = task_rows()
        for row in rows:
            spec = row["spec"] or {}
            row.update(loss=spec.get("loss"), readout=spec.get("readout"), baseline=spec.get("baseline"))
        return rows, ["task", "loss", "readout", "baseline", "summary"]
    return config_rows(family=family), ["config", "description"]


def nothing_listed(args) -> str:
    if args.what == "configs" and args.family is not None:
        return f"no config trains {args.family}: start from another family's config with --model.family {args.family}"
    return "nothing registered"


def _options(cls, skip: set[str]) -> dict:
    params = inspect.signature(cls.__init__).parameters.values()
    return {
        p.name: (None if p.default is inspect.Parameter.empty else p.default)
        for p in params
        if p.name not in skip and p.kind is not inspect.Parameter.VAR_KEYWORD
    }


def _summary(*described) -> str:
    """The first docstring line of the first of `described` (a module, a class) that has one; '' if none does."""
    for thing in described:
        lines = (inspect.getdoc(thing) or "").strip().splitlines()
        if lines:
            return lines[0]
    return ""


def family_groups(family: str) -> list[str]:
    """The family's parameter groups, each an optimizer key (model.optimizers.<group>)."""
    from ortholab.models import FAMILIES

    return sorted(FAMILIES[family](2, 4).parameter_groups())


def family_rows() -> list[dict]:
    from ortholab.models import FAMILIES

    rows = []
    for name, cls in FAMILIES.items():
        layer = cls(2, 4)
        rows.append(
            {
                "family": name,
                "class": f"{cls.__module__}.{cls.__qualname__}",
                "groups": sorted(layer.parameter_groups()),
                "options": _options(cls, {"self", "input_size", "hidden_size"}),
                "recurrent_matrix": layer.recurrent_matrix() is not None,
                "summary": _summary(cls),
            }
        )
    return rows


def unknown_until_data(rows: list[dict]) -> str:
    """The line under the tasks table naming the tasks whose `-` the data decides (text's vocabulary, a data set's
    own baseline), and where a run says them; then those that have no baseline at all (speech), and why."""
    from ortholab.datamodules import TASKS

    def none(row: dict) -> str | None:
        return getattr(TASKS.get(row["task"]), "no_baseline", None)

    waiting = [
        row["task"]
        for row in rows
        if None in (row["loss"], row["readout"]) or (row["baseline"] is None and not none(row))
    ]
    parts = [f"-: read from the task's data ({', '.join(waiting)}); a run prints and records it"] if waiting else []
    parts += [f"{row['task']} has no baseline ({none(row)})" for row in rows if row["baseline"] is None and none(row)]
    return "; ".join(parts)


def task_rows() -> list[dict]:
    from ortholab.datamodules import TASKS

    rows = []
    for name, cls in TASKS.items():
        try:
            spec = cls().spec.to_dict()
        except (ConfigError, TypeError, AttributeError):  # it needs its data (text: its vocabulary) or arguments
            spec = dict(getattr(cls, "known_without_data", {})) or None
        rows.append(
            {
                "task": name,
                "class": f"{cls.__module__}.{cls.__qualname__}",
                "spec": spec,
                "options": _options(cls, {"self"}),
                "summary": _summary(inspect.getmodule(cls), cls),
            }
        )
    return rows


# Folders under configs/ holding data, not trainable configs: the papers' published tables and the CPU checks
NOT_TRAINABLE = (Path("papers", "published"), Path("papers", "checks"))


NO_DESCRIPTION = "(no description: add a first comment line to this config)"


def config_description(path: Path) -> str:
    """The config's first comment line, read before any YAML content; NO_DESCRIPTION when it has none."""
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#") and line.lstrip("# ").strip():
            return line.lstrip("# ").strip()
        if line.strip() and not line.startswith("#"):
            break
    return NO_DESCRIPTION


DEFAULT_FAMILY = "scornn"  # what a config naming no model.family trains (RecurrentModule's default)


def config_family(path: Path) -> str:
    """The family the config trains: its model.family, else DEFAULT_FAMILY; a file that is not YAML is a
    ConfigError naming it."""
    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        reason = " ".join(str(err).split())[:160]
        fix = "fix it or move it out of configs/"
        raise ConfigError(f"{path}: cannot be read as a YAML config ({reason}); {fix}") from None
    model = loaded.get("model") if isinstance(loaded, dict) else None
    family = model.get("family") if isinstance(model, dict) else None
    return family if isinstance(family, str) else DEFAULT_FAMILY


def config_rows(root: Path | None = None, family: str | None = None) -> list[dict]:
    """Every trainable config under `root` with its description; by default those of ./configs, then the installed
    ones that no file of the same name there hides (as `fit --config configs/...` finds them); with `family`, only
    those whose model.family is that family."""
    roots = [root] if root else [Path.cwd() / "configs", PACKAGE_ROOT / "configs"]
    rows, seen = [], set()
    for folder in dict.fromkeys(r.resolve() for r in roots if r.is_dir()):
        for path in sorted(folder.rglob("*.yaml")):
            name = path.relative_to(folder)
            if name in seen or any(name.is_relative_to(skipped) for skipped in NOT_TRAINABLE):
                continue
            seen.add(name)
            if family is not None and config_family(path) != family:
                continue
            rows.append({"config": str(Path("configs") / name), "description": config_description(path)})
    return rows
