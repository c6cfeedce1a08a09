"""Every family trains five steps through `ortholab fit` on the CPU and on CUDA (the GPU check's first stage runs
the CUDA cases, tools/gpu_check.py): the run is recorded finished with finite losses, and the map each family keeps
orthogonal or unitary stays so to the round-off of the precision the map is formed in."""

import json
import math

import pytest
from devices import DEVICES
from map_probe import LastModule
from test_cli import DEMO
from test_precision import FAMILY_ARGS, ORTHOGONAL_MAP, PLAN, N, conditioning, unitarity_error
from tolerances import roundoff

from ortholab.cli.main import main
from ortholab.db import Store
from ortholab.models import FAMILIES

STEPS = 5


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_family_trains_five_steps_through_fit(tmp_path, family, device):
    db = f"sqlite:///{tmp_path / 'store.db'}"
    main(
        [
            "fit",
            "--config",
            DEMO,
            "--db",
            db,
            "--runs_dir",
            str(tmp_path / "runs"),
            "--model.family",
            family,
            "--model.hidden_size",
            str(N),
            "--model.family_args",
            json.dumps(FAMILY_ARGS.get(family, {})),
            "--model.optimizers",
            json.dumps(PLAN[family]),  # every group its own optimizer; fcurnn's Stiefel step
            "--data.seq_len",
            "5",
            "--data.train_size",
            "50",
            "--data.batch_size",
            "10",
            "--data.val_size",
            "10",
            "--data.eval_batch_size",
            "10",
            "--data.test_size",
            "10",
            "--trainer.max_steps",
            str(STEPS),
            "--trainer.val_check_interval",
            str(STEPS),
            "--trainer.log_every_n_steps",
            "1",
            "--trainer.accelerator",
            "gpu" if device == "cuda" else "cpu",
            "--trainer.devices",
            "1",
            "--trainer.callbacks",
            "[{class_path: map_probe.LastModule}]",
            "--trainer.enable_progress_bar",
            "false",
            "--trainer.enable_model_summary",
            "false",
        ]
    )
    store = Store(db)
    (run,) = store.list_runs()
    losses = [point.value for point in store.metric_series(run.id, "train/loss")]
    assert run.status == "finished" and run.steps == STEPS, (run.status, run.steps)
    assert len(losses) == STEPS and all(math.isfinite(loss) for loss in losses), losses
    module = LastModule.module
    assert LastModule.device == device
    if family in ORTHOGONAL_MAP:
        layer = module.model.layer
        w = ORTHOGONAL_MAP[family](layer)
        # formed in W's precision (n = N per product, a few factors) and moved by STEPS multiplicative updates
        # (Stiefel step, dtriv's re-basing), each adding as much; Frobenius: sqrt(N); conditioning as tolerances.py
        bound = roundoff(w.dtype, n=(STEPS + 1) * N, scale=math.sqrt(N) * conditioning(family, layer))
        assert unitarity_error(w) <= bound, (unitarity_error(w), bound)
