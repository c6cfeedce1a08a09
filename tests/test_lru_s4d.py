"""LRU and S4D (issue 51): the parallel scan against the sequential recurrence, gradients against finite differences,
|λ| < 1 for every parameter, S4D's convolution against its recurrence, the LRU's γ normalisation of the state's
variance, the initialisations, the eigenvalues the callback stores, sizing to a budget, and (slow) learning."""

import math

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from devices import DEVICES
from finite_differences import assert_gradients_match_finite_differences
from learning import fit_recorded
from tolerances import close, largest, norm, roundoff

from ortholab.datamodules import CopyingTask
from ortholab.db import SQLLogger, Store
from ortholab.db.artifacts import EIGENVALUES, array_from_bytes
from ortholab.models import FAMILIES, ConfigError
from ortholab.models.fft_convolution import causal_convolution, channelwise_causal_convolution
from ortholab.models.linear_scan import (
    CHUNK_RANGE,
    SINGLE_CHUNK,
    chunk_length,
    diagonal_scan,
    linear_recurrence_loop,
    linear_scan,
)
from ortholab.models.lru import LRU, LinearRecurrentUnit, eigenvalue_powers, ring_eigenvalues
from ortholab.models.s4d import S4D
from ortholab.models.sizing import hidden_size_for_budget, parameter_count
from ortholab.training.callbacks import EigenvalueSnapshots
from ortholab.training.family_options import resolve_optimizers
from ortholab.training.module import RecurrentModule

F64, C128 = torch.float64, torch.complex128
LENGTHS = [1, 2, 3, 7, 16, 33]  # odd, even, a power of two, one past it: every round pattern of the doubling


def _complex(generator, *shape):
    return torch.complex(
        torch.randn(*shape, generator=generator, dtype=F64), torch.randn(*shape, generator=generator, dtype=F64)
    )


def _in_real_coordinates(f):
    """f of complex128 tensors as a function of their (..., 2) real views, returning its output's real view: the form
    tests/finite_differences.py checks (float64 in and out); the real part of a complex gradient is its gradient in
    these coordinates."""

    def real(*views):
        out = f(*(torch.view_as_complex(v) for v in views))
        return torch.view_as_real(out) if out.is_complex() else out

    return real


def _decays(generator, *shape):
    """Complex decays inside the unit circle, |a| in [0.5, 1)."""
    modulus = 0.5 + 0.5 * torch.rand(*shape, generator=generator, dtype=F64)
    return torch.polar(modulus, 2 * math.pi * torch.rand(*shape, generator=generator, dtype=F64))


# the parallel scan ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("varying", [False, True], ids=["constant_decay", "decay_per_step"])
@pytest.mark.parametrize("with_initial", [False, True], ids=["zero_h0", "given_h0"])
@pytest.mark.parametrize("steps", LENGTHS)
def test_the_scan_equals_the_sequential_recurrence_values_and_gradients(steps, with_initial, varying):
    g = torch.Generator().manual_seed(steps)
    a = _decays(g, 3, steps, 5) if varying else _decays(g, 5)
    b, h0, probe = _complex(g, 3, steps, 5), _complex(g, 3, 5), _complex(g, 3, steps, 5)
    ours = [t.clone().requires_grad_() for t in (a, b, h0)]
    theirs = [t.clone().requires_grad_() for t in (a, b, h0)]
    got = linear_scan(ours[0], ours[1], ours[2] if with_initial else None)
    expected = linear_recurrence_loop(theirs[0], theirs[1], theirs[2] if with_initial else None)
    # h_t sums t + 1 terms, each a product of up to T decays (the scan's by ceil(log2 T) squarings, the loop's one by
    # one): 2T roundings of a complex multiply-add per entry, relative to the states' size ||h||
    torch.testing.assert_close(got, expected, **close(C128, n=4 * steps, scale=norm(expected)))
    (got * probe.conj()).real.sum().backward()
    (expected * probe.conj()).real.sum().backward()
    used = ours if with_initial else ours[:2]
    for mine, reference in zip(used, theirs):
        # the backward scan sums T terms more per entry (dL/da sums over the batch of 3 too): 4T + 3 roundings,
        # relative to the gradient's size
        torch.testing.assert_close(
            mine.grad, reference.grad, **close(C128, n=8 * steps + 3, scale=norm(reference.grad))
        )


def test_the_scan_is_real_for_real_inputs_and_matches_finite_differences():
    g = torch.Generator().manual_seed(1)
    a, b = 0.9 * torch.rand(4, generator=g, dtype=F64), torch.randn(2, 9, 4, generator=g, dtype=F64)
    assert linear_scan(a, b).dtype == F64
    inputs = [_decays(g, 2, 9, 3), _complex(g, 2, 9, 3), _complex(g, 2, 3)]
    # the derived bound (tests/finite_differences.py) in real coordinates, not gradcheck's rtol 1e-3: T = 9 complex
    # multiply-adds of 8 real operations each
    scan = _in_real_coordinates(linear_scan)
    assert_gradients_match_finite_differences(scan, [torch.view_as_real(t) for t in inputs], ops=8 * 9)
    constant = [_decays(g, 3), _complex(g, 2, 9, 3), _complex(g, 2, 3)]
    assert_gradients_match_finite_differences(scan, [torch.view_as_real(t) for t in constant], ops=8 * 9)
    assert torch.autograd.gradgradcheck(linear_scan, [t.detach().requires_grad_() for t in constant])


# lengths for the chunked scan: one chunk (<= 32), a divisor in range (64: 4 chunks of 16; 784: 28 of 28), a prime
# (97: padded to 7 chunks of 16), and 2000 (50 chunks of 40, whose 50 carries are 2 chunks of 25: two levels)
CHUNKED_LENGTHS = [1, 2, 32, 33, 64, 97, 784, 2000]


