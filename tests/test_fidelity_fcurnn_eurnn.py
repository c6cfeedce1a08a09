"""Faithfulness to the authors' code of three details (issue 23): the full-capacity uRNN's Stiefel step
(stwisdom/urnn @ 9f8b679), EURNN's modReLU (jingli9111/EUNN-tensorflow) and the TF1 optimizers' refusals.

Each reference below is a transcription, in torch and float64, of the authors' update or function; the comments
cite the file and lines it follows.
"""

import math
from functools import partial
from pathlib import Path

import pytest
import torch
import yaml
from tolerances import close, norm, roundoff

from ortholab.models import FAMILIES, ConfigError
from ortholab.models.complex_recurrence import SCURNN_MODRELU, ModReLU, eunn_modrelu
from ortholab.models.eurnn import EURNN
from ortholab.models.fcurnn import FullCapacityURNN, haar_unitary
from ortholab.models.givens_kernels import givens_recurrence_features
from ortholab.models.operator_recurrence import operator_recurrence_features
from ortholab.models.optimizers import AdagradTF, RMSpropTF, build_optimizer, check_optimizer_spec
from ortholab.models.stiefel import StiefelCayley

F64 = torch.float64
REPO = Path(__file__).resolve().parents[1]


# the full-capacity uRNN's Stiefel step (stwisdom/urnn) ------------------------------------------------------


def augmented(w: torch.Tensor) -> torch.Tensor:
    """The code's real 2n x 2n matrix of W (models.py:568-569, h_row @ Waug): [[Re W^T, Im W^T], [-Im W^T, Re W^T]]."""
    re, im = w.real.T, w.imag.T
    return torch.cat([torch.cat([re, im], 1), torch.cat([-im, re], 1)], 0)


def code_forward(waug, v, bias, h0, x):
    """models.py:746-791 for Wimpl 'full': lin = h_prev @ Waug + x_t @ V, modulus = sqrt(1e-5 + re^2 + im^2),
    rescale = max(modulus + b, 0) / (modulus + 1e-5), h_t = lin * rescale; all states (B, T, 2n)."""
    h, states = h0, []
    for x_t in x.unbind(1):
        lin = h @ waug + x_t @ v
        re, im = lin.chunk(2, dim=1)
        modulus = torch.sqrt(1e-5 + re**2 + im**2).repeat(1, 2)  # the code's lin[:, swap_re_im] pairs units
        h = lin * (torch.clamp(modulus + bias.repeat(2), min=0.0) / (modulus + 1e-5))
        states.append(h)
    return torch.stack(states, 1)


def code_natgrad_step(waug, grad, lr, rms=None, rho=0.9, epsilon=1e-8):
    """custom_optimizers.py:49-85 (RMSprop_and_natGrad, a `natGrad..._unitaryAug` parameter): with natGradRMS the
    whole augmented gradient is scaled by its running RMS (49-54); then X = A + jB and G = C + jD from the top
    blocks only (63-67), GX^H = CA^T + DB^T + j(DA^T - CB^T), S = GX^H - (GX^H)^H (71-73),
    X <- inv(I + lr/2 S) (I - lr/2 S) X (74-80), back to the augmented form (83-85). Also optimizations.py:35-62.
    Returns the new Waug, X_new and cond(I + lr/2 S)."""
    if rms is not None:
        rms.mul_(rho).add_((1 - rho) * grad**2)
        grad = grad / (torch.sqrt(rms) + epsilon)
    n = waug.shape[0] // 2
    a, b = waug[:n, :n].T, waug[:n, n:].T
    c, d = grad[:n, :n].T, grad[:n, n:].T
    gxh = torch.complex(c @ a.T + d @ b.T, d @ a.T - c @ b.T)
    skew = gxh - gxh.conj().T
    eye = torch.eye(n, dtype=skew.dtype)
    x_new = torch.linalg.inv(eye + lr / 2 * skew) @ (eye - lr / 2 * skew) @ torch.complex(a, b)
    return augmented(x_new), x_new, float(torch.linalg.cond(eye + lr / 2 * skew))


def full_gradient_blocks(grad: torch.Tensor) -> torch.Tensor:
    """The augmented gradient whose top blocks hold dL/dW: C = (G11 + G22)^T, D = (G12 - G21)^T (OrthoLab's 'full')."""
    n = grad.shape[0] // 2
    top = torch.cat([grad[:n, :n] + grad[n:, n:], grad[:n, n:] - grad[n:, :n]], 1)
    return torch.cat([top, torch.zeros_like(top)], 0)


