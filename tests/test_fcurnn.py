"""The full-capacity uRNN and its Stiefel Cayley step against their mathematics (Wisdom et al. 2016 Section 4;
scoRNN paper eq. 1 and Section 5.5.1)."""

import math
from itertools import pairwise
from pathlib import Path

import pytest
import torch
from tolerances import close, cond, norm, roundoff

from ortholab.cli.main import main
from ortholab.datamodules import CopyingTask
from ortholab.db import Store
from ortholab.models import FAMILIES, ConfigError, SequenceModel
from ortholab.models.cayley import ScaledCayley
from ortholab.models.complex_recurrence import complex_modrelu_recurrence_reference
from ortholab.models.fcurnn import FullCapacityURNN, haar_unitary
from ortholab.models.optimizers import OPTIMIZERS, build_optimizer, check_optimizer_spec
from ortholab.models.sizing import parameter_count
from ortholab.models.stiefel import StiefelCayley, cayley_step, skew_hermitian_direction
from ortholab.training.module import RecurrentModule

REPO = Path(__file__).resolve().parents[1]


def unitarity_error(w: torch.Tensor) -> float:
    eye = torch.eye(w.shape[0], dtype=w.dtype)
    return torch.linalg.matrix_norm(w.mH @ w - eye).item()  # Frobenius norm, as scoRNN Figure 4


def _random_steps(layer: FullCapacityURNN, optimizer, steps: int, seed: int, every: int = 0) -> list[float]:
    """`steps` optimizer steps on N(0, 1) gradients; the unitarity error every `every` steps."""
    g = torch.Generator().manual_seed(seed)
    errors = []
    for k in range(steps):
        layer.w_real.grad = torch.randn(layer.w_real.shape, generator=g, dtype=layer.w_real.dtype)
        layer.w_imag.grad = torch.randn(layer.w_imag.shape, generator=g, dtype=layer.w_imag.dtype)
        optimizer.step()
        if every and (k + 1) % every == 0:
            errors.append(unitarity_error(layer.recurrent_matrix().detach()))
    return errors


# initialisation --------------------------------------------------------------------------------------------


def test_layer_initialisation_as_the_papers_code():
    torch.manual_seed(0)
    n, m = 128, 10
    layer = FullCapacityURNN(m, n)
    w = layer.recurrent_matrix().detach()
    # Haar in float64, rounded to float32: n = 128, n eps32
    assert w.dtype == torch.complex64 and unitarity_error(w) < roundoff(torch.float32, n)
    assert layer.w_imag.abs().max() > 0.1  # a genuinely complex W, not a real orthogonal one
    glorot = math.sqrt(6 / (m + 2 * n))  # Glorot-uniform over the code's real [m, 2n] variable V
    assert 0.9 * glorot < layer.input_weight.abs().max() <= glorot
    assert 0.009 < layer.bias.abs().max() <= 0.01 and layer.bias.min() < 0 < layer.bias.max()
    h0_range = math.sqrt(3 / (2 * n))  # the code's h_0 ~ U(+-sqrt(3 / 2 / n))
    assert 0.9 * h0_range < layer.h0.abs().max() <= h0_range
    torch.manual_seed(0)
    assert torch.equal(FullCapacityURNN(m, n).w_real, layer.w_real)  # seeded by torch's RNG
    identity = FullCapacityURNN(m, 6, init="identity").recurrent_matrix().detach()
    assert torch.equal(identity, torch.eye(6, dtype=torch.complex64))


def test_haar_unitary_has_uniform_eigenphases():
    # Haar measure: eigenvalue phases uniform on the circle; the phase fix of R's diagonal is what makes Q Haar
    g = torch.Generator().manual_seed(1)
    phases = torch.cat([torch.linalg.eigvals(haar_unitary(32, g)).angle() for _ in range(40)])
    # Householder QR, n = 32: n eps in the 2-norm, sqrt(n) times that in the Frobenius norm
    assert unitarity_error(haar_unitary(32, g)) < roundoff(torch.float64, 32, scale=32**0.5)
    counts = torch.histc(phases, bins=8, min=-math.pi, max=math.pi)
    expected = phases.numel() / 8  # 160 per bin; Haar eigenphases repel, so they are *more* even than Poisson
    assert ((counts - expected).abs() < 0.25 * expected).all()


# the Stiefel Cayley step -------------------------------------------------------------------------------------


