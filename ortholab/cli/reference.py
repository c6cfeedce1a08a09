"""The parts of the docs read from the code, so they cannot drift from it: the markers of the Markdown pages.

- `<!-- ortholab:family NAME -->`: the family's class, parameter groups (names and shapes of a small layer) and
  options (`model.family_args`: type, default, one line each) from models.FAMILIES and the class signature;
- `<!-- ortholab:task NAME -->`: the task's class and options (`data.init_args`) from datamodules.TASKS;
- `<!-- ortholab:help COMMAND -->`: `ortholab COMMAND --help` as the CLI prints it;
- `<!-- ortholab:configs -->`: `ortholab list configs` as a table.
The site's build (docs/_hooks/reference.py) and `ortholab docs PAGE` fill them in with `filled`; the build fails
on `coverage_problems`: a new family, task or command cannot go undocumented.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import os
import re
import sys
from functools import cache

MARKER = re.compile(r"<!-- ortholab:(family|task|help|configs)\s*([\w-]*)\s*-->")
SMALL_LAYER = (2, 8)  # input size, hidden size of the layer whose parameter shapes the family pages show


def families() -> dict:
    from ortholab.models import FAMILIES

    return FAMILIES


def tasks() -> dict:
    from ortholab.datamodules import TASKS

    return TASKS


def commands() -> list[str]:
    """The commands of the registry (ortholab/cli/__init__.py), which `ortholab --help` lists."""
    from ortholab.cli import COMMANDS

    return list(COMMANDS)


def _paragraphs(doc: str) -> list[str]:
    """A docstring's paragraphs (split at blank lines), each with its lines' breaks kept."""
    return [p.strip() for p in re.split(r"\n\s*\n", doc) if p.strip()]


def _depth_at(text: str, position: int) -> int:
    """How many parentheses are open at `position` (a half-open interval's lone ')' never goes below zero)."""
    depth = 0
    for char in text[:position]:
        depth = depth + 1 if char == "(" else max(0, depth - 1) if char == ")" else depth
    return depth


def _cut(paragraph: str, starts: re.Pattern) -> list[tuple[list[str], str]]:
    """The (option names, description) pairs of one paragraph: each runs to the next option's start, or to a line
    that opens a new sentence at column 0 (a capital letter: 'Parameter groups: ...') outside parentheses."""
    hits = [h for h in starts.finditer(paragraph) if _depth_at(paragraph, h.start(1)) == 0]
    pairs = []
    for hit, after in zip(hits, [*hits[1:], None]):
        end = after.start() if after else len(paragraph)
        for line_break in re.finditer(r"\n(?=[A-Z])", paragraph[hit.end() : end]):
            if _depth_at(paragraph, hit.end() + line_break.start()) == 0:
                end = hit.end() + line_break.start()
                break
        text = " ".join(paragraph[hit.end() : end].split()).rstrip(";").strip()
        pairs.append((re.split(r"\s*/\s*", hit.group(1)), text))
    return pairs


def option_descriptions(cls, names: list[str]) -> dict[str, str]:
    """One description per option, from `name: text` in the class docstring, else from a `- name ...` bullet of
    its module's docstring; '' where neither. A `name:` (or `a / b:` for two options) starts a description at a
    line's start or after '; ', '. ' or '/ ', outside parentheses, so several options on one line are cut apart
    and a mention inside a sentence or a parenthesis is not taken for one."""
    found: dict[str, str] = {}
    one = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    if not one:
        return found
    names_group = rf"((?:{one})(?:\s*/\s*(?:{one}))*)"
    starts = re.compile(rf"(?:^|(?<=[;.] )|(?<=\n)\s*){names_group}:\s")
    for paragraph in _paragraphs(inspect.getdoc(cls) or ""):
        for options, text in _cut(paragraph, starts):
            for option in options:
                found.setdefault(option, text)
    bullet_starts = re.compile(rf"(?:^- |(?<=[;.] )){names_group}\b:?\s")
    for bullet in re.split(r"\n(?=- )", inspect.getdoc(inspect.getmodule(cls)) or ""):
        for options, text in _cut(bullet.split("\n\n")[0], bullet_starts):
            for option in options:
                found.setdefault(option, text)
    return found


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def options_table(cls, skip: set[str], key: str) -> str:
    params = [
        p
        for p in inspect.signature(cls.__init__).parameters.values()
        if p.name not in skip and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
    ]
    if not params:
        return f"No options (`{key}` stays empty)."
    from ortholab.models.choices import option_choices

    notes = option_descriptions(cls, [p.name for p in params])
    choices = option_choices(cls)  # a Literal (or an alias of one): its choices, not the alias's name
    rows = ["| option | type | default | description |", "|---|---|---|---|"]
    for p in params:
        kind = p.annotation if isinstance(p.annotation, str) else getattr(p.annotation, "__name__", str(p.annotation))
        kind = "" if p.annotation is p.empty else kind
        if p.name in choices:
            kind = " | ".join(f"`{c!r}`" for c in choices[p.name])
        default = "required" if p.default is p.empty else f"`{p.default!r}`"
        rows.append(f"| `{p.name}` | {_cell(kind)} | {_cell(default)} | {_cell(notes.get(p.name, ''))} |")
    return "\n".join(rows)


