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


# What a config may name (class_path, or a dotted value): classes of these modules only, checked before anything is
# imported (jsonargparse's import-path policy: a denied path is never imported, so no import side effect runs).
# Callables are refused: no function is allowed, and LambdaCallback (which calls the functions it is given) is out.
CONFIG_IMPORTS_ALLOWED = (
    "ortholab.datamodules",
    "datamodules",
    "ortholab.training.callbacks",
    "training.callbacks",
    "lightning.pytorch.callbacks",
    "lightning.pytorch.profilers",
    "lightning.pytorch.strategies",
    "lightning.pytorch.plugins",
    "lightning.pytorch.accelerators",
    "lightning.pytorch.loggers.CSVLogger",
    "lightning.pytorch.loggers.csv_logs.CSVLogger",
    "lightning.pytorch.loggers.TensorBoardLogger",
    "lightning.pytorch.loggers.tensorboard.TensorBoardLogger",
    "lightning.pytorch.loggers.MLFlowLogger",
    "lightning.pytorch.loggers.mlflow.MLFlowLogger",
    "lightning.pytorch.loggers.WandbLogger",
    "lightning.pytorch.loggers.wandb.WandbLogger",
)
CONFIG_IMPORTS_DENIED = (
    "*",  # everything not allowed above
    "lightning.pytorch.callbacks.LambdaCallback",
    "lightning.pytorch.callbacks.lambda_function",
)
EXTRA_MODULES_VAR = "ORTHOLAB_CONFIG_MODULES"  # comma-separated modules of the user's own tasks, callbacks, families


def allowed_config_imports() -> tuple[str, ...]:
    """The allow-list, with the modules the user named in $ORTHOLAB_CONFIG_MODULES (set by the user, never by a
    config, so a config cannot widen it)."""
    import os

    extra = [m.strip() for m in os.environ.get(EXTRA_MODULES_VAR, "").split(",") if m.strip()]
    for module in extra:
        if not all(part.isidentifier() for part in module.split(".")) or module.split(".")[0] == "jsonargparse":
            from ortholab.errors import ConfigError

            raise ConfigError(
                f"${EXTRA_MODULES_VAR} holds {module!r}; give comma-separated module names "
                f"(e.g. {EXTRA_MODULES_VAR}=mytasks,mylab.callbacks)"
            )
    return (*CONFIG_IMPORTS_ALLOWED, *extra)


UNIMPORTABLE: dict[str, str] = {}  # $ORTHOLAB_CONFIG_MODULES entries Python could not import here -> why


def import_user_modules() -> None:
    """Import the modules named in $ORTHOLAB_CONFIG_MODULES, so that those registering a family of the user's own
    (models.register_family) have done so before a config names it. One that Python cannot find is noted, not
    refused: it may hold only a task or callback that this command never names (the refusal, when one is named,
    says why), and a family's or task's refusal cites it (unimportable_note). A module that Python finds but cannot
    run (a syntax error, an exception while it is imported, a package it imports that is missing) is refused in one
    line naming its file and line."""
    import importlib

    from ortholab.errors import ConfigError

    UNIMPORTABLE.clear()  # this command's own finding (a test runs several in one process)
    for module in allowed_config_imports()[len(CONFIG_IMPORTS_ALLOWED) :]:
        try:
            importlib.import_module(module)
        except Exception as error:
            parents = {module.rsplit(".", depth)[0] for depth in range(module.count(".") + 1)}  # a.b.c: a, a.b, a.b.c
            if isinstance(error, ModuleNotFoundError) and error.name in parents:  # not found, not failing as it runs
                UNIMPORTABLE[module] = str(error)
                continue
            raise ConfigError(  # the user's own code failed as it ran (or imports what is missing): where, in one line
                f"${EXTRA_MODULES_VAR} names {module!r}, whose import failed at {failed_at(error)}: "
                f"{failure(error)}; fix it, or drop it from ${EXTRA_MODULES_VAR}"
            ) from None


def failed_at(error: Exception) -> str:
    """'FILE, line N' in the user's module: the deepest frame in the file the import began running (a missing
    package's or a library's own frames are not the user's line)."""
    import traceback

    if isinstance(error, SyntaxError):
        return f"{error.filename}, line {error.lineno}"
    frames = traceback.extract_tb(error.__traceback__)
    ran = next((f.filename for f in frames if f.name == "<module>" and not f.filename.startswith("<")), None)
    frame = next((f for f in reversed(frames) if f.filename == ran), frames[-1])
    return f"{frame.filename}, line {frame.lineno}"