def _states_first_loop(decay, inputs, initial, reverse):
    """The oracle in the scan's layout: (S, ..., T) moved to (..., T, S), the loop, and back (reverse: time flipped)."""
    b = inputs.movedim(0, -1)
    b = b.flip(-2) if reverse else b
    h = linear_recurrence_loop(decay, b, None if initial is None else initial.movedim(0, -1))
    return (h.flip(-2) if reverse else h).movedim(-1, 0)


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
@pytest.mark.parametrize("steps", CHUNKED_LENGTHS)
def test_the_chunked_scan_equals_the_loop_values_and_gradients(steps, reverse):
    g = torch.Generator().manual_seed(steps)
    decay, inputs, h0 = _decays(g, 4), _complex(g, 4, 2, steps), _complex(g, 4, 2)
    probe = _complex(g, 4, 2, steps)
    ours = [t.clone().requires_grad_() for t in (decay, inputs, h0)]
    theirs = [t.clone().requires_grad_() for t in (decay, inputs, h0)]
    got = diagonal_scan(*ours, reverse=reverse)
    expected = _states_first_loop(*theirs, reverse)
    # h_t sums up to T + 1 terms whose powers of a take up to C + T/C + 1 roundings here (one by one in the loop):
    # 4T roundings of a complex multiply-add bound both, relative to ||h||
    torch.testing.assert_close(got, expected, **close(C128, n=4 * steps + 4, scale=norm(expected)))
    (got * probe.conj()).real.sum().backward()
    (expected * probe.conj()).real.sum().backward()
    for mine, reference in zip(ours, theirs):  # the backward scan sums as many terms again (dL/da over 2 rows too)
        torch.testing.assert_close(
            mine.grad, reference.grad, **close(C128, n=8 * steps + 8, scale=norm(reference.grad))
        )


def test_the_chunked_scan_matches_finite_differences_across_chunks_and_padding():
    g = torch.Generator().manual_seed(5)
    inputs = [_decays(g, 2), _complex(g, 2, 1, 97), _complex(g, 2, 1)]  # 97 steps: 7 chunks, 15 padded
    for reverse in (False, True):
        scan = lambda a, b, h0, r=reverse: diagonal_scan(a, b, h0, reverse=r)  # noqa: E731
        # the derived bound in real coordinates: 97 steps of a complex multiply-add (8 real operations), as above
        real = _in_real_coordinates(scan)
        assert_gradients_match_finite_differences(real, [torch.view_as_real(t) for t in inputs], ops=8 * 97 + 8)
        assert torch.autograd.gradgradcheck(scan, [t.detach().requires_grad_() for t in inputs])


@pytest.mark.parametrize("steps", [1, 31, 32, 33, 97, 784, 1020, 2000, 4099])
def test_chunk_lengths_divide_the_steps_when_they_can_and_stay_in_range(steps):
    chunk = chunk_length(steps)
    if steps <= SINGLE_CHUNK:
        assert chunk == steps
        return
    assert CHUNK_RANGE[0] <= chunk <= CHUNK_RANGE[1]
    if any(steps % c == 0 for c in range(CHUNK_RANGE[0], CHUNK_RANGE[1] + 1)):
        assert steps % chunk == 0


@pytest.mark.parametrize("device", DEVICES)
def test_the_chunked_scan_in_float32_on_each_device_against_the_float64_loop(device):
    """The LRU's own sizes (N = 128 states, T = 784 steps, 4 sequences), |λ| up to 0.999, in complex64 on the device
    (CUDA: the GPU check's first stage) against the loop in complex128 on the CPU."""
    g = torch.Generator().manual_seed(784)
    modulus = 0.9 + 0.099 * torch.rand(128, generator=g, dtype=F64)
    decay = torch.polar(modulus, 2 * math.pi * torch.rand(128, generator=g, dtype=F64))
    inputs, probe = _complex(g, 128, 4, 784), _complex(g, 128, 4, 784)
    ours = [t.to(device, torch.complex64).requires_grad_() for t in (decay, inputs)]
    theirs = [t.clone().requires_grad_() for t in (decay, inputs)]
    got = diagonal_scan(*ours)
    expected = _states_first_loop(*theirs, None, False)
    # complex64 rounding against a float64 oracle: 4T roundings of a multiply-add, relative to the largest |h_t|
    # (measured 2026-11-27: 49 eps; the bound allows 3136 eps, a real fault is O(1))
    torch.testing.assert_close(
        got.cpu().to(C128), expected, **close(torch.complex64, n=4 * 784, scale=largest(expected))
    )
    (got * probe.to(device, torch.complex64).conj()).real.sum().backward()
    (expected * probe.conj()).real.sum().backward()
    for mine, reference in zip(ours, theirs):  # dL/dλ sums over 4 x 784 steps more
        scale = largest(reference.grad)
        torch.testing.assert_close(
            mine.grad.cpu().to(C128), reference.grad, **close(torch.complex64, n=8 * 784 * 4, scale=scale)
        )


def test_an_empty_sequence_has_no_states():
    assert diagonal_scan(torch.ones(3), torch.ones(3, 2, 0)).shape == (3, 2, 0)
    assert linear_scan(torch.ones(3), torch.ones(2, 0, 3)).shape == (2, 0, 3)
    assert diagonal_scan(torch.ones(3), torch.ones(3, 0, 5)).shape == (3, 0, 5)  # no sequences


def test_the_diagonal_scan_names_a_wrong_shape():
    with pytest.raises(ValueError, match="decay should be one value per state"):
        diagonal_scan(torch.ones(2, 3), torch.ones(3, 4))
    with pytest.raises(ValueError, match="inputs should be .S, ..., T. with S = 3"):
        diagonal_scan(torch.ones(3), torch.ones(4, 5))
    with pytest.raises(ValueError, match=r"initial should be .* shape \(3, 2\) .* got shape \(4, 2\)"):
        diagonal_scan(torch.ones(3), torch.ones(3, 2, 40), initial=torch.ones(4, 2))


