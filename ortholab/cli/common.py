"""What every command shares: the --db help, one-line argparse errors, aligned tables that fit a terminal, and the
flags an --export takes."""

from __future__ import annotations

import argparse
import re
import signal
import sys

from ortholab.command_name import as_typed

DB_HELP = (
    "the run store: a SQLite file's path or an SQLAlchemy URL (default: $ORTHOLAB_DB, else the SQLite file "
    "ortholab.db in $ORTHOLAB_RUNS, else in ./runs)"
)
LINE_WIDTH = 120  # tables printed for a terminal fit this many columns (their --wide flags show every character)
NARROWEST = 80  # a terminal narrower than this still gets 80 columns: fewer would cut every cell


def add_export_extras(parser, checkpoints_help: str) -> None:
    """--with-artifacts and --with-checkpoints, which an --export of `report` or `runs` takes."""
    parser.add_argument(
        "--with-artifacts",
        action="store_true",
        help="with --export: runs.db also holds the runs' artifacts (eigenvalues, audio: larger)",
    )
    parser.add_argument("--with-checkpoints", action="store_true", help=checkpoints_help)


def export_extra_given(args, *more: str) -> str | None:
    """The first export-only flag given (--with-artifacts, --with-checkpoints, then `more`'s attributes), or None."""
    flags = ("--with-artifacts", "--with-checkpoints", *more)
    return next((flag for flag in flags if getattr(args, flag.removeprefix("--").replace("-", "_"))), None)


def refuse_export_extras_without_export(args, *more: str) -> None:
    """An export-only flag without --export: one line naming it."""
    from ortholab.errors import ConfigError

    flag = export_extra_given(args, *more)
    if flag is not None and args.export is None:
        raise ConfigError(f"{flag} applies only to an export: add --export DIR, or leave {flag} out")


def line_width() -> int:
    """The columns tables are cut to: a terminal's width (its COLUMNS too), at least NARROWEST; LINE_WIDTH when the
    output goes to a file or a pipe, so that what a script reads does not depend on the window it ran in."""
    import shutil

    if not sys.stdout.isatty():
        return LINE_WIDTH
    return max(NARROWEST, shutil.get_terminal_size((LINE_WIDTH, 24)).columns)


def exit_reason(code: int) -> str:
    """A child process's return code in words: "exit 2", or the signal that killed it (a negative code)."""
    if code >= 0:
        return f"exit {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        return f"killed by signal {-code}"
    if -code == signal.SIGKILL:  # what Linux's out-of-memory killer sends; the process cannot say so itself
        return f"killed by {name}, most often the out-of-memory killer: `dmesg` names it"
    return f"killed by {name}"


