"""Optimizers by name, including the TensorFlow 1 RMSProp and Adagrad the papers' results depend on.

TF1's RMSProp starts its mean-square accumulator at 1 (a built-in warm-up: early steps are ~lr*g) and puts
epsilon inside the square root; TF1's Adagrad starts its accumulator at 0.1 with no epsilon
(reference-impl-facts 5.4). PyTorch's RMSprop/Adagrad differ in both, so they are kept under their own names.
"""

from __future__ import annotations

import inspect
import math
from typing import Iterable

import torch
from torch.optim import Optimizer

from ortholab.errors import ConfigError, did_you_mean
from ortholab.models.stiefel import StiefelCayley


class _PerParameterOptimizer(Optimizer):
    """An optimizer whose update of each parameter reads only its own gradient and state (`update`)."""

    def update(self, p: torch.Tensor, grad: torch.Tensor, state: dict, group: dict) -> None:
        raise NotImplementedError

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    self.update(p, p.grad, self.state[p], group)
        return loss


def _require(name: str, value, holds: bool, what: str) -> None:
    """A ValueError naming the argument, unless `value` is a finite number for which `holds`."""
    if not (_number(value) and math.isfinite(value) and holds):
        raise ValueError(f"{name} = {value!r}: {what}")


class RMSpropTF(_PerParameterOptimizer):
    """ms <- decay ms + (1 - decay) g^2;  p <- p - lr g / sqrt(ms + eps), ms starting at `initial_accumulator`."""

    def __init__(
        self,
        params: Iterable,
        lr: float = 1e-3,
        decay: float = 0.9,
        eps: float = 1e-10,
        initial_accumulator: float = 1.0,
    ):
        _require("lr", lr, _number(lr) and lr > 0, "a positive finite number (e.g. 1e-3)")
        _require("decay", decay, _number(decay) and 0 <= decay <= 1, "a number in [0, 1] (TF1's RMSProp: 0.9)")
        for name, value in (("eps", eps), ("initial_accumulator", initial_accumulator)):
            _require(name, value, _number(value) and value >= 0, "a finite number >= 0 (ms + eps is square-rooted)")
        super().__init__(params, dict(lr=lr, decay=decay, eps=eps, initial_accumulator=initial_accumulator))

    def update(self, p, grad, state, group):
        if not state:
            state["mean_square"] = torch.full_like(p, group["initial_accumulator"])
        ms = state["mean_square"].mul_(group["decay"]).addcmul_(grad, grad, value=1 - group["decay"])
        p.addcdiv_(grad, (ms + group["eps"]).sqrt_(), value=-group["lr"])


class AdagradTF(_PerParameterOptimizer):
    """acc <- acc + g^2;  p <- p - lr g / sqrt(acc), acc from `initial_accumulator` > 0 (TF1: 0.1, no epsilon)."""

    def __init__(self, params: Iterable, lr: float = 1e-3, initial_accumulator: float = 0.1):
        _require("lr", lr, _number(lr) and lr > 0, "a positive finite number (e.g. 1e-3)")
        _require(
            "initial_accumulator",
            initial_accumulator,
            _number(initial_accumulator) and initial_accumulator >= 0,
            "a finite number >= 0 (TF1: 0.1; a config refuses 0 too: lr g / sqrt(acc) is 0/0 where g is 0)",
        )
        super().__init__(params, dict(lr=lr, initial_accumulator=initial_accumulator))

    def update(self, p, grad, state, group):
        if not state:
            state["accumulator"] = torch.full_like(p, group["initial_accumulator"])
        acc = state["accumulator"].addcmul_(grad, grad)
        p.addcdiv_(grad, acc.sqrt(), value=-group["lr"])


DEFAULT_OPTIMIZERS = {"default": {"name": "adam", "lr": 1e-3}}  # model.optimizers when a config names none

OPTIMIZERS: dict[str, type[Optimizer]] = {
    "rmsprop_tf": RMSpropTF,
    "adagrad_tf": AdagradTF,
    "adam": torch.optim.Adam,
    "adamw": torch.optim.AdamW,
    "sgd": torch.optim.SGD,
    "rmsprop": torch.optim.RMSprop,
    "adagrad": torch.optim.Adagrad,
    "stiefel_cayley": StiefelCayley,
}