# the layers --------------------------------------------------------------------------------------------------------
LAYERS = [
    ("lru", {"state_size": 3}),
    ("lru", {"state_size": 2, "prenorm": False, "norm": "batch"}),
    ("s4d", {"state_size": 4}),
    ("s4d", {"state_size": 4, "mode": "recurrence", "init": "inv"}),
]


@pytest.mark.parametrize("family, options", LAYERS, ids=["lru", "lru-postnorm-batch", "s4d", "s4d-recurrence-inv"])
def test_layer_gradcheck_in_float64(family, options):
    """d(output, final state) / d(input, initial state, every parameter) against finite differences."""
    torch.manual_seed(2)
    layer = FAMILIES[family](2, 3, **options).double()
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 5, 2, generator=g, dtype=F64)
    state = torch.randn(2, layer.state_features, generator=g, dtype=F64) / 2
    names = [name for name, _ in layer.named_parameters()]

    def run(x, state, *params):
        out, final = torch.func.functional_call(
            layer, dict(zip(names, params)), (x,), {"initial_state": state, "return_state": True}
        )
        return torch.cat([out.reshape(-1), final.reshape(-1)])

    # derived bound (tests/finite_differences.py), not gradcheck's rtol 1e-3. Each output entry: the encoder (2 terms),
    # a norm over at most B T = 10 entries (2 x 10), the state's mix of the 3 features, T = 5 steps and a readout of
    # at most 4 states (a complex multiply-add, 4 roundings, each), three FFTs of 2T points (3 x 4) and the GLU (3)
    ops = 2 + 2 * 10 + 4 * (3 + 5 + 4) + 3 * 4 + 3
    assert_gradients_match_finite_differences(run, [x, state, *layer.parameters()], ops=ops)


NU_THETA = [-1e4, -800.0, -40.0, -20.0, -14.0, -1.0, 0.0, 1.0, 4.0, 5.0, 80.0, 88.7, 800.0, 1e4]


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_lru_eigenvalues_lie_strictly_inside_the_unit_circle_for_any_nu_and_theta(dtype):
    values = torch.tensor(NU_THETA, dtype=dtype)
    nu, theta = (grid.reshape(-1).clone().requires_grad_() for grid in torch.meshgrid(values, values, indexing="ij"))
    lam = ring_eigenvalues(nu, theta)
    assert torch.isfinite(lam).all() and (lam.abs() < 1).all(), lam.abs().max()
    (lam.abs() + lam.real + lam.imag).sum().backward()  # the gradients stay finite at the extremes too
    assert torch.isfinite(nu.grad).all() and torch.isfinite(theta.grad).all()
    layer = LRU(2, 4, state_size=len(NU_THETA)).to(dtype)
    with torch.no_grad():  # through the layer: extreme parameters, a long input, a finite bounded state
        layer.recurrence.nu_log.copy_(values)
        layer.recurrence.theta_log.copy_(values.flip(0))
        layer.recurrence.gamma_log.fill_(0.0)
    assert (layer.eigenvalues().abs() < 1).all()
    out, final = layer(torch.randn(2, 300, 2, dtype=dtype), return_state=True)
    assert torch.isfinite(out).all() and torch.isfinite(final).all()


@pytest.mark.parametrize("init", ["lin", "inv"])
@pytest.mark.parametrize("with_initial", [False, True], ids=["zero_state", "given_state"])
@pytest.mark.parametrize("steps", [1, 6, 17])
def test_s4d_convolution_and_recurrence_agree(steps, with_initial, init):
    torch.manual_seed(4)
    convolution = S4D(3, 3, state_size=6, init=init).double()
    recurrence = S4D(3, 3, state_size=6, init=init, mode="recurrence").double()
    recurrence.load_state_dict(convolution.state_dict())
    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, steps, 3, generator=g, dtype=F64)
    state = torch.randn(2, convolution.state_features, generator=g, dtype=F64) if with_initial else None
    ssm_c, ssm_r = convolution.recurrence, recurrence.recurrence
    y_c, final_c = ssm_c(x, None if state is None else torch.complex(*state.chunk(2, -1)))
    y_r, final_r = ssm_r(x, None if state is None else torch.complex(*state.chunk(2, -1)))
    # each y_k sums T terms of N/2 = 3 modes: the kernel's powers exp(ΔA l) and the FFT (log2 2T rounds) against
    # the scan's squarings; 4 T N roundings relative to the output's size
    torch.testing.assert_close(y_c, y_r, **close(F64, n=4 * steps * 6, scale=norm(y_r)))
    torch.testing.assert_close(final_c, final_r, **close(C128, n=4 * steps * 6, scale=norm(final_r)))
    probe = torch.randn(2, steps, 3, generator=g, dtype=F64)
    (y_c * probe).sum().backward()
    (y_r * probe).sum().backward()
    # the gradients sum the same terms over the batch of 2 and the T steps once more: 8 T N + 2 roundings. Their
    # scale is that of the terms summed, the whole gradient's: dL/dA's terms (Δ e^(ΔA)/A against (e^(ΔA) - 1)/A^2)
    # cancel to O(Δ^2), far below them
    scale = norm(torch.cat([p.grad.reshape(-1) for p in ssm_r.parameters()]))
    for (name, p_c), p_r in zip(ssm_c.named_parameters(), ssm_r.parameters()):
        torch.testing.assert_close(p_c.grad, p_r.grad, **close(F64, n=8 * steps * 6 + 2, scale=scale), msg=name)


def _reference_s4d_kernel(ssm, length):
    """The authors' kernel as written: every power Ā^l an exponential exp(ΔA l) (s4d.py:43-45)."""
    dt_a, gain = ssm.discretised()
    powers = torch.exp(dt_a.unsqueeze(-1) * torch.arange(length))
    return 2 * torch.einsum("hn,hnl->hl", torch.view_as_complex(ssm.C) * gain, powers).real