def _fcurnn(w_gradient: str, n=5, m=3, seed=0) -> FullCapacityURNN:
    torch.manual_seed(seed)
    layer = FullCapacityURNN(m, n, w_gradient=w_gradient).double()
    with torch.no_grad():  # a W unitary in float64
        w0 = haar_unitary(n, torch.Generator().manual_seed(seed))
        layer.w_real.copy_(w0.real)
        layer.w_imag.copy_(w0.imag)
    return layer


def _batches(steps, batch=4, time=7, m=3, n=5):
    g = torch.Generator().manual_seed(11)
    return [
        (torch.randn(batch, time, m, generator=g, dtype=F64), torch.randn(batch, time, 2 * n, generator=g, dtype=F64))
        for _ in range(steps)
    ]


def _ortholab_trajectory(layer, batches, lr, rms_normalize=False) -> list[torch.Tensor]:
    optimizer = StiefelCayley([layer.w_real, layer.w_imag], lr=lr, rms_normalize=rms_normalize)
    trajectory = []
    for x, probe in batches:
        optimizer.zero_grad()
        (layer(x) * probe).sum().backward()
        optimizer.step()
        trajectory.append(layer.recurrent_matrix().detach().clone())
    return trajectory


def _code_trajectory(layer, batches, lr, rms_normalize=False, blocks=lambda grad: grad):
    waug = augmented(layer.recurrent_matrix().detach())
    v, bias, h0 = (p.detach() for p in (layer.input_weight.T, layer.bias, layer.h0))
    rms = torch.zeros_like(waug) if rms_normalize else None  # Keras K.zeros accumulators
    trajectory, conds = [], []
    for x, probe in batches:
        leaf = waug.clone().requires_grad_()
        loss = (code_forward(leaf, v, bias, h0.expand(x.shape[0], -1), x) * probe).sum()
        (grad,) = torch.autograd.grad(loss, leaf)
        waug, x_new, cond = code_natgrad_step(waug, blocks(grad), lr, rms)
        trajectory.append(x_new)
        conds.append(cond)
    return trajectory, conds


@pytest.mark.parametrize("rms_normalize", [False, True], ids=["plain (memory_problem)", "natGradRMS (MNIST)"])
def test_the_default_step_is_the_codes_over_several_steps(rms_normalize):
    # lr/2 ||S||_2 ~ 0.3: each step is near the identity map, so the two computations' round-off adds over the
    # steps (at lr = 0.1, lr/2 ||S||_2 ~ 3.5 and the trajectory's sensitivity to W compounds it ~5x a step)
    steps, lr, n, time = 5, 0.01, 5, 7
    batches = _batches(steps)
    start = _fcurnn("top_blocks").recurrent_matrix().detach().clone()
    ours = _ortholab_trajectory(_fcurnn("top_blocks"), batches, lr, rms_normalize)
    theirs, conds = _code_trajectory(_fcurnn("top_blocks"), batches, lr, rms_normalize)
    for k, (a, b) in enumerate(zip(ours, theirs)):
        # n = steps so far x time steps x 2n (the inner dimension of each product), scale = ||W||_F = sqrt(n)
        torch.testing.assert_close(a, b, **close(F64, (k + 1) * time * 2 * n, math.sqrt(n)), msg=f"step {k + 1}")
    assert torch.linalg.matrix_norm(ours[-1] - start) > 0.1  # W moved: the comparison is not of a fixed point
    # unitary to round-off: each Cayley solve errs by ~n eps cond(I + lr/2 S) per entry, over ||W||_F = sqrt(n),
    # twice in W^H W; n = steps x n, scale = sqrt(n) x the worst cond, c = 2; plus the start's own error
    eye = torch.eye(n, dtype=start.dtype)
    drift = torch.linalg.matrix_norm(ours[-1].mH @ ours[-1] - eye).item()
    initial = torch.linalg.matrix_norm(start.mH @ start - eye).item()
    assert drift <= initial + roundoff(F64, steps * n, math.sqrt(n) * max(conds), c=2)