def _loss_and_layer(dtype=torch.float64, seed=0, n=6):
    torch.manual_seed(seed)
    layer = FullCapacityURNN(3, n, w_gradient="full").to(dtype)  # W's .grad = dL/dW, as the slope below needs
    x, probe = torch.randn(4, 9, 3, dtype=dtype), torch.randn(4, 9, 2 * n, dtype=dtype)
    return layer, lambda: (layer(x) * probe).sum()


def test_the_step_is_a_descent_step_with_the_predicted_first_order_decrease():
    # W(lr) = (I + lr/2 B)^-1 (I - lr/2 B) W with B = G W^H - W G^H: dL/dlr at 0 = -1/2 ||W^H G - G^H W||_F^2,
    # which fixes both the sign of B and G = dL/dRe W + i dL/dIm W
    layer, loss = _loss_and_layer()
    before = loss()
    before.backward()
    w = layer.recurrent_matrix().detach()
    g = torch.complex(layer.w_real.grad, layer.w_imag.grad)
    m = w.mH @ g
    predicted_slope = -0.5 * torch.linalg.matrix_norm(m - m.mH).item() ** 2
    assert predicted_slope < -1e-3
    start = {name: p.detach().clone() for name, p in layer.named_parameters()}
    for lr, rel in [(1e-6, 1e-4), (1e-7, 1e-5)]:
        with torch.no_grad():
            for name, p in layer.named_parameters():
                p.copy_(start[name])
        optimizer = StiefelCayley([layer.w_real, layer.w_imag], lr=lr)
        optimizer.step()
        with torch.no_grad():
            slope = (loss().item() - before.item()) / lr
        assert slope == pytest.approx(predicted_slope, rel=rel)
    with torch.no_grad():  # and a finite step of the size used in training lowers the loss
        for name, p in layer.named_parameters():
            p.copy_(start[name])
    StiefelCayley([layer.w_real, layer.w_imag], lr=1e-3).step()
    with torch.no_grad():
        assert loss().item() < before.item() + 0.5e-3 * predicted_slope


def test_the_step_is_the_official_codes_real_composite_formula():
    # Wisdom's code: X = A + jB, G = C + jD from the real parts; GX^H = CA^T + DB^T + j(DA^T - CB^T),
    # skew matrix GX^H - (GX^H)^H, X <- inv(I + lr/2 S) (I - lr/2 S) X
    g = torch.Generator().manual_seed(2)
    a_re, a_im, c, d = (torch.randn(5, 5, generator=g, dtype=torch.float64) for _ in range(4))
    x = haar_unitary(5, g)
    a_re, a_im = x.real, x.imag
    gxh = torch.complex(c @ a_re.T + d @ a_im.T, d @ a_re.T - c @ a_im.T)
    skew = gxh - gxh.mH
    eye = torch.eye(5, dtype=torch.complex128)
    expected = torch.linalg.inv(eye + 0.05 * skew) @ (eye - 0.05 * skew) @ x
    b = skew_hermitian_direction(x, torch.complex(c, d))
    torch.testing.assert_close(b, skew, **close(torch.float64, 5, norm(skew)))  # products of inner dimension n = 5
    torch.testing.assert_close(b.mH, -b)
    # n = 5: a solve against an inverse, then products: 3 n eps cond(I + lr/2 B) ||X||
    scale = cond(eye + 0.05 * skew) * norm(expected)
    torch.testing.assert_close(cayley_step(x, b, lr=0.1), expected, **close(torch.float64, 3 * 5, scale))


def test_unitary_to_round_off_in_float64_after_100_steps():
    torch.manual_seed(3)
    layer = FullCapacityURNN(2, 32).double()
    with torch.no_grad():  # a W unitary in float64 (the layer's own was rounded to float32 at init)
        w0 = haar_unitary(32, torch.Generator().manual_seed(3))
        layer.w_real.copy_(w0.real)
        layer.w_imag.copy_(w0.imag)
    optimizer = StiefelCayley([layer.w_real, layer.w_imag], lr=1e-2)
    assert unitarity_error(w0) < roundoff(torch.float64, 32, scale=32**0.5)  # Householder QR, n = 32, Frobenius
    errors = _random_steps(layer, optimizer, 100, seed=3, every=1)
    # each step errs by n eps cond(I + lr/2 B), cond ~ 1.01 (lr ||B|| / 2 <= lr ||G|| ~ 0.2): n = 32 times 100 steps.
    # Measured 4e-15 at the start, 3e-14 after 100 steps (float64 drifts too, slowly)
    assert max(errors) < roundoff(torch.float64, 32 * 100)
    assert torch.linalg.matrix_norm(layer.recurrent_matrix().detach() - w0) > 1.0  # W moved far