@pytest.mark.parametrize("init", ["inv", "lin"])
def test_s4d_discretisation_is_the_zero_order_hold_of_the_continuous_system(init):
    """x' = A x + B u with u held over a step of Δ: x_{k+1} = exp(ΔA) x_k + (∫_0^Δ exp(sA) ds) B u_k, read off the
    exponential of the block matrix [[ΔA, Δ], [0, 0]] (Van Loan), independently of discretised()'s closed form
    (exp(ΔA) - 1) / A with B = 1."""
    torch.manual_seed(8)
    ssm = S4D(1, 3, state_size=8, init=init).double().recurrence
    dt_a, gain = ssm.discretised()
    dt = ssm.log_dt.exp().unsqueeze(-1).expand_as(dt_a)
    block = torch.zeros(*dt_a.shape, 2, 2, dtype=torch.complex128)
    block[..., 0, 0], block[..., 0, 1] = dt_a, dt
    held = torch.linalg.matrix_exp(block)
    # exp(z) - 1 over z = ΔA loses |1 / z| eps relative to the result; the 2x2 exponential a few eps (x 10)
    bound = roundoff(F64, 10, scale=1 + 1 / float(dt_a.abs().min()))
    torch.testing.assert_close(held[..., 0, 0], dt_a.exp(), rtol=bound, atol=0)
    torch.testing.assert_close(held[..., 0, 1], gain, rtol=bound, atol=0)


@pytest.mark.parametrize("length", [0, 1, 2, 3, 17, 26, 784, 1000])
def test_s4d_kernel_by_blocks_of_powers_equals_the_references_exponentials(length):
    """Ā^(c m + r) = Ā^(c m) Ā^r: one more complex product per power than the reference's exp(ΔA l), whose own
    rounding grows with |ΔA l| (up to Re ΔA T, in eps): compared in float64, values and gradients, at square and
    non-square lengths."""
    torch.manual_seed(6)
    ssm = S4D(1, 4, state_size=16, init="inv").double().recurrence
    ours = ssm.kernel(length)
    reference = _reference_s4d_kernel(ssm, length)
    assert ours.shape == (4, length)
    # per entry: N/2 = 8 modes summed, each power off by |ΔA l| eps at most (the exponent's rounding) plus 2 products
    # (a bound for the worst case; measured 2026-11-27: 2 to 3 eps of the largest |K| at every length here)
    bound = 8 * (float(ssm.discretised()[0].abs().max()) * length + 4)
    torch.testing.assert_close(ours, reference, **close(F64, n=bound, scale=largest(reference) if length else 1.0))
    if length:
        probe = torch.randn(4, length, dtype=F64)
        used = [ssm.log_dt, ssm.log_A_real, ssm.A_imag, ssm.C]  # the kernel's parameters (D acts outside it)
        grads = [torch.autograd.grad((k * probe).sum(), used) for k in (ours, reference)]
        for got, expected in zip(*grads):
            torch.testing.assert_close(got, expected, **close(F64, n=2 * length * bound, scale=norm(expected)))


def test_s4d_kernel_in_float32_is_as_close_to_float64_as_the_references():
    """The blocked powers in float32 at the 16k budget's size against the float64 kernel: no worse than the
    reference's exponentials in float32 beside it (measured 2026-11-27: both about 1e-6 of the largest |K|)."""
    torch.manual_seed(7)
    ssm = S4D(1, 60, state_size=64).recurrence
    exact = _reference_s4d_kernel(ssm.double(), 784)
    ssm.float()
    ours = (ssm.kernel(784).double() - exact).abs().max()
    theirs = (_reference_s4d_kernel(ssm, 784).double() - exact).abs().max()
    assert ours <= 2 * theirs + roundoff(torch.float32, scale=largest(exact)), (ours, theirs)


def _lru_pair(width, states, r_min=0.0, r_max=1.0, dtype=F64):
    """Two LRUs with the same parameters, one computing by convolution, one by the scan."""
    torch.manual_seed(12)
    convolution = LinearRecurrentUnit(width, states, r_min, r_max, 6.28, "convolution").to(dtype)
    scan = LinearRecurrentUnit(width, states, r_min, r_max, 6.28, "recurrence").to(dtype)
    scan.load_state_dict(convolution.state_dict())
    return convolution, scan


@pytest.mark.parametrize("steps", [1, 2, 6, 17, 100])
def test_lru_convolution_equals_its_scan_values_and_gradients(steps):
    convolution, scan = _lru_pair(3, 5)
    g = torch.Generator().manual_seed(steps)
    u, probe = torch.randn(2, steps, 3, generator=g, dtype=F64), torch.randn(2, steps, 3, generator=g, dtype=F64)
    y_c, final_c = convolution(u, None, want_final=False)
    y_s, _ = scan(u, None, want_final=False)
    assert final_c is None  # the convolution forms no state
    # y_k sums T steps of N = 5 states: the kernel's N terms, three FFTs of 2T points, the scan's 4T roundings
    torch.testing.assert_close(
        y_c, y_s, **close(F64, n=4 * steps + 2 * 5 + 3 * math.log2(2 * steps) + 2, scale=norm(y_s))
    )
    (y_c * probe).sum().backward()
    (y_s * probe).sum().backward()
    scale = norm(torch.cat([p.grad.reshape(-1) for p in scan.parameters()]))
    for (name, p_c), p_s in zip(convolution.named_parameters(), scan.parameters()):  # and over the batch of 2
        torch.testing.assert_close(p_c.grad, p_s.grad, **close(F64, n=16 * steps + 40, scale=scale), msg=name)


