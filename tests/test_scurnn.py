"""scuRNN against its mathematics (scuRNN paper, Sections 3-4; reference-impl-facts section 2)."""

import math

import pytest
import torch
from tolerances import close, cond, largest, norm, roundoff

from ortholab.datamodules import AddingTask, CopyingTask
from ortholab.models import FAMILIES, ConfigError, SequenceModel
from ortholab.models.complex_recurrence import complex_modrelu_recurrence, complex_modrelu_recurrence_reference
from ortholab.models.modrelu import complex_modrelu
from ortholab.models.optimizers import AdagradTF, RMSpropTF
from ortholab.models.scurnn import ScuRNN
from ortholab.models.unitary import (
    ComplexScaledCayley,
    block_angles,
    complex_scaled_cayley,
    skew_hermitian,
    skew_hermitian_coordinates,
    theorem2_gradients,
)
from ortholab.training.module import RecurrentModule, build_layer


def unitarity_error(w: torch.Tensor) -> float:
    eye = torch.eye(w.shape[0], dtype=w.dtype)
    return torch.linalg.matrix_norm(w.mH @ w - eye).item()  # Frobenius norm


# W = (I + A)^-1 (I - A) D --------------------------------------------------------------------------------


def _cayley_cond(cayley: ComplexScaledCayley) -> float:
    """cond(I + A): the solve in W = (I + A)^-1 (I - A) D amplifies round-off by it."""
    a = cayley.skew().detach()
    return cond(torch.eye(a.shape[0], dtype=a.dtype) + a)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_unitary_to_round_off_after_many_updates(dtype):
    torch.manual_seed(0)
    cayley = ComplexScaledCayley(64).to(dtype)
    with torch.no_grad():
        for _ in range(1000):  # random steps of A's real and imaginary parts and of theta
            for p in (cayley.real_upper, cayley.imag_upper, cayley.theta):
                p.add_(torch.randn_like(p), alpha=1e-2)
    a = cayley.skew()
    assert a.real.abs().max() > 0.5 and a.imag.abs().max() > 0.5  # A moved far from its initialisation
    w = cayley()
    assert w.dtype == (torch.complex64 if dtype == torch.float32 else torch.complex128)
    assert unitarity_error(w) <= roundoff(dtype, n=64, scale=_cayley_cond(cayley))  # n = 64, cond(I + A) ~ 7


