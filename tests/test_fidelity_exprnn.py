"""expRNN trained by OrthoLab against a transcription of the official code's training, several steps in float64.

The official code (github.com/Lezcano/expRNN at 830ec83, brought here with the `fetch` tool) multiplies row vectors
by B = base exp(A) (orthogonal.py:34-44) and runs the dynamic trivialisation inside B's getter
(parametrization.py:73-102): the first B() of a training step re-bases when its counter k is 0 (after 0, K, 2K, ...
steps), copying B into the base and zeroing A through `.data` after autograd has recorded base @ exp(A), and every
M-th re-basing replaces the base by its polar factor. Below, `CodeKernel` and the `code_*` functions transcribe that
getter, Orthogonal, modrelu and OrthogonalRNN, its exponential's autograd function and 2_mnist.py's model and loop
(RMSprop on both groups), in torch float64; scipy's float64 expm stands for the code's float32 Pade expm32.
(Not torch.linalg.matrix_exp: in float64 its degree-8 Taylor branch, 1-norms ~0.03-0.05, errs by up to 1e-11,
pytorch/pytorch#196592, and dtriv keeps S in that range.) OrthoLab's side is its RecurrentModule with `rmsprop`
on both groups.
The defaults (base_side 'right', rebase_gradient 'code') must give the code's losses, matrices, gradients and
weights at every step, re-basing and projecting steps included; 'left' and 'new_base' must not.
"""

import pytest
import scipy.linalg
import torch
from tolerances import close

from ortholab.datamodules.spec import TaskSpec
from ortholab.models import ConfigError
from ortholab.models.cayley import skew_from_upper, upper_from_skew
from ortholab.models.exprnn import ExpRNN
from ortholab.training.module import RecurrentModule

F64 = torch.float64
INPUTS, HIDDEN, CLASSES, STEPS_T, BATCH = 3, 7, 4, 6, 5  # HIDDEN odd: henaff leaves a 1x1 zero block
K, M = 3, 2  # the code re-bases after steps 3, 6, 9, 12 and projects after 3 and 9
TRAINING_STEPS = 14  # four re-basings, two projections, and steps after the last of each
LR_ORTH, LR = 2e-3, 5e-3  # 2_mnist.py's two RMSprops at rates that move S by ~0.3 between re-basings
ORTHOLAB_OPTIMIZERS = {"recurrent": {"name": "rmsprop", "lr": LR_ORTH}, "other": {"name": "rmsprop", "lr": LR}}


# the official code, transcribed ---------------------------------------------------------------------------------