def test_lru_convolution_matches_finite_differences():
    convolution, _ = _lru_pair(2, 3)
    names = [name for name, _ in convolution.named_parameters()]
    u = torch.randn(2, 9, 2, generator=torch.Generator().manual_seed(13), dtype=F64)

    def run(u, *params):
        return torch.func.functional_call(convolution, dict(zip(names, params)), (u, None, False))[0]

    # derived bound (tests/finite_differences.py), not gradcheck's rtol 1e-3: y_k sums T = 9 steps of N = 3 states
    # (the kernel's N terms, 4 T roundings of the scan it equals) and three FFTs of 2T points (3 log2(2T), 3 x 5)
    ops = 4 * 9 + 2 * 3 + 3 * 5 + 2
    assert_gradients_match_finite_differences(run, [u, *convolution.parameters()], ops=ops)
    # y_k sums T = 9 steps of 2 channels, three FFTs of 2T points
    assert_gradients_match_finite_differences(
        causal_convolution, [u, torch.randn(9, 2, 3, dtype=F64)], ops=2 * 9 + 3 * 5 + 3
    )


@pytest.mark.parametrize("device", DEVICES)
def test_lru_convolution_in_float32_on_each_device_against_float64(device):
    """The LRU's sizes at the 16k budget (H = 27, N = 128, T = 784, 4 sequences) with |λ| in [0.9, 0.999], float32 on
    the device (CUDA: the GPU check's first stage) against the float64 scan on the CPU."""
    convolution, scan = _lru_pair(27, 128, r_min=0.9, r_max=0.999, dtype=torch.float32)
    scan = scan.double()
    convolution = convolution.to(device)
    g = torch.Generator().manual_seed(784)
    u, probe = torch.randn(4, 784, 27, generator=g, dtype=F64), torch.randn(4, 784, 27, generator=g, dtype=F64)
    got, _ = convolution(u.to(device, torch.float32), None, False)
    expected, _ = scan(u, None, False)
    # float32: the kernel sums 2N real products, three FFTs of 2T points take log2(2T) rounds each, each frequency's
    # product sums 2H terms; relative to the largest |y| (measured 2026-11-27 on the CPU: 1.9 eps; the float32 scan
    # gives 21 eps; a real fault is O(1))
    n = 2 * 128 + 3 * math.log2(2 * 784) + 2 * 27
    torch.testing.assert_close(got.cpu().double(), expected, **close(torch.float32, n=n, scale=largest(expected)))
    (got * probe.to(device, torch.float32)).sum().backward()
    (expected * probe).sum().backward()
    for (name, mine), reference in zip(convolution.named_parameters(), scan.parameters()):
        # the backward repeats those operations, then sums over the T steps and the H x H kernel entries
        # (measured: 4.4 eps of the largest entry)
        bound = close(torch.float32, n=2 * n + 784 + 27 * 27, scale=largest(reference.grad))
        torch.testing.assert_close(mine.grad.cpu().double(), reference.grad, **bound, msg=name)


def test_lru_powers_are_formed_in_float64_and_stored_in_the_parameters_precision():
    unit = LinearRecurrentUnit(2, 4, 0.99, 0.999, 6.28)
    powers = eigenvalue_powers(unit.nu_log, unit.theta_log, 784)
    assert powers.dtype == torch.complex64
    exact = eigenvalue_powers(unit.nu_log.double(), unit.theta_log.double(), 784)
    # one rounding of each power to complex64: the phase 783 exp(θ) formed in float32 would miss by ~1e-4
    torch.testing.assert_close(powers.to(C128), exact, **close(torch.complex64, n=2))
    torch.testing.assert_close(powers[:, 1].to(C128), unit.eigenvalues().to(C128), **close(torch.complex64, n=4))


def test_lru_powers_below_the_smallest_normal_number_are_zero_and_the_rest_unchanged():
    # the ring's default reaches |λ| = 0: the powers of small λ fall through float32's subnormal range
    nu_log, theta_log = torch.log(-torch.log(torch.tensor([0.5, 0.85, 0.99]))), torch.log(torch.tensor([0.1, 1.0, 3.0]))
    powers = eigenvalue_powers(nu_log, theta_log, 784)
    exact = eigenvalue_powers(nu_log.double(), theta_log.double(), 784)
    below = exact.abs() < torch.finfo(torch.float32).tiny
    assert below[0].any() and below[1].any() and not below[2].any()  # from l = 127 and 538; 0.99 never
    assert (powers[below] == 0).all()
    torch.testing.assert_close(powers[~below].to(C128), exact[~below], **close(torch.complex64, n=2))
    assert exact.abs().min() > 0  # float64 keeps them: its smallest normal number is 2^-1022


@pytest.mark.parametrize(
    "family, options, shortcut",
    [
        ("lru", {}, True),  # prenorm LayerNorm: the pixel-MNIST configs
        ("lru", {"norm": "batch"}, True),  # a batch norm before the recurrence sees every step either way
        ("lru", {"norm": "batch", "prenorm": False}, False),  # after the sum it would see the last step only
        ("lru", {"block_dropout": 0.1}, False),  # its masks would draw other random numbers
        ("s4d", {}, True),  # post-norm LayerNorm acts step by step
        ("s4d", {"mode": "recurrence"}, True),
    ],
)
def test_a_last_step_readout_computes_that_step_alone_with_the_same_values_and_gradients(family, options, shortcut):
    from ortholab.models.sequence import SequenceModel

    torch.manual_seed(0)
    layer = FAMILIES[family](1, 6, state_size=8, **options).double()
    model = SequenceModel(layer, 3, readout="last_step").double()
    x = torch.randn(4, 33, 1, dtype=F64)
    assert (layer.last_step_features(x) is not None) == shortcut
    torch.manual_seed(1)  # the same dropout masks for both (where dropout keeps the whole sequence's path)
    fast = model(x)
    torch.manual_seed(1)
    full = model.read_out(model.layer(model.encode(x)))  # every step, then the last
    # the same sums over 33 steps and 8 states in another order (one product over time against a scan or FFT)
    torch.testing.assert_close(fast, full, **close(F64, n=4 * 33 * 8, scale=largest(full)))
    grads = [torch.autograd.grad(out.sum(), list(model.parameters())) for out in (fast, full)]
    for name, mine, reference in zip([n for n, _ in model.named_parameters()], *grads):
        bound = close(F64, n=4 * 33 * 8, scale=largest(reference))
        torch.testing.assert_close(mine, reference, **bound, msg=name)
    model.float()  # under bf16-mixed the layer runs in float32 either way (models/base.py), the readout in bfloat16
    with torch.autocast("cpu", dtype=torch.bfloat16):
        torch.manual_seed(1)
        fast = model(x.float())
        torch.manual_seed(1)
        full = model.read_out(model.layer(model.encode(x.float())))
    # one bfloat16 rounding of nearly equal float32 features and of the readout's sum over 6 of them
    torch.testing.assert_close(fast.float(), full.float(), **close(torch.bfloat16, n=2 * 6, scale=largest(full)))


