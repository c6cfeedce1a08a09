"""The optional parts of OrthoLab (pyproject's extras) and the one-line error naming the extra when one is missing.

`pip install ortholab` gives training, the run store on SQLite, data fetching and reports; each extra adds one part.
`make install` installs them all (the dev extra pulls `all`).
"""

from __future__ import annotations

import importlib
import importlib.util
import shlex
import sys

from ortholab.errors import ConfigError

EXTRAS = {  # extra -> (what it enables, the modules it installs)
    "postgres": ("a PostgreSQL run store (postgresql+psycopg:// URLs)", ("psycopg",)),
    "sweeps": ("`ortholab sweep`", ("optuna",)),
    "speech": ("the speech metrics PESQ and STOI (audio evaluation)", ("pesq", "pystoi")),
    "dashboard": ("`ortholab dashboard` and the HTML figures of `report --export`", ("streamlit", "plotly")),
}
# Lightning's own loggers beside the run store (trainer.logger), each its own extra, not in `all`: the trackers'
# packages are large and a user wants one of them
TRACKERS = {
    "tensorboard": ("Lightning's TensorBoardLogger", ("tensorboard",)),
    "mlflow": ("Lightning's MLFlowLogger", ("mlflow",)),
    "wandb": ("Lightning's WandbLogger (offline or online)", ("wandb",)),
}
EXTRA_OF_MODULE = {module: extra for extra, (_, modules) in {**EXTRAS, **TRACKERS}.items() for module in modules}


class MissingExtra(ConfigError):
    """An optional dependency is not installed; the message names the extra that installs it."""


def missing_extra_message(extra: str, module: str) -> str:
    feature = {**EXTRAS, **TRACKERS}[extra][0]
    every = " (or 'ortholab[all]' for every optional part)" if extra in EXTRAS else ""
    return (
        f"{feature} {'need' if ' and ' in feature else 'needs'} the optional package {module!r}, which is not "
        f"installed: "
        f"{shlex.quote(sys.executable)} -m pip install 'ortholab[{extra}]'{every}"  # this Python's pip, quoted
    )


def require_extra(extra: str) -> None:
    """Import every module of `extra` now; MissingExtra naming the extra if one is absent."""
    for module in {**EXTRAS, **TRACKERS}[extra][1]:
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


LOGGER_EXTRAS = {"TensorBoardLogger": "tensorboard", "MLFlowLogger": "mlflow", "WandbLogger": "wandb"}


def check_logger_extras(loggers) -> None:
    """Each Lightning logger the trainer config names (trainer.logger: one, a list, or true/false) with its
    tracker's package installed, before anything is recorded; MissingExtra naming the extra otherwise."""
    for item in loggers if isinstance(loggers, (list, tuple)) else [loggers]:
        path = item.get("class_path") if hasattr(item, "get") else getattr(item, "class_path", None)
        extra = LOGGER_EXTRAS.get(str(path or "").rsplit(".", 1)[-1])
        if extra == "tensorboard" and importlib.util.find_spec("tensorboardX") is not None:
            continue  # Lightning's TensorBoardLogger writes through tensorboardX as well
        if extra is not None:
            require_extra(extra)