def test_skew_hermitian_from_free_real_coordinates():
    n = 6
    real, imag = torch.randn(n * (n - 1) // 2, dtype=torch.float64), torch.randn(n * (n + 1) // 2, dtype=torch.float64)
    a = skew_hermitian(real, imag, n)
    torch.testing.assert_close(a.mH, -a)
    assert a[0, 1] == torch.complex(real[0], imag[1]) and a[1, 0] == torch.complex(-real[0], imag[1])
    assert a[0, 0].real == 0 and a[0, 0].imag == imag[0] and a[2, 2].imag == imag[n + (n - 1)]
    back_real, back_imag = skew_hermitian_coordinates(a)
    torch.testing.assert_close(back_real, real)
    torch.testing.assert_close(back_imag, imag)


@pytest.mark.parametrize("init, max_angle", [("henaff", math.pi / 2), ("henaff_2pi", 2 * math.pi)])
def test_initial_w_is_unitary_with_the_henaff_spectrum(init, max_angle):
    # W D^-1 = D Cayley(A0)^T D^-1 (d_side left) is similar to Cayley(A0): eigenvalues e^{+-i t_j}
    # (t_j ~ U[0, max_angle]) and 1 for odd n (Henaff blocks)
    n = 21
    cayley = ComplexScaledCayley(n, init=init, generator=torch.Generator().manual_seed(3)).double()
    angles = block_angles(n, max_angle, torch.Generator().manual_seed(3))
    w = cayley()
    assert unitarity_error(w) < roundoff(torch.float64, n, scale=_cayley_cond(cayley))  # n = 21, cond(I + A) 1.2 to 5
    assert cayley.imag_upper.abs().max() == 0  # Im A starts at zero
    assert 0 <= cayley.theta.min() and cayley.theta.max() < 2 * math.pi
    k = w * torch.polar(torch.ones(n, dtype=torch.float64), -cayley.theta)
    eig = torch.linalg.eigvals(k)
    expected = torch.cat([angles, -angles, torch.zeros(1, dtype=torch.float64)])
    expected = torch.polar(torch.ones_like(expected), expected).angle()  # wrapped to (-pi, pi]
    # A0 is stored in float32 and cast: s = tan(t/2) rounds by eps32/2 relative, moving t by <= eps32/2 (test_cayley)
    torch.testing.assert_close(
        torch.sort(eig.angle()).values, torch.sort(expected).values, atol=roundoff(torch.float32), rtol=0
    )
    torch.testing.assert_close(eig.abs(), torch.ones(n, dtype=torch.float64))


def test_layer_initialisation_as_the_paper():
    torch.manual_seed(0)
    layer = ScuRNN(10, 130)
    w = layer.recurrent_matrix()
    bound = roundoff(torch.float32, 130, scale=_cayley_cond(layer.cayley))  # n = 130, cond(I + A0) <= sqrt(2)
    assert w.dtype == torch.complex64 and unitarity_error(w) < bound
    limit = math.sqrt(6 / (10 + 2 * 130))  # Glorot-uniform over the real [m, 2n] shape
    assert 0.9 * limit < layer.input_weight.abs().max() <= limit
    for p in (layer.bias, layer.h0):
        assert 0.009 < p.abs().max() <= 0.01 and p.min() < 0 < p.max()
    eig_angles = torch.linalg.eigvals(w * torch.polar(torch.ones(130), -layer.cayley.theta.detach())).angle()
    assert eig_angles.abs().max() <= math.pi / 2 + 2 * bound  # t_j ~ U[0, pi/2] by default; W's and eig's errors


# Theorem 2 ----------------------------------------------------------------------------------------------


def _loss_through_w(layer: ScuRNN, w: torch.Tensor, x: torch.Tensor, probe: torch.Tensor) -> torch.Tensor:
    u = x.transpose(0, 1) @ layer.input_weight.T
    h = complex_modrelu_recurrence(u, w.real, w.imag, layer.bias, layer.h0.expand(x.shape[0], -1))
    return (h * probe).sum()


def _away_from_init(layer: ScuRNN) -> ScuRNN:
    with torch.no_grad():  # a generic A: nonzero imaginary part, diagonal included
        layer.cayley.imag_upper.normal_(0, 0.3)
        layer.cayley.real_upper.add_(torch.randn_like(layer.cayley.real_upper), alpha=0.3)
    return layer


@pytest.mark.parametrize("d_side", ["left", "right"])
@pytest.mark.parametrize("a_gradient, off_diagonal_factor", [("theorem2", 1.0), ("coordinates", 2.0)])
def test_theorem_2_gradients_are_what_training_uses(a_gradient, off_diagonal_factor, d_side):
    # Gamma = dL/dconj(A) = C^T - conj(C) satisfies dL = Re tr(Gamma^H dA), so the free coordinates have
    # dL/dx_jk = 2 Re Gamma_jk, dL/dy_jk = 2 Im Gamma_jk (j < k), dL/dz_j = Im Gamma_jj. With 'theorem2' (default)
    # A's parameters receive Gamma's entries themselves (the paper's and the code's step); theta's gradient is exact.
    torch.manual_seed(0)
    layer = _away_from_init(ScuRNN(3, 7, a_gradient=a_gradient, d_side=d_side).double())
    x, probe = torch.randn(4, 11, 3, dtype=torch.float64), torch.randn(11, 4, 14, dtype=torch.float64)
    w = layer.cayley()
    w.retain_grad()
    _loss_through_w(layer, w, x, probe).backward()
    wirtinger = w.grad.conj() / 2  # torch's complex grad is dL/dRe W + i dL/dIm W = 2 conj(dL/dW)
    if d_side == "left":  # the layer applies (K D)^T; Theorem 2 (scuRNN paper, Sec. 3.3) differentiates W = K D
        wirtinger = wirtinger.transpose(0, 1)
    gamma, grad_theta = theorem2_gradients(layer.cayley.skew().detach(), layer.cayley.theta.detach(), wirtinger)
    torch.testing.assert_close(gamma.mH, -gamma)  # skew-Hermitian, so A stays skew-Hermitian
    gamma_real, gamma_imag = skew_hermitian_coordinates(gamma)
    diagonal = torch.tensor([j == k for j, k in zip(*torch.triu_indices(7, 7))])
    imag_factor = torch.where(diagonal, 1.0, off_diagonal_factor).double()
    # one dL/dW, two formulas: n = 7, relative to ||Gamma|| cond(I + A) (the solve with I + A)
    tolerance = close(torch.float64, 7, scale=norm(gamma) * _cayley_cond(layer.cayley))
    torch.testing.assert_close(layer.cayley.real_upper.grad, off_diagonal_factor * gamma_real, **tolerance)
    torch.testing.assert_close(layer.cayley.imag_upper.grad, imag_factor * gamma_imag, **tolerance)
    torch.testing.assert_close(layer.cayley.theta.grad, grad_theta, **tolerance)


def test_theorem_2_matches_finite_differences():
    # central differences of L(A(x, y, z), theta) in float64 against Theorem 2's closed form, coordinate by coordinate
    torch.manual_seed(1)
    n = 4
    layer = _away_from_init(ScuRNN(2, n).double())
    x, probe = torch.randn(3, 9, 2, dtype=torch.float64), torch.randn(9, 3, 2 * n, dtype=torch.float64)
    cayley = layer.cayley
    real, imag, theta = (p.detach().clone() for p in (cayley.real_upper, cayley.imag_upper, cayley.theta))

    def loss(real, imag, theta):
        w = complex_scaled_cayley(skew_hermitian(real, imag, n), theta)
        return _loss_through_w(layer, w, x, probe).item()

    w = complex_scaled_cayley(skew_hermitian(real, imag, n), theta).requires_grad_()
    _loss_through_w(layer, w, x, probe).backward()
    gamma, grad_theta = theorem2_gradients(skew_hermitian(real, imag, n), theta, w.grad.conj() / 2)
    gamma_real, gamma_imag = skew_hermitian_coordinates(gamma)
    diagonal = torch.tensor([j == k for j, k in zip(*torch.triu_indices(n, n))])
    expected = [2 * gamma_real, torch.where(diagonal, gamma_imag, 2 * gamma_imag), grad_theta]
    step = 1e-6
    scale = abs(loss(real, imag, theta)) / step
    for which, coordinates in enumerate((real, imag, theta)):
        for i in range(coordinates.numel()):
            args_plus = [real.clone(), imag.clone(), theta.clone()]
            args_minus = [real.clone(), imag.clone(), theta.clone()]
            args_plus[which][i] += step
            args_minus[which][i] -= step
            numeric = (loss(*args_plus) - loss(*args_minus)) / (2 * step)
            # L errs by 2n T eps |L| (2n = 8 real units, T = 9 steps), which the difference divides by the step;
            # the truncation step^2 L''' / 6 is ~1e-12 relative, below it
            assert numeric == pytest.approx(expected[which][i].item(), abs=roundoff(torch.float64, 8 * 9, scale=scale))


def test_layer_gradients_match_finite_differences():
    torch.manual_seed(2)
    layer = _away_from_init(ScuRNN(2, 4, a_gradient="coordinates").double())
    with torch.no_grad():
        layer.input_weight.mul_(3)
    x = torch.randn(3, 8, 2, dtype=torch.float64)
    names = [name for name, _ in layer.named_parameters()]

    def loss(*values):
        out = torch.func.functional_call(layer, dict(zip(names, values)), (x,))
        return (out**2).sum()

    assert torch.autograd.gradcheck(loss, [p.detach().clone().requires_grad_() for p in layer.parameters()])


def test_a_step_equals_the_official_codes_step():
    # The code steps the full n x n real and imaginary arrays of A by Re/Im of Theorem 2's Gamma with its numpy
    # RMSProp (r = 0.9 r + 0.1 g^2 from 0, step lr g / sqrt(r + 1e-8)); ours steps the free coordinates by autograd
    # with rmsprop_tf(initial_accumulator=0, eps=1e-8). Three steps must give the same A.
    torch.manual_seed(3)
    n, lr = 5, 1e-2
    layer = _away_from_init(ScuRNN(2, n).double())
    x, probe = torch.randn(3, 6, 2, dtype=torch.float64), torch.randn(6, 3, 2 * n, dtype=torch.float64)
    a_code = layer.cayley.skew().detach().clone()
    r_real, r_imag = torch.zeros(n, n, dtype=torch.float64), torch.zeros(n, n, dtype=torch.float64)
    optimizer = RMSpropTF([layer.cayley.real_upper, layer.cayley.imag_upper], lr=lr, initial_accumulator=0.0, eps=1e-8)
    for _ in range(3):
        w = complex_scaled_cayley(a_code, layer.cayley.theta.detach()).requires_grad_()
        _loss_through_w(layer, w.transpose(0, 1), x, probe).backward()  # the code's row product h W (scuRNN.py:71)
        gamma, _ = theorem2_gradients(a_code, layer.cayley.theta.detach(), w.grad.conj() / 2)
        r_real.mul_(0.9).add_(0.1 * gamma.real**2)
        r_imag.mul_(0.9).add_(0.1 * gamma.imag**2)
        a_code = torch.complex(
            a_code.real - lr * gamma.real / torch.sqrt(r_real + 1e-8),
            a_code.imag - lr * gamma.imag / torch.sqrt(r_imag + 1e-8),
        )

        optimizer.zero_grad()
        (_loss_through_w(layer, layer.cayley(), x, probe)).backward()
        optimizer.step()
    # n = 5, T = 6 steps, 3 updates: two gradient formulas and two RMSProps, relative to ||A|| (~2)
    torch.testing.assert_close(layer.cayley.skew().detach(), a_code, **close(torch.float64, 5 * 6 * 3, norm(a_code)))
    torch.testing.assert_close(a_code.mH, -a_code)


# modReLU, Theorems 3 and 4 ------------------------------------------------------------------------------


def wirtinger_derivatives(f, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(df/dz, df/dconj(z)) of an elementwise f by autograd over the real and imaginary parts."""
    x, y = z.real.clone().requires_grad_(), z.imag.clone().requires_grad_()
    out = f(torch.complex(x, y))
    d_re = torch.autograd.grad(out.real.sum(), (x, y), retain_graph=True)
    d_im = torch.autograd.grad(out.imag.sum(), (x, y))
    df_dx, df_dy = torch.complex(d_re[0], d_im[0]), torch.complex(d_re[1], d_im[1])
    return (df_dx - 1j * df_dy) / 2, (df_dx + 1j * df_dy) / 2


def _random_z(size=2000, seed=0):
    g = torch.Generator().manual_seed(seed)
    modulus = 10 ** (torch.rand(size, generator=g, dtype=torch.float64) * 4 - 3)  # |z| from 1e-3 to 10
    return torch.polar(modulus, torch.rand(size, generator=g, dtype=torch.float64) * 2 * math.pi)


def test_theorem_3_exact_modrelu_derivatives():
    z = _random_z()
    b = (torch.rand(z.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64) - 0.5) * 4
    dz, dzbar = wirtinger_derivatives(lambda v: complex_modrelu(v, b, eps=0.0), z)
    active = z.abs() + b >= 0
    assert active.any() and (~active).any()
    # autograd's and the closed form's few (~10) float64 operations, entry-wise against the largest entry
    expected_dz = torch.where(active, 1 + b / (2 * z.abs()), 0).to(dz.dtype)
    expected_dzbar = torch.where(active, -b * z**2 / (2 * z.abs() ** 3), 0)
    torch.testing.assert_close(dz, expected_dz, **close(torch.float64, 10, scale=largest(expected_dz)))
    torch.testing.assert_close(dzbar, expected_dzbar, **close(torch.float64, 10, scale=largest(expected_dzbar)))


def test_theorem_3_singularity_as_z_goes_to_zero_for_positive_bias():
    b = torch.tensor(0.5, dtype=torch.float64)
    moduli = torch.tensor([1e-3, 1e-4, 1e-5, 1e-6, 1e-7], dtype=torch.float64)
    z = torch.polar(moduli, torch.full_like(moduli, 0.7))
    dz, dzbar = wirtinger_derivatives(lambda v: complex_modrelu(v, b, eps=0.0), z)
    growth_z, growth_zbar = dz.abs()[1:] / dz.abs()[:-1], dzbar.abs()[1:] / dzbar.abs()[:-1]
    assert torch.all((growth_zbar > 9.99) & (growth_zbar < 10.01))  # |d/dconj(z)| = b / (2|z|): x10 per decade
    assert torch.all((growth_z > 9.95) & (growth_z < 10.01))  # |d/dz| = 1 + b / (2|z|): ~x10 per decade
    assert dzbar.abs()[-1] > 1e5
    # with b <= 0 both stay bounded (the paper's remark): |d/dz| <= 1, |d/dconj(z)| <= 1/2 where active
    z = torch.cat([_random_z(), torch.polar(moduli, torch.zeros_like(moduli))])
    b = -torch.rand(z.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    dz, dzbar = wirtinger_derivatives(lambda v: complex_modrelu(v, b, eps=0.0), z)
    # each derivative is a few (~10) operations on terms <= 1 in float64
    assert dz.abs().max() <= 1 + roundoff(torch.float64, 10) and dzbar.abs().max() <= 0.5 + roundoff(torch.float64, 10)


def test_theorem_4_eps_modrelu_derivatives():
    eps = 1e-5
    z = torch.cat([_random_z(seed=3), torch.zeros(1, dtype=torch.complex128)])
    b = (torch.rand(z.shape, generator=torch.Generator().manual_seed(4), dtype=torch.float64) - 0.5) * 4
    b[-1] = 0.5
    dz, dzbar = wirtinger_derivatives(lambda v: complex_modrelu(v, b, eps), z)
    zhat = torch.sqrt(z.abs() ** 2 + eps)
    active = zhat + b >= 0
    assert active.any() and (~active).any()
    expected_dz = (zhat + b) / (zhat + eps) + z.abs() ** 2 * (eps - b) / (2 * zhat * (zhat + eps) ** 2)
    expected_dzbar = z**2 * (eps - b) / (2 * zhat * (zhat + eps) ** 2)
    expected_dz, expected_dzbar = (
        torch.where(active, expected_dz, 0).to(dz.dtype),
        torch.where(active, expected_dzbar, 0),
    )
    torch.testing.assert_close(dz, expected_dz, **close(torch.float64, 10, scale=largest(expected_dz)))
    torch.testing.assert_close(dzbar, expected_dzbar, **close(torch.float64, 10, scale=largest(expected_dzbar)))
    # finite at z = 0, but large when zhat + eps << b: (sqrt(eps) + b) / (sqrt(eps) + eps) ~ 158 for b = 0.5
    assert (
        torch.isfinite(dz).all()
        and dz[-1].real.item()
        == pytest.approx((math.sqrt(eps) + 0.5) / (math.sqrt(eps) + eps), rel=roundoff(torch.float64, 10))
        and dz[-1].real > 100
    )


# the fused recurrence ----------------------------------------------------------------------------------


def _recurrence_inputs(dtype, seed=0, t=25, b=4, n=6):
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(t, b, 2 * n, generator=g, dtype=torch.float64) * 0.5
    w = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=torch.complex128))[0]  # unitary
    bias = (torch.rand(n, generator=g, dtype=torch.float64) - 0.5) * 1.6  # mixed signs: some units cut off
    h0 = torch.randn(b, 2 * n, generator=g, dtype=torch.float64) * 0.1
    return [x.to(dtype).requires_grad_() for x in (u, w.real, w.imag, bias, h0)]


def test_fused_recurrence_matches_plain_autograd():
    fused, reference = _recurrence_inputs(torch.float64), _recurrence_inputs(torch.float64)
    probe = torch.randn(25, 4, 12, dtype=torch.float64)
    out = complex_modrelu_recurrence(*fused)
    expected = complex_modrelu_recurrence_reference(*reference)
    # T = 25 steps through 2n = 12 real units: 2n T eps relative to ||h||; the gradients add the sum over T and
    # B = 4 that forms a weight's: (2n + B) T eps relative to each gradient's norm
    torch.testing.assert_close(out, expected, **close(torch.float64, 12 * 25, norm(expected)))
    (out * probe).sum().backward()
    (expected * probe).sum().backward()
    for a, b in zip(fused, reference):
        torch.testing.assert_close(a.grad, b.grad, **close(torch.float64, 16 * 25, norm(b.grad)))
    assert (out == 0).any() and (out != 0).any()  # both branches of modReLU were exercised


def test_offsets_carry_the_total_hidden_state_gradient():
    fused, reference = _recurrence_inputs(torch.float64, seed=4), _recurrence_inputs(torch.float64, seed=4)
    offsets = [torch.randn(25, 4, 12, dtype=torch.float64).mul_(0.1).requires_grad_() for _ in range(2)]
    with torch.no_grad():
        offsets[1].copy_(offsets[0])
    probe = torch.randn(25, 4, 12, dtype=torch.float64)
    out = complex_modrelu_recurrence(*fused, offsets[0])
    expected = complex_modrelu_recurrence_reference(*reference, offsets[1])
    # as above: T = 25, 2n = 12, B = 4
    torch.testing.assert_close(out, expected, **close(torch.float64, 12 * 25, norm(expected)))
    (out * probe).sum().backward()
    (expected * probe).sum().backward()
    torch.testing.assert_close(offsets[0].grad, offsets[1].grad, **close(torch.float64, 16 * 25, norm(offsets[1].grad)))
    for a, b in zip(fused, reference):
        torch.testing.assert_close(a.grad, b.grad, **close(torch.float64, 16 * 25, norm(b.grad)))
    assert torch.autograd.gradcheck(
        complex_modrelu_recurrence,
        (*_recurrence_inputs(torch.float64, seed=5, t=8, n=3), offsets[0][:8, :, :6].detach().requires_grad_()),
    )


def test_fused_recurrence_gradcheck():
    assert torch.autograd.gradcheck(complex_modrelu_recurrence, _recurrence_inputs(torch.float64, seed=1, t=12, n=4))


def test_fused_recurrence_in_float32_agrees_with_float64():
    single, double = _recurrence_inputs(torch.float32, seed=2), _recurrence_inputs(torch.float64, seed=2)
    expected = complex_modrelu_recurrence(*double)
    # float32's round-off over T = 25 steps through 2n = 12 real units (the inputs' own rounding included)
    torch.testing.assert_close(
        complex_modrelu_recurrence(*single).double(), expected, **close(torch.float32, 12 * 25, norm(expected))
    )


# the layer in the application ----------------------------------------------------------------------------


def test_forward_shapes_and_groups():
    layer = ScuRNN(3, 8)
    out = layer(torch.randn(5, 7, 3))
    assert out.shape == (5, 7, 16) and layer.output_size == 16
    assert layer(torch.randn(2, 7, 3)).shape == (2, 7, 16)  # h0 serves any batch size
    groups = layer.parameter_groups()
    assert sorted(groups) == ["other", "recurrent", "scaling"]
    grouped = [p for params in groups.values() for p in params]
    assert len(grouped) == len(set(map(id, grouped))) == len(list(layer.parameters()))
    assert sum(p.numel() for p in groups["recurrent"]) == 8 * 8 and groups["scaling"][0].numel() == 8
    assert layer.recurrent_matrix().is_complex()
    assert torch.equal(layer.snapshot_arrays()["phases"], layer.cayley.theta)
    assert FAMILIES["scurnn"] is ScuRNN
    assert layer.supports_state_offsets
    x = torch.randn(2, 7, 3)
    torch.testing.assert_close(layer(x, state_offsets=torch.zeros(2, 7, 16)), layer(x))


def test_nonfinite_hint_names_the_modrelu_singularity():
    layer = ScuRNN(3, 8)
    assert "Theorem 4" in layer.nonfinite_hint()  # b ~ U[-0.01, 0.01] has positive entries
    with torch.no_grad():
        layer.bias.clamp_(max=0.0)
    assert layer.nonfinite_hint() is None


def _parameter_count(input_size, n, output_size, readout="every_step"):
    return sum(p.numel() for p in SequenceModel(ScuRNN(input_size, n), output_size, readout).parameters())


@pytest.mark.parametrize(
    "input_size, n, output_size, budget, readout",
    [
        (10, 130, 9, 22_000, "every_step"),  # copying
        (2, 116, 1, 14_000, "last_step"),  # adding
        (1, 116, 10, 16_000, "last_step"),  # pixel MNIST
        (1, 250, 10, 69_000, "last_step"),
        (129, 128, 129, 83_000, "every_step"),  # TIMIT
        (129, 258, 129, 200_000, "every_step"),
    ],
)
def test_parameter_counts_match_the_papers_budgets(input_size, n, output_size, budget, readout):
    count = _parameter_count(input_size, n, output_size, readout)
    # A: n^2, theta: n, U: 2nm, b: n, h0: 2n, readout: 2n p + p
    assert count == n * n + n + 2 * n * input_size + n + 2 * n + 2 * n * output_size + output_size
    assert abs(count - budget) / budget < 0.05
    if (input_size, n) == (10, 130):
        assert count == 22_369
    if (input_size, n) == (2, 116):
        assert count == 14_617


def test_config_errors_name_the_key():
    with pytest.raises(ConfigError, match=r"model\.family_args\.init = 'glorot'.*henaff"):
        ScuRNN(3, 8, init="glorot")
    with pytest.raises(ConfigError, match=r"model\.family_args\.a_gradient = 'wirtinger'.*theorem2"):
        ScuRNN(3, 8, a_gradient="wirtinger")
    with pytest.raises(ConfigError, match=r"model\.family_args\.rho is not an option of family 'scurnn'"):
        build_layer("scurnn", 3, 8, {"rho": 4})
    with pytest.raises(ConfigError, match=r"model\.hidden_size"):
        ScuRNN(3, 0)


def test_each_group_is_stepped_by_its_own_optimizer():
    task = CopyingTask(seq_len=5, train_size=20, val_size=20, test_size=20, batch_size=10)
    module = RecurrentModule(
        task.spec,
        family="scurnn",
        hidden_size=6,
        optimizers={
            "recurrent": {"name": "rmsprop_tf", "lr": 1e-3, "initial_accumulator": 0.0, "eps": 1e-8},
            "scaling": {"name": "adagrad_tf", "lr": 1e-3},
            "other": {"name": "adam", "lr": 1e-3},
        },
    )
    optimizers = module.configure_optimizers()
    assert [type(o) for o in optimizers] == [RMSpropTF, AdagradTF, torch.optim.Adam]
    assert module.parameter_counts() == {"recurrent": 36, "scaling": 6, "other": 12 * 10 + 6 + 12 + 12 * 9 + 9}
    inputs, targets = task.make_split("train")
    before = {name: p.detach().clone() for name, p in module.named_parameters()}
    module.objective.loss(module(inputs[:10]), targets[:10], None).backward()
    for optimizer in optimizers:
        optimizer.step()
    assert all(not torch.equal(before[name], p) for name, p in module.named_parameters())


def test_adding_task_runs_through_the_layer():
    task = AddingTask(seq_len=6, train_size=8, val_size=8, test_size=8, batch_size=4)
    module = RecurrentModule(task.spec, family="scurnn", hidden_size=5, family_args={"init": "henaff_2pi"})
    inputs, _ = task.make_split("train")
    out = module(inputs)
    assert out.shape == (8, 1) and torch.isfinite(out).all()
