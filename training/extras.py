"""The optional parts of OrthoLab (pyproject's extras) and the one-line error naming the extra when one is missing.

`pip install ortholab` gives training, the run store on SQLite, data fetching and reports; each extra adds one part.
`make install` installs them all (the dev extra pulls `all`).
"""
from __future__ import annotations

import importlib

from ortholab.errors import ConfigError

EXTRAS = {  # extra -> (what it enables, the modules it installs)
    "postgres": ("a PostgreSQL run store (postgresql+psycopg:// URLs)", ("psycopg",)),
    "sweeps": ("`ortholab sweep`", ("optuna",)),
    "speech": ("the speech metrics PESQ and STOI (audio evaluation)", ("pesq", "pystoi")),
    "dashboard": ("`ortholab dashboard` and the HTML figures of `report --export`", ("streamlit", "plotly")),
}
EXTRA_OF_MODULE = {module: extra for extra, (_, modules) in EXTRAS.items() for module in modules}


class MissingExtra(ConfigError):
    """An optional dependency is not installed; the message names the extra that installs it."""


def missing_extra_message(extra: str, module: str) -> str:
    feature = EXTRAS[extra][0]
    return (f"{feature} needs the optional package {module!r}, which is not installed: "
            f"pip install 'ortholab[{extra}]' (or 'ortholab[all]' for every optional part)")


def require_extra(extra: str) -> None:
    """Import every module of `extra` now; MissingExtra naming the extra if one is absent."""
    for module in EXTRAS[extra][1]:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as err:
            if (err.name or "").split(".")[0] != module:
                raise  # a dependency of the package itself is broken: not ours to rename
            raise MissingExtra(missing_extra_message(extra, module)) from None


def explain_missing_module(err: BaseException) -> MissingExtra | None:
    """The MissingExtra behind a ModuleNotFoundError of an optional package (anywhere in a command), else None."""
    if not isinstance(err, ModuleNotFoundError):
        return None
    module = (err.name or "").split(".")[0]
    extra = EXTRA_OF_MODULE.get(module)
    return MissingExtra(missing_extra_message(extra, module)) if extra else None