def table(rows: list[dict], columns: list[str], width: int | None = None) -> str:
    """Aligned columns; with `width`, long text and then the widest columns are cut (ending in …) to fit it."""
    from ortholab.db.published import clip, shrink_to_fit

    cells = [[fmt(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) if cells else len(c) for i, c in enumerate(columns)]
    if width is not None:  # long text is cut first; ids a user types back never
        first = tuple(columns.index(c) for c in ("published", "config", "description") if c in columns)
        keep = tuple(i for i, c in enumerate(columns) if c in ("id", "table", "row", "run"))
        widths = shrink_to_fit(widths, width - 2 * (len(widths) - 1), first, keep)

    def line(values: list[str]) -> str:
        return "  ".join(clip(v, w).ljust(w) for v, w in zip(values, widths)).rstrip()

    return "\n".join([line(columns), line(["-" * w for w in widths]), *map(line, cells)])


def fmt(value) -> str:
    """A table cell: '-' for none, 4 significant digits for a float, a list's items joined by commas, control
    characters escaped."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):  # a family's groups: 'other, recurrent', not a Python list
        return ", ".join(map(fmt, value))
    text = str(value)  # a name recorded with a newline or a tab (older OrthoLab) stays on its row, escaped
    return text if text.isprintable() else text.encode("unicode_escape").decode("ascii")


def positive_ints(text: str, flag: str) -> list[int]:
    """'50,128' -> [50, 128]; anything else is one line naming the flag."""
    from ortholab.errors import ConfigError

    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        values = [0]
    if any(v <= 0 for v in values):
        raise ConfigError(f"{flag} {text!r}: give comma-separated positive integers, e.g. {flag} 50,128")
    return values


class OneLineParser(argparse.ArgumentParser):
    """argparse's errors as the CLI's one line (no usage block), naming the help to read; exit code 2."""

    def __init__(self, *args, **kwargs):
        self.option_names: set[str] = set()  # first: argparse's own __init__ adds --help through add_argument
        super().__init__(*args, **kwargs)

    def add_argument(self, *names, **kwargs):
        self.option_names.update(name for name in names if name.startswith("-"))
        return super().add_argument(*names, **kwargs)

    def split_passed_on(self, argv: list[str]) -> tuple[list[str], list[str]]:
        """argv as (this command's own arguments, the `--key value` or `--key=value` config flags it passes on to
        its runs: every `--key` it does not define, with the value after it). argparse alone reads the 6 of
        `--trainer.max_steps 6` as a positional where one is free, and `--model.family_args={rho: 4}` too (a space)."""
        own: list[str] = []
        passed_on: list[str] = []
        i = 0
        while i < len(argv):
            arg = argv[i]
            if arg == "--":  # argparse's end of options: the rest is its own
                own += argv[i:]
                break
            name = arg.split("=", 1)[0]  # `--est` is --estimate's: argparse takes unambiguous abbreviations
            if not arg.startswith("--") or any(known.startswith(name) for known in self.option_names):
                own.append(arg)
            else:
                passed_on.append(arg)
                if "=" not in arg and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                    i += 1
                    passed_on.append(argv[i])  # its value (a flag followed by another option has none)
            i += 1
        self._refuse_a_mistyped_own_flag(passed_on)
        return own, passed_on

    def _refuse_a_mistyped_own_flag(self, passed_on: list[str]) -> None:
        """`sweep --workrs 2` would go on to every trial as a config key and come back as fit's unknown key: an
        undotted flag near one of this command's own is named as its typo (config keys a run takes are dotted,
        or fit's top-level ones, none of which is near a command's own flag)."""
        for arg in passed_on:
            name = arg.split("=", 1)[0]
            if name.startswith("--") and "." not in name and (near := self._nearest_flag(name, cutoff=0.75)):
                self.error(f"unknown flag {name}; did you mean {near}?")

    def _nearest_flag(self, name: str, cutoff: float) -> str | None:
        """This command's own flag nearest to `name` (`--workers` for `--workrs`), or None."""
        import difflib

        flags = sorted(n[2:] for n in self.option_names if n.startswith("--"))
        near = difflib.get_close_matches(name[2:].lower(), flags, n=1, cutoff=cutoff)
        return f"--{near[0]}" if near else None

    def parse_known_args(self, args=None, namespace=None):
        self.given_args = list(sys.argv[1:] if args is None else args)  # error() names a mistyped flag among them
        return super().parse_known_args(args, namespace)

    def unknown_flag(self) -> str | None:
        """The first `--flag` given that this command does not define (nor abbreviates), with the nearest one."""
        for arg in getattr(self, "given_args", ()):
            name = str(arg).split("=", 1)[0]
            if name == "--" or not name.startswith("--"):
                continue
            if not any(known.startswith(name) for known in self.option_names):
                near = self._nearest_flag(name, cutoff=0.6)
                return f"unknown flag {name}{f'; did you mean {near}?' if near else ''}"
        return None

    def error(self, message: str):
        from ortholab.db.masking import known_passwords, mask_secrets

        if ("unrecognized arguments" in message or "invalid choice" in message) and (typo := self.unknown_flag()):
            message = typo  # `runs --statsu finished`: the typo, not the value argparse then misread
        elif choice := re.match(r"argument (\S+): invalid choice: '(.*)' \(choose from (.*)\)$", message):
            message = _not_a_choice(*choice.groups())  # `db versoin`: argparse named the argument's dest, 'action'

        print(
            as_typed(f"ortholab: error: {mask_secrets(message, known_passwords(sys.argv))} (see `{self.prog} --help`)"),
            file=sys.stderr,
        )
        sys.exit(2)


def _not_a_choice(argument: str, value: str, listed: str) -> str:
    """ "'versoin' is not one of upgrade, version; did you mean version?" (`--sampler 'gird'` for an option)."""
    import difflib

    options = [option.strip().strip("'") for option in listed.split(", ")]  # quoted until Python 3.12.x, then not
    near = difflib.get_close_matches(value, options, n=1, cutoff=0.6)
    what = f"{argument} {value!r}" if argument.startswith("-") else repr(value)
    return f"{what} is not one of {', '.join(options)}" + (f"; did you mean {near[0]}?" if near else "")
