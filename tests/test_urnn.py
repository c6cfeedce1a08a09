"""Restricted-capacity uRNN against its mathematics (Arjovsky et al. 2016) and the budgets the scoRNN paper
quotes for it."""

import math

import pytest
import torch
from finite_differences import assert_gradients_match_finite_differences
from tolerances import close, norm, roundoff

from ortholab.datamodules import CopyingTask
from ortholab.models import FAMILIES, ConfigError, SequenceModel
from ortholab.models.operator_recurrence import (
    operator_recurrence,
    operator_recurrence_features,
    operator_recurrence_reference,
    to_complex,
    to_real,
)
from ortholab.models.sizing import hidden_size_for_budget, parameter_count
from ortholab.models.urnn import URNN
from ortholab.models.urnn_kernels import urnn_recurrence_features
from ortholab.training.module import RecurrentModule, build_layer

F64 = torch.float64


def unitarity_error(w: torch.Tensor) -> float:
    return torch.linalg.matrix_norm(w.mH @ w - torch.eye(w.shape[0], dtype=w.dtype)).item()  # Frobenius


def _away_from_init(layer: URNN, seed: int = 0) -> URNN:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(torch.randn(p.shape, generator=g, dtype=p.dtype), alpha=0.3)
        layer.bias.uniform_(-0.6, 0.3, generator=g)  # mixed signs: some units cut off
    return layer


# W = D3 R2 F^-1 D2 Pi R1 F D1 ------------------------------------------------------------------------------


def _dense_factors(layer: URNN) -> torch.Tensor:
    """W from its factors as explicit n x n matrices: the DFT matrix, I - 2 v v^H / |v|^2, a permutation matrix."""
    n = layer.hidden_size
    k = torch.arange(n, dtype=F64)
    dft = torch.polar(torch.full((n, n), n**-0.5, dtype=F64), -2 * math.pi * torch.outer(k, k) / n)  # unitary F
    d = [torch.diag(torch.polar(torch.ones(n, dtype=F64), w)) for w in layer.phases.detach()]
    r = []
    for re, im in zip(layer.reflection_real.detach(), layer.reflection_imag.detach()):
        v = torch.complex(re, im).unsqueeze(1)
        r.append(torch.eye(n, dtype=torch.complex128) - 2 * (v @ v.mH) / (v.mH @ v))
    pi = torch.zeros(n, n, dtype=torch.complex128)
    pi[torch.arange(n), layer.permutation] = 1  # (Pi x)_k = x_p[k]
    return d[2] @ r[1] @ dft.mH @ d[1] @ pi @ r[0] @ dft @ d[0]


@pytest.mark.parametrize("n", [8, 13])
def test_the_fft_applied_operator_is_the_papers_product(n):
    layer = _away_from_init(URNN(3, n).double(), seed=n)
    expected = _dense_factors(layer)
    # unitary factors, entries <= 1: the dense product's 7 products of inner dimension n, the layer's two
    # reflections (n) and two FFTs (<= n each): 11 n eps
    torch.testing.assert_close(layer.recurrent_matrix(), expected, rtol=0, atol=roundoff(F64, 11 * n))
    operator = layer.operator()
    factors = operator.prepare(*layer.recurrent_params())
    rows = torch.randn(5, n, dtype=torch.complex128)
    # the same applied to rows: one more product of inner dimension n, relative to the rows' norm
    bound = roundoff(F64, 12 * n, scale=rows.abs().square().sum(1).sqrt().max().item())
    torch.testing.assert_close(operator.apply(rows, factors), rows @ expected.T, rtol=0, atol=bound)
    torch.testing.assert_close(operator.adjoint(rows, factors), rows @ expected.conj(), rtol=0, atol=bound)


def test_the_ports_unnormalised_fft_forms_the_same_w():
    # SRNN port: unnormalised FFT and a 1/n inverse; only their product enters W, and it is F^-1 (...) F
    n, x, middle = 12, torch.randn(4, 12, dtype=torch.complex128), torch.randn(12, dtype=torch.complex128)
    ortho = torch.fft.ifft(torch.fft.fft(x, norm="ortho") * middle, norm="ortho")
    port = torch.fft.ifft(torch.fft.fft(x) * middle)  # torch's defaults: unnormalised forward, 1/n inverse
    # two FFTs of length n = 12 each way (each <= n eps, as a dense DFT), relative to ||x|| max |middle|
    bound = roundoff(F64, 2 * 2 * n, scale=norm(x) * middle.abs().max().item())
    torch.testing.assert_close(port, ortho, rtol=0, atol=bound)
    assert torch.fft.fft(x).norm() == pytest.approx(math.sqrt(n) * x.norm().item())  # each alone is not unitary


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_w_is_unitary_to_round_off_after_many_updates(dtype):
    torch.manual_seed(0)
    layer = URNN(3, 64).to(dtype)
    with torch.no_grad():
        for _ in range(1000):  # random steps of the phases and the reflection vectors
            for p in layer.recurrent_params():
                p.add_(torch.randn_like(p), alpha=5e-2)
    assert layer.phases.abs().max() > 4 and layer.reflection_real.abs().max() > 2  # far from the initialisation
    w = layer.recurrent_matrix()
    assert w.dtype == (torch.complex64 if dtype == torch.float32 else torch.complex128)
    # n = 64: two reflections (inner products of length n), two FFTs (<= n), three diagonals: 4 n eps
    assert unitarity_error(w) <= roundoff(dtype, 4 * 64)


