"""`ortholab`: finds the command's module in the registry (ortholab/cli/__init__.py), parses its arguments and runs
it; any user error becomes one line on stderr and exit code 2.

Nothing here imports Lightning or torch: a reader such as `ortholab runs` starts in a fraction of a second, and the
training commands pay for Lightning's import only when they run.
"""

from __future__ import annotations

import difflib
import importlib
import os
import sys
import warnings
from types import ModuleType

from ortholab import aliases
from ortholab.cli import COMMANDS, children
from ortholab.cli.common import OneLineParser
from ortholab.command_name import as_typed
from ortholab.db.masking import check_db_url, db_urls_in, known_passwords, mask_secrets
from ortholab.errors import ConfigError
from ortholab.training.allocator import reuse_freed_memory
from ortholab.training.console import quiet_third_party_noise
from ortholab.training.subnormals import flush_subnormals
from ortholab.user_errors import user_error

HEADER = """usage: ortholab {fit,validate,test,predict,runs,list,reproduce,report,...} ... | ortholab --version

Train orthogonal/unitary RNNs and record every run in a SQL store.
"""


def version_line() -> str:
    """`ortholab --version`: the installed version, the checkout's commit when run from one, torch and Lightning."""
    from ortholab.db.provenance import code_version

    code = code_version()
    commit = f" (commit {code['commit']})" if code["commit"] else ""
    return f"ortholab {code['ortholab'] or 'unknown'}{commit}; torch {code['torch']}, lightning {code['lightning']}"


# words a user may try for a command that has another name, or is a subcommand of one
MEANT = {
    "show": "`ortholab runs show ID`",
    "info": "`ortholab runs show ID`",
    "inspect": "`ortholab runs show ID`",
    "delete": "`ortholab runs delete ID`",
    "rm": "`ortholab runs delete ID`",
    "tag": "`ortholab runs tag ID LABEL`",
    "untag": "`ortholab runs untag ID LABEL`",
    "ls": "`ortholab runs`",
    "status": "`ortholab runs`",
    "compare": "`ortholab runs --columns KEY,KEY` (runs side by side) or `ortholab dashboard` (curves)",
    "diff": "`ortholab runs --columns KEY,KEY` (runs side by side) or `ortholab dashboard` (curves)",
    "train": "`ortholab fit`",
    "resume": "`ortholab fit --resume ID`",
    "eval": "`ortholab validate` or `ortholab test`",
    "evaluate": "`ortholab validate` or `ortholab test`",
    "export": "`ortholab report TABLE --export DIR`",
    "upgrade": "`ortholab db upgrade`",
    "migrate": "`ortholab db upgrade`",
    "ui": "`ortholab dashboard`",
    "app": "`ortholab dashboard`",
    "serve": "`ortholab dashboard`",
}


def command_module(name: str) -> ModuleType:
    """The module of command `name` (only that one is imported); one line naming the commands if there is none."""
    if name not in COMMANDS:
        near = difflib.get_close_matches(name, COMMANDS, n=1)
        hint = f"did you mean {near[0]!r}? " if near else ""
        if name.lower() in MEANT:
            hint = f"did you mean {MEANT[name.lower()]}? "
        raise ConfigError(f"unknown command {name!r}; {hint}use one of {', '.join(COMMANDS)}")
    return importlib.import_module(f"ortholab.cli.{COMMANDS[name]}")


def top_help() -> str:
    """`ortholab --help`: each command's usage line and, indented below it, its one sentence."""
    lines = [HEADER]
    for module_name in dict.fromkeys(COMMANDS.values()):  # each module once, in the registry's order
        module = importlib.import_module(f"ortholab.cli.{module_name}")
        for usage, summary in getattr(module, "HELP_ENTRIES", None) or [(module.USAGE, module.HELP)]:
            lines.append(f"  {usage}\n{' ' * 25}{summary}")
    return "\n".join(lines) + "\n"


USER_MODULES_FOR = ("train", "listing", "bench", "sweep", "reproduce")  # the commands that build or list families

