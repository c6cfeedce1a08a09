"""Short class paths in configs: `datamodules.CopyingTask` is `ortholab.datamodules.CopyingTask`.

The configs name classes by the repository's folder names (`datamodules.X`, `training.callbacks.audio.Y`). The
CLI installs this finder in its own process only, so that those names import OrthoLab's modules themselves
(the same module objects, never a second copy), while `import ortholab` in a user's program leaves their own
`models`, `training`, ... packages alone.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

SHORT_NAMES = ("datamodules", "training", "models")  # the folders a config's class_path may start with


class _Existing(importlib.abc.Loader):
    def __init__(self, module):
        self.module = module

    def create_module(self, spec):
        return self.module

    def exec_module(self, module) -> None:  # already executed under its full name
        pass


class ShortNameFinder(importlib.abc.MetaPathFinder):
    """Resolves `datamodules...`, `training...` and `models...` to the `ortholab.` module of that name."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".", 1)[0] not in SHORT_NAMES:
            return None
        module = importlib.import_module(f"ortholab.{fullname}")
        return importlib.util.spec_from_loader(fullname, _Existing(module), is_package=hasattr(module, "__path__"))


def install() -> None:
    """Put the finder first, once, unless a program of the user's already imported a module of these names."""
    if any(name in sys.modules and not sys.modules[name].__name__.startswith("ortholab.") for name in SHORT_NAMES):
        return  # the user's own package wins; configs then need the full `ortholab.` class paths
    if not any(isinstance(finder, ShortNameFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, ShortNameFinder())


def full_class_path(path: str) -> str:
    """`datamodules.CopyingTask` -> `ortholab.datamodules.CopyingTask`; full paths unchanged."""
    return f"ortholab.{path}" if path.split(".", 1)[0] in SHORT_NAMES else path