def test_the_recurrence_never_forms_w(monkeypatch):
    layer = URNN(3, 16)
    monkeypatch.setattr(URNN, "recurrent_matrix", lambda self: pytest.fail("W formed inside the recurrence"))
    layer(torch.randn(2, 5, 3)).sum().backward()
    assert all(p.grad is not None for p in layer.parameters())


# parameters and the papers' budgets -----------------------------------------------------------------------


def test_seven_n_recurrent_parameters_and_groups():
    layer = URNN(3, 40)
    groups = layer.parameter_groups()
    assert sorted(groups) == ["other", "recurrent"]
    assert sum(p.numel() for p in groups["recurrent"]) == 7 * 40  # 3n phases + 2 complex vectors of n
    grouped = [p for params in groups.values() for p in params]
    assert len(grouped) == len(set(map(id, grouped))) == len(list(layer.parameters()))
    assert FAMILIES["urnn"] is URNN and layer.output_size == 80 and layer.supports_state_offsets


# (task sizes m -> p, readout, n the scoRNN paper used, its budget): Sections 5.1-5.4, Tables 1-2
PAPER_ROWS = [
    ("copying", 10, 9, "every_step", 470, 22_000),
    ("adding", 2, 1, "last_step", 950, 15_000),  # scoRNN: "approximately 15k" (the scuRNN paper: ~14k)
    ("mnist", 1, 10, "last_step", 512, 16_000),
    ("mnist", 1, 10, "last_step", 2170, 69_000),
    ("timit", 129, 129, "every_step", 158, 83_000),
    ("timit", 129, 129, "every_step", 256, 135_000),
    ("timit", 129, 129, "every_step", 378, 200_000),
]


@pytest.mark.parametrize("task, m, p, readout, n, budget", PAPER_ROWS)
def test_parameter_counts_match_the_papers_budgets(task, m, p, readout, n, budget):
    count = parameter_count("urnn", n, m, p)
    model = SequenceModel(URNN(m, n), p, readout)
    assert count == sum(q.numel() for q in model.parameters())
    # W: 7n, U: 2nm, b: n, h0: 2n, readout: 2np + p
    assert count == 7 * n + 2 * n * m + n + 2 * n + 2 * n * p + p
    assert abs(count - budget) / budget < 0.03
    assert abs(hidden_size_for_budget("urnn", budget, m, p) - n) <= 0.03 * n
    if (m, n) == (1, 2170):
        # the trainable h0 (Arjovsky's code) is what puts n = 2170 at ~69k: without it, 65,110 (6% short)
        assert count == 69_450 and count - 2 * n == 65_110


# initialisation -----------------------------------------------------------------------------------------


def test_initialisation():
    torch.manual_seed(0)
    n, m = 300, 10
    layer = URNN(m, n)
    assert -math.pi <= layer.phases.min() < -3.1 and 3.1 < layer.phases.max() <= math.pi
    for v in (layer.reflection_real, layer.reflection_imag):
        assert -1 <= v.min() < -0.99 and 0.99 < v.max() <= 1
    limit = math.sqrt(6 / (m + 2 * n))  # Glorot-uniform over the real (2n, m) matrix [Re U; Im U]
    assert 0.95 * limit < layer.input_weight.abs().max() <= limit
    assert torch.equal(layer.bias, torch.zeros(n))
    bound = math.sqrt(3 / (2 * n))  # h0 ~ U(-sqrt(3/2n), sqrt(3/2n)) per real coordinate: E|h0|^2 = 1
    assert 0.95 * bound < layer.h0.abs().max() <= bound and layer.h0.requires_grad
    assert 0.85 < layer.h0.square().sum() < 1.15
    assert torch.equal(torch.sort(layer.permutation).values, torch.arange(n))
    assert (layer.permutation != torch.arange(n)).float().mean() > 0.9