def test_lru_auto_mode_takes_the_convolution_when_it_is_the_less_work():
    assert LRU(1, 27).recurrence.convolves(50) and LRU(1, 70).recurrence.convolves(50)  # 16k budget, batch 50
    assert not LRU(1, 71).recurrence.convolves(50) and not LRU(1, 95).recurrence.convolves(50)  # 69k: the scan
    assert not LRU(1, 27).recurrence.convolves(1)  # one sequence: the scan's N B is small
    assert LRU(1, 95, mode="convolution").recurrence.convolves(1)
    assert not LRU(1, 4, mode="recurrence").recurrence.convolves(1000)
    layer = LRU(2, 4, mode="convolution", state_size=3)
    out, state = layer(torch.randn(2, 5, 2), return_state=True)  # a state out: the scan, whatever the mode
    assert state.shape == (2, 6) and torch.isfinite(out).all()


def test_the_convolution_of_no_steps_or_no_sequences_is_empty():
    assert causal_convolution(torch.ones(3, 0, 2), torch.ones(0, 2, 4)).shape == (3, 0, 4)
    assert causal_convolution(torch.ones(0, 5, 2), torch.ones(5, 2, 4)).shape == (0, 5, 4)
    layer = LRU(2, 4, mode="convolution")
    assert layer(torch.ones(3, 0, 2)).shape == (3, 0, 4) and layer(torch.ones(0, 5, 2)).shape == (0, 5, 4)


def test_causal_convolution_names_a_wrong_shape():
    with pytest.raises(ValueError, match="signal should be .batch, steps, channels., got shape .2, 5."):
        causal_convolution(torch.ones(2, 5), torch.ones(5, 1, 1))
    with pytest.raises(ValueError, match=r"kernel should be \(5, 3, outputs\) .* got shape \(4, 3, 2\)"):
        causal_convolution(torch.ones(2, 5, 3), torch.ones(4, 3, 2))


@pytest.mark.parametrize("steps", [1, 2, 7])
def test_both_convolutions_equal_their_direct_sums_and_finite_differences(steps):
    g = torch.Generator().manual_seed(steps)
    u, mixing = torch.randn(2, steps, 3, generator=g, dtype=F64), torch.randn(steps, 3, 4, generator=g, dtype=F64)
    direct = torch.stack([sum(u[:, j] @ mixing[k - j] for j in range(k + 1)) for k in range(steps)], dim=1)
    # y_k sums k + 1 products of 3 terms; three FFTs of 2T points, log2(2T) rounds each
    bound = close(F64, n=3 * steps + 3 * math.log2(2 * steps) + 3, scale=norm(direct))
    torch.testing.assert_close(causal_convolution(u, mixing), direct, **bound)
    signal, kernel = u.transpose(1, 2), torch.randn(3, steps, generator=g, dtype=F64)
    direct = torch.stack([sum(kernel[:, k - j] * signal[..., j] for j in range(k + 1)) for k in range(steps)], -1)
    bound = close(F64, n=steps + 3 * math.log2(2 * steps) + 3, scale=norm(direct))
    torch.testing.assert_close(channelwise_causal_convolution(signal, kernel), direct, **bound)
    # derived bound (tests/finite_differences.py), not gradcheck's rtol 1e-3: n as the values' bounds above
    fft = 3 * math.ceil(math.log2(2 * steps)) + 3
    for convolution, inputs, ops in (
        (causal_convolution, (u, mixing), 3 * steps),
        (channelwise_causal_convolution, (signal, kernel), steps),
    ):
        assert_gradients_match_finite_differences(convolution, list(inputs), ops=ops + fft)


def test_the_convolutions_written_out_backward_refuses_a_second_one():
    u, kernel = torch.randn(2, 3, 5, dtype=F64, requires_grad=True), torch.randn(3, 5, dtype=F64, requires_grad=True)
    with pytest.raises(RuntimeError, match="FFT convolution .* gives first derivatives only"):  # at the first
        torch.autograd.grad(channelwise_causal_convolution(u, kernel).square().sum(), u, create_graph=True)


def test_channelwise_convolution_names_a_wrong_shape_and_passes_no_steps():
    with pytest.raises(ValueError, match=r"kernel \(channels, steps\), got shapes \(2, 3, 5\) and \(3, 4\)"):
        channelwise_causal_convolution(torch.ones(2, 3, 5), torch.ones(3, 4))
    assert channelwise_causal_convolution(torch.ones(2, 3, 0), torch.ones(3, 0)).shape == (2, 3, 0)


def test_s4d_step_by_step_through_the_nn_layer_equals_the_whole_sequence():
    from ortholab import nn as onn

    torch.manual_seed(6)
    layer = onn.S4D(2, 3, num_layers=2, batch_first=True, dtype=F64, state_size=4)
    x = torch.randn(2, 9, 2, dtype=F64)
    whole, h_whole = layer(x)
    h, steps = None, []
    for t in range(9):  # one step at a time, the state carried in h_n: the recurrence's use
        out, h = layer(x[:, t : t + 1], h)
        steps.append(out)
    # 9 calls of one step against one convolution over 9 steps: the kernel's 9 powers of N/2 = 2 modes, two layers
    bound = close(F64, n=2 * 4 * 9 * 4, scale=norm(whole))
    torch.testing.assert_close(torch.cat(steps, dim=1), whole, **bound)
    torch.testing.assert_close(h, h_whole, **close(F64, n=2 * 4 * 9 * 4, scale=norm(h_whole)))