def check_optimizer_spec(spec: dict, where: str) -> None:
    """Fail early, naming the config key, on an unknown optimizer name or option."""
    if not isinstance(spec, dict):
        raise ConfigError(f"{where} must be a mapping like {{name: adam, lr: 1.0e-3}}, got {spec!r}")
    name = spec.get("name")
    if name not in OPTIMIZERS:
        raise ConfigError(
            f"{where}.name = {name!r} is not a known optimizer; {did_you_mean(name, OPTIMIZERS)}"
            f"choose one of {sorted(OPTIMIZERS)}"
        )
    accepted = set(inspect.signature(OPTIMIZERS[name].__init__).parameters) - {"self", "params"}
    unknown = sorted(set(spec) - accepted - {"name"})
    if unknown:
        raise ConfigError(
            f"{where}.{unknown[0]} is not an option of optimizer {name!r}; its options are {sorted(accepted)}"
        )
    lr = spec.get("lr", _defaults(OPTIMIZERS[name]).get("lr"))
    if lr is not None and not (_number(lr) and math.isfinite(lr) and lr > 0):
        raise ConfigError(f"{where}.lr = {lr!r} must be a positive finite number (e.g. 1.0e-3)")
    _check_accumulator(name, {**_defaults(OPTIMIZERS[name]), **spec}, where)
    _check_other_options(name, spec, where)


def _check_other_options(name: str, spec: dict, where: str) -> None:
    """Every numeric option finite (torch's range checks let NaN through), then torch's own checks (betas, eps,
    momentum, weight_decay, ...) run now on two dummy (2, 2) parameters: a bad value fails before a run is
    recorded, naming its key, instead of as a traceback when training starts."""
    options = {key: value for key, value in spec.items() if key != "name"}
    for key, value in options.items():
        values = value if isinstance(value, (list, tuple)) else [value]
        if any(_number(v) and not math.isfinite(v) for v in values):
            raise ConfigError(f"{where}.{key} = {value!r} must be finite")
    if name == "rmsprop_tf" and not (_number(options.get("decay", 0.9)) and 0 <= options.get("decay", 0.9) <= 1):
        raise ConfigError(f"{where}.decay = {options['decay']!r} must lie in [0, 1] (TF1's RMSProp uses 0.9)")
    probe = [torch.nn.Parameter(torch.zeros(2, 2)), torch.nn.Parameter(torch.zeros(2, 2))]
    try:
        OPTIMIZERS[name](probe, **options)
    except ConfigError as err:
        raise ConfigError(f"{where}: {err}") from None
    except (ValueError, TypeError, RuntimeError) as err:
        raise ConfigError(
            f"{where} = {spec!r}: optimizer {name!r} refuses it ({' '.join(str(err).split())}); "
            f"its options are {sorted(_defaults(OPTIMIZERS[name]))}"
        ) from None


def _defaults(optimizer: type[Optimizer]) -> dict:
    """The keyword defaults of an optimizer's constructor."""
    parameters = inspect.signature(optimizer.__init__).parameters.values()
    return {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty}


def optimizer_defaults(name: str) -> dict:
    """The options optimizer `name` (a key of OPTIMIZERS) takes when a spec leaves them out."""
    return _defaults(OPTIMIZERS[name])


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_accumulator(name: str, options: dict, where: str) -> None:
    """Refuse the starting accumulators that make lr g / sqrt(acc) 0/0 = NaN wherever a gradient is 0."""
    start = options.get("initial_accumulator")
    if name == "adagrad_tf" and not (_number(start) and start > 0):  # TF1's AdagradOptimizer refuses <= 0 too
        raise ConfigError(
            f"{where}.initial_accumulator = {start!r} must be a positive number: from 0, acc stays 0 "
            f"where a gradient is 0 and lr g / sqrt(acc) is 0/0 = NaN; use TF1's default 0.1"
        )
    if name == "rmsprop_tf":
        eps = options["eps"]
        for key, value in (("initial_accumulator", start), ("eps", eps)):
            if not (_number(value) and value >= 0):
                raise ConfigError(f"{where}.{key} = {value!r} must be a number >= 0 (ms + eps under a square root)")
        if start + eps == 0:  # TF1 cannot get here: its accumulator starts at 1.0 (and eps defaults to 1e-10)
            raise ConfigError(
                f"{where}.initial_accumulator = 0 with {where}.eps = 0: lr g / sqrt(ms + eps) is 0/0 = "
                f"NaN where a gradient is 0; make one of them positive (the papers' codes: 1.0e-3 and "
                f"0, or 0 and 1.0e-8)"
            )