def float64_expm(a: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(scipy.linalg.expm(a.detach().numpy()))


class CodeExpm(torch.autograd.Function):
    """expm_class (trivializations.py:10-21): exp(A) forward; backward differential(expm, A^T, G), the top-right
    block of exp([[A^T, G], [0, A^T]]) (expm32.py:306-313)."""

    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return float64_expm(a)

    @staticmethod
    def backward(ctx, grad):
        (a,) = ctx.saved_tensors
        n = a.shape[0]
        block = torch.zeros(2 * n, 2 * n, dtype=a.dtype)
        block[:n, :n] = block[n:, n:] = a.t()
        block[:n, n:] = grad
        return float64_expm(block)[:n, n:]


def code_project(base: torch.Tensor) -> torch.Tensor:
    """Orthogonal.project (orthogonal.py:46-50): U V^T from the SVD."""
    u, _, vh = torch.linalg.svd(base)
    return u @ vh


class CodeKernel:
    """The recurrent kernel: Orthogonal (orthogonal.py:7-44) and its Parametrization (parametrization.py:32-102).
    k_rebase None is the code's mode 'static', 'infty' its K = infinity. `steps` counts the optimizer steps taken,
    to record when the schedule acts."""

    def __init__(self, a0: torch.Tensor, k_rebase, m_project: int):
        self.A = a0.clone().requires_grad_()  # parametrization.py:42, the full n x n matrix
        self.base = torch.eye(a0.shape[0], dtype=a0.dtype)  # orthogonal.py:26, 32
        self.cached = None  # _B
        self.K, self.M, self.k, self.m = k_rebase, m_project, 0, 0  # parametrization.py:51-55
        self.steps, self.rebased_after, self.projected_after = 0, [], []

    def matrix(self) -> torch.Tensor:
        """The B property (parametrization.py:73-102) with the retraction of orthogonal.py:37-44."""
        if self.cached is None:
            upper = self.A.triu(diagonal=1)
            self.cached = self.base.mm(CodeExpm.apply(upper - upper.t()))
            if self.K is not None:  # mode "dynamic"
                if self.k == 0:
                    self.base.data.copy_(self.cached.data)  # rebase(), lines 67-70: invisible to autograd
                    self.A.data.zero_()
                    self.rebased_after.append(self.steps)
                    self.m = (self.m + 1) % self.M  # lines 88-92: incremented before the test
                    if self.m == 0:
                        self.base = code_project(self.base)  # a new tensor: the graph keeps the old one
                        self.projected_after.append(self.steps)
                self.k = 1 if self.K == "infty" else (self.k + 1) % self.K  # lines 95-100
        return self.cached

    def after_backward(self) -> None:
        self.cached = None  # the hook on A's gradient, parametrization.py:61-64


def code_forward(kernel: CodeKernel, v: dict, x: torch.Tensor) -> torch.Tensor:
    """2_mnist.py:83-96 with OrthogonalRNN (orthogonal.py:96-105) and modrelu (orthogonal.py:73-79)."""
    state = x.new_zeros(x.shape[0], HIDDEN)  # default_hidden
    for x_t in x.unbind(1):
        z = x_t @ v["W_in"].t() + state @ kernel.matrix()  # input_kernel (no bias) + input.matmul(B)
        state = torch.sign(z) * torch.relu(z.abs() + v["b"])
    return state @ v["V"].t() + v["c"]  # self.lin(state)


def code_training(kernel: CodeKernel, v: dict, batches: list) -> dict:
    """The loop of 2_mnist.py:123-144: RMSprop on the rest and on A, zero_grad, backward, both steps. Records
    each step's loss, the matrix its forward used, in column form (B^T), and the gradient of S = triu(A, 1)."""
    v = {key: value.clone().requires_grad_() for key, value in v.items()}
    optim = torch.optim.RMSprop(list(v.values()), LR)
    optim_orth = torch.optim.RMSprop([kernel.A], lr=LR_ORTH)
    records = []
    for x, labels in batches:
        loss = torch.nn.functional.cross_entropy(code_forward(kernel, v, x), labels)
        optim.zero_grad()
        optim_orth.zero_grad()
        loss.backward()
        records.append(
            {
                "loss": loss.detach(),
                "B": kernel.cached.detach().t().clone(),
                "grad": upper_from_skew(kernel.A.grad.triu(1)),
            }
        )
        kernel.after_backward()
        optim.step()
        optim_orth.step()
        kernel.steps += 1
    final = {key: value.detach() for key, value in v.items()}
    return {"records": records, "upper": upper_from_skew(kernel.A.detach().triu(1)), "base": kernel.base, **final}


# OrthoLab --------------------------------------------------------------------------------------------------------


def ortholab_module(family_args: dict, zero_start: bool = False, seed: int = 0) -> RecurrentModule:
    """A float64 module. dtriv: its base recomputed in float64 from the S it was re-based from (the constructor
    rounds it to float32), by the code's exponential; zero_start: that S is 0, so the first re-basing with S != 0 is
    the one after K steps."""
    torch.manual_seed(seed)
    spec = TaskSpec(name="fidelity", input_size=INPUTS, output_size=CLASSES, readout="last_step", loss="cross_entropy")
    module = RecurrentModule(
        spec, family="exprnn", hidden_size=HIDDEN, family_args=family_args, optimizers=ORTHOLAB_OPTIMIZERS
    ).double()
    layer = module.model.layer
    with torch.no_grad():
        if zero_start:
            layer.stale_upper.zero_()
        if layer.trivialization == "dtriv":
            layer.base.copy_(float64_expm(skew_from_upper(layer.stale_upper, HIDDEN)))
    return module


def code_start(module: RecurrentModule) -> tuple[torch.Tensor, dict]:
    """The code's initial A and other weights for OrthoLab's initial state: A_code = -A, as B_code^T = exp(-A_code)
    base_code^T (models/exprnn.py); dtriv's initial base exp(A0) is the code's re-basing at step 0 from A0."""
    layer, readout = module.model.layer, module.model.readout
    upper = layer.stale_upper if layer.trivialization == "dtriv" else layer.upper
    a0 = -skew_from_upper(upper.detach(), HIDDEN).triu(1)
    v = {"W_in": layer.input_weight, "b": layer.bias, "V": readout.weight, "c": readout.bias}
    return a0, {key: value.detach().clone() for key, value in v.items()}


def ortholab_training(module: RecurrentModule, batches: list) -> dict:
    """RecurrentModule.training_step's updates (training/module.py:203-217), recording as code_training."""
    optimizers = module.configure_optimizers()
    layer, records = module.model.layer, []
    for x, labels in batches:
        for optimizer in optimizers:
            optimizer.zero_grad()
        loss = module.objective.loss(module(x), labels)
        loss.backward()
        records.append(
            {"loss": loss.detach(), "B": layer.recurrent_matrix().detach(), "grad": layer.upper.grad.clone()}
        )
        for optimizer in optimizers:
            optimizer.step()
        layer.after_optimizer_step()
    _, v = code_start(module)
    return {"records": records, "upper": layer.upper.detach(), "base": layer.base, **v}


def batches(count: int = TRAINING_STEPS, seed: int = 1) -> list:
    g = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(BATCH, STEPS_T, INPUTS, generator=g, dtype=F64), torch.randint(0, CLASSES, (BATCH,), generator=g))
        for _ in range(count)
    ]


