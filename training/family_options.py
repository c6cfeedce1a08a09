"""A family's options (`model.family_args`) as an argument parser sees them: typed, defaulted, one line each.

The family's `__init__` signature is the single source: jsonargparse reads its type hints and defaults, and the
class docstring's `name: text` lines give each option its help. An option typed `Literal[...]` has named choices:
models/choices.py checks a given value against them, the check the constructor makes when called directly. The
CLI's `--model.family_args.help NAME`, `ortholab list families --family NAME` and `--print_config` all show what
this module builds.
"""

from __future__ import annotations

import argparse
import inspect
import shutil
import textwrap
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

from jsonargparse import ArgumentParser

from ortholab import aliases
from ortholab.errors import OWN_FAMILY, ConfigError, did_you_mean
from ortholab.models import FAMILIES
from ortholab.models.choices import check_choices, option_choices

NOT_OPTIONS = {"self", "input_size", "hidden_size"}  # set by the model (model.hidden_size, the task), not by the user


def family_class(family: str) -> type:
    if family not in FAMILIES:
        raise ConfigError(
            f"model.family = {family!r} is not a registered family; {did_you_mean(family, FAMILIES)}"
            f"choose one of {sorted(FAMILIES)} (see `ortholab list families`; one of your own: {OWN_FAMILY})"
            f"{aliases.unimportable_note()}"
        )
    return FAMILIES[family]


def _parameters(family: str) -> list[inspect.Parameter]:
    signature = inspect.signature(family_class(family).__init__)
    return [
        p for name, p in signature.parameters.items() if name not in NOT_OPTIONS and p.kind is p.POSITIONAL_OR_KEYWORD
    ]


@cache
def options_parser(family: str) -> ArgumentParser:
    """The parser of one family's options, built from its constructor's signature (types and defaults)."""
    parser = ArgumentParser(prog=f"model.family_args ({family})", exit_on_error=False, default_env=False)
    parser.add_class_arguments(family_class(family), skip=NOT_OPTIONS, sub_configs=False, fail_untyped=False)
    return parser


def option_help(family: str) -> dict[str, str]:
    """Each option's one line, from the class docstring's `name: text` lines (continuation lines joined)."""
    names = {p.name for p in _parameters(family)}
    lines, current, help_lines = (inspect.getdoc(family_class(family)) or "").splitlines(), None, {}
    for line in lines:
        head, sep, text = line.partition(":")
        if sep and head.strip() in names and not line.startswith(" "):
            current = head.strip()
            help_lines[current] = text.strip()
        elif current and line.startswith(" ") and line.strip():
            help_lines[current] += " " + line.strip()
        else:
            current = None
    return help_lines


def _choices_text(choices: tuple) -> str:
    """A Literal option's type as the table shows it: its choices, as YAML would give them ('a' | 'b', 1 | -1)."""
    return " | ".join("null" if choice is None else repr(choice) for choice in choices)


def _type_name(family: str, parameter: inspect.Parameter) -> str:
    choices = option_choices(family_class(family)).get(parameter.name)
    if choices is not None:
        return _choices_text(choices)
    annotation = parameter.annotation
    return annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))


def resolve_family_args(family: str, given: dict[str, Any] | None, where: str = "model.family_args") -> dict[str, Any]:
    """The family's options with every default filled in, each given value checked by the parser against the
    constructor's type hint; a wrong key or type is a ConfigError naming `where`.KEY (model.family_args.KEY, or
    model.family_args.cell_args.KEY for the R-Transformer's cell)."""
    given = dict(given or {})
    parser, parameters = options_parser(family), {p.name: p for p in _parameters(family)}
    for key, value in given.items():
        if key not in parameters:
            options = f"its options are {sorted(parameters)}" if parameters else "it has none"
            raise ConfigError(
                f"{where}.{key} is not an option of family {family!r}; {did_you_mean(key, parameters)}"
                f"{options} (see `ortholab list families --family {family}`)"
            )
        # a Literal option: `KEY = VALUE; choose one of [...]`, as the constructor itself refuses it
        check_choices(
            family_class(family), {key: value}, f"{where}.", explained_by=f"`ortholab list families --family {family}`"
        )
        try:
            parser.parse_object({key: value})
        except argparse.ArgumentError:
            raise ConfigError(
                f"{where}.{key}: expected {_type_name(family, parameters[key])}, got "
                f"{value!r}; see `ortholab list families --family {family}`"
            ) from None
    resolved = {name: p.default for name, p in parameters.items() if p.default is not inspect.Parameter.empty}
    return resolved | given


def recorded_family_args(family: str, given: dict[str, Any] | None) -> dict[str, Any]:
    """`resolve_family_args`, and where the family builds another family inside it (the R-Transformer's `cell` with
    its `cell_args`), that family's options checked and filled in too, their errors naming
    model.family_args.cell_args.KEY: what a run records as the values it ran with."""
    resolved = resolve_family_args(family, given)
    cell = resolved.get("cell")
    # only a cell the family can build: another name is the constructor's own refusal of model.family_args.cell
    if isinstance(cell, str) and cell in getattr(family_class(family), "cell_families", {}) and "cell_args" in resolved:
        resolved["cell_args"] = resolve_family_args(cell, resolved["cell_args"], "model.family_args.cell_args")
    return resolved