def test_the_permutation_is_seeded_and_saved_in_the_checkpoint():
    torch.manual_seed(1)
    first = URNN(3, 32)
    torch.manual_seed(1)
    assert torch.equal(URNN(3, 32).permutation, first.permutation)  # drawn from the run's seeded generator
    torch.manual_seed(2)
    other = URNN(3, 32)
    assert not torch.equal(other.permutation, first.permutation)
    assert "permutation" in first.state_dict()
    other.load_state_dict(first.state_dict())
    torch.testing.assert_close(other.recurrent_matrix(), first.recurrent_matrix(), rtol=0, atol=0)


# the hand-written BPTT --------------------------------------------------------------------------------------


def _run(recurrence, operator, u, b, h0, params, offsets=None):
    """A complex recurrence on real [Re | Im] tensors: u (T, B, 2n), h0 (B, 2n), offsets (T, B, 2n) -> (T, B, 2n)."""
    offsets = None if offsets is None else to_complex(offsets)
    return to_real(recurrence(operator, to_complex(u), b, to_complex(h0), tuple(params), offsets))


def compiled_recurrence(operator, u, b, h0, params, offsets=None):  # the CPU kernels, complex states out
    return to_complex(urnn_recurrence_features(operator, u, b, h0, params, offsets))


RECURRENCES = pytest.mark.parametrize(
    "recurrence", [operator_recurrence, compiled_recurrence], ids=["torch", "compiled"]
)


def _recurrence_inputs(seed=0, t=9, b=3, n=6, dtype=F64):
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    layer = _away_from_init(URNN(2, n).double(), seed)
    u = torch.randn(t, b, 2 * n, generator=g, dtype=F64)
    h0 = torch.randn(b, 2 * n, generator=g, dtype=F64) * 0.5
    offsets = torch.randn(t, b, 2 * n, generator=g, dtype=F64) * 0.1
    params = [p.detach().to(dtype).requires_grad_() for p in layer.recurrent_params()]
    tensors = [x.to(dtype).requires_grad_() for x in (u, layer.bias.detach(), h0, offsets)]
    return layer.operator(), tensors, params


@RECURRENCES
@pytest.mark.parametrize("with_offsets", [False, True])
def test_hand_written_bptt_matches_plain_autograd(with_offsets, recurrence):
    operator, (u, b, h0, offsets), params = _recurrence_inputs()
    _, (u2, b2, h02, offsets2), params2 = _recurrence_inputs()
    offsets, offsets2 = (offsets, offsets2) if with_offsets else (None, None)
    out = _run(recurrence, operator, u, b, h0, params, offsets)
    expected = _run(operator_recurrence_reference, operator, u2, b2, h02, params2, offsets2)
    # T = 9 steps through W's factors (4 n eps, n = 6) relative to ||h||; the gradients add the sum over T and
    # B = 3 that forms a parameter's: (4 n + B) T eps relative to each gradient's norm
    torch.testing.assert_close(out, expected, **close(F64, 4 * 6 * 9, norm(expected)))
    if not with_offsets:
        assert (out == 0).any() and (out != 0).any()  # both branches of modReLU were exercised
    probe = torch.randn_like(out)
    (out * probe).sum().backward()
    (expected * probe).sum().backward()
    mine = [u, b, h0, *params] + ([offsets] if with_offsets else [])
    theirs = [u2, b2, h02, *params2] + ([offsets2] if with_offsets else [])
    for a, c in zip(mine, theirs):
        torch.testing.assert_close(a.grad, c.grad, **close(F64, (4 * 6 + 3) * 9, norm(c.grad)))


@pytest.mark.parametrize("with_offsets", [False, True])
def test_the_compiled_forward_without_a_gradient_gives_the_same_states(with_offsets):
    """Evaluation (no gradient wanted) keeps one step's intermediates in place of every step's: the same operations
    on the same numbers, so the same states to the bit, with offsets too."""
    operator, (u, b, h0, offsets), params = _recurrence_inputs(t=12, b=4, n=8)
    offsets = offsets if with_offsets else None
    taped = _run(compiled_recurrence, operator, u, b, h0, params, offsets)
    assert taped.requires_grad
    with torch.no_grad():
        untaped = _run(compiled_recurrence, operator, u, b, h0, params, offsets)
    detached = [x.detach() for x in (u, b, h0, *params)]
    plain = _run(
        compiled_recurrence, operator, *detached[:3], detached[3:], None if offsets is None else offsets.detach()
    )  # grad mode on, but nothing requires a gradient
    assert not untaped.requires_grad and not plain.requires_grad
    assert torch.equal(untaped, taped.detach()) and torch.equal(plain, taped.detach())