def bound(steps: int, scale: float, a0: torch.Tensor) -> dict:
    """assert_close keywords: every step's gradient sums over T steps of n-long products, and each step carries the
    earlier steps' error on (n = steps x T x n); exp errs by eps ||A||^2 (models/matrix_exp.py), so the scale is
    the quantity's norm x (1 + ||A0||_2^2), A0 = a0 - a0^T the code's initial skew matrix."""
    spectral = torch.linalg.matrix_norm(a0 - a0.t(), ord=2).item()
    return close(F64, steps * STEPS_T * HIDDEN, scale * (1 + spectral**2))


def run_both(family_args: dict, k_rebase, m_project, zero_start: bool = False) -> tuple[dict, dict, torch.Tensor]:
    module = ortholab_module(family_args, zero_start)
    a0, v = code_start(module)
    data = batches()
    code = code_training(CodeKernel(a0, k_rebase, m_project), v, data)
    return ortholab_training(module, data), code, a0


def assert_same_step(ours: dict, code: dict, step: int, a0: torch.Tensor) -> None:
    """One step's loss, matrix and gradient of S (ours = -code's, as A = -A_code); `step` + 1 steps of error."""
    got, expected = ours["records"][step], code["records"][step]
    for key, sign in (("loss", 1), ("B", 1), ("grad", -1)):
        # n: (step + 1) x T x n products; scale: the quantity's norm x exp's conditioning (bound)
        torch.testing.assert_close(got[key], sign * expected[key], **bound(step + 1, expected[key].norm().item(), a0))


# tests -----------------------------------------------------------------------------------------------------------


