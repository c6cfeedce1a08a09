"""Every recurrent family as a drop-in for `torch.nn.RNN`: `(input, h0=None) -> (output, h_n)`.

    from ortholab import nn as onn
    rnn = onn.ScoRNN(input_size=10, hidden_size=64, num_layers=2, batch_first=True)  # the paper's initialisation
    output, h_n = rnn(x)                       # x (N, L, 10) -> output (N, L, 64), h_n (2, N, 64)
    opt = onn.group_optimizer(model, {"recurrent": {"name": "rmsprop_tf", "lr": 1e-4},
                                      "other": {"name": "rmsprop_tf", "lr": 1e-3}})

A layer wraps the family's own recurrent cells (models/<family>.py, the ones `ortholab fit` trains), stacked as
`model.num_layers` stacks them: the same parameters, initialisation, recurrence and gradients, so a model built
on it and trained with the groups it reports (`parameter_groups`) and the same optimizers takes the CLI's steps.

Shapes follow nn.RNN, with H_out = `output_size` features per step: n for the real families, 2n for the complex
ones (`layout` says how [Re h, Im h] are laid out; `as_complex` turns features into complex states):
- input (L, N, H_in), or (N, L, H_in) with batch_first, or (L, H_in) unbatched;
- h0 (num_layers, N, H_out) (unbatched: (num_layers, H_out)); for LSTM the pair (h0, c0) and for NRU the pair
  (h0, m0) of hidden states and memories (num_layers, N, memory_size); for LRU and S4D each layer's complex
  recurrence state x as [Re x | Im x] (num_layers, N, `state_size['h']`), apart from the features it outputs;
  None: each layer's own initial state, the paper's: zeros, or the trained h0 parameter of scuRNN, oRNN, uRNN
  and the full-capacity uRNN;
- output: the last layer's hidden features at every step; h_n: every layer's state after the last step, in h0's
  format, so that passing h_n on as the next h0 continues the sequence.
rtransformer is refused: its attention reads the whole sequence and its local windows restart from zeros, so it
carries no state from one call to the next (use `ortholab.models.RTransformer` as a (N, L, H_in) -> (N, L, d)
module instead).
"""

from __future__ import annotations

import inspect
import math
import numbers
import typing
from pathlib import Path

import torch
import yaml
from torch import nn

from ortholab.models import FAMILIES
from ortholab.models.gated import LSTM as LSTMCell
from ortholab.models.nru import NRU as NRUCell
from ortholab.models.operator_recurrence import to_complex
from ortholab.models.optimizers import DEFAULT_OPTIMIZERS, build_optimizer, group_specs
from ortholab.models.precision import LOW_PRECISION, autocast_active
from ortholab.models.ssm_block import DiagonalStateSpaceLayer
from ortholab.models.stack import StackedLayers, build_layers

NOT_A_RECURRENCE = {
    "rtransformer": "its causal attention reads the whole sequence and its local windows restart from zeros, so "
    "no state carries from one call to the next and nn.RNN's (input, h0) -> (output, h_n) does not "
    "apply; use ortholab.models.RTransformer(input_size, hidden_size, ...) (hidden_size is d_model) as a "
    "(N, L, H_in) -> (N, L, hidden_size) module",
}
PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # the checkout, or site-packages/ortholab: configs/ beside


