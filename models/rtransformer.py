"""R-Transformer (Wang, Jiang, Liu, Tang 2019): local recurrent windows, then causal multi-head attention and a
position-wise feed-forward block, repeated; its local recurrent cell is any family of the registry.

One level = `local_layers` LocalRNN sublayers, an attention sublayer and a feed-forward sublayer, each wrapped as
x + dropout(sublayer(LayerNorm(x))) (the official code's pre-norm residual). The LocalRNN runs the cell over the
`window` positions t-window+1..t (zero-padded at the start) and keeps its last state: every window of the sequence
is one sequence of a single batched call, so there is no loop over t. The SRNN paper's music experiment (Table 4)
swaps the official GRU cell for SRNN (d_model 160, f_r one hidden layer of 160).

Defaults are the official polyphonic-music script's (DSE-MSU/R-transformer audio/experiment.py): d_model 160,
window (ksize) 6, 3 levels, 1 LocalRNN per level, 4 heads, dropout 0.1, GRU cell; and its models/RTransformer.py
layers: a LayerNorm dividing by the unbiased std + 1e-6, attention projections initialised as nn.Linear
(weights and biases uniform in +-1/sqrt(d)). `torch_layers=True` uses torch's nn.LayerNorm and
nn.MultiheadAttention's own initialisation (Xavier weights, zero biases) instead, with the same parameters, so
checkpoints load either way. The one difference left: no unused Linear+ReLU beside each local RNN (the code
creates one and never calls it).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from ortholab.models.base import ConfigError, RecurrentLayer


class LocalRecurrence(nn.Module):
    """h_t = the cell's last state after reading x_{t-window+1}, ..., x_t (zeros before the sequence starts)."""

    def __init__(self, cell: RecurrentLayer, width: int, window: int):
        super().__init__()
        self.cell, self.window = cell, window
        # complex cells read out [Re h | Im h] (2n features): project back to the model width
        self.project = nn.Linear(cell.output_size, width) if cell.output_size != width else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, steps, width = x.shape
        padded = nn.functional.pad(x, (0, 0, self.window - 1, 0))  # window-1 zero steps before t = 0
        windows = padded.unfold(1, self.window, 1)  # (B, T, width, window): every position's window at once
        windows = windows.permute(0, 1, 3, 2).reshape(batch * steps, self.window, width)
        last = self.cell(windows)[:, -1]  # one batched pass over all B*T windows
        return self.project(last).view(batch, steps, -1)


