"""NRU against the SRNN repository's port of the authors' cell (srnn-exprnn-facts section 2; Chandar et al. 2019)."""

import math
from pathlib import Path

import pytest
import torch
from tolerances import close, norm
from torch import nn
from torch.nn import functional as F

from ortholab.cli.main import main
from ortholab.models import FAMILIES, ConfigError, SequenceModel
from ortholab.models.nru import NRU, memory_update
from ortholab.models.sizing import parameter_count

REPO = Path(__file__).resolve().parents[1]


def port_forward(layer: NRU, x: torch.Tensor) -> torch.Tensor:
    """The port's NRUCell, step by step with its cats, bmm and normalize (models/nrucell.py), on our weights."""
    k, size = layer.heads, layer.memory_size
    h = x.new_zeros(x.shape[0], layer.hidden_size)
    memory = x.new_zeros(x.shape[0], size)
    out = []
    for x_t in x.unbind(1):
        h = F.relu(layer.state_layer(torch.cat((x_t, h, memory), 1)))
        hm = torch.cat((h, memory), 1)
        alpha, beta = layer.write_weights(hm), layer.erase_weights(hm)
        u_alpha = layer.write_vectors(hm).chunk(2, dim=1)
        v_alpha = torch.bmm(u_alpha[0].unsqueeze(2), u_alpha[1].unsqueeze(1)).view(-1, k, size)
        v_alpha = F.normalize(v_alpha, p=5, dim=2, eps=1e-12)
        u_beta = layer.erase_vectors(hm).chunk(2, dim=1)
        v_beta = torch.bmm(u_beta[0].unsqueeze(2), u_beta[1].unsqueeze(1)).view(-1, k, size)
        v_beta = F.normalize(v_beta, p=5, dim=2, eps=1e-12)
        memory = memory + torch.mean(alpha.unsqueeze(2) * v_alpha - beta.unsqueeze(2) * v_beta, dim=1)
        out.append(h)
    return torch.stack(out, dim=1)


@pytest.mark.parametrize(
    "memory_size, heads",
    [
        (9, 4),  # r = sqrt(9 * 4) = 6 is not a multiple of k: the k vectors are formed and normalised as the port
        (16, 4),  # r = 8 = 2 k: each head is 2 whole rows of a b^T, the factorised path (as M = 256, k = 4)
        (4, 1),
    ],
)
def test_forward_and_gradients_equal_the_port(memory_size, heads):
    torch.manual_seed(0)
    layer = NRU(3, 7, memory_size=memory_size, heads=heads).double()
    x = torch.randn(4, 12, 3, dtype=torch.float64)
    out = layer(x)
    expected = port_forward(layer, x)
    assert out.shape == (4, 12, 7) and (out == 0).any() and (out > 0).any()
    # per step two layers in sequence read [x, h, m] (3 + 7 + M) and [h, m]: 2 (3 + 7 + M) roundings, T = 12 steps,
    # relative to ||h||; the gradients add the sum over T and B = 4, relative to the backpropagated signal's size,
    # all gradients' norm (a bias's gradient sums T B terms that cancel: erase_weights.bias ~0.5 against ~20)
    ops = 2 * (3 + 7 + memory_size)
    torch.testing.assert_close(out, expected, **close(torch.float64, ops * 12, norm(expected)))
    probe = torch.randn_like(out)
    ours = torch.autograd.grad((out * probe).sum(), list(layer.parameters()))
    theirs = torch.autograd.grad((expected * probe).sum(), list(layer.parameters()))
    signal = norm(torch.cat([b.reshape(-1) for b in theirs]))
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, **close(torch.float64, (ops + 4) * 12, signal))


