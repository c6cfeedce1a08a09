"""The errors a user acts on, importable by every package (models, data modules, store, app) without the others."""

import difflib
import os
from collections.abc import Iterable
from pathlib import Path


class ReportedError(Exception):
    """An error whose message is for the user: the command line prints its one line and exits with code 2, no
    traceback (ortholab/user_errors.py). The store's errors and the NaN guard's stop derive from it."""


class ConfigError(ReportedError, ValueError):
    """A configuration value a user must change; the message names the key and the fix."""


class OrthoLabWarning(UserWarning):
    """Something a user should know that does not stop the command (an incomplete corpus, a resume that changes the
    data); printed as one line `ortholab: warning: ...` (training/console.py), not as Python's file:line report."""


def home_path(value: "str | os.PathLike", said: str) -> Path:
    """`value` with a leading ~ or ~user replaced by that home folder, as a shell does; one that names no home (an
    unknown user, HOME unset) is a ConfigError naming `said` (the flag, key or variable), where Path.expanduser's
    RuntimeError ('Could not determine home directory') was a traceback."""
    text = os.fspath(value)
    expanded = os.path.expanduser(text)  # leaves a ~ it cannot expand as it is
    if isinstance(expanded, str) and expanded.startswith("~"):
        head = expanded.replace(os.sep, "/").split("/", 1)[0]
        whose = f"no user {head[1:]!r} on this machine" if head != "~" else "no home folder (HOME is not set)"
        raise ConfigError(
            f"{said} {text!r}: {head} names {whose}; write ~/ for your own home folder, or give the full path"
        )
    return Path(expanded)


OWN_FAMILY = "register_family in a module named by $ORTHOLAB_CONFIG_MODULES, docs/configs.md#a-family-of-your-own"
OWN_OBJECTIVE = "register_objective in a module named by $ORTHOLAB_CONFIG_MODULES, docs/tasks.md#a-task-of-your-own"


def did_you_mean(value: object, choices: Iterable) -> str:
    """'did you mean 'scornn'? ' for a value close to one of `choices`, case aside ('scoRNN', 'rmsprp'); else ''."""
    lowered = {str(choice).lower(): choice for choice in choices}
    ratio = {choice: difflib.SequenceMatcher(None, str(value).lower(), choice).ratio() for choice in lowered}
    best = max(ratio.values(), default=0.0)
    tied = sorted(lowered[choice] for choice, r in ratio.items() if r == best) if best >= 0.6 else []
    if not tied or len(tied) > 2:  # more than two equally close (three tables of one name but a digit): no guess
        return ""
    return f"did you mean {' or '.join(map(repr, tied))}? "