def test_the_full_gradient_option_is_the_previous_step_and_another_trajectory():
    steps, lr, n, time = 5, 0.01, 5, 7  # lr as above
    batches = _batches(steps)
    full = _ortholab_trajectory(_fcurnn("full"), batches, lr)
    theirs, _ = _code_trajectory(_fcurnn("full"), batches, lr, blocks=full_gradient_blocks)
    for k, (a, b) in enumerate(zip(full, theirs)):
        # n = steps so far x time steps x 2n, scale = ||W||_F = sqrt(n), as above
        torch.testing.assert_close(a, b, **close(F64, (k + 1) * time * 2 * n, math.sqrt(n)), msg=f"step {k + 1}")
    code = _ortholab_trajectory(_fcurnn("top_blocks"), batches, lr)
    # far apart compared with the bound above (n = steps x time x 2n, scale = sqrt(n)): the option matters
    assert torch.linalg.matrix_norm(full[-1] - code[-1]) > 1e6 * roundoff(F64, steps * time * 2 * n, math.sqrt(n))


def test_the_top_blocks_are_the_gradient_through_re_h():
    # G = sum_t delta_t Re(h_{t-1})^T = (dL/dW + sum_t delta_t h_{t-1}^T) / 2 (models/fcurnn.py), checked from
    # the two gradients the recurrence gives and the code's augmented gradient
    x, probe = _batches(1)[0]
    grads = {}
    for mode in ("top_blocks", "full"):
        layer = _fcurnn(mode)
        (layer(x) * probe).sum().backward()
        grads[mode] = torch.complex(layer.w_real.grad, layer.w_imag.grad)
    layer = _fcurnn("full")
    leaf = augmented(layer.recurrent_matrix().detach()).requires_grad_()
    loss = (
        code_forward(
            leaf, layer.input_weight.detach().T, layer.bias.detach(), layer.h0.detach().expand(x.shape[0], -1), x
        )
        * probe
    ).sum()
    (grad,) = torch.autograd.grad(loss, leaf)
    n = layer.hidden_size
    top = torch.complex(grad[:n, :n].T, grad[:n, n:].T)
    full = full_gradient_blocks(grad)
    # n = time steps x 2n (the sums over steps of products), scale = the gradient's norm
    torch.testing.assert_close(grads["top_blocks"], top, **close(F64, 7 * 2 * n, norm(top)))
    torch.testing.assert_close(
        grads["full"], torch.complex(full[:n, :n].T, full[:n, n:].T), **close(F64, 7 * 2 * n, norm(grads["full"]))
    )
    assert torch.linalg.matrix_norm(grads["full"] - grads["top_blocks"]) > 0.1 * norm(grads["full"])


def test_w_gradient_is_a_family_option_naming_its_values():
    assert FullCapacityURNN(2, 4).w_gradient == "top_blocks"  # the code's step by default
    with pytest.raises(ConfigError, match=r"model\.family_args\.w_gradient = 'exact'.*'top_blocks'.*'full'"):
        FullCapacityURNN(2, 4, w_gradient="exact")


@pytest.mark.parametrize(
    "config",
    sorted((REPO / "configs" / "papers").glob("fcurnn_*.yaml"))
    + sorted((REPO / "configs" / "papers").glob("eurnn_*.yaml")),
    ids=lambda p: p.stem,
)
def test_paper_configs_build_their_layer(config):
    model = yaml.safe_load(config.read_text())["model"]
    layer = FAMILIES[model["family"]](1, model["hidden_size"], **(model.get("family_args") or {}))
    if model["family"] == "fcurnn":
        assert layer.w_gradient == "top_blocks"
        for name, spec in model["optimizers"].items():
            check_optimizer_spec(spec, f"model.optimizers.{name}")
    else:
        assert layer.modrelu == eunn_modrelu(1e-5)


# EURNN's modReLU (jingli9111/EUNN-tensorflow) --------------------------------------------------------------