def test_float32_drift_grows_for_the_multiplicative_update_but_not_for_scornn():
    # scoRNN paper Section 5.5.1 / Figure 4: the full-capacity uRNN's W loses unitarity with updates in single
    # precision (the rounding errors of repeated products accumulate), scoRNN's W = Cayley(A) D is formed afresh
    # from A and stays at the round-off of one transform. n = 64, 2,000 updates, float32. Measured (seeds 0-2):
    # fcurnn 1.2e-6 at the start -> 9e-5 after 500 -> 2.4e-4 after 2,000 steps, rising all along; scoRNN 5e-7 ->
    # 4e-6 .. 9e-6 (its error follows cond(I + A) as A grows, never the number of steps). Tolerances leave ~2x room.
    torch.manual_seed(0)
    layer = FullCapacityURNN(2, 64)
    start = unitarity_error(layer.recurrent_matrix().detach())
    fcurnn = _random_steps(layer, StiefelCayley([layer.w_real, layer.w_imag], lr=1e-3), 2000, seed=0, every=500)
    assert fcurnn[-1] > 10 * start and fcurnn[-1] > 1e-4
    assert all(later > earlier for earlier, later in pairwise(fcurnn))  # it keeps growing

    cayley = ScaledCayley(64, 32)
    g = torch.Generator().manual_seed(0)
    scornn, bounds = [], []
    with torch.no_grad():
        for k in range(2000):
            cayley.upper.add_(torch.randn(cayley.upper.shape, generator=g), alpha=1e-2)
            if (k + 1) % 500 == 0:
                scornn.append(unitarity_error(cayley()))
                # round-off of one Cayley transform: n = 64, n eps32 cond(I + A) (cond grows from 3.5 to 7)
                bounds.append(roundoff(torch.float32, 64, scale=cond(torch.eye(64) + cayley.skew())))
    assert cayley.upper.abs().max() > 1.0  # A moved far from its initialisation
    assert all(error < bound for error, bound in zip(scornn, bounds))
    assert fcurnn[-1] > 10 * scornn[-1]


def test_rms_normalize_scales_each_real_gradient_before_the_step():
    # the code's natGradRMS: ms = 0.9 ms + 0.1 g^2 from 0, g / (sqrt(ms) + 1e-8), then the Cayley step
    torch.manual_seed(4)
    layer = FullCapacityURNN(2, 5).double()
    w = layer.recurrent_matrix().detach().clone()
    optimizer = StiefelCayley([layer.w_real, layer.w_imag], lr=1e-2, rms_normalize=True)
    grads = [torch.randn(2, 5, 5, dtype=torch.float64) for _ in range(2)]
    ms = torch.zeros(2, 5, 5, dtype=torch.float64)
    for grad in grads:
        layer.w_real.grad, layer.w_imag.grad = grad[0].clone(), grad[1].clone()
        optimizer.step()
        ms = 0.9 * ms + 0.1 * grad**2
        scaled = grad / (ms.sqrt() + 1e-8)
        w = cayley_step(w, skew_hermitian_direction(w, torch.complex(scaled[0], scaled[1])), 1e-2)
    # 2 steps of a Cayley step (a solve and 2 products, n = 5; cond(I + lr/2 B) ~ 1), relative to ||W||
    torch.testing.assert_close(layer.recurrent_matrix().detach(), w, **close(torch.float64, 2 * 3 * 5, norm(w)))


def test_the_optimizer_is_registered_and_checks_its_group():
    assert OPTIMIZERS["stiefel_cayley"] is StiefelCayley
    layer = FullCapacityURNN(2, 4)
    optimizer = build_optimizer(
        layer.parameter_groups()["recurrent"], {"name": "stiefel_cayley", "lr": 1e-3}, "model.optimizers.recurrent"
    )
    assert isinstance(optimizer, StiefelCayley) and optimizer.defaults["rms_normalize"] is False
    check_optimizer_spec(
        {"name": "stiefel_cayley", "lr": 1e-4, "rms_normalize": True, "decay": 0.9, "eps": 1e-8},
        "model.optimizers.recurrent",
    )
    with pytest.raises(ConfigError, match=r"model\.optimizers\.recurrent\.momentum is not an option"):
        check_optimizer_spec({"name": "stiefel_cayley", "momentum": 0.9}, "model.optimizers.recurrent")
    with pytest.raises(ConfigError, match=r"exactly the two real \(n, n\) parameters \[W_re, W_im\]"):
        StiefelCayley(layer.parameter_groups()["other"], lr=1e-3)
    with pytest.raises(ConfigError, match=r"exactly the two real"):
        StiefelCayley([layer.w_real], lr=1e-3)
    with pytest.raises(ConfigError, match="lr = 0"):
        StiefelCayley([layer.w_real, layer.w_imag], lr=0)
    with pytest.raises(ConfigError, match=r"exactly the two real"):
        RecurrentModule(
            CopyingTask(seq_len=5).spec,
            family="fcurnn",
            hidden_size=4,
            optimizers={
                "recurrent": {"name": "stiefel_cayley", "lr": 1e-3},
                "other": {"name": "stiefel_cayley", "lr": 1e-3},
            },
        ).configure_optimizers()


