"""nnRNN against its mathematics: W = P (Lambda + T) P^T (Kerg et al. 2019; srnn-exprnn-facts section 2)."""

import math

import pytest
import torch
from finite_differences import assert_gradients_match_finite_differences
from tolerances import close, cond, norm, roundoff

from ortholab.datamodules import CopyingTask
from ortholab.models import FAMILIES, ConfigError, SequenceModel
from ortholab.models.cayley import skew_from_upper
from ortholab.models.matrix_exp import initial_skew
from ortholab.models.modrelu import modrelu
from ortholab.models.nnrnn import NNRNN, scaled_rotation_blocks, strictly_upper
from ortholab.models.recurrence import modrelu_recurrence_reference
from ortholab.models.sizing import parameter_count
from ortholab.training.module import RecurrentModule, build_layer

F64 = torch.float64


def _eye(n):
    return torch.eye(n, dtype=F64)


def normality_defect(w: torch.Tensor) -> float:
    """||W W^T - W^T W||_F: zero exactly for normal matrices."""
    return torch.linalg.matrix_norm(w @ w.t() - w.t() @ w).item()


def _exp_scale(layer: NNRNN) -> float:
    """(1 + ||L - L^T||_2)^2: P = exp(L - L^T) errs by n eps times this (exp_skew forms A^2; test_exprnn)."""
    a = skew_from_upper(layer.log_basis.detach().double(), layer.hidden_size)
    return (1 + torch.linalg.matrix_norm(a, 2).item()) ** 2


def _sorted_eigenvalues(values: torch.Tensor) -> torch.Tensor:
    return values[torch.argsort(values.angle() * 1000 + values.abs())]


def _expected_spectrum(layer: NNRNN) -> torch.Tensor:
    """alpha_i e^{+-i theta_i}, and alpha_last for odd n."""
    k = layer.theta.numel()
    alpha, theta = layer.alpha.detach().double(), layer.theta.detach().double()
    pairs = torch.polar(alpha[:k], theta)
    return torch.cat([pairs, pairs.conj(), alpha[k:].to(pairs.dtype)])


# the factors -----------------------------------------------------------------------------------------


def test_normal_part_is_scaled_rotation_blocks():
    theta, alpha = torch.tensor([0.3, 2.0], dtype=F64), torch.tensor([1.5, 0.5, 2.5], dtype=F64)
    lam = scaled_rotation_blocks(theta, alpha, 5)
    c0, s0, c1, s1 = math.cos(0.3), math.sin(0.3), math.cos(2.0), math.sin(2.0)
    expected = torch.tensor(
        [
            [1.5 * c0, -1.5 * s0, 0, 0, 0],
            [1.5 * s0, 1.5 * c0, 0, 0, 0],
            [0, 0, 0.5 * c1, -0.5 * s1, 0],
            [0, 0, 0.5 * s1, 0.5 * c1, 0],
            [0, 0, 0, 0, 2.5],
        ],
        dtype=F64,
    )
    # two roundings of entries <= 2.5: cos/sin (torch's and math's may differ by an ulp) and the product by alpha
    torch.testing.assert_close(lam, expected, rtol=0, atol=roundoff(F64, n=2, scale=2.5))
    assert torch.equal(scaled_rotation_blocks(theta, alpha[:2], 4), expected[:4, :4])  # even n: no 1x1 block
    t = strictly_upper(torch.arange(1.0, 11.0, dtype=F64), 5)
    assert torch.equal(t, t.triu(1)) and t[0, 1] == 1 and t[0, 4] == 4 and t[1, 2] == 5 and t[3, 4] == 10