class UnbiasedLayerNorm(nn.LayerNorm):
    """The official code's LayerNorm: weight * (x - mean) / (std + eps) + bias, std with Bessel's correction."""

    def __init__(self, width: int, eps: float = 1e-6):
        super().__init__(width, eps=eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        centred = x - x.mean(-1, keepdim=True)
        return self.weight * centred / (x.std(-1, keepdim=True) + self.eps) + self.bias


class PreNormResidual(nn.Module):
    """x + dropout(sublayer(LayerNorm(x))), the official code's SublayerConnection."""

    def __init__(self, width: int, sublayer: nn.Module, dropout: float, torch_layers: bool = False):
        super().__init__()
        norm = nn.LayerNorm(width) if torch_layers else UnbiasedLayerNorm(width)
        self.norm, self.sublayer, self.dropout = norm, sublayer, nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.dropout(self.sublayer(self.norm(x)))


class CausalSelfAttention(nn.Module):
    """Multi-head attention in which position t attends to positions <= t (the code's 'MHPooling')."""

    def __init__(self, width: int, heads: int, dropout: float, torch_layers: bool = False):
        super().__init__()
        self.attention = nn.MultiheadAttention(width, heads, dropout=dropout, batch_first=True)
        if not torch_layers:  # the official code's four nn.Linear(d, d): weights and biases uniform in +-1/sqrt(d)
            bound = width**-0.5
            for tensor in (
                self.attention.in_proj_weight,
                self.attention.in_proj_bias,
                self.attention.out_proj.weight,
                self.attention.out_proj.bias,
            ):
                nn.init.uniform_(tensor, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        steps = x.shape[1]
        mask = torch.ones(steps, steps, dtype=torch.bool, device=x.device).triu(1)  # True: may not attend
        return self.attention(x, x, x, attn_mask=mask, need_weights=False, is_causal=True)[0]


class FeedForward(nn.Sequential):
    """Linear(d, 4d) -> ReLU -> dropout -> Linear(4d, d), at every position."""

    def __init__(self, width: int, dropout: float):
        super().__init__(nn.Linear(width, 4 * width), nn.ReLU(), nn.Dropout(dropout), nn.Linear(4 * width, width))


class RTransformer(RecurrentLayer):
    """R-Transformer: a local recurrent cell over a sliding window, then causal self-attention; hidden_size is d_model.

    cell: the local recurrent cell, a registered family name.
    cell_args: the cell's own family_args.
    window: the positions each LocalRNN reads (the code's ksize).
    levels: the repeated blocks (LocalRNN sublayers, attention, feed-forward).
    local_layers: LocalRNN sublayers per level.
    heads: attention heads.
    dropout: dropout of every residual sublayer.
    torch_layers: torch's LayerNorm and attention initialisation instead of the official code's (see above).

    Parameter groups: the cells' own groups (e.g. scoRNN's `recurrent`), merged across levels, and `other`.
    `recurrent_matrix()` and `eigenvalues()` are the first cell's, so the analyses see an orthogonal cell's W.
    """

    # attention and feed-forward under torch.autocast; the local cells are layers that decide for themselves
    autocast_devices = ("cpu", "cuda")
    readout_init = "torch"  # the official music model reads out with a default nn.Linear(d_model, 88)
    # the families a window can run, by name: every registered one but this. The registry (models/__init__.py)
    # fills it in, so that this module, which the registry imports, does not import the registry back
    cell_families: Mapping[str, type[RecurrentLayer]] = {}

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        cell: str = "gru",
        cell_args: dict | None = None,
        window: int = 6,
        levels: int = 3,
        local_layers: int = 1,
        heads: int = 4,
        dropout: float = 0.1,
        torch_layers: bool = False,
    ):
        super().__init__(input_size, hidden_size)
        if cell not in self.cell_families:
            raise ConfigError(
                f"model.family_args.cell = {cell!r} is not a recurrent family to use inside windows; "
                f"choose one of {sorted(self.cell_families)}"
            )
        for key, value in (("window", window), ("levels", levels), ("local_layers", local_layers), ("heads", heads)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"model.family_args.{key} = {value!r} must be a positive integer")
        if hidden_size % heads:
            raise ConfigError(
                f"model.hidden_size = {hidden_size} must be divisible by model.family_args.heads = "
                f"{heads} (each head gets hidden_size / heads features)"
            )
        if not isinstance(torch_layers, bool):
            raise ConfigError(f"model.family_args.torch_layers = {torch_layers!r} must be true or false")
        if not 0.0 <= dropout < 1.0:
            raise ConfigError(f"model.family_args.dropout = {dropout!r} must be a probability in [0, 1)")
        width = hidden_size
        self.encoder = nn.Linear(input_size, width)
        levels_list = []
        for _ in range(levels):
            sublayers = []
            for _ in range(local_layers):
                local = LocalRecurrence(self._cell(cell, width, cell_args), width, window)
                sublayers.append(PreNormResidual(width, local, dropout, torch_layers))
            attention = CausalSelfAttention(width, heads, dropout, torch_layers)
            sublayers.append(PreNormResidual(width, attention, dropout, torch_layers))
            sublayers.append(PreNormResidual(width, FeedForward(width, dropout), dropout, torch_layers))
            levels_list.append(nn.Sequential(*sublayers))
        self.levels = nn.Sequential(*levels_list)

    def _cell(self, cell: str, width: int, cell_args: dict | None) -> RecurrentLayer:
        """One local cell; its own refusals, which name its options model.family_args.KEY, name them as they are
        given here: model.family_args.cell_args.KEY."""
        try:
            return self.cell_families[cell](width, width, **(cell_args or {}))
        except ConfigError as err:
            raise ConfigError(str(err).replace("model.family_args.", "model.family_args.cell_args.")) from None

    @property
    def cells(self) -> list[RecurrentLayer]:
        """The local recurrent cells, level by level."""
        return [module.cell for module in self.modules() if isinstance(module, LocalRecurrence)]

    def recurrent_matrix(self) -> torch.Tensor | None:
        return self.cells[0].recurrent_matrix()

    def eigenvalues(self) -> torch.Tensor | None:
        return self.cells[0].eigenvalues()

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        groups: dict[str, list[nn.Parameter]] = {}
        in_cells = set()
        for cell in self.cells:
            for name, params in cell.parameter_groups().items():
                groups.setdefault(name, []).extend(params)
                in_cells.update(id(p) for p in params)
        groups.setdefault("other", []).extend(p for p in self.parameters() if id(p) not in in_cells)
        return groups

    def after_optimizer_step(self) -> None:
        for cell in self.cells:
            cell.after_optimizer_step()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.levels(self.encoder(x))
