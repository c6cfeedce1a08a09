"""The errors a user acts on, importable by every package (models, data modules, store, app) without the others."""

import difflib
from collections.abc import Iterable


class ReportedError(Exception):
    """An error whose message is for the user: the command line prints its one line and exits with code 2, no
    traceback (ortholab/user_errors.py). The store's errors and the NaN guard's stop derive from it."""


class ConfigError(ReportedError, ValueError):
    """A configuration value a user must change; the message names the key and the fix."""


class OrthoLabWarning(UserWarning):
    """Something a user should know that does not stop the command (an incomplete corpus, a resume that changes the
    data); printed as one line `ortholab: warning: ...` (training/console.py), not as Python's file:line report."""


OWN_FAMILY = "register_family in a module named by $ORTHOLAB_CONFIG_MODULES, docs/configs.md#a-family-of-your-own"
OWN_OBJECTIVE = "register_objective in a module named by $ORTHOLAB_CONFIG_MODULES, docs/tasks.md#a-task-of-your-own"


def did_you_mean(value: object, choices: Iterable) -> str:
    """'did you mean 'scornn'? ' for a value close to one of `choices`, case aside ('scoRNN', 'rmsprp'); else ''."""
    lowered = {str(choice).lower(): choice for choice in choices}
    near = difflib.get_close_matches(str(value).lower(), list(lowered), n=1, cutoff=0.6)
    return f"did you mean {lowered[near[0]]!r}? " if near else ""
