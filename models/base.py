"""What every recurrent family provides, so the sequence model, optimizers and analyses treat them alike."""

from __future__ import annotations

import torch
from torch import nn

from ortholab.errors import ConfigError
from ortholab.models.precision import autocast_active, autocast_off, first_device_type, to_full_precision

# what output and h_n of a family's torch.nn layer (models/layers.py) hold, by the family's `layout`
REAL_STATE = "output and h_n hold the real hidden state h (n features)."
PLANAR_STATE = "output and h_n hold the complex state h as [Re h | Im h] (2n features); `as_complex` gives h."
INTERLEAVED_STATE = (
    "output and h_n hold the complex state h interleaved, (Re h_0, Im h_0, Re h_1, ...) (2n "
    "features); `as_complex` gives h."
)


class RecurrentLayer(nn.Module):
    """A sequence layer like `nn.RNN(batch_first=True)`: (B, T, input_size) -> all hidden features (B, T, output_size).

    Subclasses set `output_size` when the readout sees more than `hidden_size` features (complex states give 2n).
    A family that embeds symbol ids itself sets the class attribute `embeds_symbols = True`: for symbolic tasks
    it then receives the ids (B, T) with input_size = the vocabulary size, instead of one-hot vectors.
    """

    embeds_symbols = False
    # Families whose forward takes `state_offsets` (B, T, output_size), added to every h_t inside the recurrence:
    # the gradient w.r.t. them is the total dL/dh_t, which the gradient-norm probe (scoRNN Figure 5) records.
    supports_state_offsets = False
    # Options about the task's raw inputs (e.g. embedding symbol ids): layers above the first in a stack drop them.
    first_layer_options: tuple[str, ...] = ()
    # Optimizers a group needs unless the config names one for that group itself (the config's `default`
    # entry does not replace them), e.g. the full-capacity uRNN's Stiefel step for its unitary W.
    default_optimizers: dict[str, dict] = {}
    # Families that keep a matrix orthogonal or unitary by construction under any training (`orthogonal_map`: W
    # itself, or nnRNN's basis P); the generic tests check it for each such family, a new one included.
    keeps_orthogonal = False
    # Families whose forward forms W = recurrent_matrix() from the parameters once per pass (a Cayley solve, a
    # Householder product, an exponential): `ortholab bench` times that formation against a whole step.
    forms_recurrent_matrix = False
    # Device types (cpu, cuda) on which the forward may run under torch.autocast (bf16-mixed, 16-mixed): library
    # layers with low-precision kernels. Elsewhere autocast is off inside the layer and its bf16/fp16 inputs are
    # cast to float32, so W is formed and the recurrence run in full precision (models/precision.py).
    autocast_devices: tuple[str, ...] = ()
    # How SequenceModel initialises the linear readout unless model.readout_init says: "glorot" (Glorot-uniform
    # weights, zero bias, tf.layers.dense: the TensorFlow codes of scoRNN, scuRNN, EURNN), "torch" (nn.Linear's own,
    # the PyTorch codes whose readout is a default nn.Linear), ... (models/sequence.py READOUT_INITS).
    readout_init = "glorot"
    # How the output features hold the hidden state: "real" (n features), or a complex state's 2n as "planar"
    # [Re h | Im h] or "interleaved" (Re h_0, Im h_0, Re h_1, ...) (the torch.nn layer's `layout` and `as_complex`).
    layout = "real"
    # The docstring of the family's torch.nn layer, ortholab.nn.<class name> (models/layers.py): the paper, what
    # output and h_n hold, the parameter groups and the initial state.
    layer_doc = ""

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        if hidden_size <= 0:
            raise ConfigError(f"model.hidden_size must be a positive integer, got {hidden_size}; set it to 1 or more")
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.output_size = hidden_size

    def __call__(self, *args, **kwargs):
        return self.in_layer_precision(super().__call__, *args, **kwargs)

    def in_layer_precision(self, call, *args, **kwargs):
        """call(*args, **kwargs) under this family's precision: as it is, or with autocast off and bf16/fp16 inputs
        cast to float32 where the family has no low-precision kernels (`autocast_devices`)."""
        device_type = first_device_type(args)
        if device_type is None or device_type in self.autocast_devices or not autocast_active(device_type):
            return call(*args, **kwargs)
        with autocast_off(device_type):  # the family's maps and recurrence in full precision, as without autocast
            full = {key: to_full_precision(value) for key, value in kwargs.items()}
            return call(*map(to_full_precision, args), **full)

    def _apply(self, fn, recurse: bool = True):
        """nn.Module's conversion (.to, .double(), Lightning's 64-true); a float32 layer made float64 then re-projects
        the orthogonal/unitary matrix it stores, orthogonal only to float32's ~1e-7 (`exact_after_widening_`)."""
        before = self._stored_dtype()
        result = super()._apply(fn, recurse)
        if before == torch.float32 and self._stored_dtype() == torch.float64:
            with torch.no_grad():
                self.exact_after_widening_()
        return result

    def _stored_dtype(self) -> torch.dtype | None:
        return next((p.dtype for p in self.parameters(recurse=False) if p.is_floating_point()), None)

    def exact_after_widening_(self) -> None:
        """Put a stored orthogonal/unitary matrix back onto its manifold in the new float64 precision: a no-op for
        the families that form W from free parameters (a Cayley transform, an exponential), exact in any precision."""

    def recurrent_matrix(self) -> torch.Tensor | None:
        """The (n, n) matrix W of h_t = f(W h_{t-1} + ...), or None for families without one (LSTM, GRU)."""
        return None

    def orthogonal_map(self) -> torch.Tensor | None:
        """The matrix this family keeps orthogonal/unitary (`keeps_orthogonal`): W by default; None where none is."""
        return self.recurrent_matrix() if self.keeps_orthogonal else None

    def eigenvalues(self) -> torch.Tensor | None:
        """The recurrence's eigenvalues in complex128 (the eigenvalue snapshots store them): eig(W) of
        `recurrent_matrix()`, or None without one. A diagonal recurrence (LRU, S4D) returns its diagonal instead,
        with no matrix formed."""
        w = self.recurrent_matrix()
        if w is None:
            return None
        return torch.linalg.eigvals(w.detach().to(torch.complex128 if w.is_complex() else torch.float64))

    def nonfinite_hint(self) -> str | None:
        """The family's likely explanation when training hits a NaN/Inf (shown by the NaN guard), or None."""
        return None

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        """Named groups, each trained by its own optimizer; together they hold every parameter exactly once."""
        return {"other": list(self.parameters())}

    def redundant_parameter_count(self) -> int:
        """Stored numbers beyond the model's degrees of freedom, which the papers' budgets do not count (the
        full-capacity uRNN stores 2n^2 reals for an n^2-dimensional unitary W); 0 for most families."""
        return 0

    def after_optimizer_step(self) -> None:
        """Called once after every group's optimizer has stepped (e.g. expRNN's re-basing every K steps)."""


def count_from_fraction(value: int | float, n: int, key: str) -> int:
    """A count given either as an int in [0, n] or as a float fraction of n in [0, 1]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"model.family_args.{key} must be an int count or a float fraction, got {value!r}")
    if isinstance(value, float):
        if not 0.0 <= value <= 1.0:
            raise ConfigError(
                f"model.family_args.{key} = {value} as a fraction must lie in [0, 1]; give an int for a count"
            )
        return int(round(value * n))
    if not 0 <= value <= n:
        raise ConfigError(
            f"model.family_args.{key} = {value} must lie between 0 and hidden_size = {n}; "
            + ("lower it or raise model.hidden_size" if value > n else "give a count of 0 or more")
        )
    return value
