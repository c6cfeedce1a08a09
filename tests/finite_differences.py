"""Gradients against central finite differences in float64, with a single backward pass per graph.

torch.autograd.gradcheck backpropagates through one graph many times; the uRNN/EURNN recurrence writes its
gradients over the pre-activations it saved and so backpropagates once per forward. This check takes the
gradient of <v, f(x)> once (v random) and compares its projection on directions d (random ones, and each input
alone) with the central difference <v, f(x + eps d) - f(x - eps d)> / 2 eps.

Its error is round-off plus truncation. <v, f> sums f.numel() products, and each entry of f carries the
round-off of the `ops` operations it accumulates (the caller's count: units times steps, and any sum f takes):
(f.numel() + ops) eps sum |v f|, which the difference divides by eps. The truncation eps^2 <v, f'''> / 6 is
measured: the difference at 2 eps minus the one at eps is 3 times it (Richardson), and at least the error where a
kink (a ReLU's) lies within the step.
"""

import torch
from tolerances import roundoff


def assert_gradients_match_finite_differences(
    f, inputs, *, ops: int, directions: int = 8, eps: float = 1e-6, seed: int = 0
) -> None:
    g = torch.Generator().manual_seed(seed)
    inputs = [x.detach().clone().requires_grad_() for x in inputs]
    assert all(x.dtype == torch.float64 for x in inputs), "finite differences need float64 inputs"
    out = f(*inputs)
    v = torch.randn(out.shape, generator=g, dtype=out.dtype)
    grads = torch.autograd.grad((out * v).sum(), inputs, allow_unused=True)
    grads = [torch.zeros_like(x) if grad is None else grad for x, grad in zip(inputs, grads)]
    probes = [[torch.randn(x.shape, generator=g, dtype=x.dtype) for x in inputs] for _ in range(directions)]
    probes += [
        [
            torch.randn(x.shape, generator=g, dtype=x.dtype) if i == j else torch.zeros_like(x)
            for j, x in enumerate(inputs)
        ]
        for i in range(len(inputs))
    ]
    rounding = roundoff(torch.float64, n=out.numel() + ops, scale=(v * out).abs().sum().item() / eps)

    def difference(d, step):
        plus = f(*[x + step * dx for x, dx in zip(inputs, d)])
        minus = f(*[x - step * dx for x, dx in zip(inputs, d)])
        return ((plus - minus) * v).sum() / (2 * step)

    with torch.no_grad():
        for d in probes:
            numeric = difference(d, eps)
            truncation = (difference(d, 2 * eps) - numeric).abs().item()  # 3 x the truncation, + round-off
            analytic = sum((grad * dx).sum() for grad, dx in zip(grads, d))
            torch.testing.assert_close(analytic, numeric, rtol=0, atol=rounding + truncation)
