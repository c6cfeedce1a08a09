"""The scaled Cayley transform and scoRNN against their mathematics (scoRNN Sections 3-4)."""

import math

import pytest
import torch
from finite_differences import assert_gradients_match_finite_differences
from tolerances import close, cond, norm, roundoff

from ortholab.errors import ConfigError
from ortholab.models.cayley import (
    ScaledCayley,
    block_angles,
    cayley_gradient,
    scaled_cayley,
    skew_from_upper,
    upper_from_skew,
)
from ortholab.models.scornn import ScoRNN


def orthogonality_error(w: torch.Tensor) -> float:
    eye = torch.eye(w.shape[0], dtype=w.dtype)
    return torch.linalg.matrix_norm(w.T @ w - eye).item()  # Frobenius norm


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_orthogonal_to_round_off_after_many_updates(dtype):
    torch.manual_seed(0)
    cayley = ScaledCayley(64, num_negative=20).to(dtype)
    with torch.no_grad():
        for _ in range(1000):  # random steps of the size RMSProp takes on A
            cayley.upper.add_(torch.randn_like(cayley.upper), alpha=1e-2)
    w = cayley()
    a = cayley.skew().detach()
    assert a.abs().max() > 0.1  # A moved far from its initialisation
    # n = 64: the solve with I + A is backward stable, so W errs by n eps cond(I + A) (cond ~ 5 here)
    assert orthogonality_error(w) <= roundoff(dtype, n=64, scale=cond(torch.eye(64, dtype=dtype) + a))


def test_skew_symmetric_from_upper_triangle():
    upper = torch.randn(6 * 5 // 2, dtype=torch.float64)
    a = skew_from_upper(upper, 6)
    torch.testing.assert_close(a, -a.T)
    torch.testing.assert_close(upper_from_skew(a), upper)


def test_d_holds_rho_minus_ones_at_the_end():
    layer = ScoRNN(3, 190, rho=0.5)
    d = layer.cayley.d
    assert layer.rho == 95 and int((d == -1).sum()) == 95 and bool((d[-95:] == -1).all())
    assert int((ScoRNN(3, 10, rho=3).cayley.d == -1).sum()) == 3


def test_initial_eigenvalues_where_the_paper_puts_them():
    # Cayley(A0) has eigenvalues e^{+-i t_j}, t_j ~ U[0, pi/2]; D's -1 entries (whole blocks) reflect them.
    n, rho = 20, 6
    cayley = ScaledCayley(n, num_negative=rho, generator=torch.Generator().manual_seed(3)).double()
    angles = block_angles(n, generator=torch.Generator().manual_seed(3))
    eig = torch.linalg.eigvals(cayley())
    torch.testing.assert_close(eig.abs(), torch.ones(n, dtype=torch.float64))
    kept = torch.cat([angles[: (n - rho) // 2], -angles[: (n - rho) // 2]])
    flipped = torch.cat([math.pi - angles[(n - rho) // 2 :], -(math.pi - angles[(n - rho) // 2 :])])
    expected = torch.sort(torch.cat([kept, flipped])).values
    # A0 is stored in float32 (the module's dtype) and then cast: s = tan(t/2) rounds by eps32/2 relative, which
    # moves t = 2 atan(s) by s/(1 + s^2) eps32 <= eps32/2; float64's eigenvalue error (n eps64) is far below
    torch.testing.assert_close(torch.sort(eig.angle()).values, expected, atol=roundoff(torch.float32), rtol=0)
    assert int((eig.real < 0).sum()) == rho


def test_set_matrix_is_a_right_inverse():
    source = ScaledCayley(12, num_negative=4, generator=torch.Generator().manual_seed(1)).double()
    target = ScaledCayley(12, num_negative=4, init="zeros").double()
    target.set_matrix(source())
    torch.testing.assert_close(target(), source())


def _loss_of_w(layer: ScoRNN, w: torch.Tensor, x: torch.Tensor, probe: torch.Tensor) -> torch.Tensor:
    from ortholab.models.recurrence import modrelu_recurrence

    u = x.transpose(0, 1) @ layer.input_weight.T
    h = modrelu_recurrence(u, w, layer.bias, layer.h0.expand(x.shape[0], -1))
    return (h * probe).sum()


def test_theorem_3_2_gradient_is_what_training_uses():
    torch.manual_seed(0)
    layer = ScoRNN(3, 16, rho=4).double()
    with torch.no_grad():
        layer.bias.uniform_(-0.1, 0.1)
    x, probe = torch.randn(5, 30, 3, dtype=torch.float64), torch.randn(30, 5, 16, dtype=torch.float64)
    w = layer.cayley()
    w.retain_grad()
    _loss_of_w(layer, w, x, probe).backward()
    closed_form = cayley_gradient(layer.cayley.skew().detach(), w.detach(), layer.cayley.d.double(), w.grad)
    torch.testing.assert_close(closed_form, -closed_form.T)
    # one gradient from one dL/dW, two formulas: n = 16, scale ||dL/dA|| cond(I + A) (the solve with I + A^T)
    scale = norm(closed_form) * cond(torch.eye(16, dtype=torch.float64) + layer.cayley.skew().detach())
    torch.testing.assert_close(layer.cayley.upper.grad, upper_from_skew(closed_form), **close(torch.float64, 16, scale))


def test_scornn_gradients_match_finite_differences():
    torch.manual_seed(1)
    layer = ScoRNN(2, 6, rho=2).double()
    with torch.no_grad():
        layer.bias.uniform_(-0.05, 0.05)
        layer.input_weight.mul_(50)
    x = torch.randn(3, 12, 2, dtype=torch.float64)

    def loss(upper, input_weight, bias):
        layer.cayley.upper.data, layer.input_weight.data, layer.bias.data = upper, input_weight, bias
        from ortholab.models.cayley import scaled_cayley
        from ortholab.models.recurrence import modrelu_recurrence

        w = scaled_cayley(skew_from_upper(upper, 6), layer.cayley.d.double())
        h = modrelu_recurrence(x.transpose(0, 1) @ input_weight.T, w, bias, torch.zeros(3, 6, dtype=torch.float64))
        return (h**2).sum()

    args = [p.detach() for p in (layer.cayley.upper, layer.input_weight, layer.bias)]
    # derived bound (tests/finite_differences.py), not gradcheck's rtol 1e-3: the loss sums 3 x 12 x 6 squares of
    # states, each T = 12 steps through W (n = 6), W's entries from a 6 x 6 solve (n = 6) and the input (2)
    assert_gradients_match_finite_differences(loss, args, ops=3 * 12 * 6 + 12 * (6 + 6 + 2))


def test_scornn_rejects_rho_larger_than_n():
    with pytest.raises(ConfigError, match=r"rho = 300 .*hidden_size = 190"):
        ScoRNN(3, 190, rho=300)
    with pytest.raises(ConfigError, match="rho"):
        ScoRNN(3, 190, rho=1.5)


def test_scaled_cayley_matches_torch_cayley():
    # scoRNN(A) = torch's Cayley map (I + X/2)(I - X/2)^-1 at X = -2A, times D (ecosystem facts F)
    a = skew_from_upper(torch.randn(10 * 9 // 2, dtype=torch.float64), 10)
    d = torch.tensor([1.0] * 7 + [-1.0] * 3, dtype=torch.float64)
    eye = torch.eye(10, dtype=torch.float64)
    torch_cayley = torch.linalg.solve(eye + a, eye - a)  # (I - A)(I + A)^-1 = (I + A)^-1 (I - A): they commute
    torch.testing.assert_close(scaled_cayley(a, d), torch_cayley * d)
