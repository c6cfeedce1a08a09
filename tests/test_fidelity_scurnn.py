"""scuRNN trained by OrthoLab against a transcription of the official code's training, several steps in float64.

The official code (github.com/Gayan225/scuRNN at f6ff975, TF1 + numpy) multiplies row vectors: z_t = x_t U + h_{t-1} W
with W = (I + A)^-1 (I - A) D, A stepped by its own numpy RMSProp on Theorem 2's dL/dconj(A), theta by TF's
optimizer on Theorem 2's dL/dtheta, the rest by TF's optimizer. Below, `code_*` functions are a transcription of
scuRNN.py and scuRNN_mnist.py (cited line by line), written in torch; OrthoLab's side is its RecurrentModule with the
optimizers its configs name. The default d_side 'left' (W = D K^T on column vectors) must give the code's
trajectory, theta's gradients included; 'right' (W = K D) must not, and must still be the former behaviour.
"""

import pytest
import torch
from devices import DEVICES
from tolerances import close, roundoff

from ortholab.datamodules.spec import TaskSpec
from ortholab.models import ConfigError
from ortholab.models.complex_recurrence import complex_modrelu_recurrence
from ortholab.models.scurnn import ScuRNN
from ortholab.models.unitary import complex_scaled_cayley
from ortholab.training.module import RecurrentModule

F64 = torch.float64
INPUTS, HIDDEN, CLASSES, STEPS_T, BATCH = 3, 6, 4, 12, 5
TRAINING_STEPS = 4
# scuRNN_mnist.py's groups at rates large enough to move in a few steps: A by the code's numpy RMSProp, theta by
# TF Adagrad (the script's default), the rest by TF RMSProp (the paper's choice for copying T=2000 and adding T=750)
LR_A, LR_THETA, LR_OTHER = 1e-2, 5e-2, 1e-2
ORTHOLAB_OPTIMIZERS = {
    "recurrent": {"name": "rmsprop_tf", "lr": LR_A, "initial_accumulator": 0.0, "eps": 1e-8},
    "scaling": {"name": "adagrad_tf", "lr": LR_THETA},
    "other": {"name": "rmsprop_tf", "lr": LR_OTHER},
}


# the official code, transcribed ---------------------------------------------------------------------------------


