"""Probe passes on a fixed batch: ||dL/dh_t|| over t (scoRNN Figure 5) and one sequence's hidden states."""

from __future__ import annotations

import torch
from lightning.pytorch import Callback
from lightning.pytorch.utilities import rank_zero_warn

from ortholab.db.artifacts import GRAD_NORMS, HIDDEN_TRAJECTORY, NPY_MEDIA_TYPE, array_to_bytes
from ortholab.errors import OrthoLabWarning
from ortholab.training.callbacks.record import record_artifact


def hidden_gradient_norms(pl_module, inputs, targets, mask=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(||dL/dh_t||_F over batch and units for every t, the loss) on one batch; parameter gradients untouched.

    dL/dh_t is the total derivative through all later steps: the gradient w.r.t. zero offsets added to each
    h_t inside the recurrence (a family's `supports_state_offsets`).
    """
    model = pl_module.model
    encoded = model.encode(inputs)
    weight = model.readout.weight  # encoded inputs may be symbol ids: take dtype and device from the model
    offsets = torch.zeros(
        inputs.shape[0],
        inputs.shape[1],
        model.layer.output_size,
        dtype=weight.dtype,
        device=weight.device,
        requires_grad=True,
    )
    with torch.enable_grad():
        hidden = model.layer(encoded, state_offsets=offsets)
        loss = pl_module.objective.loss(model.read_out(hidden), targets, mask)
        (grad,) = torch.autograd.grad(loss, offsets)
    return torch.linalg.vector_norm(grad.double(), dim=(0, 2)), loss.detach()


def probe_batch(trainer, size: int) -> tuple[torch.Tensor, ...]:
    """The first `size` sequences of the validation split: the same probe at every snapshot, its floating tensors in
    the trainer's precision as a training batch's are (64-true: float64; symbol ids and masks as they are)."""
    tensors = trainer.datamodule.dataset("val").tensors
    return tuple(trainer.precision_plugin.convert_input(t[:size]) for t in tensors)


class _ProbeCallback(Callback):
    """Runs `probe(trainer, pl_module, step)` before the optimizer steps listed in `steps` (0 = untrained)."""

    def __init__(self, steps: list[int], probe_size: int):
        self.steps = set(steps)
        self.probe_size = probe_size

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.is_global_zero and trainer.global_step in self.steps:
            self.probe(trainer, pl_module, trainer.global_step)


class GradientNormProfile(_ProbeCallback):
    """Stores ||dL/dh_t||_F (over the probe batch and units) for every t as a `grad_norms` artifact.

    Only the probe pass keeps the hidden states' gradients (torch.autograd.grad on them); normal steps pay nothing.
    """

    def __init__(self, steps: list[int] = (0, 300), probe_size: int = 50):
        super().__init__(list(steps), probe_size)

    def probe(self, trainer, pl_module, step: int) -> None:
        if not pl_module.model.layer.supports_state_offsets:
            if not getattr(self, "_warned", False):
                rank_zero_warn(
                    f"GradientNormProfile: family {type(pl_module.model.layer).__name__} cannot expose "
                    "dL/dh_t (no state_offsets support); no gradient profile is recorded, the other analyses are "
                    "(a family of your own: docs/configs.md#a-family-of-your-own says how to give it)",
                    category=OrthoLabWarning,
                )
                self._warned = True
            return
        inputs, targets, *rest = (t.to(pl_module.device) for t in probe_batch(trainer, self.probe_size))
        norms, loss = hidden_gradient_norms(pl_module, inputs, targets, rest[0] if rest else None)
        record_artifact(
            trainer,
            GRAD_NORMS,
            "dL/dh_t",
            step,
            data=array_to_bytes(norms.cpu().numpy()),
            media_type=NPY_MEDIA_TYPE,
            meta={"probe_size": int(inputs.shape[0]), "loss": float(loss)},
        )


class HiddenTrajectory(_ProbeCallback):
    """Stores h_t of the first probe sequence, (T, features), as a `hidden_trajectory` artifact.

    Families with a fixed permutation of units (SRNN) provide `unshift_trajectory` to undo it, as the SRNN
    paper's Figure 5 shows the states.
    """

    def __init__(self, steps: list[int] = (0,), probe_size: int = 1):
        super().__init__(list(steps), probe_size)

    def probe(self, trainer, pl_module, step: int) -> None:
        inputs = probe_batch(trainer, 1)[0].to(pl_module.device)
        layer = pl_module.model.layer
        with torch.no_grad():
            states = layer(pl_module.model.encode(inputs))[0]
            unshift = getattr(layer, "unshift_trajectory", None)
            if unshift is not None:
                states = unshift(states)
        record_artifact(
            trainer,
            HIDDEN_TRAJECTORY,
            "h_t",
            step,
            media_type=NPY_MEDIA_TYPE,
            data=array_to_bytes(states.float().cpu().numpy()),
            meta={"unshifted": unshift is not None},
        )