def test_memory_update_by_hand():
    # k = 1, M = 4, r = sqrt(4) = 2. Write: a = (1, 2), b = (3, -1) -> a b^T = (3, -1, 6, -2), alpha = 0.5.
    # Erase: a = (0, 1), b = (1, 1) -> (0, 0, 1, 1), beta = 2. L5 norms: (3^5 + 1 + 6^5 + 2^5)^(1/5), 2^(1/5).
    memory = torch.tensor([[1.0, 0.0, -1.0, 2.0]], dtype=torch.float64)
    vectors = torch.tensor([[1.0, 2.0, 3.0, -1.0, 0.0, 1.0, 1.0, 1.0]], dtype=torch.float64)
    alpha, beta = torch.tensor([[0.5]], dtype=torch.float64), torch.tensor([[2.0]], dtype=torch.float64)
    write = torch.tensor([3.0, -1.0, 6.0, -2.0], dtype=torch.float64) / (243 + 1 + 7776 + 32) ** 0.2
    erase = torch.tensor([0.0, 0.0, 1.0, 1.0], dtype=torch.float64) / 2**0.2
    expected = memory + 0.5 * write - 2.0 * erase
    # ~10 roundings (an L5 norm of 4 entries, a product, the update), relative to the terms m, alpha v, beta e
    terms = norm(memory) + 0.5 * norm(write) + 2.0 * norm(erase)
    torch.testing.assert_close(
        memory_update(memory, vectors, alpha, beta, heads=1), expected, **close(torch.float64, 10, terms)
    )
    # two heads (M = 2, r = 2): the update is the mean over heads; head 2 of the write is (6, -2) here
    two = memory_update(
        torch.zeros(1, 2, dtype=torch.float64),
        vectors,
        torch.tensor([[1.0, 3.0]]).double(),
        torch.zeros(1, 2, dtype=torch.float64),
        heads=2,
    )
    head1 = torch.tensor([3.0, -1.0], dtype=torch.float64) / (243 + 1) ** 0.2
    head2 = torch.tensor([6.0, -2.0], dtype=torch.float64) / (7776 + 32) ** 0.2
    torch.testing.assert_close(
        two[0], (head1 + 3 * head2) / 2, **close(torch.float64, 10, norm(head1) + 3 * norm(head2))
    )  # as above


def test_memory_does_not_saturate_under_a_constant_write():
    # Every weight zero, constant write a b^T / |a b^T|_5 with alpha = 1 and no erase: m_t = t v grows linearly,
    # and h_t = relu(m_{t-1}) (the state layer reads the memory through I) shows it unbounded
    layer = NRU(1, 4, memory_size=4, heads=1).double()
    with torch.no_grad():
        for p in layer.parameters():
            p.zero_()
        layer.state_layer.weight[:, 1 + 4 :] = torch.eye(4)
        layer.write_vectors.bias.copy_(torch.tensor([1.0, 2.0, 3.0, 1.0]))  # a = (1, 2), b = (3, 1)
        layer.write_weights.bias.fill_(1.0)
    h = layer(torch.zeros(1, 300, 1, dtype=torch.float64))[0]
    v = torch.tensor([3.0, 1.0, 6.0, 2.0], dtype=torch.float64)
    v = v / v.pow(5).sum() ** 0.2
    steps = torch.arange(300, dtype=torch.float64).unsqueeze(1)
    # m_t adds v (itself ~10 roundings) 300 times: (300 + 10) eps relative to |h|
    torch.testing.assert_close(h, steps * v, **close(torch.float64, 300 + 10, norm(h)))
    assert h[-1].max() > 250  # no tanh or sigmoid caps it


def test_layer_gradcheck_in_float64():
    torch.manual_seed(1)
    layer = NRU(2, 3, memory_size=4, heads=1).double()
    x = torch.randn(2, 5, 2, dtype=torch.float64)
    names = [name for name, _ in layer.named_parameters()]

    def loss(*values):
        return (torch.func.functional_call(layer, dict(zip(names, values)), (x,)) ** 2).sum()

    assert torch.autograd.gradcheck(loss, [p.detach().clone().requires_grad_() for p in layer.parameters()])


def test_shapes_groups_and_offsets():
    torch.manual_seed(2)
    layer = NRU(3, 8, memory_size=16, heads=4)
    x = torch.randn(5, 7, 3)
    out = layer(x)
    assert out.shape == (5, 7, 8) and layer.output_size == 8 and layer(x[:2]).shape == (2, 7, 8)
    assert layer.recurrent_matrix().shape == (8, 8) and FAMILIES["nru"] is NRU
    groups = layer.parameter_groups()
    assert list(groups) == ["other"] and len(groups["other"]) == len(list(layer.parameters()))
    assert layer.supports_state_offsets
    torch.testing.assert_close(layer(x, state_offsets=torch.zeros(5, 7, 8)), out)
    offsets = torch.zeros(5, 7, 8, requires_grad=True)
    shifted = layer(x, state_offsets=offsets)
    (shifted[:, -1].sum()).backward()  # dL/dh_t through every later step (offsets are added to each h_t)
    assert offsets.grad[:, -1].eq(1).all() and offsets.grad[:, :-1].abs().sum() > 0
    assert "grad_clip_norm" in layer.nonfinite_hint()


