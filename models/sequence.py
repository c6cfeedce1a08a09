"""A recurrent layer between the input adapter and the readout a task needs."""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from ortholab.models.base import ConfigError, RecurrentLayer
from ortholab.models.choices import check_choice, checks_choices

# model.input_adapter: "default" feeds symbol ids one-hot (unless the family embeds them) and real inputs as
# they are; "embedding" maps symbol ids through nn.Embedding(vocab, size); "linear" maps real inputs through
# nn.Linear(input_size, size). With either of the last two the recurrent layer reads `size` features.
InputAdapter = Literal["default", "embedding", "linear"]


def input_adapter(kind: InputAdapter, input_size: int, symbolic: bool, size: int | None) -> nn.Module | None:
    """The adapter module of `model.input_adapter` (None for "default"), checked against the task's inputs.

    input_size: the task's input channels, or its vocabulary size when the inputs are symbol ids (`symbolic`).
    size: `model.input_adapter_size`, the features the recurrent layer then reads.
    """
    check_choice("model.input_adapter", kind, InputAdapter)
    if kind == "default":
        if size is not None:
            raise ConfigError(
                f"model.input_adapter_size = {size!r} only applies with model.input_adapter: "
                f"embedding or linear; remove it or choose an adapter"
            )
        return None
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ConfigError(
            f"model.input_adapter_size = {size!r}; model.input_adapter: {kind} needs a positive "
            f"integer, the number of features the recurrent layer reads"
        )
    if kind == "embedding":
        if not symbolic:
            raise ConfigError(
                "model.input_adapter: embedding needs a task of symbol ids, but this task's inputs are "
                "real-valued; use model.input_adapter: linear"
            )
        return nn.Embedding(input_size, size)  # N(0, 1) entries, PyTorch's (and the SRNN code's) initialisation
    if symbolic:
        raise ConfigError(
            "model.input_adapter: linear needs real-valued inputs, but this task's inputs are symbol "
            "ids; use model.input_adapter: embedding (a linear map of one-hot vectors)"
        )
    return nn.Linear(input_size, size)  # PyTorch's initialisation


def _zero_bias(init_weight):
    def initialise(linear: nn.Linear) -> None:
        init_weight(linear.weight)
        nn.init.zeros_(linear.bias)

    return initialise


def lecun_normal_(weight: torch.Tensor) -> None:
    """flax's default Dense kernel (flax/linen/linear.py: `default_kernel_init = initializers.lecun_normal()`):
    jax's variance_scaling(1, fan_in, 'truncated_normal'), a normal cut at 2 std, its std sqrt(1/fan_in) / .8796."""
    std = (1.0 / weight.shape[1]) ** 0.5 / 0.87962566103423978  # the truncated normal's std restored to sqrt(1/fan_in)
    nn.init.trunc_normal_(weight, 0.0, std, -2 * std, 2 * std)


READOUT_INITS = {  # how the linear readout starts, as the code a family or a paper's baseline comes from
    "glorot": _zero_bias(nn.init.xavier_uniform_),  # tf.layers.dense: scoRNN, scuRNN, EURNN (TensorFlow)
    "torch": lambda linear: None,  # nn.Linear's own, weights and bias uniform in +-1/sqrt(fan_in): SRNN's repository
    "xavier_normal": _zero_bias(nn.init.xavier_normal_),  # NRU's W_h2o
    "kaiming_normal": _zero_bias(lambda w: nn.init.kaiming_normal_(w, nonlinearity="relu")),  # expRNN's copying head
    "lecun_normal": _zero_bias(lecun_normal_),  # flax's nn.Dense: the LRU code's decoder (minimal-LRU lru/model.py:191)
}


def initialise_readout(linear: nn.Linear, how: str) -> None:
    if how not in READOUT_INITS:
        raise ConfigError(f"model.readout_init = {how!r}; give one of {sorted(READOUT_INITS)} or null (the family's)")
    READOUT_INITS[how](linear)


class SequenceModel(nn.Module):
    """inputs -> adapter -> recurrent layer -> linear readout at every step or at the last step.

    vocab_size: set for symbol inputs (B, T) of integer ids, fed one-hot (the papers' layout); None for real
    inputs (B, T, input_size).
    adapter: a module mapping the inputs to the layer's input_size features (see `input_adapter`); None keeps
    the one-hot / as-is layout above.
    readout_init: one of READOUT_INITS; None: the layer's `readout_init` (its family's code).
    """

    @checks_choices(key_prefix="SequenceModel: ")
    def __init__(
        self,
        layer: RecurrentLayer,
        output_size: int,
        readout: Literal["every_step", "last_step"] = "every_step",
        vocab_size: int | None = None,
        adapter: nn.Module | None = None,
        readout_init: str | None = None,
    ):
        super().__init__()
        self.vocab_size = vocab_size
        self.adapter = adapter
        self.layer = layer
        self.readout_at = readout
        self.readout = nn.Linear(layer.output_size, output_size)
        initialise_readout(self.readout, readout_init or layer.readout_init)

    def encode(self, inputs: torch.Tensor) -> torch.Tensor:
        """What the recurrent layer reads: the adapter's features, else one-hot vectors for symbol ids (unless
        the family embeds them), else the inputs as they are."""
        if self.adapter is not None:
            return self.adapter(inputs)
        if self.vocab_size is not None and not self.layer.embeds_symbols:
            return nn.functional.one_hot(inputs, self.vocab_size).to(self.readout.weight.dtype)
        return inputs

    def read_out(self, features: torch.Tensor) -> torch.Tensor:
        """Outputs from all hidden features (B, T, F): at every step, or at the last step only."""
        if self.readout_at == "last_step":
            features = features[:, -1]
        return self.readout(features)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        encoded = self.encode(inputs)
        if self.readout_at == "last_step" and hasattr(self.layer, "last_step_features"):
            last = self.layer.last_step_features(encoded)  # the last step alone, where the layer can (LRU, S4D)
            if last is not None:
                return self.readout(last)
        features = self.layer(encoded)
        expected = (*encoded.shape[:2], self.layer.output_size)  # (batch, steps, output_size)
        if tuple(features.shape) != expected:
            raise ConfigError(
                f"family {type(self.layer).__name__}'s forward returned features of shape {tuple(features.shape)} for "
                f"inputs {tuple(encoded.shape)}: a family returns (batch, steps, output_size) = {expected}, every "
                f"step's features"
            )
        return self.read_out(features)