@cache
def family_reference(name: str) -> str:
    cls = families()[name]
    layer = cls(*SMALL_LAYER)
    names = {id(p): k for k, p in layer.named_parameters()}
    groups = ["| group | parameters (shape at input size 2, hidden size 8) | count |", "|---|---|---|"]
    for group, params in layer.parameter_groups().items():
        listed = ", ".join(f"`{names.get(id(p), '?')}` {tuple(p.shape)}" for p in params)
        if len(listed) > 400:  # deep stacks (the R-Transformer): name the tensors' count instead
            listed = f"{len(params)} tensors"
        groups.append(f"| `{group}` | {listed} | {sum(p.numel() for p in params):,} |")
    if layer.recurrent_matrix() is not None:
        matrix = "yes"
    elif layer.eigenvalues() is not None:  # a diagonal recurrence (LRU, S4D): its eigenvalues without a matrix
        matrix = "no, a diagonal recurrence (its eigenvalues are recorded; the orthogonality drift skips it)"
    else:
        matrix = "no (the matrix analyses skip it)"
    return "\n".join(
        [
            f"`model.family: {name}` · class `{cls.__module__}.{cls.__qualname__}` · one recurrent matrix: {matrix}",
            "",
            "#### Parameter groups",
            "",
            "One optimizer per group (`model.optimizers.<group>`; a `default` entry serves the groups not named).",
            "",
            *groups,
            "",
            "#### Options (`model.family_args`)",
            "",
            "Read from the class's signature and docstring.",
            "",
            options_table(cls, {"self", "input_size", "hidden_size"}, "model.family_args"),
        ]
    )


@cache
def task_reference(name: str) -> str:
    cls = tasks()[name]
    return "\n".join(
        [
            f"`data.class_path: datamodules.{cls.__qualname__}` (class `{cls.__module__}.{cls.__qualname__}`)",
            "",
            "Options (`data.init_args`, or `--data.<option>`), read from the class's signature and docstrings:",
            "",
            options_table(cls, {"self"}, "data.init_args"),
        ]
    )


@cache
def command_help(command: str) -> str:
    from ortholab.cli.main import main

    out, err, code = io.StringIO(), io.StringIO(), 0
    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "90"
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main([command, "--help"])
    except SystemExit as stop:
        code = stop.code
    finally:
        if previous is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = previous
    said = err.getvalue().strip().splitlines()
    if code not in (0, None):  # its one-line error (a broken $ORTHOLAB_CONFIG_MODULES module), as `fit` says it
        from ortholab.errors import ConfigError

        raise ConfigError(said[-1].removeprefix("ortholab: error: ") if said else f"`ortholab {command} --help` failed")
    sys.stderr.write(err.getvalue())  # its warnings, if any, as the command itself prints them
    text = out.getvalue().strip()
    if not text:
        raise RuntimeError(f"`ortholab {command} --help` printed nothing")
    return f"```text\n$ ortholab {command} --help\n{text}\n```"


def configs_table() -> str:
    from ortholab.cli.listing import config_rows

    rows = ["| config | description |", "|---|---|"]
    rows += [f"| `{r['config']}` | {_cell(r['description'])} |" for r in config_rows()]
    return "\n".join(rows)


def filled(markdown: str) -> str:
    """`markdown` with every marker replaced by what it stands for (KeyError: a name that is not registered)."""
    return MARKER.sub(_replace, markdown)


def _replace(match: re.Match) -> str:
    kind, name = match.group(1), match.group(2)
    if kind == "family":
        return family_reference(name)
    if kind == "task":
        return task_reference(name)
    if kind == "help":
        return command_help(name)
    return configs_table()


def coverage_problems(sources: dict[str, str]) -> list[str]:
    """What the registries hold that the docs do not: `sources` maps a page's path (under docs/) to its Markdown."""
    problems = []
    for name in families():
        page = sources.get(f"families/{name}.md")
        if page is None or f"<!-- ortholab:family {name} -->" not in page:
            problems.append(f"family {name!r} has no page docs/families/{name}.md with <!-- ortholab:family {name} -->")
    tasks_page = sources.get("tasks.md", "")
    problems += [
        f"task {name!r} has no <!-- ortholab:task {name} --> section in docs/tasks.md"
        for name in tasks()
        if f"<!-- ortholab:task {name} -->" not in tasks_page
    ]
    cli_page = sources.get("cli.md", "")
    problems += [
        f"command {name!r} has no section in docs/cli.md: a line ## `ortholab {name}` (the name in backticks)"
        for name in commands()
        if not re.search(rf"^## `ortholab {re.escape(name)}`", cli_page, re.MULTILINE)
    ]
    return problems
