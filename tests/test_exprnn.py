"""expRNN and its dynamic trivialisation against their mathematics (srnn-exprnn-facts section 3)."""

import math
from pathlib import Path

import pytest
import torch
from devices import needs_cuda
from tolerances import close, norm, roundoff

from ortholab.models import FAMILIES, ConfigError, SequenceModel
from ortholab.models.cayley import skew_from_upper, upper_from_skew
from ortholab.models.exprnn import ExpRNN
from ortholab.models.matrix_exp import (
    exp_skew,
    haar_special_orthogonal,
    initial_skew,
    skew_from_superdiagonal_blocks,
    skew_matrix_exp,
)
from ortholab.models.modrelu import modrelu
from ortholab.models.sizing import hidden_size_for_budget, parameter_count
from ortholab.training.module import build_layer

F64 = torch.float64


def orthogonality_error(b: torch.Tensor) -> float:
    return torch.linalg.matrix_norm(b.t() @ b - torch.eye(b.shape[0], dtype=b.dtype)).item()  # Frobenius


# the exponential map -------------------------------------------------------------------------------------


def test_exp_of_any_skew_matrix_is_special_orthogonal_to_round_off():
    g = torch.Generator().manual_seed(0)
    n = 64
    upper = torch.zeros(n * (n - 1) // 2, dtype=F64)
    for _ in range(500):  # far from the initialisation: entries of order 1-10
        upper += torch.randn(upper.shape, generator=g, dtype=F64) * 0.2
    assert upper.abs().max() > 5
    b = exp_skew(upper, n)
    a_norm = torch.linalg.matrix_norm(skew_from_upper(upper, n), ord=2).item()
    # A^2 is formed with error n eps ||A||^2 (gamma_n); cos and sinc of its eigenvalues carry it into exp(A)
    # with O(1) factors (measured: 0.02 of the bound on AMD EPYC with MKL's AVX2 and its COMPATIBLE path)
    bound = roundoff(F64, n=n, scale=a_norm**2)
    assert orthogonality_error(b) < bound
    # det(B)^2 = det(I + E) = 1 + tr E + O(E^2), |tr E| <= sqrt(n) ||E||_F: exp reaches SO(n) only
    assert torch.linalg.det(b).item() == pytest.approx(1.0, abs=n**0.5 * bound)


def frechet_adjoint(a: torch.Tensor, probe: torch.Tensor) -> torch.Tensor:
    """dL/dA for L = <probe, exp(A)>: Dexp_{A^T}[probe], the top-right block of exp([[A^T, probe], [0, A^T]])."""
    n = a.shape[0]
    block = torch.zeros(2 * n, 2 * n, dtype=a.dtype)
    block[:n, :n] = block[n:, n:] = a.t()
    block[:n, n:] = probe
    return torch.linalg.matrix_exp(block)[:n, n:]


def skew_cases(n: int, g: torch.Generator) -> dict[str, torch.Tensor]:
    """Skew matrices with distinct eigenvalues, a large norm, equal eigenvalues, zero, and near zero."""
    upper = torch.randn(n * (n - 1) // 2, generator=g, dtype=F64)
    repeated = skew_from_superdiagonal_blocks(torch.full((n // 2,), 0.7, dtype=F64), n)  # +-0.7i, n/2 times each
    return {
        "random": skew_from_upper(upper * 0.5, n),
        "large": skew_from_upper(upper * 4, n),
        "repeated": repeated,
        "zero": torch.zeros(n, n, dtype=F64),
        "small": skew_from_upper(upper * 0.02, n),
    }  # theta < 0.1: the divided differences' power series


@pytest.mark.parametrize("case", ["random", "large", "repeated", "zero", "small"])
def test_skew_exponential_and_its_gradient_match_torch_matrix_exp_in_float64(case):
    g = torch.Generator().manual_seed(1)
    n = 9
    a = skew_cases(n, g)[case].requires_grad_()
    probe = torch.randn(n, n, generator=g, dtype=F64)
    b = skew_matrix_exp(a)
    # n = 9; exp is conditioned by 1 + ||A||_2 (||A||_2 up to ~16 in "large"), both exps are backward stable
    scale = 1 + torch.linalg.matrix_norm(a.detach(), 2).item()
    torch.testing.assert_close(b, torch.linalg.matrix_exp(a.detach()), rtol=0, atol=roundoff(F64, n, scale))
    (b * probe).sum().backward()
    reference = a.detach().clone().requires_grad_()
    (torch.linalg.matrix_exp(reference) * probe).sum().backward()
    # the gradient: the same conditioning, relative to its norm
    tolerance = close(F64, n, scale=norm(reference.grad) * scale)
    torch.testing.assert_close(a.grad, reference.grad, **tolerance)  # autograd of torch's Pade exp
    torch.testing.assert_close(a.grad, frechet_adjoint(a.detach(), probe), **tolerance)


def test_skew_exponential_gradient_matches_finite_differences():
    g = torch.Generator().manual_seed(2)
    n = 5
    upper = (torch.randn(n * (n - 1) // 2, generator=g, dtype=F64) * 1.5).requires_grad_()
    assert torch.autograd.gradcheck(lambda s: exp_skew(s, n), (upper,))


def rotated_blocks(n: int, largest: float, g: torch.Generator) -> torch.Tensor:
    """A dense skew A = Q blocks Q^T with rotation angles U(-largest, largest): ||A||_2 just under `largest`."""
    q = haar_special_orthogonal(n, g)
    angles = (torch.rand(n // 2, generator=g, dtype=F64) * 2 - 1) * largest
    return q @ skew_from_superdiagonal_blocks(angles, n) @ q.t()


def test_skew_exponential_in_float32_is_nearer_float64_than_torch_matrix_exp():
    # the reason for the eigendecomposition besides speed: scaling and squaring loses accuracy with ||A||.
    # "turn": ||A|| < 2 pi, decomposed in float32; "random" (~10) and "large" (~85): in float64 (FLOAT32_LIMIT)
    g = torch.Generator().manual_seed(3)
    n = 120
    cases = {**skew_cases(n, g), "turn": rotated_blocks(n, 6.0, g)}
    for case in ("large", "random", "turn"):
        a = cases[case]
        probe = torch.randn(n, n, generator=g, dtype=F64)
        exact_b, exact_grad = torch.linalg.matrix_exp(a), frechet_adjoint(a, probe)
        errors = {}
        for name, exp in (("eigh", skew_matrix_exp), ("pade", torch.linalg.matrix_exp)):
            a32 = a.float().requires_grad_()
            b = exp(a32)
            (b * probe.float()).sum().backward()
            errors[name] = (
                orthogonality_error(b.detach().double()),
                ((a32.grad.double() - exact_grad).norm() / exact_grad.norm()).item(),
                (b.detach().double() - exact_b).abs().max().item(),
            )
        # no less accurate than Pade, up to one float32 round-off n eps32 (n = 120) of quantities of size 1: at
        # ||A|| < 2 pi ("turn") both are at round-off, and which is nearer depends on the CPU's code path
        slack = roundoff(torch.float32, n)
        assert all(ours <= theirs + slack for ours, theirs in zip(errors["eigh"], errors["pade"])), (case, errors)


def test_skew_exponential_stays_in_float32_under_bf16_autocast():
    # `precision: bf16-mixed` must not round the products that form B (torch.linalg.matrix_exp is one op autocast
    # leaves alone; the eigendecomposition's matrix products are not)
    g = torch.Generator().manual_seed(4)
    a = skew_cases(40, g)["random"].float().requires_grad_()
    probe = torch.randn(40, 40, generator=g)
    (skew_matrix_exp(a) * probe).sum().backward()
    expected_grad, a.grad = a.grad, None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        b = skew_matrix_exp(a)
        (b * probe).sum().backward()
    assert b.dtype == torch.float32
    # float32's round-off, n = 40, ||A||^2 as above (~40 here); bf16 products would err ~1e-2
    a_norm = torch.linalg.matrix_norm(a.detach(), 2).item()
    assert orthogonality_error(b.detach().double()) < roundoff(torch.float32, n=40, scale=a_norm**2)
    torch.testing.assert_close(a.grad, expected_grad)


@needs_cuda
def test_skew_exponential_on_cuda_matches_the_cpu():
    g = torch.Generator().manual_seed(5)
    a = skew_cases(30, g)["large"].requires_grad_()
    probe = torch.randn(30, 30, generator=g, dtype=F64)
    (skew_matrix_exp(a) * probe).sum().backward()
    on_gpu = a.detach().cuda().requires_grad_()
    b = skew_matrix_exp(on_gpu)
    (b * probe.cuda()).sum().backward()
    # n = 30, conditioned by 1 + ||A||_2 (~40): torch's Pade exp on the GPU against the eigendecomposition
    scale = 1 + torch.linalg.matrix_norm(a.detach(), 2).item()
    torch.testing.assert_close(b.cpu(), skew_matrix_exp(a.detach()), rtol=0, atol=roundoff(F64, 30, scale))
    torch.testing.assert_close(on_gpu.grad.cpu(), a.grad, **close(F64, 30, scale=norm(a.grad) * scale))


def test_skew_exponential_rejects_what_is_not_one_real_square_matrix():
    with pytest.raises(ValueError, match=r"one real square matrix, got shape \(2, 3, 3\)"):
        skew_matrix_exp(torch.zeros(2, 3, 3))
    with pytest.raises(ValueError, match="complex"):
        skew_matrix_exp(torch.zeros(3, 3, dtype=torch.complex64))


# initialisations ---------------------------------------------------------------------------------------


def _block_values(a: torch.Tensor) -> torch.Tensor:
    """The s_i of a block-diagonal skew A, after checking that A has exactly that structure."""
    n = a.shape[0]
    idx = torch.arange(0, n - 1, 2)
    values = a[idx, idx + 1]
    torch.testing.assert_close(a, skew_from_superdiagonal_blocks(values, n), rtol=0, atol=0)
    return values


@pytest.mark.parametrize(
    "init, low, high", [("henaff", -math.pi, math.pi), ("henaff_icml", -math.pi, 0.0), ("cayley", -1.0, 0.0)]
)
def test_initialisations_are_2x2_blocks_with_the_codes_ranges(init, low, high):
    n = 401  # odd: the last unit is a 1x1 zero block (eigenvalue 1)
    a0 = initial_skew(n, init, torch.Generator().manual_seed(2))
    values = _block_values(a0)
    assert values.numel() == 200 and low <= values.min() and values.max() <= high
    assert values.min() < low + 0.1 * (high - low) and values.max() > high - 0.1 * (high - low)  # the whole range
    if init == "cayley":  # -tan(t/2) with t ~ U(0, pi/2): t = -2 atan(s) is uniform on [0, pi/2]
        t = -2 * torch.atan(values)
        assert t.mean().item() == pytest.approx(math.pi / 4, abs=0.1)
    b = torch.linalg.matrix_exp(a0)
    eig = torch.linalg.eigvals(b)
    # exp of the block [[0, s], [-s, 0]] is a rotation by s: eigenvalues e^{+-i s}, and 1 for the odd unit
    expected = torch.cat([values, -values, torch.zeros(1, dtype=F64)])
    # n = 401, ||A0||_2 <= pi: exp and the eigensolver err by n eps (1 + ||A0||); B is normal, its eigenvalues as well
    torch.testing.assert_close(
        torch.sort(eig.angle()).values, torch.sort(expected).values, rtol=0, atol=roundoff(F64, n, scale=1 + math.pi)
    )
    torch.testing.assert_close(eig.abs(), torch.ones(n, dtype=F64))


def test_random_initialisation_is_the_log_of_a_haar_rotation():
    n = 40
    q = haar_special_orthogonal(n, torch.Generator().manual_seed(3))
    # Householder QR, n = 40: Q^T Q - I errs by n eps in the 2-norm, sqrt(n) times that in the Frobenius norm;
    # det = 1 + tr E, |tr E| <= sqrt(n) ||E||_F
    bound = roundoff(F64, n, scale=n**0.5)
    assert orthogonality_error(q) < bound and torch.linalg.det(q).item() == pytest.approx(1.0, abs=n**0.5 * bound)
    a0 = initial_skew(n, "random", torch.Generator().manual_seed(3))
    torch.testing.assert_close(a0.t(), -a0, rtol=0, atol=0)  # skew by construction, exactly
    # the principal logarithm: its eigenvalues i theta with |theta| <= pi, so ||A0||_2 <= pi (to the eigensolver's
    # n eps (1 + pi)); what the bound below relies on
    assert torch.linalg.matrix_norm(a0, 2).item() <= math.pi + roundoff(F64, n, scale=1 + math.pi)
    # log (by an eigendecomposition) then exp, n = 40, ||A0||_2 <= pi: each errs by n eps (1 + ||A0||)
    torch.testing.assert_close(torch.linalg.matrix_exp(a0), q, rtol=0, atol=roundoff(F64, 2 * n, scale=1 + math.pi))
    # Haar: E[tr Q] = 0 for SO(n), n >= 3; over 200 draws the mean trace is within a few standard errors (sd 1)
    traces = torch.stack(
        [torch.trace(haar_special_orthogonal(n, torch.Generator().manual_seed(seed))) for seed in range(200)]
    )
    assert abs(traces.mean().item()) < 0.3


@pytest.mark.parametrize("init", ["henaff", "cayley"])
def test_layer_stores_the_initial_skew_and_input_weights_as_the_code(init):
    n, inputs = 300, 20
    torch.manual_seed(4)
    expected = upper_from_skew(initial_skew(n, init)).float()
    torch.manual_seed(4)
    layer = ExpRNN(inputs, n, init=init)
    assert torch.equal(layer.upper, expected) and layer.upper.numel() == n * (n - 1) // 2
    assert torch.equal(layer.base, torch.eye(n))  # static: base = I
    # kaiming_normal(ReLU gain): std sqrt(2 / fan_in), no input bias; modReLU bias ~ U(-0.01, 0.01)
    assert layer.input_weight.std().item() == pytest.approx(math.sqrt(2 / inputs), rel=0.05)
    assert layer.input_weight.mean().abs() < 0.02
    assert 0.009 < layer.bias.abs().max() <= 0.01 and layer.bias.min() < 0 < layer.bias.max()


def test_dtriv_starts_from_base_exp_a0_and_zero_s():
    torch.manual_seed(5)
    a0 = initial_skew(12, "henaff")
    torch.manual_seed(5)
    layer = ExpRNN(3, 12, trivialization="dtriv")
    assert torch.equal(layer.upper, torch.zeros(66))
    torch.testing.assert_close(layer.base, torch.linalg.matrix_exp(a0).float())
    torch.testing.assert_close(layer.recurrent_matrix(), torch.linalg.matrix_exp(a0).float())


# the layer -------------------------------------------------------------------------------------------------


def _away_from_init(layer: ExpRNN) -> ExpRNN:
    with torch.no_grad():
        layer.upper.add_(torch.randn_like(layer.upper), alpha=0.5)
        layer.input_weight.mul_(3)
        layer.bias.uniform_(-0.8, 0.8)  # mixed signs, large enough that modReLU cuts some units off
    return layer


def test_layer_is_the_modrelu_recurrence_with_b_in_column_form():
    torch.manual_seed(6)
    layer = _away_from_init(ExpRNN(3, 7)).double()
    x = torch.randn(4, 9, 3, dtype=F64)
    b = torch.linalg.matrix_exp(skew_from_upper(layer.upper.detach(), 7))
    h, expected = torch.zeros(4, 7, dtype=F64), []
    for x_t in x.unbind(1):  # h_t = modReLU(W_in x_t + B h_{t-1}, b), h_0 = 0
        h = modrelu(x_t @ layer.input_weight.detach().t() + h @ b.t(), layer.bias.detach())
        expected.append(h)
    out = layer(x)
    # n = 7 times T = 9 steps; B's two exps differ by n eps (1 + ||A||) (||A||_2 ~ 3), relative to ||h||
    scale = norm(out) * (1 + torch.linalg.matrix_norm(skew_from_upper(layer.upper.detach(), 7), 2).item())
    torch.testing.assert_close(out, torch.stack(expected, 1), **close(F64, 7 * 9, scale))
    assert (out == 0).any() and (out != 0).any()  # both branches of modReLU
    torch.testing.assert_close(layer(x, state_offsets=torch.zeros(4, 9, 7, dtype=F64)), out)


@pytest.mark.parametrize("trivialization", ["static", "dtriv"])
def test_layer_gradients_match_finite_differences(trivialization):
    torch.manual_seed(7)
    # 'new_base': right after a re-basing the default 'code' gradient is not the forward's (test_fidelity_exprnn)
    layer = _away_from_init(ExpRNN(2, 5, trivialization=trivialization, rebase_gradient="new_base")).double()
    if trivialization == "dtriv":
        layer.project_base_()  # the float32 base, made orthogonal in float64
        layer.rebase_()  # a base far from I, and S moved off zero again
        with torch.no_grad():
            layer.upper.add_(torch.randn_like(layer.upper), alpha=0.5)
        assert (layer.base - torch.eye(5, dtype=F64)).abs().max() > 0.1
    x = torch.randn(3, 8, 2, dtype=F64)
    names = [name for name, _ in layer.named_parameters()]

    def loss(*values):
        out = torch.func.functional_call(layer, dict(zip(names, values)), (x,))
        return (out**2).sum()

    assert torch.autograd.gradcheck(loss, [p.detach().clone().requires_grad_() for p in layer.parameters()])


def test_b_stays_orthogonal_after_many_optimizer_updates_in_float32():
    # float32 exp loses orthogonality roughly in proportion to ||A|| (scaling and squaring); dtriv keeps A small
    # and its SVD re-projection removes the drift that re-basing accumulates
    torch.manual_seed(8)
    n = 48
    layers = {
        "static": ExpRNN(3, n),
        "dtriv": ExpRNN(3, n, trivialization="dtriv", rebase_every=7, project_every=5),
        "dtriv_unprojected": ExpRNN(3, n, trivialization="dtriv", rebase_every=7, project_every=None),
    }
    x, target = torch.randn(8, 10, 3), torch.randn(8, 10, n)
    errors = {}
    for name, layer in layers.items():
        optimizer = torch.optim.RMSprop(layer.parameters(), lr=0.05)  # large steps: A moves far
        for _ in range(200):
            optimizer.zero_grad()
            ((layer(x) - target) ** 2).mean().backward()
            optimizer.step()
            layer.after_optimizer_step()
        b = layer.recurrent_matrix().detach()
        assert b.dtype == torch.float32
        errors[name] = orthogonality_error(b.double())
    a_norm = torch.linalg.matrix_norm(layers["static"].skew().detach(), 2).item()
    assert a_norm > 5  # ||A||_2 far from the init's
    # float32, n = 48: one exp errs by n eps ||A||^2 (as above); a dtriv base carries n eps from each re-basing since
    # its last projection (at most project_every - 1 = 4, and this step's exp: 5), an unprojected one all 200 // 7
    assert errors["static"] < roundoff(torch.float32, n, scale=a_norm**2)
    assert errors["dtriv"] < roundoff(torch.float32, n, scale=5)
    assert errors["dtriv"] < errors["dtriv_unprojected"] < roundoff(torch.float32, n, scale=200 // 7 + 1)
    assert int(layers["dtriv"].optimizer_steps) == 200


# dynamic trivialisation -------------------------------------------------------------------------------------


def _drifted_dtriv_layer(rebasings: int, step: float) -> ExpRNN:
    """A float32 dtriv layer after `rebasings` changes of base, each after S moved by N(0, step^2) entries."""
    layer = ExpRNN(4, 32, trivialization="dtriv", rebase_every=None)
    for _ in range(rebasings):
        with torch.no_grad():
            layer.upper.add_(torch.randn_like(layer.upper), alpha=step)
        layer.rebase_()
    with torch.no_grad():
        layer.upper.add_(torch.randn_like(layer.upper), alpha=step)
    return layer


def test_rebasing_keeps_the_function_computed_exactly():
    torch.manual_seed(9)
    layer = _drifted_dtriv_layer(5, 0.2)
    x = torch.randn(5, 30, 4)
    before, b_before = layer(x).detach(), layer.recurrent_matrix().detach()
    layer.rebase_()
    assert torch.equal(layer.upper, torch.zeros_like(layer.upper))
    assert torch.equal(layer.recurrent_matrix(), b_before)  # base exp(0) = base I, bit for bit
    assert torch.equal(layer(x), before)


def test_reprojection_moves_the_base_by_no_more_than_its_drift_and_keeps_the_function():
    torch.manual_seed(10)
    layer = _drifted_dtriv_layer(20, 0.3)  # large float32 drift off O(n)
    before = layer.base.double()
    drift = orthogonality_error(before)
    assert drift > 1e-5
    layer.project_base_()
    # U V^T is the orthogonal matrix closest to the base: it moves it by about half of ||base^T base - I||
    assert torch.linalg.matrix_norm(layer.base.double() - before).item() < drift
    # float32 round-off of U V^T, n = 32: U's, V's orthogonality and their product's, n eps32 each in the 2-norm,
    # sqrt(n) more in the Frobenius norm
    projection = roundoff(torch.float32, n=3 * 32, scale=32**0.5)
    assert orthogonality_error(layer.base.double()) < min(drift / 5, projection)
    torch.manual_seed(11)
    layer = _drifted_dtriv_layer(5, 0.1)  # the drift of a few re-basings: the function stays to float32 precision
    x = torch.randn(5, 30, 4)
    before = layer(x).detach()
    drift = orthogonality_error(layer.base.double())
    layer.project_base_()
    # the base moves by <= its drift (+ U V^T's round-off); over T = 30 steps h moves by T ||dB|| max ||h_t||
    moved = drift + roundoff(torch.float32, n=3 * 32)  # ||dB||_2 moves h: U V^T's round-off in the 2-norm
    assert (layer(x) - before).abs().max() < 30 * moved * before.norm(dim=-1).max()


def test_schedule_rebases_every_k_steps_and_projects_every_m_rebasings(monkeypatch):
    layer = ExpRNN(2, 6, trivialization="dtriv", rebase_every=3, project_every=2)
    calls = []
    monkeypatch.setattr(layer, "rebase_", lambda: calls.append(("rebase", int(layer.optimizer_steps))))
    monkeypatch.setattr(layer, "project_base_", lambda: calls.append(("project", int(layer.optimizer_steps))))
    for _ in range(13):
        layer.after_optimizer_step()
    # the initial base counts as the first re-basing, as in the code: projections at re-basings 2, 4 (steps 3, 9)
    assert calls == [("rebase", 3), ("project", 3), ("rebase", 6), ("rebase", 9), ("project", 9), ("rebase", 12)]
    for kwargs in ({}, {"trivialization": "dtriv", "rebase_every": None}):  # static, and dtriv with K = infinity
        other = ExpRNN(2, 6, **kwargs)
        monkeypatch.setattr(other, "rebase_", lambda: calls.append("unexpected"))
        for _ in range(250):
            other.after_optimizer_step()
        assert int(other.optimizer_steps) == 250
    assert "unexpected" not in calls


def test_a_rebase_keeps_the_optimizer_state_of_s():
    torch.manual_seed(10)
    layer = ExpRNN(2, 6, trivialization="dtriv", rebase_every=2)
    optimizer = torch.optim.RMSprop([layer.upper], lr=1e-2)
    x = torch.randn(3, 5, 2)
    for _ in range(2):
        optimizer.zero_grad()
        layer(x).square().sum().backward()
        optimizer.step()
        layer.after_optimizer_step()
    assert torch.equal(layer.upper, torch.zeros_like(layer.upper))  # re-based after step 2
    assert optimizer.state[layer.upper]["square_avg"].abs().max() > 0  # RMSprop's accumulator is kept


def test_checkpoint_round_trip_keeps_base_and_counter():
    torch.manual_seed(11)
    layer = ExpRNN(3, 8, trivialization="dtriv", rebase_every=4, project_every=3)
    with torch.no_grad():
        for _ in range(6):
            layer.upper.add_(torch.randn_like(layer.upper), alpha=0.2)
            layer.after_optimizer_step()  # one rebase, at step 4
    state = layer.state_dict()
    assert {"base", "optimizer_steps", "upper"} <= set(state) and int(state["optimizer_steps"]) == 6
    restored = ExpRNN(3, 8, trivialization="dtriv", rebase_every=4, project_every=3)
    restored.load_state_dict(state)
    assert torch.equal(restored.base, layer.base) and int(restored.optimizer_steps) == 6
    x = torch.randn(2, 5, 3)
    torch.testing.assert_close(restored(x), layer(x), rtol=0, atol=0)
    restored.after_optimizer_step()
    restored.after_optimizer_step()  # step 8: the schedule goes on where it stopped
    assert torch.equal(restored.upper, torch.zeros_like(restored.upper))


def test_training_loop_drives_the_schedule_and_checkpoints_it(tmp_path, monkeypatch):
    from ortholab.cli.main import main

    monkeypatch.chdir(tmp_path)
    main(
        [
            "fit",
            "--model.family",
            "exprnn",
            "--model.hidden_size",
            "6",
            "--model.family_args",
            "{trivialization: dtriv, rebase_every: 5}",
            "--model.optimizers",
            "{recurrent: {name: rmsprop, lr: 1.0e-3}, other: {name: rmsprop, lr: 1.0e-2}}",
            "--data",
            "datamodules.CopyingTask",
            "--data.seq_len",
            "4",
            "--data.train_size",
            "40",
            "--data.batch_size",
            "10",
            "--data.val_size",
            "10",
            "--trainer.max_steps",
            "7",
            "--trainer.val_check_interval",
            "7",
            "--trainer.check_val_every_n_epoch",
            "null",
            "--trainer.enable_progress_bar",
            "false",
            "--trainer.enable_model_summary",
            "false",
            "--trainer.accelerator",
            "cpu",
            "--db",
            f"sqlite:///{tmp_path / 'runs.db'}",
        ]
    )
    (checkpoint,) = Path(tmp_path).rglob("last.ckpt")
    state = torch.load(checkpoint, weights_only=False)["state_dict"]
    assert int(state["model.layer.optimizer_steps"]) == 7  # one after_optimizer_step per training step
    upper = state["model.layer.upper"]
    assert 0 < upper.abs().max() < 0.01  # two RMSprop steps since the rebase at step 5 (lr 1e-3 each)


# sizes and options ------------------------------------------------------------------------------------------


def test_parameter_count_is_honest():
    n, inputs = 50, 7
    layer = ExpRNN(inputs, n)
    groups = layer.parameter_groups()
    assert sorted(groups) == ["other", "recurrent"]
    grouped = [p for params in groups.values() for p in params]
    assert len(grouped) == len(set(map(id, grouped))) == len(list(layer.parameters()))
    assert sum(p.numel() for p in groups["recurrent"]) == n * (n - 1) // 2  # S only; base is a buffer
    assert sum(p.numel() for p in layer.parameters()) == n * (n - 1) // 2 + n * inputs + n
    assert (
        parameter_count("exprnn", n, inputs, 3, {"trivialization": "dtriv", "init": "random"})
        == n * (n - 1) // 2 + n * inputs + n + 3 * n + 3
    )
    assert FAMILIES["exprnn"] is ExpRNN and layer.supports_state_offsets and not layer.embeds_symbols


# The ICML paper sized expRNN as scoRNN (copying n = 190; MNIST 170/360/512; TIMIT 224/322/425, the sizes the SRNN
# paper's Table 3 quotes): the same count as scoRNN at each n, so scoRNN's budgets give the papers' sizes back.
@pytest.mark.parametrize(
    "input_size, output_size, budget, n",
    [
        (10, 9, 22_000, 190),
        (1, 10, 16_000, 170),
        (1, 10, 69_000, 360),
        (1, 10, 137_000, 512),
        (129, 129, 83_000, 224),
        (129, 129, 135_000, 322),
        (129, 129, 200_000, 425),
    ],
)
def test_papers_sizes(input_size, output_size, budget, n):
    count = parameter_count("exprnn", n, input_size, output_size)
    assert count == parameter_count("scornn", n, input_size, output_size)
    assert abs(count - budget) / budget < 0.03
    assert abs(hidden_size_for_budget("exprnn", budget, input_size, output_size) - n) <= 0.04 * n
    if n == 224:
        assert count == 24_976 + 224 * 129 + 224 + 224 * 129 + 129 == 83_121


def test_config_errors_name_the_key():
    with pytest.raises(ConfigError, match=r"model\.family_args\.trivialization = 'dynamic'.*'static'.*'dtriv'"):
        ExpRNN(3, 8, trivialization="dynamic")
    with pytest.raises(ConfigError, match=r"model\.family_args\.init = 'glorot'.*henaff"):
        ExpRNN(3, 8, init="glorot")
    for bad in (0, -5, 2.5, True, "infty"):
        with pytest.raises(ConfigError, match=r"model\.family_args\.rebase_every"):
            ExpRNN(3, 8, rebase_every=bad)
    with pytest.raises(ConfigError, match=r"model\.family_args\.project_every"):
        ExpRNN(3, 8, project_every=0)
    with pytest.raises(ConfigError, match=r"model\.family_args\.rho is not an option of family 'exprnn'"):
        build_layer("exprnn", 3, 8, {"rho": 4})


def test_sequence_model_and_meta_device_count():
    model = SequenceModel(ExpRNN(2, 9, trivialization="dtriv"), 1, readout="last_step")
    assert model(torch.randn(4, 11, 2)).shape == (4, 1)
    with torch.device("meta"):
        meta = ExpRNN(2, 9, trivialization="dtriv", init="random")
    assert meta.base.is_meta and sum(p.numel() for p in meta.parameters()) == 36 + 18 + 9