def code_forward(v: dict, w_row: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Logits of the last step. x: (B, T, m); w_row: the TF variable W = [Re W | Im W], (n, 2n)."""
    n = HIDDEN
    expanded = torch.cat([w_row, torch.cat([-w_row[:, n:], w_row[:, :n]], dim=1)], dim=0)  # scuRNN.py:65-68
    state = v["ho"].expand(x.shape[0], -1)  # scuRNN_mnist.py:132-137: ho (1, 2n) tiled over the batch
    for t in range(x.shape[1]):
        z = x[:, t] @ v["U"] + state @ expanded  # scuRNN.py:71 (Un = U, lines 60-62)
        modulus = torch.sqrt(z[:, :n] ** 2 + z[:, n:] ** 2 + 1e-5)  # scuRNN.py:79
        scale = torch.relu(modulus + v["b"]) / (modulus + 1e-5)  # scuRNN.py:80
        state = z * torch.cat([scale, scale], dim=1)  # scuRNN.py:81-82
    return state @ v["V"] + v["c"]  # scuRNN_mnist.py:143-147: tf.layers.dense on the last output


def code_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """scuRNN_mnist.py:314-315: mean softmax cross-entropy against one-hot labels."""
    return -(torch.log_softmax(logits, dim=1) * torch.nn.functional.one_hot(labels, CLASSES)).sum(1).mean()


def code_w(a: torch.Tensor, theta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(IplusAinv, d, W = IplusAinv (I - A) D): scuRNN_mnist.py:158-163 (make_D), 191-198 (makeW), 416 (lstsq)."""
    eye = torch.eye(HIDDEN, dtype=a.dtype)
    inverse = torch.linalg.solve(eye + a, eye)  # lstsq of a square nonsingular system: the inverse
    d = torch.complex(torch.cos(theta), torch.sin(theta))
    return inverse, d, inverse @ (eye - a) @ torch.diag(d)


def code_theorem2(grad_w_row: torch.Tensor, a: torch.Tensor, theta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(DFA, DFT) from TF's dL/dW: scuRNN_mnist.py:210-216 (Reduce_Matrix), 220-231 (Cayley_Transform_Deriv)."""
    n = HIDDEN
    g = 0.5 * grad_w_row[:, :n] - 0.5j * grad_w_row[:, n:]
    inverse, d, w = code_w(a, theta)
    update = inverse.T @ g @ (torch.diag(d) + w.T)
    dfa = update.T - update.conj()
    k = inverse @ (torch.eye(n, dtype=a.dtype) - a)
    dft = 2 * (1j * torch.diagonal(g.T @ k) * d).real
    return dfa, dft


def code_rmsprop_a(a: torch.Tensor, grad: torch.Tensor, state: dict) -> torch.Tensor:
    """Update_step_A 'rmsprop' (scuRNN_mnist.py:251-256; rho1 0.9, delta 1e-8, r and ri from zero, lines 56-60)."""
    state["r"] = 0.9 * state.get("r", 0.0) + 0.1 * grad.real**2
    state["ri"] = 0.9 * state.get("ri", 0.0) + 0.1 * grad.imag**2
    return a + torch.complex(
        -LR_A * grad.real / torch.sqrt(state["r"] + 1e-8), -LR_A * grad.imag / torch.sqrt(state["ri"] + 1e-8)
    )


def tf_adagrad(value: torch.Tensor, grad: torch.Tensor, state: dict, lr: float) -> torch.Tensor:
    """tf.train.AdagradOptimizer: accumulator from 0.1, += g^2, step lr g / sqrt(accumulator), no epsilon."""
    state["acc"] = state.get("acc", 0.1) + grad**2
    return value - lr * grad / torch.sqrt(state["acc"])


def tf_rmsprop(value: torch.Tensor, grad: torch.Tensor, state: dict, lr: float) -> torch.Tensor:
    """tf.train.RMSPropOptimizer (decay 0.9, momentum 0, eps 1e-10): mean square from 1, step lr g / sqrt(ms + eps)."""
    state["ms"] = 0.9 * state.get("ms", 1.0) + 0.1 * grad**2
    return value - lr * grad / torch.sqrt(state["ms"] + 1e-10)


def code_training(v: dict, a: torch.Tensor, theta: torch.Tensor, batches: list) -> dict:
    """The loop of scuRNN_mnist.py:402-418: one forward/backward, opt1 steps b, U, V, c, ho (line 346), theta by
    opt2 with DFT (line 353), A by Update_step_A with DFA, W rebuilt. Returns the gradients of the first step and
    the final values."""
    v = {key: value.clone() for key, value in v.items()}
    states = {key: {} for key in [*v, "theta", "A"]}
    first = None
    for x, labels in batches:
        _, _, w = code_w(a, theta)
        w_row = torch.cat([w.real, w.imag], dim=1).requires_grad_()  # Expand_Matrix, lines 202-205
        leaves = {key: value.requires_grad_() for key, value in v.items()}
        loss = code_loss(code_forward(leaves, w_row, x), labels)
        grads = torch.autograd.grad(loss, [w_row, *leaves.values()])  # grads_W (line 348) and opt1's gradients
        dfa, dft = code_theorem2(grads[0], a, theta)
        first = first or {"A": dfa, "theta": dft, "loss": loss.detach()}
        v = {key: tf_rmsprop(value.detach(), g, states[key], LR_OTHER) for (key, value), g in zip(v.items(), grads[1:])}
        theta = tf_adagrad(theta, dft, states["theta"], LR_THETA)
        a = code_rmsprop_a(a, dfa, states["A"])
    return {"first": first, "A": a, "theta": theta, **v}


# OrthoLab --------------------------------------------------------------------------------------------------------


def ortholab_module(d_side: str, seed: int = 0) -> RecurrentModule:
    torch.manual_seed(seed)
    spec = TaskSpec(name="fidelity", input_size=INPUTS, output_size=CLASSES, readout="last_step", loss="cross_entropy")
    module = RecurrentModule(
        spec, family="scurnn", hidden_size=HIDDEN, family_args={"d_side": d_side}, optimizers=ORTHOLAB_OPTIMIZERS
    ).double()
    cayley = module.model.layer.cayley
    with torch.no_grad():  # a generic A: Im A (diagonal included) nonzero, as A becomes after the first step
        cayley.imag_upper.normal_(0, 0.3)
        cayley.real_upper.add_(torch.randn_like(cayley.real_upper), alpha=0.3)
    return module


def code_variables(module: RecurrentModule) -> tuple[dict, torch.Tensor, torch.Tensor]:
    """The code's variables holding OrthoLab's initial weights: U (m, 2n), b, ho (1, 2n), V (2n, p), c; A; theta."""
    layer, readout = module.model.layer, module.model.readout
    v = {"U": layer.input_weight.T, "b": layer.bias, "ho": layer.h0[None], "V": readout.weight.T, "c": readout.bias}
    v = {key: value.detach().clone() for key, value in v.items()}
    return v, layer.cayley.skew().detach().clone(), layer.cayley.theta.detach().clone()


def ortholab_training(module: RecurrentModule, batches: list, device: str) -> dict:
    """RecurrentModule.training_step's updates (training/module.py): zero_grad, backward, every group's step."""
    module = module.to(device)
    optimizers = module.configure_optimizers()
    layer, first = module.model.layer, None
    for x, labels in batches:
        for optimizer in optimizers:
            optimizer.zero_grad()
        loss = module.objective.loss(module(x.to(device)), labels.to(device))
        loss.backward()
        first = first or {
            "A": [layer.cayley.real_upper.grad.cpu(), layer.cayley.imag_upper.grad.cpu()],
            "theta": layer.cayley.theta.grad.cpu(),
            "loss": loss.detach().cpu(),
        }
        for optimizer in optimizers:
            optimizer.step()
        layer.after_optimizer_step()
    module = module.cpu()
    v, a, theta = code_variables(module)
    return {"first": first, "A": a, "theta": theta, **v}


def batches(count: int = TRAINING_STEPS, seed: int = 1) -> list:
    g = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(BATCH, STEPS_T, INPUTS, generator=g, dtype=F64), torch.randint(0, CLASSES, (BATCH,), generator=g))
        for _ in range(count)
    ]


