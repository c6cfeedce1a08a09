"""oRNN: Householder products against their algebra (Proposition 1, Theorem 1), the layer, and its hand-written BPTT."""

import math

import pytest
import torch
from finite_differences import assert_gradients_match_finite_differences
from tolerances import close, norm, roundoff

from ortholab.models import FAMILIES, ConfigError, SequenceModel
from ortholab.models.householder import (
    entries_from_tril,
    householder_factors,
    householder_product,
    householder_product_sequential,
    tril_from_entries,
)
from ortholab.models.ornn import ORNN
from ortholab.models.pointwise_recurrence import pointwise_recurrence, pointwise_recurrence_reference

F64 = torch.float64


def _random_orthogonal(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.linalg.qr(torch.randn(n, n, generator=g, dtype=F64))[0]


def _eye(n):
    return torch.eye(n, dtype=F64)


@pytest.mark.parametrize("n,m,scalar_last", [(9, 9, True), (9, 4, False), (9, 1, False), (9, 9, False), (1, 1, True)])
def test_product_is_orthogonal_and_equals_the_reflections_one_by_one(n, m, scalar_last):
    g = torch.Generator().manual_seed(n * 100 + m)
    u = torch.randn(n, m, generator=g, dtype=F64).tril() * 3.0  # any norms: H(u) only sees the direction
    w = householder_product(u, scalar_last)
    # m reflections, each an inner product of length n (Higham Lemma 19.3), and W^T W's product: (m + 1) n eps
    torch.testing.assert_close(w.t() @ w, _eye(n), rtol=0, atol=roundoff(F64, (m + 1) * n))
    torch.testing.assert_close(w, householder_product_sequential(u, scalar_last), rtol=0, atol=roundoff(F64, 2 * m * n))


def test_scalar_last_factor_is_the_sign_of_its_entry():
    u = torch.randn(5, 5, dtype=F64).tril()
    with_plus, with_minus = u.clone(), u.clone()
    with_plus[-1, -1], with_minus[-1, -1] = 0.3, -2.0
    w_plus, w_minus = householder_product(with_plus, True), householder_product(with_minus, True)
    # W = H(u_1) ... H(u_{n-1}) diag(1, ..., 1, s): only the last column changes sign, and det W flips
    torch.testing.assert_close(w_minus[:, :-1], w_plus[:, :-1])
    torch.testing.assert_close(w_minus[:, -1], -w_plus[:, -1])
    # each W: 5 reflections of length 5, then LU's n eps: det = +-(1 + O(6 n eps)) for n = 5
    assert torch.det(w_plus) * torch.det(w_minus) == pytest.approx(-1.0, abs=roundoff(F64, 2 * 6 * 5))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_theorem_1_recovers_any_orthogonal_matrix_from_its_householder_factors(seed):
    q = _random_orthogonal(12, seed)
    if seed == 1:
        q[:, 0] = -q[:, 0]  # both components of O(n): det +1 and det -1
    u = householder_factors(q)
    assert torch.equal(u, u.tril())  # u_k has the paper's support: zero above row k
    assert u[-1, -1].abs() == 1.0  # the scalar factor H_1 = +-1
    # n = 12: Q's factors (n reflections of length n, as Householder QR) and their product again: 2 n^2 eps
    torch.testing.assert_close(householder_product(u, scalar_last=True), q, rtol=0, atol=roundoff(F64, 2 * 12 * 12))


def test_theorem_1_through_the_layer():
    q = _random_orthogonal(10, 7)
    layer = ORNN(3, 10).double()
    with torch.no_grad():
        layer.reflections.copy_(entries_from_tril(householder_factors(q)))
    torch.testing.assert_close(layer.recurrent_matrix(), q, rtol=0, atol=roundoff(F64, 2 * 10 * 10))  # as above, n = 10


def test_gradient_steps_from_random_vectors_fit_a_target_orthogonal_matrix():
    n = 6
    g = torch.Generator().manual_seed(0)
    q = _random_orthogonal(n, 3)
    u0 = torch.randn(n, n, generator=g, dtype=F64).tril()
    u0[-1, -1] = torch.sign(torch.det(q)) * (-1) ** (n - 1)  # det W = (-1)^(n-1) s: pick q's component
    entries = entries_from_tril(u0).requires_grad_()
    start = (householder_product(u0, True) - q).norm().item()
    opt = torch.optim.Adam([entries], lr=0.05)
    for _ in range(400):
        loss = (householder_product(tril_from_entries(entries, n, n), True) - q).square().sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    w = householder_product(tril_from_entries(entries.detach(), n, n), True)
    assert start > 1.0
    assert (w - q).norm() < 1e-3


def test_gradient_of_each_reflection_vector_is_orthogonal_to_it():
    # H(u) depends on u/|u| only, so dL/du_k has no component along u_k (what the code's GradF computes)
    layer = ORNN(2, 7, num_reflections=5).double()
    target = torch.randn(7, 7, dtype=F64)
    (layer.recurrent_matrix() * target).sum().backward()
    u, grad = layer.reflection_vectors().detach(), tril_from_entries(layer.reflections.grad, 7, 5)
    # the gradient through m = 5 reflections of length n = 7, then the inner product with u_k: (m + 1) n eps |u_k| |g_k|
    scale = (u.norm(dim=0) * grad.norm(dim=0)).max().item()
    torch.testing.assert_close(
        (u * grad).sum(dim=0), torch.zeros(5, dtype=F64), rtol=0, atol=roundoff(F64, 6 * 7, scale)
    )


def test_scalar_factor_gets_no_gradient_and_keeps_its_sign():
    layer = ORNN(2, 6).double()
    layer.recurrent_matrix().sum().backward()
    assert layer.reflections.grad[-1] == 0.0  # the last stored entry is U[n-1, n-1]


@pytest.mark.parametrize("m", [1, 16, 40, None])
def test_parameter_count(m):
    n, inputs = 40, 3
    layer = ORNN(inputs, n, num_reflections=m)
    reflections = n if m is None else m
    assert layer.reflections.numel() == n * reflections - reflections * (reflections - 1) // 2
    assert sum(p.numel() for p in layer.parameters()) == layer.reflections.numel() + n * inputs + n + n  # + V, b, h0


def test_papers_adding_size_is_about_2_6k_parameters():
    # scoRNN / scuRNN papers: oRNN on adding with n = 128 and 16 reflections, "~2.6k parameters"
    model = SequenceModel(ORNN(2, 128, num_reflections=16), 1, readout="last_step")
    assert sum(p.numel() for p in model.parameters()) == 128 * 16 - 120 + 2 * 128 + 128 + 128 + 129 == 2569


def test_initialisation_as_the_official_code():
    torch.manual_seed(0)
    n, inputs = 64, 5
    layer = ORNN(inputs, n, num_reflections=0.5)
    u = layer.reflection_vectors()
    assert layer.num_reflections == 32
    torch.testing.assert_close(u.norm(dim=0), torch.ones(32))
    assert torch.equal(u, u.tril())
    assert layer.h0.abs().max() <= math.sqrt(3 / (2 * n)) and layer.h0.std() > 0.5 * math.sqrt(1 / (2 * n))
    glorot = math.sqrt(6 / (inputs + n))
    assert layer.input_weight.abs().max() <= glorot and layer.input_weight.abs().max() > 0.9 * glorot
    assert torch.equal(layer.bias, torch.zeros(n))
    w = layer.recurrent_matrix()
    # float32, n = 64, m = 32 reflections and W^T W's product: (m + 1) n eps32
    torch.testing.assert_close(w.t() @ w, torch.eye(n), rtol=0, atol=roundoff(torch.float32, 33 * n))


def test_training_forward_renormalises_the_columns_without_changing_w():
    layer = ORNN(2, 8, num_reflections=5, renormalize=True).double()  # the code's option
    w = layer.recurrent_matrix().detach()
    with torch.no_grad():
        layer.reflections.mul_(torch.linspace(0.5, 3.0, layer.reflections.numel(), dtype=F64))
    x = torch.randn(3, 4, 2, dtype=F64)
    layer.eval()
    eval_out = layer(x)
    assert not torch.allclose(layer.reflection_vectors().norm(dim=0), torch.ones(5, dtype=F64))  # eval: untouched
    layer.train()
    torch.testing.assert_close(layer(x), eval_out)  # W only depends on the directions
    torch.testing.assert_close(layer.reflection_vectors().norm(dim=0), torch.ones(5, dtype=F64))
    skewed = layer.recurrent_matrix().detach()
    assert not torch.allclose(w, skewed)  # the per-entry rescaling did change directions
    layer_off = ORNN(2, 8, num_reflections=5).double()  # the default: the paper's plain parametrisation
    with torch.no_grad():
        layer_off.reflections.mul_(2.0)
    layer_off(x)
    torch.testing.assert_close(layer_off.reflection_vectors().norm(dim=0), torch.full((5,), 2.0, dtype=F64))


@pytest.mark.parametrize("activation", ["leaky_relu", "tanh"])
def test_layer_is_the_papers_recurrence(activation):
    torch.manual_seed(1)
    layer = ORNN(3, 6, num_reflections=4, activation=activation).double().eval()
    with torch.no_grad():
        layer.bias.uniform_(-0.5, 0.5)
    x = torch.randn(2, 9, 3, dtype=F64)
    w = layer.recurrent_matrix()
    sigma = (lambda z: torch.where(z > 0, z, 0.1 * z)) if activation == "leaky_relu" else torch.tanh
    h, states = layer.h0.expand(2, -1), []
    for t in range(9):
        h = sigma(x[:, t] @ layer.input_weight.t() + h @ w.t() + layer.bias)  # h_t = f(V x_t + W h_{t-1} + b)
        states.append(h)
    torch.testing.assert_close(layer(x), torch.stack(states, dim=1))


def _recurrence_inputs(seed, t=20, b=3, n=6, offsets=False):
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(t, b, n, generator=g, dtype=F64)
    w = _random_orthogonal(n, seed)
    h0 = torch.randn(b, n, generator=g, dtype=F64)
    extra = [0.3 * torch.randn(t, b, n, generator=g, dtype=F64)] if offsets else []
    return [x.requires_grad_() for x in (u, w, h0, *extra)]


@pytest.mark.parametrize("offsets", [False, True])
@pytest.mark.parametrize("activation", ["leaky_relu", "tanh"])
def test_fused_recurrence_matches_plain_autograd(activation, offsets):
    # with offsets added to every h_t, their gradient is the total dL/dh_t (the gradient-norm probe's quantity)
    fused, reference = _recurrence_inputs(0, offsets=offsets), _recurrence_inputs(0, offsets=offsets)
    probe = torch.randn(20, 3, 6, dtype=F64)
    out = pointwise_recurrence(*fused[:3], activation, 0.1, *fused[3:])
    expected = pointwise_recurrence_reference(*reference[:3], activation, 0.1, *reference[3:])
    # T = 20 steps through n = 6 units: n T eps relative to ||h||; the gradients add the sum over T and B = 3
    torch.testing.assert_close(out, expected, **close(F64, 6 * 20, norm(expected)))
    (out * probe).sum().backward()
    (expected * probe).sum().backward()
    for a, b in zip(fused, reference):
        torch.testing.assert_close(a.grad, b.grad, **close(F64, (6 + 3) * 20, norm(b.grad)))
    if activation == "leaky_relu":
        assert (out < 0).any() and (out > 0).any()  # both branches of the leaky ReLU were exercised


@pytest.mark.parametrize("activation", ["leaky_relu", "tanh"])
def test_fused_recurrence_matches_finite_differences(activation):
    inputs = _recurrence_inputs(1, t=12, offsets=True)
    # derived bound (tests/finite_differences.py), not gradcheck's rtol 1e-3: T = 12 steps of n = 6 units, B = 3
    ops = (6 + 3) * 12
    assert_gradients_match_finite_differences(
        lambda u, w, h0, o: pointwise_recurrence(u, w, h0, activation, 0.1, o), inputs, ops=ops
    )
    assert_gradients_match_finite_differences(
        lambda u, w, h0: pointwise_recurrence(u, w, h0, activation, 0.1), inputs[:3], ops=ops
    )


def test_layer_gradients_match_finite_differences():
    layer = ORNN(2, 5, num_reflections=3, renormalize=False).double()
    x = torch.randn(2, 6, 2, dtype=F64)
    names = ["reflections", "input_weight", "bias", "h0"]

    def run(*values):
        return torch.func.functional_call(layer, dict(zip(names, values)), (x,))

    # derived bound (tests/finite_differences.py), not gradcheck's rtol 1e-3: T = 6 steps of n = 5 units, B = 2, the
    # input (2), and W's entries from 3 reflections (2 n each)
    assert_gradients_match_finite_differences(
        run, [getattr(layer, name).detach() for name in names], ops=(5 + 2 + 2) * 6 + 3 * 2 * 5
    )


def test_state_offsets_expose_the_total_hidden_state_gradient():
    layer = ORNN(2, 6, num_reflections=3).double().eval()
    x = torch.randn(2, 8, 2, dtype=F64)
    offsets = torch.zeros(2, 8, 6, dtype=F64, requires_grad=True)
    h = layer(x, state_offsets=offsets)
    torch.testing.assert_close(h, layer(x))  # zero offsets change nothing
    weights = torch.randn(2, 8, 6, dtype=F64)
    (grad,) = torch.autograd.grad((h * weights).sum(), offsets)
    # dL/dh_T is the direct term only; one step earlier it adds W^T sigma'(z_T) dL/dh_T
    torch.testing.assert_close(grad[:, -1], weights[:, -1])
    slope = torch.where(h[:, -1] > 0, 1.0, 0.1).to(F64)
    torch.testing.assert_close(grad[:, -2], weights[:, -2] + (weights[:, -1] * slope) @ layer.recurrent_matrix())
    assert ORNN.supports_state_offsets


def test_registered_with_groups_and_config_errors():
    assert FAMILIES["ornn"] is ORNN
    layer = ORNN(2, 10, num_reflections=3)
    groups = layer.parameter_groups()
    assert [p for p in groups["recurrent"]] == [layer.reflections]
    assert {id(p) for ps in groups.values() for p in ps} == {id(p) for p in layer.parameters()}
    assert sum(len(ps) for ps in groups.values()) == len(list(layer.parameters()))
    with pytest.raises(ConfigError, match="num_reflections"):
        ORNN(2, 10, num_reflections=11)
    with pytest.raises(ConfigError, match="num_reflections"):
        ORNN(2, 10, num_reflections=0)
    with pytest.raises(ConfigError, match="activation"):
        ORNN(2, 10, activation="relu6")
