"""Stop at the first non-finite loss, gradient or updated parameter, keep the weights from before the bad
step, and say where and why."""

from __future__ import annotations

import copy
import math
import os
import re

import torch
from lightning.pytorch import Callback

from ortholab.errors import ReportedError
from ortholab.models.precision import autocast_off


class NonFiniteError(ReportedError, RuntimeError):
    """Training produced a NaN or an infinity; the message names the step, the parameter group and a likely cause."""


def groups_named_in(hint: str) -> set[str]:
    """The parameter groups whose optimizer keys a family's hint names (`model.optimizers.other.lr`,
    `non_normal.lr`)."""
    return set(re.findall(r"optimizers\.(\w+)", hint)) | set(re.findall(r"(\w+)\.lr\b", hint))


def family_hint(pl_module, group: str | None) -> str | None:
    """The family's own diagnosis (e.g. the modReLU singularity), when it concerns the loss or this group."""
    hint = pl_module.model.layer.nonfinite_hint()
    if not hint:
        return None
    named = groups_named_in(hint)
    return hint if group is None or not named or group in named else None


SECOND_MOMENTS = ("mean_square", "square_avg", "exp_avg_sq", "accumulator", "sum")  # g^2 averages steps divide by


def zero_second_moment(pl_module, group: str, optimizer) -> str | None:
    """0/0 in an adaptive step: with eps = 0, an entry of the group's running mean of g^2 that reached exactly 0 (its
    gradient stayed 0 for long enough that the decaying float32 average underflowed) divides a zero gradient by 0."""
    if optimizer is None:
        return None
    names = {id(p): name for name, p in pl_module.named_parameters()}
    for param_group in optimizer.param_groups:
        if param_group.get("eps", 0) != 0:
            continue
        for p in param_group["params"]:
            state = optimizer.state.get(p, {})
            for key in SECOND_MOMENTS:
                moment = state.get(key)
                zeros = int((moment == 0).sum()) if torch.is_tensor(moment) else 0
                if zeros:
                    return (
                        f"the optimizer's {key} of {names.get(id(p), 'a parameter')} reached exactly 0 in "
                        f"{zeros} {'entry' if zeros == 1 else 'entries'} (a gradient that stayed 0 until the "
                        f"decaying average underflowed) and with eps = 0 the step divided 0 by 0: give "
                        f"model.optimizers.{group}.eps a positive value (e.g. 1e-10, TF1's default)"
                    )
    return None


def likely_cause(pl_module, group: str | None, update: bool = False, optimizer=None) -> str:
    """Why `group`'s gradient (or, with `update`, its optimizer step) went non-finite; `group` None: the loss. The
    optimizer keys it names are those the config sets (model.optimizers.default.lr where a group takes the default)."""
    cause = _likely_cause(pl_module, group, update, optimizer)
    for name, key in getattr(pl_module, "optimizer_keys", {}).items():
        cause = cause.replace(f"model.optimizers.{name}.", f"{key}.")
    return cause


def _likely_cause(pl_module, group: str | None, update: bool = False, optimizer=None) -> str:
    if update and group is not None:  # a definite cause first: the families' hints are likelihoods
        zero = zero_second_moment(pl_module, group, optimizer)
        if zero:
            return zero
    hint = family_hint(pl_module, group)
    if hint:
        return hint
    if group is None:
        return "the loss itself is not finite: check the inputs and targets, or lower the learning rates"
    if update:
        return (
            f"the optimizer step of group {group!r} overflowed its parameters from finite gradients: lower "
            f"model.optimizers.{group}.lr"
        )
    return f"gradients of group {group!r} overflowed: lower model.optimizers.{group}.lr or set model.grad_clip_norm"