# the layer ---------------------------------------------------------------------------------------------------


def test_forward_shapes_groups_and_the_recurrence():
    torch.manual_seed(5)
    layer = FullCapacityURNN(3, 8)
    x = torch.randn(5, 7, 3)
    out = layer(x)
    assert out.shape == (5, 7, 16) and layer.output_size == 16 and layer(x[:2]).shape == (2, 7, 16)
    groups = layer.parameter_groups()
    assert sorted(groups) == ["other", "recurrent"]
    assert groups["recurrent"][0] is layer.w_real and groups["recurrent"][1] is layer.w_imag
    grouped = [p for params in groups.values() for p in params]
    assert len(grouped) == len(set(map(id, grouped))) == len(list(layer.parameters()))
    assert FAMILIES["fcurnn"] is FullCapacityURNN and layer.supports_state_offsets
    torch.testing.assert_close(layer(x, state_offsets=torch.zeros(5, 7, 16)), out)
    # h_t = sigma_eps(U x_t + W h_{t-1}, b) with the complex-dtype oracle
    u = x.transpose(0, 1) @ layer.input_weight.T
    expected = complex_modrelu_recurrence_reference(
        u, layer.w_real, layer.w_imag, layer.bias, layer.h0.expand(5, -1)
    ).transpose(0, 1)
    # float32, T = 7 steps through 2n = 16 real units (the oracle does complex products), relative to ||h||
    torch.testing.assert_close(out, expected, **close(torch.float32, 16 * 7, norm(expected)))


def test_layer_gradients_match_finite_differences():
    torch.manual_seed(6)
    layer = FullCapacityURNN(2, 3, w_gradient="full").double()  # the default hands W the code's G, not dL/dW
    x = torch.randn(2, 6, 2, dtype=torch.float64)
    names = [name for name, _ in layer.named_parameters()]

    def loss(*values):
        return (torch.func.functional_call(layer, dict(zip(names, values)), (x,)) ** 2).sum()

    assert torch.autograd.gradcheck(loss, [p.detach().clone().requires_grad_() for p in layer.parameters()])


@pytest.mark.parametrize(
    "input_size, n, output_size, budget, readout",
    [
        (10, 128, 9, 22_000, "every_step"),  # copying (scoRNN paper 5.1: "~22k", Wisdom's n = 128)
        (2, 120, 1, 15_000, "last_step"),  # adding (scoRNN paper 5.2: n = 120, "~15k")
        (1, 116, 10, 16_000, "last_step"),  # MNIST (scoRNN paper Table 1: n = 116, "~16k")
        (1, 512, 10, 270_000, "last_step"),  # MNIST (n = 512, "~270k")
    ],
)
def test_parameter_counts_are_the_papers_with_w_counted_as_n_squared(input_size, n, output_size, budget, readout):
    # The papers count W as n^2 parameters (U(n) has dimension n^2); we store Re W and Im W, 2 n^2 numbers.
    model = SequenceModel(FullCapacityURNN(input_size, n), output_size, readout)
    stored = sum(p.numel() for p in model.parameters())
    # W: 2n^2, U: 2nm, b: n, h0: 2n, readout: 2n p + p
    assert stored == 2 * n * n + 2 * n * input_size + n + 2 * n + 2 * n * output_size + output_size
    papers = parameter_count("fcurnn", n, input_size, output_size)  # what param_budget sizing counts
    assert papers == stored - n * n
    assert abs(papers - budget) / budget < 0.05