def test_dtriv_default_reproduces_the_codes_training_through_rebasings_and_projections():
    ours, code, a0 = run_both({"trivialization": "dtriv", "rebase_every": K, "project_every": M}, K, M)
    assert code["records"][0]["grad"].norm() > 0 and len(code["records"]) == TRAINING_STEPS
    for step in range(TRAINING_STEPS):
        assert_same_step(ours, code, step, a0)
    # the final weights: S (ours -code's), the base in column form (ours = code's^T), W_in, b and the readout
    for key, expected in (
        ("upper", -code["upper"]),
        ("base", code["base"].t()),
        ("W_in", code["W_in"]),
        ("b", code["b"]),
        ("V", code["V"]),
        ("c", code["c"]),
    ):
        # n: all steps x T x n products; scale: the weight's norm x exp's conditioning (bound)
        torch.testing.assert_close(ours[key], expected, **bound(TRAINING_STEPS, expected.norm().item(), a0))
    assert code["upper"].abs().max() > 1e-2  # S moved since the last re-basing (step 12)
    assert (code["base"] - float64_expm(a0 - a0.t())).abs().max() > 1e-2  # and the base since step 0


def test_left_base_side_departs_from_the_code_at_the_first_step():
    # B = base exp(A): the same matrix at every re-basing, but dL/dA is the code's conjugated by the base, so
    # RMSprop's per-entry scaling takes another step from the first one on
    ours, code, a0 = run_both(
        {"trivialization": "dtriv", "rebase_every": K, "project_every": M, "base_side": "left"}, K, M
    )
    first, expected = ours["records"][0], code["records"][0]
    torch.testing.assert_close(first["B"], expected["B"], **bound(1, expected["B"].norm().item(), a0))
    assert (first["grad"] + expected["grad"]).norm() > 0.1 * expected["grad"].norm()
    got, expected = ours["records"][-1]["B"], code["records"][-1]["B"]
    assert (got - expected).norm() > 1e-4 * expected.norm()  # a trajectory apart, not round-off
    assert not torch.allclose(got, expected, **bound(TRAINING_STEPS, expected.norm().item(), a0))


def test_new_base_gradient_departs_from_the_code_at_the_first_rebasing_with_s_nonzero():
    # from S = 0 before the initial re-basing, the code's gradient is exp's derivative at 0 on steps 0-2 as
    # 'new_base''s; at step 3 it is the derivative at the S of step 2, and the two part
    args = {"trivialization": "dtriv", "rebase_every": K, "project_every": M}
    for mode in ("code", "new_base"):
        ours, code, a0 = run_both({**args, "rebase_gradient": mode}, K, M, zero_start=True)
        for step in range(K):
            assert_same_step(ours, code, step, a0)
        if mode == "code":
            assert_same_step(ours, code, K, a0)
        else:
            got, expected = ours["records"][K]["grad"], -code["records"][K]["grad"]
            torch.testing.assert_close(
                ours["records"][K]["B"],
                code["records"][K]["B"],
                **bound(K + 1, code["records"][K]["B"].norm().item(), a0),
            )
            assert (got - expected).norm() > 1e-3 * expected.norm()  # ~ ||S_old|| ~ 0.1 relative, not round-off
            assert not torch.allclose(got, expected, **bound(K + 1, expected.norm().item(), a0))


def test_new_base_gradient_is_the_derivative_at_s_zero():
    module = ortholab_module({"trivialization": "dtriv", "rebase_gradient": "new_base"})
    layer = module.model.layer
    x, labels = batches(1)[0]
    module.objective.loss(module(x), labels).backward()
    ours = layer.upper.grad.clone()
    # the same loss through B = exp(S) base with torch's matrix_exp, differentiated at S = 0
    upper = torch.zeros_like(layer.upper, requires_grad=True)
    b = torch.linalg.matrix_exp(skew_from_upper(upper, HIDDEN)) @ layer.base
    (expected,) = torch.autograd.grad(module.objective.loss(reference_logits(module, b, x), labels), upper)
    # n: T x n products, scale: the gradient's norm (S = 0: exp is exact to round-off)
    torch.testing.assert_close(ours, expected, **close(F64, STEPS_T * HIDDEN, expected.norm().item()))
    code_mode = ortholab_module({"trivialization": "dtriv"})  # same seed, same weights, default 'code'
    module.objective.loss(code_mode(x), labels).backward()
    assert (code_mode.model.layer.upper.grad - expected).norm() > 0.1 * expected.norm()  # Dexp at A0, not at 0