def family_options_rows(family: str) -> list[dict[str, Any]]:
    """One row per option: key, type, default (absent when required), its help line, and for an option with named
    choices (a Literal) the list of them."""
    helps, choices = option_help(family), option_choices(family_class(family))
    return [
        {"key": f"model.family_args.{p.name}", "type": _type_name(family, p), "help": helps.get(p.name, "")}
        | ({} if p.default is p.empty else {"default": p.default})
        | ({"choices": list(choices[p.name])} if p.name in choices else {})
        for p in _parameters(family)
    ]


def describe_options(family: str) -> str:
    """A table of the family's options: key, type (an option's choices, where it has named ones), default, one
    line."""
    rows = [
        (row["key"], row["type"], repr(row["default"]) if "default" in row else "required", row["help"])
        for row in family_options_rows(family)
    ]
    if not rows:
        return f"family {family!r} has no options"
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = [f"options of family {family!r} ({family_class(family).__name__}):"]
    for row in rows:  # key, type and default in columns; the help wrapped beneath, indented
        lines.append("  " + "  ".join(cell.ljust(width) for cell, width in zip(row[:3], widths)).rstrip())
        lines += textwrap.wrap(
            row[3],
            width=max(60, shutil.get_terminal_size().columns - 1),
            initial_indent=" " * 6,
            subsequent_indent=" " * 6,
        )
    return "\n".join(lines)


def _constructor_defaults(cls: type) -> dict[str, Any]:
    """The optimizer's own defaults; a tuple (Adam's betas) as the list YAML writes, which reads back the same."""
    signature = inspect.signature(cls.__init__)
    return {
        name: list(p.default) if isinstance(p.default, tuple) else p.default
        for name, p in signature.parameters.items()
        if name not in ("self", "params") and p.default is not p.empty and p.kind is p.POSITIONAL_OR_KEYWORD
    }


def resolve_optimizers(
    family: str, family_args: dict[str, Any] | None, optimizers: dict[str, dict] | None, hidden_size: int = 4
) -> dict[str, dict]:
    """Each parameter group's optimizer as the run will build it: the group's own entry, the family's default for
    it, or `default`, with the optimizer's own defaults filled in (what `--print_config` shows)."""
    from ortholab.models.optimizers import DEFAULT_OPTIMIZERS, OPTIMIZERS, group_specs

    layer = family_class(family)(2, hidden_size, **resolve_family_args(family, family_args))
    specs = group_specs(
        layer.parameter_groups(), optimizers or DEFAULT_OPTIMIZERS, getattr(layer, "default_optimizers", {})
    )
    return {
        group: {"name": spec["name"]} | _constructor_defaults(OPTIMIZERS[spec["name"]]) | spec
        for group, spec in specs.items()
    }


def with_resolved_options(model: dict[str, Any]) -> dict[str, Any]:
    """A config's `model` section with family_args and optimizers resolved; unchanged where they are invalid (the
    run itself then reports the error with its key)."""
    try:
        family_args = resolve_family_args(model["family"], model.get("family_args"))
        size = model.get("hidden_size")
        optimizers = resolve_optimizers(
            model["family"],
            family_args,
            model.get("optimizers"),
            size if isinstance(size, int) and 0 < size <= 1024 else 4,
        )
    except (ConfigError, KeyError, TypeError, ValueError):
        return model
    return model | {"family_args": family_args, "optimizers": optimizers}


def check_family_switch(model: Mapping[str, Any], given_on_command_line: Sequence[str]) -> None:
    """`--model.family NEW` on a config written for another family, whose family_args or optimizer groups NEW does
    not take: one ConfigError naming all of them and the flags that replace them (each was refused alone before,
    one at a time). Nothing to say when the command line gives family_args or optimizers of its own."""
    family = model.get("family")
    if "family" not in given_on_command_line or family not in FAMILIES:
        return
    problems, fixes = [], []
    options = {p.name for p in _parameters(family)}
    foreign_options = sorted(set(model.get("family_args") or {}) - options)
    if foreign_options and "family_args" not in given_on_command_line:
        problems.append(f"model.family_args {foreign_options} ({family}'s options: {sorted(options)})")
        fixes.append("--model.family_args '{}'")
    # the groups of the options it will build: its own where they all fit, else its defaults (what '{}' gives)
    groups = optimizer_groups(family, None if foreign_options else model.get("family_args"))
    configured = set(model.get("optimizers") or {})
    foreign_groups = sorted(configured - groups - {"default"})
    # a group it has that the config does not set, with no default entry (scoRNN's config for scuRNN: no 'scaling')
    missing_groups = sorted(groups - configured) if configured and "default" not in configured else []
    if (foreign_groups or missing_groups) and groups and "optimizers" not in given_on_command_line:
        found = [f"groups {foreign_groups}"] if foreign_groups else []
        found += [f"with no group {missing_groups}"] if missing_groups else []
        problems.append(f"model.optimizers {' and '.join(found)} ({family}'s groups: {sorted(groups)}, or default)")
        fixes.append("--model.optimizers '{}'")
    if problems:
        raise ConfigError(
            f"--model.family {family}: the config's {' and '.join(problems)} are another family's; give "
            f"{family}'s own, e.g. {' '.join(fixes)} (its defaults; `ortholab list families --family {family}`)"
        )


def optimizer_groups(family: str, family_args: dict[str, Any] | None) -> set[str]:
    """The family's parameter groups as a model with these options builds them (its layer's, and 'other' for the
    readout); empty when it cannot be built (the run then says why)."""
    try:
        layer = family_class(family)(2, 4, **resolve_family_args(family, family_args))
    except Exception:  # a family that needs an option given: no group check
        return set()
    return set(layer.parameter_groups()) | {"other"}