def build_optimizer(params: list[torch.nn.Parameter], spec: dict, where: str) -> Optimizer:
    """An optimizer from {'name': ..., 'lr': ..., other keyword arguments}; `where` names the config key in errors."""
    check_optimizer_spec(spec, where)
    options = {key: value for key, value in spec.items() if key != "name"}
    params = list(params)
    if spec["name"] == "stiefel_cayley" and len(params) > 2 and all(isinstance(p, torch.Tensor) for p in params):
        params = [{"params": params[i : i + 2]} for i in range(0, len(params), 2)]  # one [W_re, W_im] per layer
    return OPTIMIZERS[spec["name"]](params, **options)


def _named(spec, stands_in_for: dict):
    """`spec` as given, or, where it names no optimizer, `stands_in_for` with its options changed by it."""
    named = not isinstance(spec, dict) or "name" in spec or not isinstance(stands_in_for, dict)
    return spec if named else stands_in_for | spec


def group_specs(
    groups: dict[str, list],
    specs: dict[str, dict],
    family_defaults: dict[str, dict] | None = None,
    where: str = "model.optimizers",
    family: str | None = None,
) -> dict[str, dict]:
    """Each group's optimizer spec: its own entry in `specs`, else the family's default for it (the full-capacity
    uRNN's Stiefel step), else `specs['default']`; checked, errors naming `where`.<group> (and `family`, given).
    An entry without `name` (`--model.optimizers.other.lr 0.01` on a config that names no optimizer) changes the
    options of the one it stands in for: the family's default for its group, else `default`, else Adam's."""
    if not isinstance(specs, dict):
        raise ConfigError(f"{where} must be a mapping {{group: {{name: ..., lr: ...}}}}, got {specs!r}")
    unknown = sorted(set(specs) - set(groups) - {"default"})
    family_s, of_family = (f"family {family!r}'s", f" of family {family!r}") if family else ("the family's", "")
    if unknown:
        holder, its = (f"family {family!r} has", "its") if family else ("there is", "the")
        raise ConfigError(
            f"{where}.{unknown[0]}: {holder} no parameter group {unknown[0]!r}; {did_you_mean(unknown[0], groups)}"
            f"{its} groups are {sorted(groups)} (or use 'default')"
        )
    resolved, takes_default = {}, False
    base = _named(specs.get("default", {}), DEFAULT_OPTIMIZERS["default"])
    for name in groups:
        if name in specs:
            stands_in_for = (family_defaults or {}).get(name, base)
            takes_default |= stands_in_for is base and _named(specs[name], base) is not specs[name]
            spec, key = _named(specs[name], stands_in_for), f"{where}.{name}"
        elif name in (family_defaults or {}):
            spec, key = family_defaults[name], f"{family_s} default for group {name!r}"
        elif "default" in specs:
            spec, key, takes_default = base, f"{where}.default", True
        else:
            raise ConfigError(
                f"{where} has no entry for parameter group {name!r}{of_family}; add {where}.{name} or {where}.default"
            )
        check_optimizer_spec(spec, key)
        resolved[name] = spec
    if "default" in specs and not takes_default:  # `--model.optimizers.default.lr 0.5` would change nothing
        named = ", ".join(f"{where}.{name}" for name in groups)
        raise ConfigError(
            f"{where}.default: no parameter group{of_family} takes it, as {named} each name their own "
            f"optimizer; set the option on those groups instead, or remove {where}.default"
        )
    return resolved