def reference_logits(module: RecurrentModule, b: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """h_t = modReLU(W_in x_t + B h_{t-1}, b), logits = V h_T + c, written out (column form, rows of a batch)."""
    layer, readout = module.model.layer, module.model.readout
    state = x.new_zeros(x.shape[0], HIDDEN)
    for x_t in x.unbind(1):
        z = x_t @ layer.input_weight.t() + state @ b.t()
        state = torch.sign(z) * torch.relu(z.abs() + layer.bias)
    return readout(state)


def test_static_needs_no_flip_to_follow_the_code():
    # base = I: in column form the code's matrix is exp(A_code)^T = exp(-A_code), ours exp(A); with A = -A_code
    # they are one matrix, dL/dA = -dL/dA_code exactly, and RMSprop, odd in the gradient, keeps A = -A_code
    ours, code, a0 = run_both({"trivialization": "static"}, None, M)
    for step in range(TRAINING_STEPS):
        assert_same_step(ours, code, step, a0)
    # n: all steps x T x n products; scale: S's norm x exp's conditioning (bound)
    torch.testing.assert_close(ours["upper"], -code["upper"], **bound(TRAINING_STEPS, code["upper"].norm().item(), a0))
    assert torch.equal(ours["base"], torch.eye(HIDDEN, dtype=F64))


@pytest.mark.parametrize("k_rebase, m_project", [(3, 2), (2, 1), (4, 3), (None, 2), (None, 1)])
def test_rebasing_and_projection_schedules_are_the_codes(k_rebase, m_project, monkeypatch):
    steps = 25
    kernel = CodeKernel(torch.zeros(4, 4, dtype=F64), "infty" if k_rebase is None else k_rebase, m_project)
    for _ in range(steps):  # the schedule acts at each step's first B(), before its backward
        kernel.matrix()
        kernel.after_backward()
        kernel.steps += 1
    calls = {"rebase": [0], "project": []}  # our constructor's base exp(A0) is the code's re-basing at step 0
    for name in ("rebase", "project"):
        method = getattr(ExpRNN, f"{name}_" if name == "rebase" else "project_base_")

        def recording(self, method=method, name=name):
            calls[name].append(int(self.optimizer_steps))
            method(self)

        monkeypatch.setattr(ExpRNN, method.__name__, recording)
    layer = ExpRNN(2, 4, trivialization="dtriv", rebase_every=k_rebase, project_every=m_project)
    for _ in range(steps - 1):  # the code's step s acts after s optimizer steps: ours after the step before
        layer.after_optimizer_step()
    assert calls["rebase"] == kernel.rebased_after and calls["project"] == kernel.projected_after
    if (k_rebase, m_project) == (3, 2):
        assert kernel.rebased_after == [0, 3, 6, 9, 12, 15, 18, 21, 24] and kernel.projected_after == [3, 9, 15, 21]


def test_options_are_checked_and_old_checkpoints_resume_as_they_were_trained():
    with pytest.raises(ConfigError, match=r"model\.family_args\.base_side = 'up'.*'right', 'left'"):
        ExpRNN(3, 8, trivialization="dtriv", base_side="up")
    with pytest.raises(ConfigError, match=r"model\.family_args\.rebase_gradient = 'old'.*'code', 'new_base'"):
        ExpRNN(3, 8, trivialization="dtriv", rebase_gradient="old")
    for trivialization, side in (("static", "right"), ("dtriv", "left")):
        layer = ExpRNN(3, 8, trivialization=trivialization, base_side=side)
        state = {key: value for key, value in layer.state_dict().items() if not key.startswith("stale")}
        layer.load_state_dict(state)  # written before issue 23: nothing pending
        assert not layer.stale_pending and torch.equal(layer.stale_upper, torch.zeros(28))
    state = {
        key: value
        for key, value in ExpRNN(3, 8, trivialization="dtriv").state_dict().items()
        if not key.startswith("stale")
    }
    with pytest.raises(ConfigError, match=r"base_side: left"):
        ExpRNN(3, 8, trivialization="dtriv").load_state_dict(state)
