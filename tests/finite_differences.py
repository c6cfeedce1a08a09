"""Gradients against central finite differences in float64, with a single backward pass per graph.

torch.autograd.gradcheck backpropagates through one graph many times; the uRNN/EURNN recurrence writes its
gradients over the pre-activations it saved and so backpropagates once per forward. This check takes the
gradient of <v, f(x)> once (v random) and compares its projection on directions d (random ones, and each input
alone) with the central difference <v, f(x + eps d) - f(x - eps d)> / 2 eps.
"""
import torch


def assert_gradients_match_finite_differences(f, inputs, directions: int = 8, eps: float = 1e-6,
                                              rtol: float = 1e-6, atol: float = 1e-9, seed: int = 0) -> None:
    g = torch.Generator().manual_seed(seed)
    inputs = [x.detach().clone().requires_grad_() for x in inputs]
    assert all(x.dtype == torch.float64 for x in inputs), "finite differences need float64 inputs"
    out = f(*inputs)
    v = torch.randn(out.shape, generator=g, dtype=out.dtype)
    grads = torch.autograd.grad((out * v).sum(), inputs, allow_unused=True)
    grads = [torch.zeros_like(x) if grad is None else grad for x, grad in zip(inputs, grads)]
    probes = [[torch.randn(x.shape, generator=g, dtype=x.dtype) for x in inputs] for _ in range(directions)]
    probes += [[torch.randn(x.shape, generator=g, dtype=x.dtype) if i == j else torch.zeros_like(x)
                for j, x in enumerate(inputs)] for i in range(len(inputs))]
    with torch.no_grad():
        for d in probes:
            plus = f(*[x + eps * dx for x, dx in zip(inputs, d)])
            minus = f(*[x - eps * dx for x, dx in zip(inputs, d)])
            numeric = ((plus - minus) * v).sum() / (2 * eps)
            analytic = sum((grad * dx).sum() for grad, dx in zip(grads, d))
            torch.testing.assert_close(analytic, numeric, rtol=rtol, atol=atol)