def check_options(family: str, family_args: dict) -> type:
    """The family's cell class, once `family` is a recurrence and every option is one of its own."""
    if family in NOT_A_RECURRENCE:
        raise ValueError(f"family {family!r} has no nn.RNN form: {NOT_A_RECURRENCE[family]}")
    if family not in FAMILIES:
        raise ValueError(
            f"family {family!r} is not a registered family; choose one of "
            f"{sorted(set(FAMILIES) - set(NOT_A_RECURRENCE))}"
        )
    cls = FAMILIES[family]
    accepted = set(inspect.signature(cls.__init__).parameters) - {"self", "input_size", "hidden_size"}
    unknown = sorted(set(family_args) - accepted)
    if unknown:
        raise ValueError(
            f"{unknown[0]!r} is not an option of family {family!r}; its options are {sorted(accepted)} "
            f"({cls.__module__.replace('ortholab.', '').replace('.', '/')}.py explains each)"
        )
    try:
        hints = typing.get_type_hints(cls.__init__)
    except Exception:  # an annotation this module cannot resolve: the family checks its own options
        hints = {}
    for key, value in family_args.items():  # a number's or a switch's option given another kind (forget_bias="1")
        default = inspect.signature(cls.__init__).parameters[key].default
        if value is None or typing.get_origin(hints.get(key)) is typing.Literal:  # None: the family says what it
            wrong = False  # means (forget_bias, rebase_every); a choice (shift: 1 or -1): the family names them
        elif isinstance(default, bool) or isinstance(value, bool):
            wrong = isinstance(default, bool) != isinstance(value, bool) and isinstance(default, (bool, int, float))
        elif isinstance(default, (int, float)):
            wrong = (
                not isinstance(value, numbers.Real)
                or isinstance(default, int)
                and not isinstance(value, numbers.Integral)
            )
        else:
            wrong = False
        if wrong:
            raise TypeError(
                f"{key} of family {family!r} must be {type(default).__name__} (default {default!r}), got {value!r} "
                f"({type(value).__name__})"
            )
        if isinstance(value, float) and math.isnan(value):  # NaN passes every range check and poisons the outputs
            raise ValueError(f"{key} = nan must be a number (family {family!r}'s default: {default!r})")
    if family_args.get("embed_symbols"):
        raise ValueError(
            "embed_symbols: an nn.RNN-style layer reads real features; put nn.Embedding(vocab, hyper) "
            "before the layer instead"
        )
    return cls