def float64_recheck(pl_module, batch) -> str:
    """The bad step's loss and gradient norms per group, recomputed in float64 on a copy of the model and the same
    batch: finite there, float32 overflowed where float64 did not (and the norms say how large the gradient was);
    not finite there either, the model itself diverged (with dropout, under another mask than the step's). "" when
    the model is float64 already or the recheck fails."""
    floating = [p for p in pl_module.parameters() if p.is_floating_point()]
    if batch is None or not floating or all(p.dtype == torch.float64 for p in floating):
        return ""
    try:
        model = copy.deepcopy(pl_module.model).double()
        inputs, targets, *rest = batch
        mask = rest[0] if rest else None
        inputs, targets = (t.double() if t.is_floating_point() else t for t in (inputs, targets))
        with torch.enable_grad(), autocast_off(inputs.device.type):
            loss = pl_module.objective.loss(model(inputs), targets, mask)
            if getattr(pl_module, "loss_reduction", "mean") == "sum":
                loss = loss * pl_module.objective.loss_weight(targets, mask)
            if not torch.isfinite(loss):
                return f"recomputed in float64 on the same batch, the loss is {float(loss.detach())} too"
            loss.backward()
        loss = float(loss.detach())
        copies = dict(model.named_parameters())
        names = {id(p): name for name, p in pl_module.model.named_parameters()}
        norms = {}
        for group, params in pl_module.parameter_groups().items():
            grads = [copies[names[id(p)]].grad for p in params if id(p) in names]
            grads = [g for g in grads if g is not None]
            if grads:
                norms[group] = float(torch.sqrt(sum(g.square().sum() for g in grads)))
    except Exception:  # a diagnosis only: the error it would add to must still be raised as it is
        return ""
    listed = ", ".join(f"{group} {norm:.4g}" for group, norm in norms.items())
    if not all(math.isfinite(norm) for norm in norms.values()):
        return (
            f"recomputed in float64 on the same batch, the loss is {loss:.4g} but the gradient is not "
            f"finite either ({listed})"
        )
    return (
        f"recomputed in float64 on the same batch, the loss is {loss:.4g} and the gradient norms are finite "
        f"({listed}): float64 (--trainer.precision 64) computes this step, and norms far above the run's usual "
        f"ones mean the gradient exploded, which model.grad_clip_norm bounds"
    )


def all_finite(tensors) -> bool:
    """Whether every value of every tensor is finite, read back once (one device sync, not one per tensor)."""
    flags = [torch.isfinite(t).all() for t in tensors]
    return not flags or bool(torch.stack(flags).all())


