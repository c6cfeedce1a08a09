"""The hand-written BPTT of the modReLU recurrence against autograd and finite differences."""

import torch
from finite_differences import assert_gradients_match_finite_differences
from tolerances import close, norm

from ortholab.models.recurrence import modrelu_recurrence, modrelu_recurrence_reference

# BPTT over T = 25 steps through n = 7 units, and the sum over T and B = 4 that forms a weight's gradient:
# (n + B) T eps, relative to each gradient's norm
GRADIENT_OPS = (7 + 4) * 25


def _inputs(dtype, seed=0, t=25, b=4, n=7):
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(t, b, n, generator=g, dtype=dtype)
    w = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=dtype))[0]
    bias = (torch.rand(n, generator=g, dtype=dtype) - 0.5) * 0.4  # mixed signs: some units cut off
    h0 = torch.randn(b, n, generator=g, dtype=dtype)
    return [x.requires_grad_() for x in (u, w, bias, h0)]


def test_matches_plain_autograd():
    fused, reference = _inputs(torch.float64), _inputs(torch.float64)
    probe = torch.randn(25, 4, 7, dtype=torch.float64)
    (modrelu_recurrence(*fused) * probe).sum().backward()
    (modrelu_recurrence_reference(*reference) * probe).sum().backward()
    torch.testing.assert_close(modrelu_recurrence(*fused), modrelu_recurrence_reference(*reference))
    for a, b in zip(fused, reference):
        torch.testing.assert_close(a.grad, b.grad, **close(torch.float64, GRADIENT_OPS, norm(b.grad)))
    assert (modrelu_recurrence(*fused) == 0).any()  # the cut-off branch was exercised


def test_gradients_match_finite_differences():
    # derived bound (tests/finite_differences.py), not gradcheck's default rtol 1e-3: T = 15 steps of n = 7 units
    assert_gradients_match_finite_differences(
        modrelu_recurrence, _inputs(torch.float64, seed=1, t=15), ops=(7 + 4) * 15
    )


def test_offsets_carry_the_total_hidden_state_gradient():
    fused, reference = _inputs(torch.float64, seed=2), _inputs(torch.float64, seed=2)
    offsets = [torch.randn(25, 4, 7, dtype=torch.float64).mul_(0.1).requires_grad_() for _ in range(2)]
    with torch.no_grad():
        offsets[1].copy_(offsets[0])
    probe = torch.randn(25, 4, 7, dtype=torch.float64)
    (modrelu_recurrence(*fused, offsets[0]) * probe).sum().backward()
    (modrelu_recurrence_reference(*reference, offsets[1]) * probe).sum().backward()
    torch.testing.assert_close(
        offsets[0].grad, offsets[1].grad, **close(torch.float64, GRADIENT_OPS, norm(offsets[1].grad))
    )
    for a, b in zip(fused, reference):
        torch.testing.assert_close(a.grad, b.grad, **close(torch.float64, GRADIENT_OPS, norm(b.grad)))
    assert_gradients_match_finite_differences(
        modrelu_recurrence, [*_inputs(torch.float64, seed=3, t=10), offsets[0][:10].detach()], ops=(7 + 4) * 10
    )