def test_gamma_keeps_the_state_variance_of_white_inputs():
    """x_k = λ x_{k-1} + γ (B u)_k with white (B u)_k: E|x_k|^2 = γ^2 E|(Bu)_k|^2 Σ_j |λ|^(2j), which tends to
    γ^2 E|Bu|^2 / (1 - |λ|^2) = E|Bu|^2 = Σ_h |B_nh|^2 (u ~ N(0, I)) with γ = sqrt(1 - |λ|^2), the paper's."""
    torch.manual_seed(7)
    unit = LinearRecurrentUnit(width=4, state_size=16, r_min=0.0, r_max=0.95, max_phase=6.28).double()
    modulus = unit.eigenvalues().abs().detach()
    # γ was drawn in float32: a few roundings, amplified by 1 / (1 - |λ|^2) <= 1 / (1 - 0.95^2) in sqrt(1 - |λ|^2)
    torch.testing.assert_close(
        unit.gamma_log.exp().detach(), torch.sqrt(1 - modulus**2), **close(torch.float32, n=4 / (1 - 0.95**2))
    )
    batch, steps, burn_in = 32, 4096, 512  # |λ| <= 0.95: 0.95^(2 * 512) < 1e-22 of the start is left
    u = torch.randn(batch, steps, 4, generator=torch.Generator().manual_seed(8), dtype=F64)
    with torch.no_grad():
        inputs = torch.complex(u @ unit.B_re.t(), u @ unit.B_im.t())
        x = linear_scan(unit.eigenvalues(), inputs * unit.gamma_log.exp())
    measured = x[:, burn_in:].abs().square().mean(dim=(0, 1))
    expected = (unit.B_re.square() + unit.B_im.square()).sum(dim=1).detach()  # E|(Bu)_n|^2
    # the mean of |x|^2 over K = 32 (4096 - 512) samples: Var|x|^2 <= 2 E|x|^2^2 (a Gaussian's, non-circular
    # at worst) and |x_k|^2 correlates with |x_(k+d)|^2 by at most |λ|^(2d), so its relative standard deviation is at
    # most sqrt(2 (1 + |λ|^2) / ((1 - |λ|^2) K)); five of them per state
    samples = batch * (steps - burn_in)
    tolerance = 5 * torch.sqrt(2 * (1 + modulus**2) / ((1 - modulus**2) * samples))
    relative = (measured / expected - 1).abs()
    assert (relative <= tolerance).all(), (relative, tolerance)
    assert modulus.max() > 0.8  # some states remember long, where the normalisation matters


# initialisation, options, groups -----------------------------------------------------------------------------------
def test_lru_initialisation_is_the_ring_of_its_options():
    torch.manual_seed(9)
    layer = LRU(3, 8, state_size=500, r_min=0.4, r_max=0.9, max_phase=math.pi / 10)
    lam = layer.eigenvalues()
    assert lam.dtype == C128 and lam.shape == (500,)
    # |lambda| and its phase come back through log, exp and the parameters' float32 storage: a few float32 roundings
    slack = roundoff(torch.float32, n=4)
    assert lam.abs().min() >= 0.4 - slack and lam.abs().max() <= 0.9 + slack
    assert lam.angle().min() >= 0 and lam.angle().max() <= math.pi / 10 + slack
    unit = layer.recurrence
    assert abs(unit.B_re.std().item() - (1 / (2 * 8)) ** 0.5) < 0.05  # N(0, 1/(2H)), 4,000 draws
    assert abs(unit.C_re.std().item() - 500**-0.5) < 0.01  # N(0, 1/N)
    assert isinstance(layer.encoder, torch.nn.Linear) and not isinstance(LRU(8, 8).encoder, torch.nn.Linear)


def test_s4d_initialisations_lin_and_inv():
    torch.manual_seed(10)
    for init, expected in (
        ("lin", math.pi * torch.arange(4.0)),
        ("inv", 8 / math.pi * (8 / (2 * torch.arange(4.0) + 1) - 1)),
    ):
        ssm = S4D(2, 3, state_size=8, init=init, dt_min=0.01, dt_max=0.2).recurrence
        torch.testing.assert_close(ssm.A_imag.detach(), expected.expand(3, 4))
        torch.testing.assert_close(ssm.log_A_real.exp().detach(), torch.full((3, 4), 0.5))
        dt = ssm.log_dt.exp()
        slack = roundoff(torch.float32, n=2, scale=0.2)  # exp(log dt) in float32: two roundings of a value <= 0.2
        assert (dt >= 0.01 - slack).all() and (dt <= 0.2 + slack).all()
        dt_a, _ = ssm.discretised()
        torch.testing.assert_close(ssm.eigenvalues(), dt_a.exp().reshape(-1))  # exp(ΔA), every feature's modes
        assert (ssm.eigenvalues().abs() < 1).all()


