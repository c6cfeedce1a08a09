"""The gated baselines (models/gated.py): the LSTM's forget-gate bias option."""

import pytest
import torch
from tolerances import close, norm

from ortholab.models import FAMILIES
from ortholab.models.gated import LSTM


def gate_slices(bias: torch.Tensor, n: int) -> dict[str, torch.Tensor]:
    """PyTorch's nn.LSTM stacks its gates (input, forget, cell, output) in that order, n entries each."""
    return dict(zip(("input", "forget", "cell", "output"), bias.detach().split(n)))


@pytest.mark.parametrize("forget_bias", [1.0, -3.5, 4.0])
def test_forget_bias_sets_the_forget_gate_bias(forget_bias):
    torch.manual_seed(0)
    n = 6
    layer = LSTM(3, n, forget_bias=forget_bias)
    ih, hh = gate_slices(layer.rnn.bias_ih_l0, n), gate_slices(layer.rnn.bias_hh_l0, n)
    # the gate sees b_ih + b_hh: the value sits in b_ih, b_hh's forget slice is zeroed so the sum is exact
    assert torch.equal(ih["forget"], torch.full((n,), forget_bias)) and torch.equal(hh["forget"], torch.zeros(n))
    for gate in ("input", "cell", "output"):  # the other gates keep PyTorch's U(-1/sqrt(n), 1/sqrt(n))
        assert ih[gate].abs().max() <= n**-0.5 and ih[gate].std() > 0 and hh[gate].std() > 0


@pytest.mark.parametrize("forget_bias", [1.0, None])
def test_zero_biases_zeroes_every_gate_but_the_forget_gates(forget_bias):
    """The oRNN paper's LSTM: every bias zero but the forget gate's (set, or PyTorch's draw kept)."""
    torch.manual_seed(0)
    n = 6
    drawn = LSTM(3, n, forget_bias=forget_bias)
    torch.manual_seed(0)
    layer = LSTM(3, n, forget_bias=forget_bias, zero_biases=True)
    for bias, before in ((layer.rnn.bias_ih_l0, drawn.rnn.bias_ih_l0), (layer.rnn.bias_hh_l0, drawn.rnn.bias_hh_l0)):
        gates, kept = gate_slices(bias, n), gate_slices(before, n)
        assert all(torch.equal(gates[g], torch.zeros(n)) for g in ("input", "cell", "output"))
        assert torch.equal(gates["forget"], kept["forget"])  # as without zero_biases
    assert torch.equal(layer.rnn.weight_ih_l0, drawn.rnn.weight_ih_l0)  # the weights untouched
    with pytest.raises(ValueError, match=r"model.family_args.zero_biases = 'yes': true or false"):
        LSTM(3, n, zero_biases="yes")


def test_forget_bias_acts_on_the_forget_gate():
    # all weights zero, input zero: f = sigmoid(forget_bias), i = o = sigmoid(0), g = tanh(0) = 0, so c stays 0;
    # with the cell gate's bias set, c_t = f c_{t-1} + i g shows f = sigmoid(forget_bias)
    layer = LSTM(1, 2, forget_bias=2.0).double()
    with torch.no_grad():
        for name, p in layer.rnn.named_parameters():
            if name.startswith("weight"):
                p.zero_()
        for bias in (layer.rnn.bias_ih_l0, layer.rnn.bias_hh_l0):
            bias[:2].zero_()
            bias[4:].zero_()
        # g = 0.5 and i = 0.5: c_t = f c_{t-1} + 0.25
        layer.rnn.bias_ih_l0[4:6] = torch.atanh(torch.tensor(0.5, dtype=torch.float64))
    h = layer(torch.zeros(1, 3, 1, dtype=torch.float64))[0]
    f = torch.sigmoid(torch.tensor(2.0, dtype=torch.float64))
    c = [0.25, f * 0.25 + 0.25, f * (f * 0.25 + 0.25) + 0.25]
    expected = torch.stack([0.5 * torch.tanh(torch.as_tensor(c_t, dtype=torch.float64)) for c_t in c])
    # T = 3 steps of ~10 roundings (gates, products, tanh), relative to |h|
    torch.testing.assert_close(h[:, 0], expected, **close(torch.float64, 10 * 3, norm(expected)))


def test_no_forget_bias_keeps_pytorchs_init():
    torch.manual_seed(1)
    layer = LSTM(3, 6, forget_bias=None)
    torch.manual_seed(1)
    reference = torch.nn.LSTM(3, 6, batch_first=True)
    assert torch.equal(layer.rnn.bias_ih_l0, reference.bias_ih_l0) and torch.equal(
        layer.rnn.bias_hh_l0, reference.bias_hh_l0
    )
    assert FAMILIES["lstm"] is LSTM and LSTM(3, 6).rnn.bias_ih_l0[6:12].eq(1.0).all()  # the default is 1
