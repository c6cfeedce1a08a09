"""The deep state-space block shared by the LRU and S4D families: a diagonal linear recurrence inside a residual block.

One family layer is one block, (B, T, input_size) -> (B, T, hidden_size):

    x -> [norm] -> recurrence (y_k = Re(C x_k) + D u_k) -> GELU -> dropout -> GLU -> dropout -> + x -> [norm]

with the norm before the recurrence (`prenorm`) or after the sum, as both papers' codes allow. When input_size
differs from hidden_size, a linear encoder maps the inputs to hidden_size first, the papers' encoder; stacked
layers (`model.num_layers`) then read hidden_size features and have none, so a stack is the papers' network:
encoder, `num_layers` blocks, and the readout as the decoder. The dropout drops whole features, one mask per
sequence, the same at every step, as both codes do (minimal-LRU's broadcast over time, S4's Dropout1d).

The recurrence's state is complex (a diagonal recurrence's eigenvalues come in conjugate pairs or as complex
numbers): `initial_state` and the final state are its real and imaginary parts side by side, [Re x | Im x].
"""

from __future__ import annotations

import numbers

import torch
from torch import nn

from ortholab.models.base import ConfigError, RecurrentLayer


def positive_int(key: str, value) -> int:
    """An option that counts something: TypeError unless an int, ConfigError unless positive, naming the key."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"model.family_args.{key} should be of type int, got {value!r} ({type(value).__name__})")
    if value < 1:
        raise ConfigError(f"model.family_args.{key} = {value} must be a positive integer")
    return int(value)


SSM_STATE = (  # what output, h0 and h_n of the torch.nn layer hold (models/layers.py)
    "output holds each step's block features (n); h0 and h_n hold each layer's complex recurrence state x "
    "as [Re x | Im x] (state_features)."
)


def real_number(key: str, value) -> float:
    """An option that is a real number: TypeError otherwise, naming the key."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"model.family_args.{key} should be a real number, got {value!r} ({type(value).__name__})")
    return float(value)


class FeatureBatchNorm(nn.BatchNorm1d):
    """BatchNorm over the batch and the time steps of (B, T, H) features, one mean and variance per feature."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.transpose(1, 2)).transpose(1, 2)


class FeatureDropout(nn.Dropout1d):
    """Dropout of whole features of (B, T, H): one mask per sequence and feature, the same at every step."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.transpose(1, 2)).transpose(1, 2)


class ResidualBlock(nn.Module):
    """x + dropout(GLU(dropout(GELU(recurrence(norm(x)))))), normalised before the recurrence (`prenorm`) or
    after the sum. `recurrence(u, state, want_final)` returns (y, final state or None); the GLU is Linear(H, 2H)
    whose first half is gated by the sigmoid of its second half."""

    def __init__(
        self, width: int, recurrence: nn.Module, norm: nn.Module, prenorm: bool, dropout: float, activation: nn.Module
    ):
        super().__init__()
        self.recurrence, self.norm, self.prenorm = recurrence, norm, prenorm
        self.activation, self.dropout = activation, FeatureDropout(dropout)
        self.glu = nn.Linear(width, 2 * width)

    def forward(
        self, x: torch.Tensor, state: torch.Tensor | None = None, want_final: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        z = self.norm(x) if self.prenorm else x
        z, final = self.recurrence(z, state, want_final)
        # (B, T, H) in memory: the recurrences may return a transposed view, and elementwise backward kernels given
        # operands of different layouts take a slow path (GELU's backward: 4 to 8x as long, docs/benchmarks.md)
        z = self.dropout(self.activation(z.contiguous()))
        z = self.dropout(nn.functional.glu(self.glu(z), dim=-1))
        x = x + z  # the skip connection
        return (x if self.prenorm else self.norm(x)), final

    def has_last_step(self) -> bool:
        """Whether `last_step` gives forward's last step exactly: the recurrence computes its last output alone, the
        norm comes first or acts step by step (a batch norm after the sum would see only the last step's
        statistics), and no dropout draws its masks (their random numbers would differ)."""
        norm_fits = self.prenorm or isinstance(self.norm, nn.LayerNorm)
        return hasattr(self.recurrence, "last_output") and norm_fits and (self.dropout.p == 0 or not self.training)

    def last_step(self, x: torch.Tensor) -> torch.Tensor:
        """forward(x)[0][:, -1] (B, H) with no state in: the recurrence reads every step but gives its last output
        alone, and what acts step by step after it (GELU, GLU, skip, a post-norm LayerNorm) runs on that step only."""
        z = self.recurrence.last_output(self.norm(x) if self.prenorm else x)
        out = x[:, -1] + nn.functional.glu(self.glu(self.activation(z)), dim=-1)
        return out if self.prenorm else self.norm(out)


class DiagonalStateSpaceLayer(RecurrentLayer):
    """A family made of one ResidualBlock (module docstring) around `recurrence`, after a linear encoder when
    input_size != hidden_size.

    The recurrence provides `eigenvalues()` (its diagonal, complex, (S,)), `recurrent_parameters()` (the
    parameters of its eigenvalues, trained in the group `recurrent`) and `state_count` (S complex states).
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        recurrence: nn.Module,
        norm: nn.Module,
        prenorm: bool,
        dropout: float,
        activation: nn.Module,
    ):
        super().__init__(input_size, hidden_size)
        if not isinstance(prenorm, bool):
            raise TypeError(f"model.family_args.prenorm should be true or false, got {prenorm!r}")
        dropout = real_number("block_dropout", dropout)
        if not 0.0 <= dropout < 1.0:
            raise ConfigError(f"model.family_args.block_dropout = {dropout!r} must be a probability in [0, 1)")
        self.encoder = nn.Linear(input_size, hidden_size) if input_size != hidden_size else nn.Identity()
        self.block = ResidualBlock(hidden_size, recurrence, norm, prenorm, dropout, activation)
        self.state_features = 2 * recurrence.state_count  # [Re x | Im x] in the nn.RNN-style layer's h0 and h_n

    @property
    def recurrence(self) -> nn.Module:
        return self.block.recurrence

    def eigenvalues(self) -> torch.Tensor:
        """The diagonal of the recurrence, read directly (no matrix is formed), in complex128."""
        return self.recurrence.eigenvalues().detach().to(torch.complex128)

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        recurrent = list(self.recurrence.recurrent_parameters())
        chosen = {id(p) for p in recurrent}
        return {"recurrent": recurrent, "other": [p for p in self.parameters() if id(p) not in chosen]}

    def last_step_features(self, x: torch.Tensor) -> torch.Tensor | None:
        """forward(x)[:, -1] (B, hidden_size), computed for that step alone where the block can (a last-step
        readout: SequenceModel), else None."""
        if not self.block.has_last_step():
            return None
        return self.in_layer_precision(lambda u: self.block.last_step(self.encoder(u)), x)  # as forward's precision

    def forward(self, x: torch.Tensor, initial_state: torch.Tensor | None = None, return_state: bool = False):
        """The block's features (B, T, hidden_size); initial_state: the recurrence's state before the first step,
        [Re x | Im x] (B, state_features), else zeros; return_state: also the state after the last step, alike."""
        state = None
        if initial_state is not None:
            real, imag = initial_state.split(initial_state.shape[-1] // 2, dim=-1)
            state = torch.complex(real, imag)
        out, final = self.block(self.encoder(x), state, return_state)
        return (out, torch.cat([final.real, final.imag], dim=-1)) if return_state else out
