"""Options with named choices: the `typing.Literal[...]` annotation in a signature is the one list of them.

    @checks_choices
    def __init__(self, input_size: int, hidden_size: int, d_side: Literal["left", "right"] = "left"): ...

`checks_choices` refuses a value outside the Literal when the function is called (a library call such as
`ortholab.nn.ScuRNN(..., d_side="row")`), and `check_choices(cls, values)` checks a mapping of option values
against the same annotations before anything is built (training/family_options.py, for `model.family_args`).
Both raise ConfigError (a ValueError) naming the key, the value given and the choices, on one line.
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

from ortholab.errors import ConfigError, did_you_mean

FAMILY_KEY = "model.family_args."  # how a family constructor's options are named in a config


def literal_choices(annotation: Any) -> tuple | None:
    """The values a `Literal[...]` annotation allows (None among them for `Literal[...] | None`); None when the
    annotation is not made of Literals alone."""
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        choices: list = []
        for member in typing.get_args(annotation):
            if member is type(None):
                choices.append(None)
            elif typing.get_origin(member) is typing.Literal:
                choices.extend(typing.get_args(member))
            else:
                return None
        return tuple(choices)
    return None


def _function(fn_or_cls: Callable) -> Callable:
    return inspect.unwrap(fn_or_cls.__init__ if isinstance(fn_or_cls, type) else fn_or_cls)


@functools.cache
def option_choices(fn_or_cls: Callable) -> dict[str, tuple]:
    """{parameter: its choices} for each parameter of a function (of a class: its __init__) annotated with a Literal,
    the annotations resolved with typing.get_type_hints (so `from __future__ import annotations` strings and
    aliases such as `SkewInit = Literal[...]` imported into the defining module both work)."""
    hints = typing.get_type_hints(_function(fn_or_cls))
    return {
        name: choices
        for name, hint in hints.items()
        if name != "return" and (choices := literal_choices(hint)) is not None
    }


def is_choice(value: Any, choices: tuple) -> bool:
    """`value` is one of `choices`, of the same type (True is not the choice 1, nor 1.0 the choice 1)."""
    return any(type(value) is type(choice) and value == choice for choice in choices)


def choice_error(key: str, value: Any, choices: tuple, explained_by: str | None = None) -> ConfigError:
    """The one wording of a refused choice: `KEY = VALUE; choose one of [CHOICES] (WHERE explains each)`, and `; did
    you mean 'CHOICE'?` for text close to one."""
    where = f" ({explained_by} explains each)" if explained_by else ""
    near = did_you_mean(value, [c for c in choices if isinstance(c, str)]).strip() if isinstance(value, str) else ""
    return ConfigError(f"{key} = {value!r}; choose one of {list(choices)}{where}{'; ' + near if near else ''}")


def check_choice(key: str, value: Any, literal: Any, explained_by: str | None = None) -> Any:
    """`value` when the Literal type `literal` allows it; otherwise choice_error's ConfigError naming `key`."""
    choices = literal_choices(literal)
    if choices is None:
        raise TypeError(f"check_choice needs a Literal type, got {literal!r}")
    if not is_choice(value, choices):
        raise choice_error(key, value, choices, explained_by)
    return value


def _owner(fn: Callable) -> str:
    """Where a function's options are explained: its class for a method (the class docstring), else itself."""
    qualname = fn.__qualname__.removesuffix(".__init__")
    return f"{fn.__module__}.{qualname}"


def check_choices(
    fn_or_cls: Callable, values: Mapping[str, Any], key_prefix: str = FAMILY_KEY, explained_by: str | None = None
) -> None:
    """Every value in `values` whose parameter of `fn_or_cls` is Literal-typed is one of its choices; otherwise a
    ConfigError naming `key_prefix` + the parameter, the value given and the choices. `explained_by` says where the
    choices are explained (default: the class or function itself)."""
    for name, choices in option_choices(fn_or_cls).items():
        if name in values and not is_choice(values[name], choices):
            raise choice_error(key_prefix + name, values[name], choices, explained_by or _owner(_function(fn_or_cls)))


def checks_choices(fn: Callable | None = None, *, key_prefix: str = FAMILY_KEY) -> Callable:
    """Decorator: every call of `fn` (a family's `__init__`, or any function) first checks its Literal-typed
    arguments with `check_choices`. `key_prefix` names them: `model.family_args.` for a family's options (the
    default), or e.g. `ComplexScaledCayley: ` for a building block's."""
    if fn is None:
        return functools.partial(checks_choices, key_prefix=key_prefix)
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def checked(*args, **kwargs):
        try:
            arguments = signature.bind(*args, **kwargs).arguments
        except TypeError:  # a call that does not fit the signature: the function's own call raises Python's error
            return fn(*args, **kwargs)
        check_choices(fn, arguments, key_prefix)
        return fn(*args, **kwargs)

    return checked
