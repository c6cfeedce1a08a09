"""Mixed precision (`trainer.precision: bf16-mixed`, `16-mixed`): every family trains a few steps on the CPU with
every optimizer, its orthogonal/unitary map formed and kept in float32 (models/precision.py); what cannot run on
the CPU is refused in one line."""

import math

import lightning.pytorch as pl
import pytest
import torch
from devices import needs_cuda
from lightning.pytorch.plugins.precision import MixedPrecision
from test_cli import DEMO, TINY
from tolerances import cond, roundoff

from ortholab.cli.main import main
from ortholab.datamodules import CopyingTask
from ortholab.db import Store
from ortholab.models import FAMILIES
from ortholab.models.cayley import skew_from_upper
from ortholab.models.optimizers import OPTIMIZERS
from ortholab.training.module import RecurrentModule

N, STEPS = 8, 3
FAMILY_ARGS = {
    "scornn": {"rho": 4},
    "exprnn": {"trivialization": "dtriv", "rebase_every": 2},
}  # base <- B after step 2 of 3, under bf16
# the map each family keeps orthogonal/unitary (nnRNN: its basis P; W = P (Lambda + T) P^T is non-normal)
ORTHOGONAL_MAP = {
    family: (lambda layer: layer.orthogonal_map()) for family, cls in FAMILIES.items() if cls.keeps_orthogonal
}
# every optimizer takes a turn: the groups of the families, in order, cycle through them (fcurnn's recurrent group
# keeps its own stiefel_cayley); test_every_optimizer_takes_a_turn checks that none is left out
ELEMENTWISE = [name for name in OPTIMIZERS if name != "stiefel_cayley"]


def optimizer_plan() -> dict[str, dict[str, dict]]:
    plan, turn = {}, 0
    for family in sorted(FAMILIES):
        groups = RecurrentModule(
            CopyingTask(seq_len=3, copy_len=2).spec,
            family=family,
            hidden_size=N,
            family_args=FAMILY_ARGS.get(family, {}),
        ).parameter_groups()
        plan[family] = {}
        for group in sorted(groups):
            plan[family][group] = {"name": ELEMENTWISE[turn % len(ELEMENTWISE)], "lr": 1e-3}
            turn += 1
    plan["fcurnn"].pop("recurrent")  # the family's default: the Stiefel manifold's Cayley step
    return plan


PLAN = optimizer_plan()


class _Losses(pl.Callback):
    def __init__(self):
        self.losses = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.losses.append(float(outputs["loss"]))


def train(
    family: str, precision="32-true", plugins=None, grad_clip_norm=None, optimizers=None, steps=STEPS, accelerator="cpu"
):
    """(module, the parameters before, the training losses) after `steps` steps on a tiny copying task."""
    torch.manual_seed(0)
    task = CopyingTask(seq_len=3, copy_len=2, train_size=10 * steps, batch_size=10, val_size=10)
    module = RecurrentModule(
        task.spec,
        family=family,
        hidden_size=N,
        family_args=FAMILY_ARGS.get(family, {}),
        optimizers=optimizers or PLAN[family],
        grad_clip_norm=grad_clip_norm,
    )
    before = {name: p.detach().clone() for name, p in module.named_parameters()}
    losses = _Losses()
    trainer = pl.Trainer(
        max_steps=steps,
        logger=False,
        accelerator=accelerator,
        limit_val_batches=0,
        callbacks=[losses],
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        **({"plugins": plugins} if plugins else {"precision": precision}),
    )
    trainer.fit(module, datamodule=task)
    return module, before, losses.losses


def unitarity_error(w: torch.Tensor) -> float:
    w = w.detach().cpu()
    return torch.linalg.matrix_norm(w.mH @ w - torch.eye(w.shape[-1], dtype=w.dtype)).item()  # Frobenius


