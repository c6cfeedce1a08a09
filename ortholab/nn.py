"""OrthoLab's recurrent families as torch.nn layers, and the optimizers the papers train them with.

    from ortholab import nn as onn
    rnn = onn.ScoRNN(10, 64, batch_first=True)       # nn.RNN's calling convention: (input, h0) -> (output, h_n)
    opt = onn.group_optimizer(model, "scornn_copying_T1000")   # that paper config's optimizer for each group

Everything here lives in ortholab.models.layers and ortholab.models.optimizers; docs/library.md shows it at work.
"""

from ortholab.models.layers import (
    LAYERS,
    FamilyRNN,
    GroupOptimizer,
    group_optimizer,
    paper_optimizers,
    parameter_groups,
)
from ortholab.models.optimizers import OPTIMIZERS, AdagradTF, RMSpropTF, build_optimizer
from ortholab.models.stiefel import StiefelCayley

# one layer per family, named as its class (ScoRNN, ScuRNN, ..., LSTM): a family added to the registry is here too
globals().update({layer.__name__: layer for layer in LAYERS.values()})

__all__ = [
    *(layer.__name__ for layer in LAYERS.values()),
    "LAYERS",
    "FamilyRNN",
    "GroupOptimizer",
    "group_optimizer",
    "paper_optimizers",
    "parameter_groups",
    "OPTIMIZERS",
    "AdagradTF",
    "RMSpropTF",
    "StiefelCayley",
    "build_optimizer",
]