def a_coordinates(a: torch.Tensor) -> list[torch.Tensor]:
    """Theorem 2's Gamma as OrthoLab's 'theorem2' gradients: Re over the strict upper triangle, Im over the upper."""
    strict, upper = torch.triu_indices(HIDDEN, HIDDEN, 1), torch.triu_indices(HIDDEN, HIDDEN, 0)
    return [a.real[strict[0], strict[1]], a.imag[upper[0], upper[1]]]


def rounding_terms(a: torch.Tensor, steps: int) -> tuple[int, float]:
    """(n, conditioning) of a bound: every training step's gradient sums over T steps of 2n-long products and the
    Cayley solve amplifies by cond(I + A) <= 1 + ||A||_2 (A skew-Hermitian: |eig(I + A)| >= 1)."""
    return steps * STEPS_T * 2 * HIDDEN, 1 + torch.linalg.matrix_norm(a, ord=2).item()


def assert_same_trajectory(ours: dict, code: dict) -> None:
    n, conditioning = rounding_terms(code["A"], TRAINING_STEPS)
    for key in ("A", "theta", "U", "b", "ho", "V", "c"):
        expected = code[key]
        # n: training steps x T x 2n products; scale: the parameter's norm x cond(I + A)
        torch.testing.assert_close(ours[key], expected, **close(F64, n, expected.norm().item() * conditioning))


# tests -----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_default_reproduces_the_codes_gradients_and_training(device):
    module = ortholab_module("left")
    v, a, theta = code_variables(module)
    data = batches()
    code = code_training(v, a, theta, data)
    ours = ortholab_training(module, data, device)
    n, conditioning = rounding_terms(a, 1)
    # the first step's gradients: n = T x 2n products, scale = the gradient's norm x cond(I + A)
    torch.testing.assert_close(
        ours["first"]["theta"],
        code["first"]["theta"],
        **close(F64, n, code["first"]["theta"].norm().item() * conditioning),
    )
    gamma = a_coordinates(code["first"]["A"])
    for got, expected in zip(ours["first"]["A"], gamma):
        torch.testing.assert_close(got, expected, **close(F64, n, code["first"]["A"].norm().item() * conditioning))
    torch.testing.assert_close(ours["first"]["loss"], code["first"]["loss"], **close(F64, n, conditioning))
    assert code["A"].sub(a).abs().max() > 1e-2 and code["theta"].sub(theta).abs().max() > 1e-2  # it moved
    torch.testing.assert_close(code["A"].mH, -code["A"])  # the code's A stays skew-Hermitian
    assert_same_trajectory(ours, code)