def conditioning(family: str, layer) -> float:
    """How much forming the family's map amplifies round-off (tests/tolerances.py): cond(I + A) for scoRNN's
    Cayley solve, (1 + ||A||)^2 for the exponentials (A^2 is formed), 1 for products of unitary factors (and
    scuRNN's transform, formed in complex128)."""
    if family == "scornn":
        return cond(torch.eye(N) + layer.cayley.skew().detach().cpu())
    if family in ("exprnn", "nnrnn"):
        skew = layer.skew() if family == "exprnn" else skew_from_upper(layer.log_basis, N)
        return (1 + torch.linalg.matrix_norm(skew.detach().cpu().double(), 2).item()) ** 2
    return 1.0


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_each_family_trains_under_bf16_mixed_with_its_map_in_float32(family):
    module, before, losses = train(family, "bf16-mixed")
    assert len(losses) == STEPS and all(math.isfinite(loss) for loss in losses), losses
    groups = module.parameter_groups()
    names = {id(p): name for name, p in module.named_parameters()}
    for group, params in groups.items():  # every group's optimizer stepped: each of its parameters moved
        unmoved = [names[id(p)] for p in params if torch.equal(p.detach(), before[names[id(p)]])]
        assert not unmoved, (group, unmoved)
    layer = module.model.layer
    x = torch.randn(4, 5, layer.input_size)
    with torch.no_grad():
        plain = layer(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            mixed = layer(x)
    if "cpu" in layer.autocast_devices:  # a library layer, left to autocast's own choice of kernels
        assert torch.isfinite(mixed).all()
    else:  # autocast off inside the layer: the very same float32 computation, W formed in float32
        assert mixed.dtype == torch.float32 and torch.equal(mixed, plain)
    if family in ORTHOGONAL_MAP:
        w = ORTHOGONAL_MAP[family](layer)
        assert w.dtype in (torch.float32, torch.complex64)
        # formed in float32 (n = 8 per product, a few factors), moved by STEPS multiplicative updates (the
        # Stiefel step, dtriv's re-basing) each adding as much; Frobenius: sqrt(n); bf16 would err ~ n 2^-8
        bound = roundoff(torch.float32, n=(STEPS + 1) * N, scale=math.sqrt(N) * conditioning(family, layer))
        assert unitarity_error(w) <= bound, (unitarity_error(w), bound)


@needs_cuda
@pytest.mark.parametrize("precision", ["16-mixed", "bf16-mixed"])
@pytest.mark.parametrize("family", sorted(FAMILIES))  # every family, every optimizer of PLAN
def test_mixed_precision_on_cuda(family, precision):
    module, before, losses = train(family, precision, accelerator="gpu")
    assert len(losses) == STEPS and all(math.isfinite(loss) for loss in losses), losses
    moved = {name: not torch.equal(p.detach().cpu(), before[name]) for name, p in module.named_parameters()}
    assert all(moved.values()), moved
    if family in ORTHOGONAL_MAP:
        layer = module.model.layer
        w = ORTHOGONAL_MAP[family](layer)
        bound = roundoff(torch.float32, n=(STEPS + 1) * N, scale=math.sqrt(N) * conditioning(family, layer))
        assert w.dtype in (torch.float32, torch.complex64) and unitarity_error(w) <= bound


def test_every_optimizer_takes_a_turn():
    named = {spec["name"] for groups in PLAN.values() for spec in groups.values()}
    named |= {spec["name"] for spec in FAMILIES["fcurnn"].default_optimizers.values()}
    assert named == set(OPTIMIZERS)


def test_16_mixed_steps_every_group_with_the_unscaled_gradient():
    # 16-mixed's GradScaler multiplies the loss by 2^16: each group's step must see the gradient divided back,
    # clipped to the true norm. nnRNN has four groups (three of them stepped outside Lightning's own step).
    sgd = {"default": {"name": "sgd", "lr": 0.1}}
    for clip in (None, 0.01):  # 0.01: far below the gradient's norm, so clipping decides the step
        _, start, _ = train("nnrnn", grad_clip_norm=clip, optimizers=sgd, steps=1)
        full, _, _ = train("nnrnn", grad_clip_norm=clip, optimizers=sgd, steps=1)
        scaler = torch.amp.GradScaler("cpu")
        half, _, losses = train(
            "nnrnn",
            plugins=[MixedPrecision("16-mixed", "cpu", scaler=scaler)],
            grad_clip_norm=clip,
            optimizers=sgd,
            steps=1,
        )
        assert math.isfinite(losses[0]) and scaler.get_scale() == 2.0**16  # no inf: nothing skipped
        reference = dict(full.named_parameters())
        for name, p in half.named_parameters():
            expected, got = reference[name].detach() - start[name], p.detach() - start[name]
            # float16 products in the readout and inputs (11 bits), an error carried through T = 5 steps of
            # n = 8 sums; a gradient left scaled would step 2^16 times too far
            bound = roundoff(torch.float16, n=5 * N, scale=expected.norm().item())
            assert (got - expected).norm().item() <= bound, (clip, name)


def _fit(tmp_path, *extra):
    db = f"sqlite:///{tmp_path / 'store.db'}"
    Store(db)
    main(["fit", "--config", DEMO, *TINY, "--db", db, "--runs_dir", str(tmp_path / "runs"), *extra])
    return db


@pytest.mark.parametrize(
    "precision, says",
    [
        (
            "16-mixed",
            "trainer.precision = 16-mixed (on the command line): float16 mixed precision runs on CUDA GPUs only",
        ),
        (
            "bf16-true",
            "trainer.precision = bf16-true (on the command line) stores the parameters themselves in 16 bits",
        ),
    ],
)
def test_what_the_cpu_cannot_train_is_refused_in_one_line(tmp_path, capsys, precision, says):
    if torch.cuda.is_available() and precision == "16-mixed":
        pytest.skip("the demo config names the CPU, but this machine could take --trainer.accelerator gpu")
    with pytest.raises(SystemExit) as exit_info:
        _fit(tmp_path, "--trainer.precision", precision)
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and len(err.splitlines()) == 1 and says in err
    assert "--trainer.precision bf16-mixed" in err  # the fix
    assert Store(f"sqlite:///{tmp_path / 'store.db'}").list_runs() == []  # refused before anything is recorded


def test_bf16_mixed_through_the_cli_records_a_finished_run(tmp_path, capsys):
    db = _fit(tmp_path, "--trainer.precision", "bf16-mixed")
    (run,) = Store(db).list_runs()
    assert run.status == "finished" and run.steps == 6 and math.isfinite(run.best)