def check_count(owner: str, key: str, value) -> int:
    """`value` as a positive int; TypeError or ValueError naming `key` otherwise, as nn.RNN checks its sizes."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{owner}: {key} should be of type int, got {value!r} ({type(value).__name__})")
    if value <= 0:
        raise ValueError(f"{owner}: {key} must be greater than zero, got {value}")
    return int(value)


class FamilyRNN(nn.Module):
    """`family`'s recurrence with nn.RNN's calling convention (module docstring); `family_args` are the family's
    options (`ortholab list families`), defaulting to the paper's.

    num_layers, dropout: stack layers with dropout on the features passed between them, as nn.RNN and
    `model.num_layers` / `model.dropout`. device, dtype: where and in what precision the parameters live (built
    as `ortholab fit` builds them, then moved; a stored orthogonal/unitary matrix made float64 is re-projected onto
    its manifold there, models/base.py `exact_after_widening_`). The cells are `self.core` (one cell, or a
    StackedLayers of them): its state_dict is a CLI checkpoint's `model.layer.*` entries.
    """

    def __init__(
        self,
        family: str,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        batch_first: bool = False,
        dropout: float = 0.0,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        **family_args,
    ):
        super().__init__()
        owner = type(self).__name__
        input_size, hidden_size, num_layers = (
            check_count(owner, key, value)
            for key, value in (("input_size", input_size), ("hidden_size", hidden_size), ("num_layers", num_layers))
        )
        if not isinstance(batch_first, bool):  # "yes" was taken as true
            raise TypeError(f"{owner}: batch_first must be True or False, got {batch_first!r}")
        if dtype is not None and not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
            raise TypeError(f"{owner}: dtype must be a torch floating dtype such as torch.float64, got {dtype!r}")
        if dtype in LOW_PRECISION:  # their maps (a solve, an exponential, an FFT) have no 16-bit kernels on the CPU
            raise ValueError(
                f"{owner}: dtype {dtype} would hold the parameters in 16 bits; keep them float32 and run the model "
                f"under torch.autocast (the orthogonal map and recurrence stay float32, as `ortholab fit` runs "
                f"bf16-mixed)"
            )
        if isinstance(dropout, bool) or not isinstance(dropout, numbers.Real):
            raise TypeError(f"{owner}: dropout should be a number in [0, 1), got {dropout!r}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"{owner}: dropout must be in [0, 1) (the chance of zeroing a feature), got {dropout}")
        try:
            device = None if device is None else torch.device(device)
        except (RuntimeError, TypeError):
            raise ValueError(
                f"{owner}: device {device!r} is not a torch device (e.g. 'cpu', 'cuda', 'cuda:1')"
            ) from None
        cls = check_options(family, family_args)
        self.family, self.input_size, self.hidden_size = family, input_size, hidden_size
        self.num_layers, self.batch_first, self.dropout = num_layers, batch_first, dropout
        self.family_args = dict(family_args)
        core = build_layers(cls, input_size, hidden_size, dict(family_args), num_layers, dropout)
        self.core = core.to(device=device, dtype=dtype or torch.get_default_dtype())
        self.output_size = core.output_size  # H_out: n, or 2n for the complex families
        self.layout = cls.layout  # how the features hold h: real, planar or interleaved

    # the layers ------------------------------------------------------------------------------------------------
    @property
    def cells(self) -> list[nn.Module]:
        """The family's cells, first layer first."""
        return list(self.core.layers) if isinstance(self.core, StackedLayers) else [self.core]

    @property
    def state_size(self) -> dict[str, int]:
        """Features per layer of each part of the state: h (H_out), and LSTM's c or NRU's memory."""
        cell = self.cells[0]
        if isinstance(cell, LSTMCell):
            return {"h": self.hidden_size, "c": self.hidden_size}
        if isinstance(cell, NRUCell):
            return {"h": self.hidden_size, "memory": cell.memory_size}
        if isinstance(cell, DiagonalStateSpaceLayer):  # LRU, S4D: the complex state x apart from the features
            return {"h": cell.state_features}
        return {"h": self.output_size}

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        """The family's groups (e.g. `recurrent`, `scaling`, `other`), merged across layers: each is trained by its
        own optimizer (`group_optimizer`), as the papers and `ortholab fit` train them."""
        return self.core.parameter_groups()

    @property
    def default_optimizers(self) -> dict[str, dict]:
        """Optimizers a group needs unless one is named for it (the full-capacity uRNN's Stiefel step)."""
        return self.core.default_optimizers

    def after_optimizer_step(self) -> None:
        """What the family does after every optimizer step (expRNN's re-basing); `GroupOptimizer.step` calls it."""
        self.core.after_optimizer_step()

    def recurrent_matrices(self) -> list[torch.Tensor | None]:
        """Each layer's W (None for the families without one: LSTM, GRU, LRU, S4D), e.g. to check that W stays
        orthogonal or unitary (nnRNN's W is not: its basis P is, `cells[k].orthogonal_map()`)."""
        return [cell.recurrent_matrix() for cell in self.cells]

    def as_complex(self, features: torch.Tensor) -> torch.Tensor:
        """The complex states (..., n) held in a complex family's output or h_n features (..., 2n). (LRU's and S4D's
        h_n hold their complex state x as [Re x | Im x]: torch.complex(*h_n.chunk(2, dim=-1)).)"""
        owner = type(self).__name__
        if isinstance(self.cells[0], DiagonalStateSpaceLayer):  # real features, the complex state in h_n alone
            raise ValueError(
                f"{owner}: family {self.family!r} outputs real features; its h_n holds the complex state x as "
                f"[Re x | Im x]: torch.complex(*h_n.chunk(2, dim=-1))"
            )
        if self.layout not in ("planar", "interleaved"):
            raise ValueError(f"{owner}: family {self.family!r} has a real state; its features are the state itself")
        if not isinstance(features, torch.Tensor):
            raise TypeError(f"{owner}: features must be a tensor, got {type(features).__name__}")
        if features.shape[-1:] != (self.output_size,) or not features.is_floating_point():
            raise ValueError(  # an interleaved half-size tensor read as half as many states, without a word
                f"{owner}: features must be real (..., {self.output_size}), the output's or h_n's 2n = "
                f"{self.output_size} per state; got shape {tuple(features.shape)} of {features.dtype}"
            )
        if self.layout == "planar":
            return torch.complex(features[..., : self.hidden_size], features[..., self.hidden_size :])
        return to_complex(features.contiguous())

    # the forward pass --------------------------------------------------------------------------------------------
    def forward(self, input: torch.Tensor, hx=None):  # nn.RNN's argument names
        if not isinstance(input, torch.Tensor):
            raise TypeError(f"{type(self).__name__}: input must be a tensor, got {type(input).__name__}")
        if input.dim() not in (2, 3):
            raise ValueError(
                f"{type(self).__name__}: input must be (L, H_in), (L, N, H_in) or with batch_first "
                f"(N, L, H_in); got shape {tuple(input.shape)}"
            )
        if not input.is_floating_point():
            raise TypeError(
                f"{type(self).__name__}: input must be a floating-point tensor (real features), got {input.dtype}; "
                f"symbol ids go through nn.Embedding first"
            )
        if input.shape[-1] != self.input_size:
            raise ValueError(
                f"{type(self).__name__}: input must hold {self.input_size} real features per step "
                f"(input_size); got shape {tuple(input.shape)} of {input.dtype}"
            )
        self._check_like_parameters("input", input)
        batched = input.dim() == 3
        if input.shape[1 if batched and self.batch_first else 0] == 0:
            raise ValueError(
                f"{type(self).__name__}: input must have at least one time step; got shape {tuple(input.shape)}"
            )
        x = input if not batched else (input if self.batch_first else input.transpose(0, 1))
        x = x if batched else x.unsqueeze(0)  # (N, L, H_in) from here on
        states = self._initial_states(hx, x.shape[0], batched)
        if x.shape[0] == 0:  # no sequence: empty output and h_n as nn.RNN gives (some cells' FFTs refuse 0 rows)
            return self._empty(x)
        finals = []
        for k, cell in enumerate(self.cells):
            if k:
                x = self.core.dropout(x)  # between layers, as StackedLayers
            x, final = self._run(cell, x, None if states is None else [part[k] for part in states])
            finals.append(final)
        h_n = [torch.stack(part) for part in zip(*finals)]  # each (num_layers, N, features)
        if not batched:
            x, h_n = x.squeeze(0), [part.squeeze(1) for part in h_n]
        elif not self.batch_first:
            x = x.transpose(0, 1)
        return x, (h_n[0] if len(h_n) == 1 else tuple(h_n))

    def _empty(self, x: torch.Tensor):
        """(output, h_n) of a batch of 0 sequences: output (0, L, H_out) or (L, 0, H_out), h_n (num_layers, 0, .)."""
        output = x.new_zeros(x.shape[0], x.shape[1], self.output_size)
        h_n = [x.new_zeros(self.num_layers, 0, size) for size in self.state_size.values()]
        output = output if self.batch_first else output.transpose(0, 1)
        return output, (h_n[0] if len(h_n) == 1 else tuple(h_n))

    def _initial_states(self, hx, batch: int, batched: bool) -> list[torch.Tensor] | None:
        """h0 as a list of its parts (h, and c or memory), each (num_layers, N, features), checked; or None."""
        if hx is None:
            return None
        sizes = self.state_size
        parts = list(hx) if isinstance(hx, (tuple, list)) else [hx]
        if len(parts) != len(sizes):
            wanted = f"the pair ({', '.join(sizes)})" if len(sizes) > 1 else "one tensor, h"
            raise ValueError(f"{type(self).__name__}: h0 must be {wanted}; got {len(parts)} tensor(s)")
        checked = []
        for (name, size), part in zip(sizes.items(), parts):
            if not isinstance(part, torch.Tensor):
                raise TypeError(f"{type(self).__name__}: h0's {name} must be a tensor, got {type(part).__name__}")
            expected = (self.num_layers, batch, size) if batched else (self.num_layers, size)
            if tuple(part.shape) != expected:
                raise ValueError(
                    f"{type(self).__name__}: h0's {name} must have shape {expected} (num_layers, "
                    f"{'N, ' if batched else ''}features); got {tuple(part.shape)}"
                )
            self._check_like_parameters("h0" if len(sizes) == 1 else f"h0's {name}", part)
            checked.append((part if batched else part.unsqueeze(1)).contiguous())
        return checked

    def _check_like_parameters(self, key: str, tensor: torch.Tensor) -> None:
        """`tensor` (input or h0) of the parameters' dtype and on their device, as nn.RNN checks; under torch.autocast
        bfloat16/float16 pass, as the cells cast them themselves (models/precision.py)."""
        parameter = next((p for p in self.core.parameters() if p.is_floating_point()), None)
        if parameter is None:
            return
        if tensor.device != parameter.device:
            raise ValueError(
                f"{type(self).__name__}: {key} is on {tensor.device} but the layer's parameters are on "
                f"{parameter.device}; move one of them with .to()"
            )
        if tensor.dtype != parameter.dtype and not (
            tensor.dtype in LOW_PRECISION and autocast_active(tensor.device.type)
        ):
            raise ValueError(
                f"{type(self).__name__}: {key} must have the type {parameter.dtype}, got type {tensor.dtype}"
            )

    @staticmethod
    def _run(cell: nn.Module, x: torch.Tensor, state: list[torch.Tensor] | None):
        """One layer over (N, L, H_in) from its initial state (or its own): its features and its final state parts."""
        if isinstance(cell, (LSTMCell, NRUCell)):  # a state of two parts: (h, c) or (h, memory)
            out, final = cell(x, initial_state=None if state is None else tuple(state), return_state=True)
            return out, list(final)
        if isinstance(cell, DiagonalStateSpaceLayer):  # the recurrence's state [Re x | Im x], not the features
            out, final = cell(x, initial_state=None if state is None else state[0], return_state=True)
            return out, [final]
        out = cell(x, initial_state=None if state is None else state[0])
        return out, [out[:, -1]]  # the features are the state: h_n is the last step's

    def extra_repr(self) -> str:
        options = "".join(f", {key}={value!r}" for key, value in self.family_args.items())
        return (
            f"family={self.family!r}, {self.input_size}, {self.hidden_size}, num_layers={self.num_layers}, "
            f"batch_first={self.batch_first}, dropout={self.dropout}{options}"
        )