@pytest.mark.parametrize("init, n", [("cayley", 12), ("random", 12), ("henaff", 9)])
def test_initial_w_is_p_lambda_p_transpose_and_orthogonal(init, n):
    torch.manual_seed(0)
    layer = NNRNN(3, n, init=init).double()
    assert torch.equal(layer.non_normal, torch.zeros(n * (n - 1) // 2, dtype=F64))  # T = 0
    assert torch.equal(layer.alpha, torch.ones((n + 1) // 2, dtype=F64))
    p, lam = layer.basis().detach(), layer.normal_part().detach()
    w = layer.recurrent_matrix().detach()
    # n = 9 or 12; P errs by n eps (1 + ||A||)^2 (||A||_2 <= pi at init), each product of W by n eps
    bound = roundoff(F64, n, scale=_exp_scale(layer))
    torch.testing.assert_close(w, p @ lam @ p.t(), rtol=0, atol=roundoff(F64, 2 * n))  # two products, norm 1
    torch.testing.assert_close(p.t() @ p, _eye(n), rtol=0, atol=bound)  # P = exp(L - L^T) orthogonal
    torch.testing.assert_close(w.t() @ w, _eye(n), rtol=0, atol=3 * bound)  # alpha = 1, T = 0: W orthogonal...
    assert normality_defect(w) < 6 * bound  # ...hence normal (W W^T and W^T W: 3 bound each), with unit-modulus
    torch.testing.assert_close(
        _sorted_eigenvalues(torch.linalg.eigvals(w)),  # eigenvalues e^{+-i theta}: normal W,
        _sorted_eigenvalues(_expected_spectrum(layer)),
        rtol=0,
        atol=3 * bound,
    )  # cond 1
    if init == "cayley":  # block-diagonal P commutes with Lambda's 2x2 rotations: W = Lambda
        torch.testing.assert_close(w, lam, rtol=0, atol=3 * bound)
    if init == "random":
        assert (w - lam).abs().max() > 0.1


def test_initialisation_as_the_code():
    torch.manual_seed(1)
    n, inputs = 400, 30
    theta_seed = torch.get_rng_state()
    layer = NNRNN(inputs, n)
    torch.set_rng_state(theta_seed)
    expected_l = initial_skew(n, "cayley")  # the code's default init, drawn first
    torch.testing.assert_close(skew_from_upper(layer.log_basis.detach(), n), expected_l.float())
    assert layer.theta.numel() == n // 2 and 0 <= layer.theta.min() and layer.theta.max() < 2 * math.pi
    assert layer.theta.mean().item() == pytest.approx(math.pi, abs=0.3)  # U(0, 2 pi)
    # U: Glorot normal, std sqrt(2 / (fan_in + fan_out)), no bias; modReLU b ~ U(-0.01, 0.01)
    assert layer.input_weight.std().item() == pytest.approx(math.sqrt(2 / (inputs + n)), rel=0.05)
    assert 0.009 < layer.bias.abs().max() <= 0.01 and layer.bias.min() < 0 < layer.bias.max()


def test_w_becomes_non_normal_when_t_moves():
    torch.manual_seed(2)
    layer = NNRNN(2, 8, init="random").double()
    # n = 8: W = P Lambda P^T orthogonal to 3 n eps (1 + ||A||)^2 (P, and two products), W W^T and W^T W each
    assert normality_defect(layer.recurrent_matrix().detach()) < 6 * roundoff(F64, 8, scale=_exp_scale(layer))
    x, target = torch.randn(4, 10, 2, dtype=F64), torch.randn(4, 10, 8, dtype=F64)
    optimizer = torch.optim.RMSprop(layer.parameter_groups()["non_normal"], lr=1e-2)
    for _ in range(5):  # only T trains
        optimizer.zero_grad()
        ((layer(x) - target) ** 2).mean().backward()
        optimizer.step()
    w = layer.recurrent_matrix().detach()
    assert layer.non_normal.abs().min() > 0  # every entry of T moved
    assert normality_defect(w) > 1e-3
    assert torch.linalg.matrix_norm(w.t() @ w - _eye(8)) > 1e-3  # no longer orthogonal


def test_t_outside_the_blocks_keeps_the_spectrum():
    # Lambda + T is block upper triangular when T avoids the (2i, 2i+1) entries: eigenvalues stay alpha e^{+-i theta}
    torch.manual_seed(3)
    n = 10
    layer = NNRNN(2, n, init="random").double()
    with torch.no_grad():
        layer.alpha.uniform_(0.5, 1.5)
        rows, cols = torch.triu_indices(n, n, offset=1)
        in_block = (cols == rows + 1) & (rows % 2 == 0)
        layer.non_normal.copy_(torch.where(in_block, 0.0, torch.randn(rows.numel(), dtype=F64)))
    w = layer.recurrent_matrix().detach()
    assert normality_defect(w) > 0.1
    eigenvalues, vectors = torch.linalg.eig(w)
    # Bauer-Fike: a non-normal W's eigenvalues move by cond(V) ||dW||, ||dW|| = 3 n eps (1 + ||A||)^2 ||W||, n = 10
    bound = roundoff(F64, 3 * n, scale=cond(vectors) * _exp_scale(layer) * torch.linalg.matrix_norm(w, 2).item())
    torch.testing.assert_close(
        _sorted_eigenvalues(eigenvalues), _sorted_eigenvalues(_expected_spectrum(layer)), rtol=0, atol=bound
    )
    with torch.no_grad():  # the code's element-wise mask also reaches inside the blocks, which moves eigenvalues
        layer.non_normal[in_block.nonzero()[0]] = 0.5
    moved = torch.linalg.eigvals(layer.recurrent_matrix().detach())
    assert not torch.allclose(
        _sorted_eigenvalues(moved), _sorted_eigenvalues(_expected_spectrum(layer)), rtol=0, atol=bound
    )  # beyond round-off (they move by ~0.2)


# the layer and its gradients ----------------------------------------------------------------------------


def _away_from_init(layer: NNRNN) -> NNRNN:
    with torch.no_grad():
        layer.log_basis.add_(torch.randn_like(layer.log_basis), alpha=0.5)
        layer.non_normal.normal_(0, 0.2)
        layer.alpha.uniform_(0.7, 1.1)
        layer.input_weight.mul_(3)
        layer.bias.uniform_(-0.8, 0.8)  # mixed signs: modReLU cuts some units off
    return layer


def test_layer_is_the_modrelu_recurrence_with_w_in_column_form():
    torch.manual_seed(4)
    layer = _away_from_init(NNRNN(3, 6, alpha_penalty=0.0)).double()
    x = torch.randn(4, 9, 3, dtype=F64)
    p = torch.linalg.matrix_exp(skew_from_upper(layer.log_basis.detach(), 6))
    lam = scaled_rotation_blocks(layer.theta.detach(), layer.alpha.detach(), 6)
    w = p @ (lam + strictly_upper(layer.non_normal.detach(), 6)) @ p.t()
    h, expected = torch.zeros(4, 6, dtype=F64), []
    for x_t in x.unbind(1):  # h_t = modReLU(U x_t + W h_{t-1}, b), h_0 = 0
        h = modrelu(x_t @ layer.input_weight.detach().t() + h @ w.t(), layer.bias.detach())
        expected.append(h)
    out = layer(x)
    # n = 6 times T = 9 steps; the two W differ by P's exps (n eps (1 + ||A||)^2), relative to ||h||, and a
    # non-normal W can grow an error by ||W||_2 a step (~1.4 here): ||W||^T
    growth = max(1.0, torch.linalg.matrix_norm(w, 2).item()) ** 9
    torch.testing.assert_close(
        out, torch.stack(expected, 1), **close(F64, 6 * 9, norm(out) * _exp_scale(layer) * growth)
    )
    assert (out == 0).any() and (out != 0).any()
    torch.testing.assert_close(layer(x, state_offsets=torch.zeros(4, 9, 6, dtype=F64)), out)


@pytest.mark.parametrize("n", [4, 5])
def test_layer_gradients_match_finite_differences(n):
    torch.manual_seed(5)
    layer = _away_from_init(NNRNN(2, n, alpha_penalty=0.0)).double()
    x = torch.randn(3, 7, 2, dtype=F64)
    names = [name for name, _ in layer.named_parameters()]

    def loss(*values):
        out = torch.func.functional_call(layer, dict(zip(names, values)), (x,))
        return (out**2).sum()

    # derived bound (tests/finite_differences.py), not gradcheck's rtol 1e-3: the loss sums 3 x 7 x n squares of
    # states, each T = 7 steps through W = P (Lambda + T) P^T (two products of n terms, P an exponential: 3 n) and
    # W h (n), and the input (2)
    assert_gradients_match_finite_differences(loss, list(layer.parameters()), ops=3 * 7 * n + 7 * (4 * n + 2))


def test_p_gradient_equals_the_codes_frechet_step():
    # the code: G = dL/dP, grad = (B^T G - G^T B) / 2, F = P Dexp_{-A}[grad], dL/dL = triu(F - F^T, 1), with the
    # Frechet derivative Dexp_X[E] the top-right block of exp([[X, E], [0, X]])
    torch.manual_seed(6)
    n = 6
    layer = _away_from_init(NNRNN(2, n, alpha_penalty=0.0)).double()
    x = torch.randn(3, 7, 2, dtype=F64)
    layer(x).square().sum().backward()
    a = skew_from_upper(layer.log_basis.detach(), n)
    p = torch.linalg.matrix_exp(a).requires_grad_()
    lam_t = layer.normal_part().detach() + layer.non_normal_part().detach()
    u = x.transpose(0, 1) @ layer.input_weight.detach().t()
    h = modrelu_recurrence_reference(u, p @ lam_t @ p.t(), layer.bias.detach(), torch.zeros(3, n, dtype=F64))
    h.square().sum().backward()
    btg = p.detach().t() @ p.grad
    grad = 0.5 * (btg - btg.t())
    block = torch.zeros(2 * n, 2 * n, dtype=F64)
    block[:n, :n] = block[n:, n:] = -a
    block[:n, n:] = grad
    frechet = p.detach() @ torch.linalg.matrix_exp(block)[:n, n:]
    code_grad = (frechet - frechet.t()).triu(1)
    rows, cols = torch.triu_indices(n, n, offset=1)
    # n = 6 times T = 7 steps of BPTT, then exp's Frechet derivative (conditioned as exp): relative to the gradient
    # and BPTT through the non-normal W grows an error by ||W||_2 a step (~1.2 here): ||W||^T. The reference's exp
    # of the block is conditioned by 1 + ||block||_2 (~||dL/dP||, ~1e3 here: the scaling and squaring's steps)
    growth = max(1.0, torch.linalg.matrix_norm(p.detach() @ lam_t @ p.detach().t(), 2).item()) ** 7
    block_cond = 1 + torch.linalg.matrix_norm(block, 2).item()
    tolerance = close(F64, n * 7, scale=norm(code_grad) * (_exp_scale(layer) * growth + block_cond))
    torch.testing.assert_close(layer.log_basis.grad, code_grad[rows, cols], **tolerance)


def test_alpha_penalty_enters_alphas_gradient_not_the_loss():
    torch.manual_seed(7)
    penalised = _away_from_init(NNRNN(2, 6, alpha_penalty=0.3)).double()
    plain = NNRNN(2, 6, alpha_penalty=0.0).double()
    plain.load_state_dict(penalised.state_dict())
    x = torch.randn(3, 5, 2, dtype=F64)
    out = penalised(x)
    torch.testing.assert_close(out, plain(x), rtol=0, atol=0)  # the forward pass is unchanged
    out.square().sum().backward()
    # the code's loss + delta * sum (alpha - 1)^2, differentiated by autograd
    (plain(x).square().sum() + 0.3 * (plain.alpha - 1).square().sum()).backward()
    for (name, a), b in zip(penalised.named_parameters(), plain.parameters()):
        # the same graph; alpha's gradient adds the penalty's once: one rounding, relative to the gradient
        torch.testing.assert_close(a.grad, b.grad, **close(F64, scale=norm(b.grad)), msg=name)
    assert penalised.alpha_penalty_term().item() == pytest.approx(0.3 * (penalised.alpha - 1).square().sum().item())
    assert (penalised.alpha - 1).abs().max() > 0.05
    penalised.zero_grad()
    with torch.no_grad():
        penalised(x)  # evaluation builds no graph: nothing to add


# sizes, groups, options ------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [128, 129])
def test_parameter_groups_and_honest_counts(n):
    inputs = 10
    layer = NNRNN(inputs, n)
    groups = layer.parameter_groups()
    assert sorted(groups) == ["non_normal", "orthogonal", "other", "spectrum"]
    grouped = [p for params in groups.values() for p in params]
    assert len(grouped) == len(set(map(id, grouped))) == len(list(layer.parameters()))
    sizes = {name: sum(p.numel() for p in params) for name, params in groups.items()}
    assert sizes == {
        "orthogonal": n * (n - 1) // 2,
        "spectrum": n,
        "non_normal": n * (n - 1) // 2,
        "other": n * inputs + n,
    }
    assert sum(sizes.values()) == n * n + n * inputs + n
    assert parameter_count("nnrnn", n, inputs, 9) == n * n + n * inputs + n + 9 * n + 9
    if n == 128:  # copying at the SRNN/nnRNN papers' d_h = 128; the code's PyTorch count would be 51,913 (it
        # stores log_P, P and UppT as full n x n Parameters and makes n thetas, using n/2)
        assert parameter_count("nnrnn", n, inputs, 9) == 18_953
    assert FAMILIES["nnrnn"] is NNRNN and layer.supports_state_offsets and not layer.embeds_symbols


def test_each_group_gets_its_optimizer_and_t_its_weight_decay():
    task = CopyingTask(seq_len=5, train_size=20, val_size=20, test_size=20, batch_size=10)
    rmsprop = {"name": "rmsprop", "lr": 1e-3, "alpha": 0.99}
    module = RecurrentModule(
        task.spec,
        family="nnrnn",
        hidden_size=6,
        optimizers={
            "orthogonal": {**rmsprop, "lr": 1e-6},
            "non_normal": {**rmsprop, "weight_decay": 1e-4},
            "default": rmsprop,
        },
    )
    optimizers = dict(zip(module.optimizer_specs, module.configure_optimizers()))
    assert sorted(optimizers) == ["non_normal", "orthogonal", "other", "spectrum"]
    assert optimizers["orthogonal"].param_groups[0]["lr"] == 1e-6
    assert optimizers["non_normal"].param_groups[0]["weight_decay"] == 1e-4
    assert optimizers["spectrum"].param_groups[0]["weight_decay"] == 0
    inputs, targets = task.make_split("train")
    before = {name: p.detach().clone() for name, p in module.named_parameters()}
    module.objective.loss(module(inputs[:10]), targets[:10], None).backward()
    for optimizer in optimizers.values():
        optimizer.step()
    assert all(not torch.equal(before[name], p) for name, p in module.named_parameters())


def test_config_errors_name_the_key():
    with pytest.raises(ConfigError, match=r"model\.family_args\.init = 'xavier'.*cayley"):
        NNRNN(3, 8, init="xavier")
    for bad in (-1e-4, "1e-4", True):
        with pytest.raises(ConfigError, match=r"model\.family_args\.alpha_penalty"):
            NNRNN(3, 8, alpha_penalty=bad)
    with pytest.raises(ConfigError, match=r"model\.family_args\.rho is not an option of family 'nnrnn'"):
        build_layer("nnrnn", 3, 8, {"rho": 4})


def test_sequence_model_meta_device_and_hint():
    model = SequenceModel(NNRNN(2, 7), 1, readout="last_step")
    assert model(torch.randn(4, 11, 2)).shape == (4, 1)
    with torch.device("meta"):
        meta = NNRNN(2, 7, init="random")
    assert sum(p.numel() for p in meta.parameters()) == 49 + 14 + 7
    assert "non_normal.weight_decay" in model.layer.nonfinite_hint()


def test_the_cli_trains_nnrnn_with_the_codes_optimizer_layout(tmp_path, monkeypatch):
    from ortholab.cli.main import main
    from ortholab.db import Store

    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    main(
        [
            "fit",
            "--model.family",
            "nnrnn",
            "--model.hidden_size",
            "6",
            "--model.optimizers",
            (
                "{orthogonal: {name: rmsprop, lr: 1.0e-6, alpha: 0.99}, non_normal: {name: rmsprop, "
                "lr: 1.0e-3, alpha: 0.99, weight_decay: 1.0e-4}, default: {name: rmsprop, lr: 1.0e-3}}"
            ),
            "--data",
            "datamodules.AddingTask",
            "--data.seq_len",
            "6",
            "--data.train_size",
            "40",
            "--data.batch_size",
            "10",
            "--data.val_size",
            "10",
            "--trainer.max_steps",
            "4",
            "--trainer.val_check_interval",
            "4",
            "--trainer.check_val_every_n_epoch",
            "null",
            "--trainer.enable_progress_bar",
            "false",
            "--trainer.enable_model_summary",
            "false",
            "--trainer.accelerator",
            "cpu",
            "--db",
            db,
        ]
    )
    (run,) = Store(db).list_runs()
    assert run.status == "finished" and run.family == "nnrnn" and run.steps == 4
    assert Store(db).get_run(run.id).info["parameter_counts"] == {
        "orthogonal": 15,
        "spectrum": 6,
        "non_normal": 15,
        "other": 6 * 2 + 6 + 6 + 1,
    }