EXTRA_FLAGS_HELP = (
    "Other --key value flags are config keys given to every fit this command starts, as `ortholab fit` takes them "
    "(e.g. --data.path DIR, --trainer.max_steps 100)."
)


def run_parsed(module: ModuleType, argv: list[str]) -> None:
    """argparse for one command: its own parser (errors as one line), then its run(args, extra)."""
    epilog = EXTRA_FLAGS_HELP if getattr(module, "EXTRA_FLAGS", False) else None
    parser = OneLineParser(prog=f"ortholab {argv[0]}", description=module.HELP, epilog=epilog)
    module.add_arguments(parser)
    if getattr(module, "EXTRA_FLAGS", False):
        own, extra = parser.split_passed_on(argv[1:])
        module.run(parser.parse_args(own), extra)
        return
    args, extra = parser.parse_known_args(argv[1:])
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    module.run(args, extra)


def reader_went_away() -> None:
    """The reader of the output went away (`ortholab runs | head`): stop quietly, as Unix tools do."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush at exit
    sys.exit(0)


def main(argv: list[str] | None = None) -> None:
    given = argv is not None
    argv = list(argv if given else sys.argv[1:])
    children.stop_with_parent()  # a sweep's trial: stops with its sweep, even one killed with -9
    aliases.install()  # configs' short class paths (datamodules.CopyingTask) in this process
    if not given and hasattr(sys.stdout, "reconfigure"):  # a non-UTF-8 locale (LC_ALL=C): '?' for what it can't show
        sys.stdout.reconfigure(errors="replace")
    if not argv or argv[0] in ("-h", "--help", "-V", "--version"):
        try:
            print(version_line() if argv and argv[0] in ("-V", "--version") else top_help(), flush=True)
        except BrokenPipeError:  # `ortholab --help | head`
            reader_went_away()
        return
    if not given and COMMANDS.get(argv[0]) in ("train", "bench"):  # the console script: a training process
        reuse_freed_memory()
        if COMMANDS[argv[0]] == "bench":  # `fit` flushes after its config files are read (torch's import, ~1 s)
            flush_subnormals()
    quiet_third_party_noise()
    warnings.filterwarnings("ignore", message="LightningCLI's args parameter")  # it prints the args: --db's password
    try:
        for i, arg in enumerate(argv):  # `--db "$DB"` with DB unset: not the default store, silently
            if (arg == "--db" and i + 1 < len(argv) and not argv[i + 1].strip()) or arg.strip() == "--db=":
                raise ConfigError("--db '': give the store's file or URL, or leave --db out for the default store")
        for url in db_urls_in(argv):  # a password that would be misread (and quoted back) is refused first
            check_db_url(url, "--db" if url != os.environ.get("ORTHOLAB_DB") else "$ORTHOLAB_DB =")
        if os.environ.get("ORTHOLAB_DB"):  # a file's path as its absolute URL, for this process and its children
            from ortholab.db.store import store_url

            os.environ["ORTHOLAB_DB"] = store_url(os.environ["ORTHOLAB_DB"], "$ORTHOLAB_DB")  # not --db: none given
        module = command_module(argv[0])
        if COMMANDS[argv[0]] in USER_MODULES_FOR:  # a family of the user's own registers itself as it is imported
            aliases.import_user_modules()
        if COMMANDS[argv[0]] == "train":
            module.main(argv, given)
        else:
            run_parsed(module, argv)
    except KeyboardInterrupt:  # Ctrl-C outside a training's own handler (while Python imports, a reader reads)
        print("ortholab: stopped by Ctrl-C", file=sys.stderr)
        sys.exit(130)
    except BrokenPipeError:  # `ortholab runs | head`
        reader_went_away()
    except Exception as err:  # a user error anywhere in the chain is reported as one line
        reported = user_error(err)
        if reported is None:
            raise
        print(as_typed(f"ortholab: error: {mask_secrets(str(reported), known_passwords(argv))}"), file=sys.stderr)
        sys.exit(2)