def failure(error: Exception) -> str:
    """'ValueError: why', or the type's name alone for an exception raised without a message."""
    why = getattr(error, "msg", None) or str(error)
    return f"{type(error).__name__}: {why}" if why else type(error).__name__


def unimportable_note() -> str:
    """'; $ORTHOLAB_CONFIG_MODULES names 'mylab.families', which Python cannot import here (No module named
    'mylab'): ...' for a family refused while a module that might register it could not be imported; else ''.
    Several such modules make one clause, so the refusal stays one readable line."""
    if not UNIMPORTABLE:
        return ""
    names = ", ".join(repr(module) for module in UNIMPORTABLE)
    whys = "; ".join(dict.fromkeys(UNIMPORTABLE.values()))  # the same failure said once
    return (
        f"; ${EXTRA_MODULES_VAR} names {names}, which Python cannot import here ({whys}): install "
        f"{'its package' if len(UNIMPORTABLE) == 1 else 'their packages'} (`pip install -e .` in its folder) or add "
        "the folder holding it to PYTHONPATH"
    )


def restrict_config_imports() -> None:
    """Make jsonargparse refuse, before importing it, any class path or dotted value outside the allow-list."""
    from jsonargparse import set_parsing_settings

    set_parsing_settings(
        import_path_denylist=list(CONFIG_IMPORTS_DENIED),
        import_path_allowlist=list(allowed_config_imports()),
        instantiate_subclass_spec_in_any=False,
    )  # a {class_path: ...} in family_args stays a dict


def config_import_refused(path: str) -> bool:
    """Whether a config naming `path` is refused (checked on the name alone: nothing is imported)."""
    from jsonargparse._common import denying_import_path_entry

    restrict_config_imports()
    return denying_import_path_entry(path) is not None


def check_class_path(path: str, key: str) -> None:
    """The same verdict for a class path read outside the parser (a stored run's config), before importing it."""
    if not isinstance(path, str) or not all(p.isidentifier() for p in path.split(".")) or config_import_refused(path):
        from ortholab.errors import ConfigError

        raise ConfigError(
            f"{key} = {path!r} is not a class OrthoLab configs may name (its tasks and callbacks, "
            f"Lightning's callbacks, loggers and profilers; add your own package to "
            f"${EXTRA_MODULES_VAR})"
        )


def config_class(path: str, key: str) -> type | None:
    """The class a stored run's config names at `key` (`datamodules.AddingTask`, a full path or one of the user's
    modules), checked as the CLI checks it (check_class_path) before its module is imported; None when `path` has no
    module part or its module holds no such name."""
    module_name, _, class_name = full_class_path(path).rpartition(".")
    if not module_name:
        return None
    check_class_path(path, key)
    found = getattr(importlib.import_module(module_name), class_name, None)
    return found if isinstance(found, type) else None


def refuse_callables(config, prefix: str = "") -> None:
    """A parsed config holds data and class paths only: a function (or any callable object) a value resolved to,
    e.g. a callback's `lambda_func`, is refused by its key before anything is instantiated or called."""
    import functools
    import inspect

    if hasattr(config, "items") and not isinstance(config, type):
        items = config.items() if not hasattr(config, "__dict__") or isinstance(config, dict) else vars(config).items()
    elif isinstance(config, (list, tuple)):
        items = ((str(i), value) for i, value in enumerate(config))
    else:
        items = ()
    for key, value in items:
        key = f"{prefix}.{key}" if prefix else str(key)
        if key.startswith("__") or key.rsplit(".", 1)[-1].startswith("__"):
            continue  # jsonargparse's own bookkeeping (__path__, __default_config__)
        if inspect.isroutine(value) or isinstance(value, functools.partial):  # (a Path is callable, and is data)
            from ortholab.errors import ConfigError

            name = getattr(value, "__qualname__", type(value).__qualname__)
            raise ConfigError(
                f"{key} = {getattr(value, '__module__', '?')}.{name}: a config may not name a function "
                f"or callable object (it would be called with the run's objects); remove {key}"
            )
        refuse_callables(value, key)