def _family_layer(name: str, family: str, cls: type) -> type[FamilyRNN]:
    """A FamilyRNN subclass fixed to `family`: Name(input_size, hidden_size, num_layers=1, ..., *, options), its
    docstring the family's `layer_doc` then its cells' own (what each option means), its signature with the
    options, so that help() and an editor show them."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        batch_first: bool = False,
        dropout: float = 0.0,
        device=None,
        dtype=None,
        **family_args,
    ):
        FamilyRNN.__init__(
            self, family, input_size, hidden_size, num_layers, batch_first, dropout, device, dtype, **family_args
        )

    fixed = [p for p in inspect.signature(__init__).parameters.values() if p.kind != inspect.Parameter.VAR_KEYWORD]
    options = [
        parameter.replace(kind=inspect.Parameter.KEYWORD_ONLY)
        for key, parameter in inspect.signature(cls.__init__).parameters.items()
        if key not in ("self", "input_size", "hidden_size") and parameter.kind != inspect.Parameter.VAR_KEYWORD
    ]
    __init__.__signature__ = inspect.signature(__init__).replace(parameters=fixed + options)
    doc = (
        f"{cls.layer_doc}\n\nThe family's options are keyword arguments (defaults: the paper's); its cells, "
        f"{cls.__module__}.{cls.__qualname__}:\n\n{inspect.cleandoc(cls.__doc__ or '')}"
    )
    return type(name, (FamilyRNN,), {"__init__": __init__, "__doc__": doc, "__module__": __name__})


# every registered family with a carried state (all but NOT_A_RECURRENCE) as a layer named as its cells' class, its
# docstring the family's `layer_doc`: a new family in models/__init__.py's FAMILIES is a layer here with no new line
LAYERS: dict[str, type[FamilyRNN]] = {
    family: _family_layer(cls.__name__, family, cls)
    for family, cls in FAMILIES.items()
    if family not in NOT_A_RECURRENCE
}
globals().update({layer.__name__: layer for layer in LAYERS.values()})  # ScoRNN, LSTM, ... as this module's names


# training a model that holds these layers ----------------------------------------------------------------------
def parameter_groups(model: nn.Module) -> dict[str, list[nn.Parameter]]:
    """Every parameter of `model` once: its OrthoLab layers' groups merged by name, all others in `other` (as
    `ortholab fit` puts the readout and input adapter there)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {model!r} ({type(model).__name__})")
    groups: dict[str, list[nn.Parameter]] = {}
    seen: set[int] = set()
    for module in model.modules():
        if isinstance(module, FamilyRNN):
            for name, params in module.parameter_groups().items():
                fresh = [p for p in params if id(p) not in seen]
                groups.setdefault(name, []).extend(fresh)
                seen.update(id(p) for p in fresh)
    groups.setdefault("other", []).extend(p for p in model.parameters() if id(p) not in seen)
    return groups