@pytest.mark.parametrize(
    "family, options, error, match",
    [
        ("lru", {"state_size": 0}, ConfigError, "model.family_args.state_size = 0 must be a positive integer"),
        ("lru", {"state_size": 2.5}, TypeError, "model.family_args.state_size should be of type int"),
        ("lru", {"r_min": 0.5, "r_max": 0.4}, ConfigError, "r_min = 0.5 and r_max = 0.4 must satisfy"),
        ("lru", {"r_max": 1.5}, ConfigError, "r_max = 1.5 must satisfy 0 <= r_min <= r_max <= 1"),
        ("lru", {"max_phase": 0.0}, ConfigError, "model.family_args.max_phase = 0.0 must be positive"),
        (
            "lru",
            {"norm": "group"},
            ConfigError,
            r"model.family_args.norm = 'group'; choose one of \['layer', 'batch'\]",
        ),
        ("lru", {"block_dropout": 1.0}, ConfigError, "model.family_args.block_dropout = 1.0 must be a probability"),
        ("lru", {"prenorm": "yes"}, TypeError, "model.family_args.prenorm should be true or false"),
        ("lru", {"mode": "fft"}, ConfigError, r"model.family_args.mode = 'fft'; choose one of \['auto', "),
        ("s4d", {"state_size": 5}, ConfigError, "model.family_args.state_size = 5 must be even"),
        ("s4d", {"init": "legs"}, ConfigError, r"model.family_args.init = 'legs'; choose one of \['lin', 'inv'\]"),
        ("s4d", {"mode": "fft"}, ConfigError, r"model.family_args.mode = 'fft'; choose one of"),
        ("s4d", {"dt_min": 0.0}, ConfigError, "dt_min = 0.0 and dt_max = 0.1 must satisfy 0 < dt_min <= dt_max"),
        ("s4d", {"dt_max": "big"}, TypeError, "model.family_args.dt_max should be a real number"),
    ],
)
def test_bad_options_are_refused_naming_the_option(family, options, error, match):
    with pytest.raises(error, match=match):
        FAMILIES[family](2, 4, **options)


def test_recurrent_groups_hold_the_eigenvalue_parameters_with_the_papers_optimizer():
    lru, s4d = LRU(2, 4, state_size=3), S4D(2, 4)
    assert lru.parameter_groups()["recurrent"] == [
        lru.recurrence.nu_log,
        lru.recurrence.theta_log,
        lru.recurrence.gamma_log,
    ]
    assert s4d.parameter_groups()["recurrent"] == [
        s4d.recurrence.log_dt,
        s4d.recurrence.log_A_real,
        s4d.recurrence.A_imag,
    ]
    for layer in (lru, s4d):
        grouped = [id(p) for params in layer.parameter_groups().values() for p in params]
        assert sorted(grouped) == sorted(id(p) for p in layer.parameters())
    resolved = resolve_optimizers("lru", {}, None)  # no model.optimizers: Adam 1e-3, the recurrent group at half
    assert resolved["recurrent"]["name"] == "adam" and resolved["recurrent"]["lr"] == 5e-4
    assert resolved["recurrent"]["weight_decay"] == 0 and resolved["other"]["lr"] == 1e-3
    assert resolve_optimizers("s4d", {}, None)["recurrent"]["lr"] == 1e-3


@pytest.mark.parametrize("family", ["lru", "s4d"])
def test_the_eigenvalue_callback_stores_the_diagonal(tmp_path, family):
    torch.manual_seed(11)
    task = CopyingTask(seq_len=5, train_size=20, batch_size=10, val_size=10)
    module = RecurrentModule(task.spec, family=family, hidden_size=4, family_args={"state_size": 4})
    logger = SQLLogger(db_url=f"sqlite:///{tmp_path / 'runs.db'}", root_dir=str(tmp_path / "runs"))
    trainer = pl.Trainer(
        max_steps=2,
        logger=logger,
        callbacks=[EigenvalueSnapshots(every_epoch=True)],
        accelerator="cpu",
        limit_val_batches=0,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    trainer.fit(module, datamodule=task)
    store = Store(logger._db_url)
    (run,) = store.list_runs()
    first, last = store.artifacts(run.id, EIGENVALUES)
    values = array_from_bytes(store.artifact_data(last.id))
    expected = module.model.layer.eigenvalues().numpy()
    assert values.dtype == np.complex128 and last.meta["n"] == len(expected) and np.array_equal(values, expected)
    assert np.all(np.abs(values) < 1) and not np.array_equal(array_from_bytes(store.artifact_data(first.id)), values)


@pytest.mark.parametrize("family", ["lru", "s4d"])
@pytest.mark.parametrize("budget", [16_000, 69_000])
def test_sized_to_the_papers_mnist_budgets(family, budget):
    n = hidden_size_for_budget(family, budget, 1, 10)  # pixel MNIST: 1 input, 10 classes

    def count(size):
        return parameter_count(family, size, 1, 10)

    assert count(n - 1) < budget <= count(n + 1)
    assert abs(count(n) - budget) <= min(abs(count(n - 1) - budget), abs(count(n + 1) - budget))
    built = sum(p.numel() for p in FAMILIES[family](1, n).parameters()) + 10 * n + 10  # and the readout
    assert count(n) == built


# learning (slow) ----------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_lru_leaves_the_copying_baseline_at_t100(tmp_path, monkeypatch):
    # two blocks, H = N = 32, Λ started near the unit circle (|λ| in [0.9, 0.999]: 0.9^100 ~ 3e-5 to 0.999^100 ~ 0.9
    # of a symbol left after T = 100 steps); the default optimizers (Adam 1e-3, ν θ γ at 5e-4). About 2 minutes on
    # 2 CPU cores; the loss was 0.03 at step 600 when written (baseline 0.173)
    run = fit_recorded(
        tmp_path,
        monkeypatch,
        [
            "--model.family",
            "lru",
            "--model.hidden_size",
            "32",
            "--model.num_layers",
            "2",
            "--model.family_args",
            "{state_size: 32, r_min: 0.9, r_max: 0.999}",
            "--data",
            "datamodules.CopyingTask",
            "--data.seq_len",
            "100",
            "--data.batch_size",
            "20",
            "--data.val_size",
            "200",
            "--trainer.max_steps",
            "600",
            "--trainer.val_check_interval",
            "200",
        ],
    )
    expected = 10 * math.log(8) / 120  # log, product and quotient in float64: three roundings
    assert abs(run.baseline - expected) <= roundoff(torch.float64, n=3, scale=expected)
    assert run.best < 0.5 * run.baseline
