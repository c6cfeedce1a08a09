"""TF1-compatible RMSProp and Adagrad against two steps computed by hand."""

import math
import re

import pytest
import torch
from tolerances import roundoff

from ortholab.errors import ConfigError
from ortholab.models.optimizers import AdagradTF, RMSpropTF, build_optimizer

# two steps of ~5 roundings each (the accumulator, its square root, the quotient, the product, the update)
TWO_STEPS = roundoff(torch.float64, 2 * 5)


def _two_steps(optimizer_cls, **kwargs):
    p = torch.nn.Parameter(torch.tensor([1.0], dtype=torch.float64))
    opt = optimizer_cls([p], **kwargs)
    values = []
    for g in (0.5, -1.0):
        p.grad = torch.tensor([g], dtype=torch.float64)
        opt.step()
        values.append(p.item())
    return values


def test_rmsprop_tf_two_steps():
    # ms0 = 1; ms1 = 0.9 + 0.1 * 0.25 = 0.925; ms2 = 0.9 * 0.925 + 0.1 * 1 = 0.9325
    p1 = 1.0 - 0.1 * 0.5 / math.sqrt(0.925 + 1e-10)
    p2 = p1 + 0.1 * 1.0 / math.sqrt(0.9325 + 1e-10)
    assert _two_steps(RMSpropTF, lr=0.1) == pytest.approx([p1, p2], rel=TWO_STEPS)
    assert p1 == pytest.approx(0.9480124755, abs=1e-9)


def test_rmsprop_tf_differs_from_torch_rmsprop():
    # torch's RMSprop starts its accumulator at 0: the first step is ~10x lr, TF1's is ~lr x g
    assert _two_steps(torch.optim.RMSprop, lr=0.1, alpha=0.9)[0] < 0.7 < _two_steps(RMSpropTF, lr=0.1)[0]


def test_adagrad_tf_two_steps():
    # acc0 = 0.1; acc1 = 0.35; acc2 = 1.35
    p1 = 1.0 - 0.1 * 0.5 / math.sqrt(0.35)
    p2 = p1 + 0.1 * 1.0 / math.sqrt(1.35)
    assert _two_steps(AdagradTF, lr=0.1) == pytest.approx([p1, p2], rel=TWO_STEPS)
    assert p1 == pytest.approx(0.915484575, abs=1e-9)


def test_unknown_optimizer_names_the_key():
    with pytest.raises(ConfigError, match=r"model.optimizers.recurrent.name = 'rmsprob'"):
        build_optimizer(
            [torch.nn.Parameter(torch.zeros(1))], {"name": "rmsprob", "lr": 1e-3}, "model.optimizers.recurrent"
        )


@pytest.mark.parametrize(
    "optimizer, options, says",
    [
        ("RMSpropTF", {"lr": -1}, "lr = -1"),
        ("RMSpropTF", {"lr": float("nan")}, "lr = nan"),
        ("RMSpropTF", {"lr": "x"}, "lr = 'x'"),
        ("RMSpropTF", {"decay": 2.0}, "decay = 2.0"),
        ("RMSpropTF", {"eps": -1.0}, "eps = -1.0"),
        ("AdagradTF", {"initial_accumulator": -1.0}, "initial_accumulator = -1.0"),
        ("AdagradTF", {"lr": 0}, "lr = 0"),
    ],
)
def test_the_tf1_optimizers_built_by_hand_refuse_a_bad_option_naming_it(optimizer, options, says):
    """A review's audit: from Python they took a negative or NaN lr, a decay of 2 (config files were checked)."""
    from ortholab import nn as onn

    with pytest.raises(ValueError, match=re.escape(says)):
        getattr(onn, optimizer)(torch.nn.Linear(2, 2).parameters(), **options)