def _refuse_mixed_defaults(layers: list[FamilyRNN], defaults: dict[str, dict], specs: dict[str, dict]) -> None:
    """A group one family steps with its own default optimizer that also holds another family's parameters: one
    optimizer would step both. Refused where that optimizer is a manifold's (the full-capacity uRNN's W: either W
    leaves U(n) or the other's step fails), and where the caller named none for the group (the default would
    silently train the other family's parameters too, e.g. the LRU's lr)."""
    for group, spec in defaults.items():
        families = sorted({layer.family for layer in layers if layer.parameter_groups().get(group)})
        needing = sorted({layer.family for layer in layers if group in layer.default_optimizers})
        if set(families) == set(needing) or (group in specs and spec["name"] != "stiefel_cayley"):
            continue
        fix = "give each such layer its own group_optimizer(layer, specs) and the rest of the model its own optimizer"
        if spec["name"] != "stiefel_cayley":
            fix = f"name specs[{group!r}] yourself (one optimizer for all of them), or {fix}"
        steps = f"{needing} steps it with {spec['name']}"
        raise ValueError(f"group {group!r} would hold the parameters of {families}, and {steps}: {fix}")


class GroupOptimizer:
    """One optimizer per parameter group of `model`, stepped together, then every layer's after-step hook.

    specs: {group: {name: ..., lr: ..., options}} with an optional `default` entry, as `model.optimizers` in a
    config (names: `ortholab.models.optimizers.OPTIMIZERS`, e.g. the papers' rmsprop_tf, adagrad_tf,
    stiefel_cayley). `optimizers` maps each group to its torch optimizer (for an LR scheduler, say).
    """

    def __init__(self, model: nn.Module, specs: dict[str, dict]):
        groups = parameter_groups(model)
        self.layers = [module for module in model.modules() if isinstance(module, FamilyRNN)]
        defaults: dict[str, dict] = {}
        for layer in self.layers:
            defaults.update(layer.default_optimizers)
        _refuse_mixed_defaults(self.layers, defaults, specs if isinstance(specs, dict) else {})
        self.specs = group_specs(groups, specs, defaults, where="optimizers")
        self.optimizers = {
            name: build_optimizer(groups[name], spec, f"optimizers.{name}")
            for name, spec in self.specs.items()
            if groups[name]
        }

    def zero_grad(self, set_to_none: bool = True) -> None:
        for optimizer in self.optimizers.values():
            optimizer.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        for optimizer in self.optimizers.values():
            optimizer.step()
        for layer in self.layers:
            layer.after_optimizer_step()

    def state_dict(self) -> dict:
        return {name: optimizer.state_dict() for name, optimizer in self.optimizers.items()}

    def load_state_dict(self, state: dict) -> None:
        for name, optimizer in self.optimizers.items():
            optimizer.load_state_dict(state[name])