def test_w_gets_the_stiefel_step_unless_the_config_names_another_for_its_group():
    task = CopyingTask(seq_len=5, train_size=20, val_size=20, test_size=20, batch_size=10)
    module = RecurrentModule(
        task.spec, family="fcurnn", hidden_size=6, optimizers={"default": {"name": "adam", "lr": 1e-3}}
    )
    assert [type(o) for o in module.configure_optimizers()] == [StiefelCayley, torch.optim.Adam]
    module = RecurrentModule(
        task.spec,
        family="fcurnn",
        hidden_size=6,
        optimizers={"recurrent": {"name": "sgd", "lr": 1e-3}, "default": {"name": "adam", "lr": 1e-3}},
    )
    assert [type(o) for o in module.configure_optimizers()] == [torch.optim.SGD, torch.optim.Adam]


def test_config_errors_and_hints():
    with pytest.raises(ConfigError, match=r"model\.family_args\.init = 'henaff'.*haar"):
        FullCapacityURNN(3, 8, init="henaff")
    layer = FullCapacityURNN(3, 8)
    assert "Theorem 4" in layer.nonfinite_hint()  # b ~ U[-0.01, 0.01] has positive entries
    with torch.no_grad():
        layer.bias.clamp_(max=0.0)
    assert layer.nonfinite_hint() is None
    with torch.no_grad():
        layer.w_real.mul_(1.1)  # e.g. W trained by a plain optimizer
    assert "stiefel_cayley" in layer.nonfinite_hint()


def test_training_steps_keep_w_unitary_and_move_every_parameter():
    task = CopyingTask(seq_len=5, train_size=20, val_size=20, test_size=20, batch_size=10)
    module = RecurrentModule(
        task.spec,
        family="fcurnn",
        hidden_size=6,
        optimizers={"recurrent": {"name": "stiefel_cayley", "lr": 1e-2}, "other": {"name": "adam", "lr": 1e-3}},
    )
    optimizers = module.configure_optimizers()
    assert [type(o) for o in optimizers] == [StiefelCayley, torch.optim.Adam]
    assert module.parameter_counts() == {"recurrent": 72, "other": 12 * 10 + 6 + 12 + 12 * 9 + 9}
    inputs, targets = task.make_split("train")
    before = {name: p.detach().clone() for name, p in module.named_parameters()}
    losses = []
    for _ in range(5):
        for optimizer in optimizers:
            optimizer.zero_grad()
        loss = module.objective.loss(module(inputs[:10]), targets[:10], None)
        loss.backward()
        losses.append(loss.item())
        for optimizer in optimizers:
            optimizer.step()
    assert losses[-1] < losses[0]
    assert all(not torch.equal(before[name], p) for name, p in module.named_parameters())
    # float32, n = 6: the rounded Haar start and 5 Cayley steps (cond ~ 1), n eps32 each
    assert unitarity_error(module.model.layer.recurrent_matrix().detach()) < roundoff(torch.float32, 6 * 6)


def test_cli_fit_records_the_drift_of_w(tmp_path, monkeypatch):
    # the analysis callback reads recurrent_matrix(): fcurnn's drift is on the dashboard like scoRNN's
    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    main(
        [
            "fit",
            "--config",
            str(REPO / "configs" / "demo" / "copying_scornn.yaml"),
            "--model.family",
            "fcurnn",
            "--model.hidden_size",
            "8",
            "--model.family_args",
            "{}",
            "--model.optimizers",
            "{recurrent: {name: stiefel_cayley, lr: 1.0e-2}, other: {name: adam, lr: 1.0e-3}}",
            "--data.seq_len",
            "5",
            "--data.train_size",
            "40",
            "--data.batch_size",
            "10",
            "--data.val_size",
            "20",
            "--data.eval_batch_size",
            "20",
            "--trainer.max_steps",
            "4",
            "--trainer.val_check_interval",
            "2",
            "--trainer.enable_progress_bar",
            "false",
            "--trainer.enable_model_summary",
            "false",
            "--trainer.callbacks+=training.callbacks.OrthogonalityDrift",
            "--trainer.callbacks.every_n_steps=2",
            "--db",
            db,
        ]
    )
    store = Store(db)
    (run,) = store.list_runs()
    assert run.status == "finished" and run.family == "fcurnn"
    drift = store.metric_series(run.id, "analysis/orthogonality")
    # float32, n = 8: the rounded Haar start and 4 Cayley steps, n eps32 each
    assert [p.step for p in drift] == [0, 2, 4] and all(0 < p.value < roundoff(torch.float32, 8 * 5) for p in drift)


def test_paper_config_parses(capsys):
    config = REPO / "configs" / "papers" / "fcurnn_copying_T1000.yaml"
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", str(config), "--print_config"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "family: fcurnn" in out and "stiefel_cayley" in out and "class_path: datamodules.CopyingTask" in out
    assert config.read_text().startswith("# ")