class NaNGuard(Callback):
    """After each backward pass: if the loss or a gradient is not finite, and after each group's optimizer step:
    if that group's parameters are not finite (restored first to their values before the step), save a checkpoint
    of the parameters before the bad step (`nan-step<k>.ckpt` in the run folder), mark the run failed with the
    reason, and stop.

    The values before a step are kept by copying each group's parameters into one reused buffer just before its
    optimizer steps (one copy of the weights; optimizer moments are not copied: the checkpoint's moments include the bad
    step's finite gradient)."""

    def __init__(self):
        self._handles: list = []
        self._before: dict[str, tuple[list, list[torch.Tensor]]] = {}  # group: (parameters, copies)
        self._stepped: list[str] = []
        self._step = 0  # the step of the current batch (Lightning counts it once the first group has stepped)
        self._checkpoint_step: int | None = None  # set while the checkpoint before the bad step is written
        self._batch = None  # the current training batch, which the float64 recheck reruns
        self._groups: dict[str, list[torch.Tensor]] = {}  # the module's parameter groups, from on_train_start

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._batch = batch  # a reference, no copy

    # loss and gradients, before any optimizer step ------------------------------------------------
    def on_after_backward(self, trainer, pl_module) -> None:
        self._stepped, self._step = [], trainer.global_step
        loss = getattr(pl_module, "last_loss", None)
        groups = self._groups or pl_module.parameter_groups()
        grads = {group: [p.grad for p in params if p.grad is not None] for group, params in groups.items()}
        if all_finite([*([] if loss is None else [loss]), *(g for gs in grads.values() for g in gs)]):
            return  # the usual step: one read back for the loss and every gradient
        if loss is not None and not torch.isfinite(loss):
            self._stop(trainer, pl_module, f"loss ({float(loss)})", None, recheck=True)
        for group, group_grads in grads.items():
            if not all_finite(group_grads):
                self._stop(trainer, pl_module, f"gradient of parameter group {group!r}", group, recheck=True)

    # parameters, right after each group's optimizer step -----------------------------------------
    def on_train_start(self, trainer, pl_module) -> None:
        self._remove_hooks()
        groups = self._groups = pl_module.parameter_groups()  # read once: the groups hold the same tensors all along
        for index, optimizer in enumerate(trainer.optimizers):  # one per non-empty group (RecurrentModule)
            params = [p for param_group in optimizer.param_groups for p in param_group["params"]]
            ids = {id(p) for p in params}
            group = next((name for name, ps in groups.items() if ps and {id(p) for p in ps} == ids), f"#{index}")
            self._handles += [
                optimizer.register_step_pre_hook(lambda *_, g=group, ps=params: self._keep(g, ps)),
                optimizer.register_step_post_hook(
                    lambda *_, g=group, ps=params, o=optimizer: self._check_update(trainer, pl_module, g, ps, o)
                ),
            ]

    @torch.no_grad()
    def _keep(self, group: str, params: list[torch.Tensor]) -> None:
        """Copy the group's parameters just before its step, into the previous step's buffers when they fit."""
        kept = self._before.get(group)
        if kept is None or [k.shape for k in kept[1]] != [p.shape for p in params]:
            self._before[group] = (params, [p.detach().clone() for p in params])
        else:
            torch._foreach_copy_(kept[1], [p.detach() for p in params])
        self._stepped.append(group)

    def _check_update(self, trainer, pl_module, group: str, params: list[torch.Tensor], optimizer=None) -> None:
        if all_finite(params):
            return
        self._restore()
        what = f"parameters of group {group!r} after its optimizer step"
        self._stop(trainer, pl_module, what, group, update=True, optimizer=optimizer)

    @torch.no_grad()
    def _restore(self) -> None:
        """Every group stepped in this batch gets back its values from before the step."""
        for group in self._stepped:
            params, copies = self._before[group]
            torch._foreach_copy_(params, copies)

    # stopping -------------------------------------------------------------------------------------
    def _stop(
        self,
        trainer,
        pl_module,
        what: str,
        group: str | None,
        update: bool = False,
        recheck: bool = False,
        optimizer=None,
    ) -> None:
        step = self._step
        reason = f"non-finite {what} at step {step}: {likely_cause(pl_module, group, update, optimizer)}"
        folder = trainer.loggers[0].log_dir if trainer.loggers else trainer.default_root_dir
        path = os.path.join(folder, "checkpoints", f"nan-step{step}.ckpt")
        self._checkpoint_step = step
        try:
            trainer.save_checkpoint(path, weights_only=False)  # the parameters are those before the bad step
        finally:
            self._checkpoint_step = None
        # after the checkpoint: the recheck's forward may draw random numbers (dropout) the checkpoint should not see
        diagnosis = float64_recheck(pl_module, self._batch) if recheck else ""
        reason += f"; {diagnosis}" if diagnosis else ""
        for logger in trainer.loggers:
            if hasattr(logger, "record_failure"):
                logger.record_failure(f"{reason} (checkpoint before the step: {path})")
        raise NonFiniteError(f"{reason}. Checkpoint before the step: {path}")

    def on_save_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        """The checkpoint before a bad step counts only the steps its weights hold (Lightning has already counted
        the bad one when a later group's update overflowed)."""
        if self._checkpoint_step is None:
            return
        checkpoint["global_step"] = self._checkpoint_step
        progress = checkpoint["loops"]["fit_loop"]["epoch_loop.manual_optimization.optim_step_progress"]
        for counts in (progress["total"], progress["current"]):
            counts["ready"] = counts["completed"] = counts["completed"] - (trainer.global_step - self._checkpoint_step)

    def _remove_hooks(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def teardown(self, trainer, pl_module, stage: str) -> None:
        self._remove_hooks()
        self._before, self._stepped, self._batch, self._groups = {}, [], None, {}