def group_optimizer(model: nn.Module, specs: dict[str, dict] | str | Path) -> GroupOptimizer:
    """`GroupOptimizer(model, specs)`; specs may also be a config (path or name) whose `model.optimizers` to use."""
    if not isinstance(specs, (dict, str, Path)):
        raise TypeError(
            f"specs must be a dict of group -> optimizer ({{'recurrent': {{'name': 'rmsprop_tf', 'lr': 1e-3}}}}) or a "
            f"config's path or name, got {specs!r} ({type(specs).__name__})"
        )
    return GroupOptimizer(model, specs if isinstance(specs, dict) else paper_optimizers(specs))


def paper_optimizers(config: str | Path) -> dict[str, dict]:
    """The `model.optimizers` of a config: a YAML path, `configs/papers/<name>.yaml` (installed with OrthoLab) or
    just <name> (`ortholab list configs` lists them); adam 1e-3 for every group if it names none, as `fit`."""
    if not isinstance(config, (str, Path)):
        raise TypeError(f"config must be a config's path or name, got {config!r} ({type(config).__name__})")
    name = str(config)
    candidates = [Path(name), PACKAGE_ROOT / name] + [
        PACKAGE_ROOT / "configs" / folder / f"{name}.yaml" for folder in ("papers", "demo")
    ]
    path = next((c for c in candidates if c.is_file()), None)
    if path is None:
        raise ValueError(
            f"config {name!r} is neither a file nor an installed config; `ortholab list configs` "
            f"lists them (e.g. configs/papers/scornn_copying_T1000.yaml)"
        )
    try:
        held = yaml.safe_load(path.read_text()) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as error:  # a binary file, a YAML mistake: the file, in one line
        raise ValueError(
            f"config {name!r} is no YAML file ({type(error).__name__}); give a config's path or name"
        ) from None
    if not isinstance(held, dict) or not isinstance(held.get("model") or {}, dict):
        raise ValueError(f"config {name!r} is no config: it holds no mapping `model:` (with its optimizers)")
    return (held.get("model") or {}).get("optimizers") or DEFAULT_OPTIMIZERS