@RECURRENCES
def test_hand_written_bptt_matches_finite_differences(recurrence):
    operator, (u, b, h0, offsets), params = _recurrence_inputs(seed=1, t=6, b=2, n=4)
    # each state entry: T = 6 steps through W's factors (4 n = 16 operations, n = 4)
    assert_gradients_match_finite_differences(
        lambda u, b, h0, o, *p: _run(recurrence, operator, u, b, h0, p, o), (u, b, h0, offsets, *params), ops=6 * 16
    )


@RECURRENCES
def test_a_second_backward_through_the_recurrence_is_refused_with_the_reason(recurrence):
    operator, (u, b, h0, _), params = _recurrence_inputs(seed=1, t=6, b=2, n=4)
    loss = _run(recurrence, operator, u, b, h0, params).square().sum()
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match=r"backpropagates once per forward pass: run the forward again"):
        loss.backward()


@RECURRENCES
def test_single_precision_agrees_with_double(recurrence):
    operator, single, single_params = _recurrence_inputs(seed=2, t=30, b=4, n=16, dtype=torch.float32)
    _, double, double_params = _recurrence_inputs(seed=2, t=30, b=4, n=16)
    out32 = _run(recurrence, operator, *single[:3], single_params)
    out64 = _run(recurrence, operator, *double[:3], double_params)
    # float32 (the inputs' rounding included): T = 30 steps through W's factors (4 n eps, n = 16), relative to ||h||;
    # the gradients add the sum over T and B = 4
    torch.testing.assert_close(out32.double(), out64, **close(torch.float32, 4 * 16 * 30, norm(out64)))
    out32.sum().backward()
    out64.sum().backward()
    for a, c in zip(single_params, double_params):
        torch.testing.assert_close(a.grad.double(), c.grad, **close(torch.float32, (4 * 16 + 4) * 30, norm(c.grad)))


def test_layer_gradients_match_finite_differences():
    layer = _away_from_init(URNN(2, 4).double(), seed=3)
    x = torch.randn(3, 7, 2, dtype=F64)
    names = [name for name, _ in layer.named_parameters()]

    def loss(*values):
        return (torch.func.functional_call(layer, dict(zip(names, values)), (x,)) ** 2).sum()

    # the loss sums 3 x 7 x 8 squares of states, each T = 7 steps through W's factors and the input (4 n + 2, n = 4)
    assert_gradients_match_finite_differences(loss, list(layer.parameters()), ops=3 * 7 * 8 + 7 * (4 * 4 + 2))


# the layer in the application ----------------------------------------------------------------------------


def test_the_layer_takes_the_compiled_kernels_on_the_cpu_only():
    layer = URNN(3, 8)
    assert layer.recurrence_for(torch.zeros(1, dtype=torch.complex64)) is urnn_recurrence_features
    assert layer.recurrence_for(torch.zeros(1, dtype=torch.complex64, device="meta")) is operator_recurrence_features


def test_forward_shapes_and_offsets():
    layer = URNN(3, 8)
    x = torch.randn(5, 7, 3)
    out = layer(x)
    assert out.shape == (5, 7, 16) and layer(torch.randn(2, 7, 3)).shape == (2, 7, 16)
    torch.testing.assert_close(layer(x, state_offsets=torch.zeros(5, 7, 16)), out)


def test_config_errors_and_optimizer_groups():
    with pytest.raises(ConfigError, match=r"model\.family_args\.rho is not an option of family 'urnn'"):
        build_layer("urnn", 3, 8, {"rho": 4})
    with pytest.raises(ConfigError, match=r"model\.hidden_size"):
        URNN(3, 0)
    task = CopyingTask(seq_len=5, train_size=20, val_size=20, test_size=20, batch_size=10)
    module = RecurrentModule(
        task.spec,
        family="urnn",
        hidden_size=6,
        optimizers={"recurrent": {"name": "rmsprop", "lr": 1e-3}, "other": {"name": "adam", "lr": 1e-3}},
    )
    optimizers = module.configure_optimizers()
    assert [type(o) for o in optimizers] == [torch.optim.RMSprop, torch.optim.Adam]
    assert module.parameter_counts() == {"recurrent": 42, "other": 12 * 10 + 6 + 12 + 12 * 9 + 9}
    inputs, targets = task.make_split("train")
    before = {name: p.detach().clone() for name, p in module.named_parameters()}
    module.objective.loss(module(inputs[:10]), targets[:10], None).backward()
    for optimizer in optimizers:
        optimizer.step()
    assert all(not torch.equal(before[name], p) for name, p in module.named_parameters())