def test_recurrent_matrix_is_the_weight_the_forward_applies_to_the_previous_state():
    torch.manual_seed(5)
    layer = NRU(3, 6, memory_size=4, heads=1).double()
    x = torch.randn(2, 2, 3, dtype=torch.float64)
    out = layer(x)
    w = layer.recurrent_matrix()
    weight = layer.state_layer.weight
    # the columns of h_{t-1} in [x_t, h_{t-1}, m_{t-1}], the state Linear's own storage
    assert w.shape == (6, 6) and w.data_ptr() == weight[:, 3:9].data_ptr()
    # step 2 by hand: m_1 from [h_1, m_0 = 0] as the port, then h_2 = relu(W_x x_2 + W_hh h_1 + W_hm m_1 + b)
    h1 = out[:, 0]
    hm = torch.cat((h1, torch.zeros(2, 4, dtype=torch.float64)), 1)
    vectors = torch.cat((layer.write_vectors(hm), layer.erase_vectors(hm)), 1)
    m1 = memory_update(
        torch.zeros(2, 4, dtype=torch.float64), vectors, layer.write_weights(hm), layer.erase_weights(hm), heads=1
    )
    h2 = torch.relu(x[:, 1] @ weight[:, :3].t() + h1 @ w.t() + m1 @ weight[:, 9:].t() + layer.state_layer.bias)
    # one step of the two layers: [x, h, m] (3 + 6 + 4) and [h, m], relative to ||h_2||
    torch.testing.assert_close(out[:, 1], h2, **close(torch.float64, 2 * (3 + 6 + 4), norm(h2)))
    with torch.no_grad():  # W is the weight itself, not a copy: changing it changes the forward
        w.mul_(2.0)
        changed = layer(x)
    torch.testing.assert_close(changed[:, 0], out[:, 0], rtol=0, atol=0)  # h_0 = 0: step 1 does not see W
    assert not torch.allclose(changed[:, 1], out[:, 1])


def test_parameter_count_is_the_srnn_papers_102k():
    # SRNN paper Table 5 / facts sheet: NRU at d_h = 128 on adding (input 2, output 1) has 102,025 parameters:
    # state Linear (2 + 128 + 256) -> 128, two vector Linears 384 -> 64, two weight Linears 384 -> 4, head 128 -> 1
    assert 386 * 128 + 128 + 2 * (384 * 64 + 64) + 2 * (384 * 4 + 4) + 128 + 1 == 102_025
    assert parameter_count("nru", 128, 2, 1) == 102_025
    model = SequenceModel(NRU(2, 128), 1, readout="last_step")
    assert sum(p.numel() for p in model.parameters()) == 102_025


def test_config_errors_name_the_key():
    with pytest.raises(
        ConfigError, match=r"model\.family_args\.memory_size \* heads = 10 \* 4 must be a perfect square"
    ):
        NRU(2, 8, memory_size=10)
    with pytest.raises(ConfigError, match=r"model\.family_args\.heads = 0 must be a positive integer"):
        NRU(2, 8, heads=0)
    with pytest.raises(ConfigError, match=r"model\.family_args\.memory_size = 2\.5"):
        NRU(2, 8, memory_size=2.5)


def test_default_init_is_pytorchs_linear_init():
    torch.manual_seed(3)
    layer = NRU(2, 128)
    for linear in (layer.state_layer, layer.write_vectors, layer.erase_vectors, layer.write_weights):
        bound = 1 / math.sqrt(linear.in_features)  # kaiming_uniform(a=sqrt 5) weights and the bias: U(+-1/sqrt(fan_in))
        assert 0.95 * bound < linear.weight.abs().max() <= bound and linear.bias.abs().max() <= bound
    assert isinstance(layer.state_layer, nn.Linear) and layer.state_layer.in_features == 2 + 128 + 256


def test_paper_config_parses(capsys):
    config = REPO / "configs" / "papers" / "nru_adding_T200.yaml"
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", str(config), "--print_config"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "family: nru" in out and "grad_clip_norm: 1.0" in out and "class_path: datamodules.AddingTask" in out
    assert config.read_text().startswith("# ")