def code_modrelu(z: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    """eunn.py:11-26 (cplex): norm = |z| + eps, magnitude = relu(norm + bias), phase = z / norm; phase * magnitude.
    eps = 0.00001 until commit ba78a68 (2018-11-20; 1e-3), 0.01 from 4ef928d (the same day) to the head 33d749d."""
    modulus = torch.sqrt(z.real**2 + z.imag**2) + eps
    return (z / modulus) * torch.relu(modulus + bias)


def code_eunn_features(layer: EURNN, x: torch.Tensor, eps: float) -> torch.Tensor:
    """EUNNCell.__call__ (eunn.py:306-334): h_t = modrelu(x_t U + W h_{t-1}, b) from h_0 = 0, U = U_re + i U_im;
    W applied as the dense matrix of the layer's rotations; the states as interleaved real features."""
    n = layer.hidden_size
    w = layer.recurrent_matrix()
    u_matrix = torch.complex(layer.input_weight[:n], layer.input_weight[n:])  # [Re U; Im U] (2n, m)
    h, states = torch.zeros(x.shape[0], n, dtype=w.dtype), []
    for x_t in x.unbind(1):
        h = code_modrelu(x_t.to(w.dtype) @ u_matrix.T + h @ w.T, layer.bias, eps)
        states.append(h)
    return torch.view_as_real(torch.stack(states, 1)).flatten(-2)


def _eurnn(eps, path, monkeypatch, n=6, m=3):
    torch.manual_seed(7)
    recurrence = "dense" if path == "dense" else "layers"
    layer = EURNN(m, n, style="tunable", capacity=3, recurrence=recurrence, modrelu_eps=eps).double()
    scale = 30 * eps  # |z| about eps .. 100 eps: where |z| + eps and sqrt(|z|^2 + eps) part
    with torch.no_grad():
        layer.input_weight.uniform_(-scale, scale)
        layer.bias.uniform_(-2 * scale, 0.0)  # b <= 0: some units cut off, and sigma is 1-Lipschitz
    if path == "layers (torch)":  # the BPTT the layer takes off the CPU
        monkeypatch.setattr("ortholab.models.eurnn.supported", lambda u: False)
    expected_recurrence = {
        "layers (compiled)": givens_recurrence_features,
        "layers (torch)": operator_recurrence_features,
    }.get(path)
    if expected_recurrence is not None:
        chosen = layer.recurrence_for(torch.zeros(1, dtype=torch.complex128))
        assert chosen.func is expected_recurrence and chosen.keywords["modrelu"] == eunn_modrelu(eps)
    return layer


@pytest.mark.parametrize("path", ["dense", "layers (compiled)", "layers (torch)"])
@pytest.mark.parametrize("eps", [1e-5, 1e-2], ids=["1e-5 (2018)", "1e-2 (head)"])
def test_eurnn_modrelu_is_the_codes_on_every_path(eps, path, monkeypatch):
    layer = _eurnn(eps, path, monkeypatch)
    x = torch.randn(4, 8, 3, dtype=F64, generator=torch.Generator().manual_seed(3))
    out = layer(x)
    expected = code_eunn_features(layer, x, eps)
    n, time = layer.hidden_size, x.shape[1]
    # n = time steps x hidden size (each step's product with W), scale = the states' norm (sigma 1-Lipschitz, b <= 0)
    torch.testing.assert_close(out, expected, **close(F64, time * n, norm(expected)))
    assert (out == 0).any() and (out != 0).any()  # units on both sides of the ReLU
    probe = torch.randn(out.shape, dtype=F64, generator=torch.Generator().manual_seed(4))
    ours = torch.autograd.grad((out * probe).sum(), list(layer.parameters()))
    theirs = torch.autograd.grad((expected * probe).sum(), list(layer.parameters()))
    for (name, _), a, b in zip(layer.named_parameters(), ours, theirs):
        # n = time steps x hidden size, forward and back; scale = that gradient's norm
        torch.testing.assert_close(a, b, **close(F64, 2 * time * n, norm(b)), msg=name)
    # and the function is not scuRNN's eq. (5) with the same eps: at these |z| the two differ far beyond round-off
    with torch.no_grad():
        z = torch.complex(torch.randn(50, dtype=F64), torch.randn(50, dtype=F64)) * 10 * eps
        bias = -torch.rand(50, dtype=F64) * 5 * eps
        gap = (ModReLU(eps, 0.0, eps)(z, bias) - code_modrelu(z, bias, eps)).abs().max().item()
    assert gap > 1e6 * roundoff(F64, 1, norm(z))  # n = 1 (elementwise), scale = |z|


def test_eurnn_modrelu_gradient_at_zero_is_finite():
    # h_0 = 0 and a zero input give z = 0 exactly at the first step, where |z| has no derivative: the code's
    # TF gradient of |z| there is 0 (sign(0) = 0); the fused paths take the z z^T term's limit, 0, not NaN
    layer = EURNN(2, 6, recurrence="layers").double()
    with torch.no_grad():
        layer.bias.copy_(torch.tensor([-4e-6, -1e-6, 0.0, 1e-6, 5e-3, -5e-3]))  # both signs: s'(m) = -b / (m + eps)^2
    x = torch.zeros(2, 5, 2, dtype=F64)
    x[:, 3:] = 1.0
    for recurrence in (layer.recurrence_for, lambda u: partial(operator_recurrence_features, modrelu=layer.modrelu)):
        layer.zero_grad()
        layer.recurrence_for = recurrence
        layer(x).square().sum().backward()
        assert all(torch.isfinite(p.grad).all() for p in layer.parameters())
    dense = EURNN(2, 6, recurrence="dense").double()
    dense.load_state_dict(layer.state_dict())
    dense(x).square().sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in dense.parameters())