def same_weights(target: torch.nn.Module, source: torch.nn.Module) -> None:
    """source's weights in target, which keeps its own side's marker (loading the other side's is refused)."""
    state = source.state_dict()
    state.update({key: value for key, value in target.state_dict().items() if key.endswith("d_on_left")})
    target.load_state_dict(state)


def relabelled_right(left: RecurrentModule) -> RecurrentModule:
    """A 'right' module computing the same function as `left`: its units are h' = D^H h. From h_t = sigma(U x + D K^T
    h_{t-1}): h'_t = sigma(D^H U x + K(A^T) D h'_{t-1}), so A' = A^T, theta' = theta, U' = D^H U, h0' = D^H h0, and
    the readout Re(c h) (c = Re V - i Im V over [Re h | Im h]) becomes Re(c D h')."""
    right = ortholab_module("right")
    same_weights(right, left)
    n, cayley = HIDDEN, right.model.layer.cayley
    d = torch.polar(torch.ones(n, dtype=F64), cayley.theta.detach())

    def rotate(real_imag: torch.Tensor, phase: torch.Tensor) -> torch.Tensor:  # [Re v | Im v] rows -> of phase * v
        v = torch.complex(real_imag[..., :n], real_imag[..., n:]) * phase
        return torch.cat([v.real, v.imag], dim=-1)

    with torch.no_grad():
        cayley.real_upper.neg_()  # A^T: Re A_jk -> -Re A_jk, Im A_jk unchanged
        layer = right.model.layer
        layer.input_weight.copy_(rotate(layer.input_weight.T, d.conj()).T)
        layer.h0.copy_(rotate(layer.h0, d.conj()))
        weight = right.model.readout.weight  # [Re c | -Im c] -> that of c D
        weight.copy_(rotate(weight * torch.cat([torch.ones(n), -torch.ones(n)]).double(), d))
        weight[:, n:].neg_()
    return right


def test_d_on_the_right_is_the_same_function_with_other_theta_gradients():
    left = ortholab_module("left")
    v, a, theta = code_variables(left)
    data = batches()
    code = code_training(v, a, theta, data)
    right = relabelled_right(left)
    x = data[0][0]
    n, conditioning = rounding_terms(a, 1)
    # the same outputs (n = T x 2n products, scale = their norm x cond(I + A)) ...
    expected = left(x).detach()
    torch.testing.assert_close(right(x).detach(), expected, **close(F64, n, expected.norm().item() * conditioning))
    ours = ortholab_training(right, data, "cpu")
    torch.testing.assert_close(ours["first"]["loss"], code["first"]["loss"], **close(F64, n, conditioning))
    # ... but theta's gradient differs far beyond round-off, as the relabelling U' = D^H U depends on theta
    expected = code["first"]["theta"]
    assert (ours["first"]["theta"] - expected).norm() > 1e-2 * expected.norm()
    assert not torch.allclose(ours["first"]["theta"], expected, **close(F64, n, expected.norm().item() * conditioning))


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_d_on_the_right_is_the_former_layer(dtype):
    # before d_side, the layer applied W = (I + A)^-1 (I - A) D (complex_scaled_cayley in complex128, cast back) to
    # column vectors; 'right' must compute exactly that, outputs and gradients bit for bit
    torch.manual_seed(4)
    right = ScuRNN(INPUTS, HIDDEN, d_side="right").to(dtype)
    left = ScuRNN(INPUTS, HIDDEN).to(dtype)
    same_weights(left, right)
    x = torch.randn(BATCH, STEPS_T, INPUTS, dtype=dtype)
    cayley = right.cayley
    former_w = complex_scaled_cayley(cayley.skew().to(torch.complex128), cayley.theta.double()).to(cayley.skew().dtype)
    assert torch.equal(right.recurrent_matrix(), former_w)
    assert torch.equal(left.recurrent_matrix(), former_w.T)  # 'left' is its transpose: the code's row-form W
    former = complex_modrelu_recurrence(
        x.transpose(0, 1) @ right.input_weight.T, former_w.real, former_w.imag, right.bias, right.h0.expand(BATCH, -1)
    ).transpose(0, 1)
    out = right(x)
    assert torch.equal(out, former)
    probe = torch.randn_like(out)
    ours = torch.autograd.grad((out * probe).sum(), list(right.parameters()))
    theirs = torch.autograd.grad((former * probe).sum(), list(right.parameters()))
    assert all(torch.equal(g, h) for g, h in zip(ours, theirs))