def test_modrelu_eps_is_a_family_option():
    assert EURNN(2, 4).modrelu == eunn_modrelu(1e-5) == ModReLU(0.0, 1e-5, 1e-5)  # the 2018 code's
    assert EURNN(2, 4, modrelu_eps=0.01).modrelu == ModReLU(0.0, 0.01, 0.01)
    assert SCURNN_MODRELU == ModReLU(1e-5, 0.0, 1e-5)  # the other complex families keep eq. (5)
    for bad in (0, -1e-5, "1e-5", True):
        with pytest.raises(ConfigError, match=r"model\.family_args\.modrelu_eps = .* must be a positive number"):
            EURNN(2, 4, modrelu_eps=bad)


# TF1's refusals (adagrad_tf, rmsprop_tf) ---------------------------------------------------------------------


def _step_at_zero_gradient(optimizer_class, **options) -> torch.Tensor:
    p = torch.nn.Parameter(torch.ones(3))
    p.grad = torch.tensor([0.0, 1.0, -2.0])
    optimizer_class([p], lr=0.1, **options).step()
    return p.detach()


def test_adagrad_tf_refuses_a_non_positive_initial_accumulator():
    # why: from 0 the accumulator of a zero gradient stays 0, and lr g / sqrt(acc) is 0/0
    assert torch.isnan(_step_at_zero_gradient(AdagradTF, initial_accumulator=0.0)[0])
    assert torch.isfinite(_step_at_zero_gradient(AdagradTF, initial_accumulator=0.1)).all()
    # TF1's AdagradOptimizer.__init__ (tensorflow/python/training/adagrad.py) raises for
    # initial_accumulator_value <= 0.0; here one ConfigError line names the config key and the fix
    for bad in (0, 0.0, -0.1):
        with pytest.raises(
            ConfigError,
            match=r"^model\.optimizers\.scaling\.initial_accumulator = .* must be a "
            r"positive number.*TF1's default 0\.1$",
        ):
            check_optimizer_spec(
                {"name": "adagrad_tf", "lr": 1e-3, "initial_accumulator": bad}, "model.optimizers.scaling"
            )
    p = torch.nn.Parameter(torch.ones(2))
    with pytest.raises(ConfigError, match=r"model\.optimizers\.scaling\.initial_accumulator"):
        build_optimizer([p], {"name": "adagrad_tf", "initial_accumulator": 0}, "model.optimizers.scaling")
    check_optimizer_spec({"name": "adagrad_tf", "lr": 1e-3}, "model.optimizers.scaling")  # TF1's 0.1 default


def test_rmsprop_tf_refuses_what_makes_its_step_nan():
    # TF1's RMSPropOptimizer (tensorflow/python/training/rmsprop.py) checks no value: its accumulator starts at
    # 1.0 (ones_initializer). rmsprop_tf's start is free (the Theano code's 1e-3, the numpy code's 0), so the
    # 0/0 of a zero gradient is reachable: from 0 with eps = 0
    assert torch.isnan(_step_at_zero_gradient(RMSpropTF, initial_accumulator=0.0, eps=0.0)[0])
    for options in ({"initial_accumulator": 1e-3, "eps": 0.0}, {"initial_accumulator": 0.0, "eps": 1e-8}, {}):
        assert torch.isfinite(_step_at_zero_gradient(RMSpropTF, **options)).all()  # the papers' codes' pairs
        check_optimizer_spec({"name": "rmsprop_tf", **options}, "model.optimizers.recurrent")
    with pytest.raises(
        ConfigError,
        match=r"^model\.optimizers\.recurrent\.initial_accumulator = 0 with "
        r"model\.optimizers\.recurrent\.eps = 0: .*make one of them positive",
    ):
        check_optimizer_spec(
            {"name": "rmsprop_tf", "initial_accumulator": 0.0, "eps": 0.0}, "model.optimizers.recurrent"
        )
    for key in ("initial_accumulator", "eps"):
        with pytest.raises(ConfigError, match=rf"^model\.optimizers\.recurrent\.{key} = -1\.0 must be a number >= 0"):
            check_optimizer_spec({"name": "rmsprop_tf", key: -1.0}, "model.optimizers.recurrent")