def test_both_sides_have_the_same_spectrum_and_phases():
    # W_left = W_right^T: eigenvalues are shared, so the eigenvalue callbacks see the code's spectrum either way;
    # unitary W is normal, so its eigenvalues move by at most the perturbation: n = n (the solve), scale = cond(I + A)
    torch.manual_seed(5)
    right = ScuRNN(INPUTS, HIDDEN, d_side="right").double()
    left = ScuRNN(INPUTS, HIDDEN).double()
    same_weights(left, right)
    eig_left, eig_right = (torch.linalg.eigvals(layer.recurrent_matrix().detach()) for layer in (left, right))
    _, conditioning = rounding_terms(left.cayley.skew().detach(), 1)
    nearest = (eig_left[:, None] - eig_right[None, :]).abs().min(dim=1).values
    assert nearest.max() <= roundoff(F64, HIDDEN, conditioning)  # each eigenvalue of one is an eigenvalue of the other
    assert torch.equal(left.snapshot_arrays()["phases"], right.snapshot_arrays()["phases"])


def test_d_side_config_error_names_the_key():
    with pytest.raises(ConfigError, match=r"model\.family_args\.d_side = 'row'.*'left'.*'right'"):
        ScuRNN(INPUTS, HIDDEN, d_side="row")


def test_a_checkpoint_is_read_with_the_side_it_was_trained_with():
    """Weights trained with D on one side are another function on the other: loading a checkpoint refuses the
    mismatch, and one from before d_side existed (no marker) counts as trained with D on the right."""
    spec = TaskSpec(
        name="copying",
        input_size=3,
        output_size=3,
        readout="every_step",
        loss="cross_entropy",
        symbolic=True,
        main_metric="val/loss",
        main_metric_mode="min",
    )

    def module(side):
        return RecurrentModule(task=spec, family="scurnn", hidden_size=4, family_args={"d_side": side})

    right, left = module("right"), module("left")
    left.on_load_checkpoint({"hyper_parameters": {}, "state_dict": module("left").state_dict()})
    with pytest.raises(ConfigError, match="trained with D on the right; load it with model.family_args.d_side: right"):
        left.on_load_checkpoint({"hyper_parameters": {}, "state_dict": right.state_dict()})
    old = {k: v for k, v in right.state_dict().items() if not k.endswith("d_on_left")}
    with pytest.raises(ConfigError, match="the only side before 2026-11-23"):
        left.on_load_checkpoint({"hyper_parameters": {}, "state_dict": dict(old)})
    right.on_load_checkpoint({"hyper_parameters": {}, "state_dict": old})  # the old behaviour, asked for
    assert bool(old["model.layer.d_on_left"]) is False  # filled in, so the weights load


def test_a_state_dict_is_loaded_only_into_a_layer_with_its_side():
    """ortholab.nn.ScuRNN.load_state_dict took weights trained with D on the left into a d_side='right' layer and
    computed another function with them; the CLI's checkpoint check (above) never ran there."""
    from ortholab import nn as onn

    left, right = onn.ScuRNN(3, 4, batch_first=True), onn.ScuRNN(3, 4, batch_first=True, d_side="right")
    before = {key: value.clone() for key, value in right.state_dict().items()}
    with pytest.raises(ValueError, match=r"trained with D on the left \(core.d_on_left\).*build it with d_side='left'"):
        right.load_state_dict(left.state_dict())
    assert all(torch.equal(value, before[key]) for key, value in right.state_dict().items())  # nothing loaded
    same = onn.ScuRNN(3, 4, batch_first=True)
    same.load_state_dict(left.state_dict())
    x = torch.randn(2, 5, 3)
    assert torch.equal(same(x)[0], left(x)[0])
