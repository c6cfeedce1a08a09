"""The LightningModule: a family's sequence model trained on a task, one optimizer per parameter group."""

from __future__ import annotations

import math
from typing import Any

import lightning.pytorch as pl
import torch
import torchmetrics
from lightning.pytorch.trainer.states import TrainerFn

from ortholab import aliases
from ortholab.datamodules.spec import TaskSpec
from ortholab.db.provenance import code_version, command_line, environment
from ortholab.errors import OWN_OBJECTIVE, did_you_mean
from ortholab.models import FAMILIES, ConfigError, SequenceModel
from ortholab.models.optimizers import DEFAULT_OPTIMIZERS, build_optimizer, group_specs, optimizer_defaults
from ortholab.models.precision import autocast_off
from ortholab.models.sequence import input_adapter as build_input_adapter
from ortholab.models.stack import build_layers
from ortholab.training.callbacks.record import record_metrics
from ortholab.training.checkpoint_files import check_checkpoint_file
from ortholab.training.cuda_graphs import GraphedTraining, check_graphs_allowed
from ortholab.training.family_options import recorded_family_args
from ortholab.training.objectives import OBJECTIVES


def check_family(family: str, family_args: dict) -> type:
    """The family's class, once its name and options are known to be valid (errors name the key to change)."""
    recorded_family_args(family, family_args)  # names and types checked by the argument parser (family_options.py),
    # the R-Transformer's cell_args too
    return FAMILIES[family]


def build_layer(
    family: str, input_size: int, hidden_size: int, family_args: dict, num_layers: int = 1, dropout: float = 0.0
):
    """The family's recurrent layer (or `num_layers` stacked), with config errors that name the key to change."""
    return build_layers(check_family(family, family_args), input_size, hidden_size, family_args, num_layers, dropout)


def check_groups_cover_the_layer(layer: torch.nn.Module, groups: dict[str, list], family: str) -> None:
    """Every trainable parameter of the layer in exactly one group (models/base.py's promise): one left out would
    never be trained, one given twice stepped twice. A family of the user's own is where this can go wrong."""
    for group, params in groups.items():
        wrong = next((p for p in params if not isinstance(p, torch.nn.Parameter)), None)
        if wrong is not None or isinstance(params, (str, torch.Tensor)):
            raise ConfigError(
                f"model.family = {family!r}: its parameter_groups()[{group!r}] must be a list of the layer's "
                f"nn.Parameter objects (self.weight, not its name); it holds {params if wrong is None else wrong!r}"
            )
    counts: dict[int, int] = {}
    for param in (p for params in groups.values() for p in params):
        counts[id(param)] = counts.get(id(param), 0) + 1
    trainable = [(name, p) for name, p in layer.named_parameters() if p.requires_grad]
    left_out = [name for name, p in trainable if id(p) not in counts]
    twice = [name for name, p in trainable if counts.get(id(p), 0) > 1]
    if left_out or twice:
        wrong = f"leaves out {left_out} (never trained)" if left_out else f"holds {twice} in more than one group"
        raise ConfigError(
            f"model.family = {family!r}: its parameter_groups() {wrong}; each trainable parameter of the layer "
            f"must be in exactly one group"
        )


def checkpoint_model_mismatch(saved: dict, model: dict) -> tuple[str, Any, Any] | None:
    """(key, the checkpoint's value, the config's) for the first of family, hidden_size and num_layers where a
    checkpoint's hyperparameters and a model config differ (a config's 'auto' size matches any); None if none."""
    for key, default in (("family", None), ("hidden_size", None), ("num_layers", 1)):
        theirs, ours = saved.get(key, default), model.get(key, default)
        if theirs is not None and ours != "auto" and theirs != ours:
            return key, theirs, ours
    return None


def floating_dtype(state: dict) -> torch.dtype | None:
    """The one dtype of a state dict's floating-point tensors (float64 for a 64-true run); None if none or several."""
    dtypes = {t.dtype for t in state.values() if isinstance(t, torch.Tensor) and t.is_floating_point()}
    return dtypes.pop() if len(dtypes) == 1 else None


class RecurrentModule(pl.LightningModule):
    """Trains `family` on the task described by `task` (linked from the datamodule's TaskSpec by the CLI).

    Args:
        task: the task's description; the CLI links it from the datamodule, never give it by hand.
        family: a registered recurrent family (`ortholab list families`).
        hidden_size: the hidden state's size n, or "auto" to size the model to model.param_budget.
        family_args: the family's own options, checked against its constructor's types; `ortholab fit
            --model.family_args.help FAMILY` (or `ortholab list families --family FAMILY`) lists them with types,
            defaults and one line each.
        optimizers: {group: {name: ..., lr: ..., other kwargs}} for the family's parameter groups (`ortholab list
            families` shows them); a `default` entry serves every group not named. Each group has its own
            optimizer, as the papers train A, D's phases and the rest with different methods.
        grad_clip_norm: clip the gradient of all parameters to this total norm before stepping (None: no
            clipping, as the papers' scoRNN/scuRNN/oRNN code).
        param_budget: a parameter count: with hidden_size "auto", the n whose count (layer and readout) is closest to
            it, which may lie above it; with an integer hidden_size, a check that it is that n.
        num_layers: stack that many layers of the family.
        dropout: dropout on the features between stacked layers.
        input_adapter: "default" (symbol ids one-hot, real inputs as they are), "embedding" (symbol ids through
            nn.Embedding(vocab, size)) or "linear" (real inputs through nn.Linear(channels, size)); its parameters
            train in `other` (models/sequence.py).
        input_adapter_size: the features the layer then reads.
        loss_reduction: "mean" (the objective's average, the default) or "sum": backpropagate the training loss
            summed over the terms it averages (the valid steps of a frame-wise loss), as the R-Transformer and TCN
            music scripts do; with plain SGD it sets the step size, so their learning rates assume it. Logged and
            evaluated losses stay means either way.
        readout_init: how the linear readout starts: "glorot" (Glorot-uniform, zero bias: tf.layers.dense),
            "torch" (nn.Linear's own), "xavier_normal", "kaiming_normal" or "lecun_normal" (flax's nn.Dense, the
            LRU's code) (zero bias each); null: the family's code's (models/sequence.py READOUT_INITS). The SRNN
            paper's baselines set "torch", as its code.
        cuda_graphs: capture the training pass (forward and backward) in CUDA graphs, one per batch shape, and
            replay it at every step (training/cuda_graphs.py); one CUDA device, 32-true or 64-true precision.
    """

    def __init__(
        self,
        task: dict | TaskSpec | None = None,
        family: str = "scornn",
        hidden_size: int | str = 128,
        family_args: dict[str, Any] | None = None,
        optimizers: dict[str, dict[str, Any]] | None = None,
        grad_clip_norm: float | None = None,
        param_budget: int | None = None,
        num_layers: int = 1,
        dropout: float = 0.0,
        input_adapter: str = "default",
        input_adapter_size: int | None = None,
        loss_reduction: str = "mean",
        readout_init: str | None = None,
        cuda_graphs: bool = False,
    ):
        super().__init__()
        if task is None:
            raise ConfigError("model.task is missing: it comes from the datamodule (give `data:` in the config)")
        self.spec = task if isinstance(task, TaskSpec) else TaskSpec(**task)
        adapter = build_input_adapter(input_adapter, self.spec.input_size, self.spec.symbolic, input_adapter_size)
        # what the recurrent layer reads, and the adapter's share of a parameter budget
        self._layer_input_size = self.spec.input_size if adapter is None else input_adapter_size
        self._adapter_parameters = 0 if adapter is None else sum(p.numel() for p in adapter.parameters())
        hidden_size = self._resolve_hidden_size(hidden_size, param_budget, family, dict(family_args or {}), num_layers)
        self.save_hyperparameters(
            {
                "task": self.spec.to_dict(),
                "family": family,
                "hidden_size": hidden_size,
                "family_args": dict(family_args or {}),
                "optimizers": optimizers or DEFAULT_OPTIMIZERS,
                "grad_clip_norm": grad_clip_norm,
                "param_budget": param_budget,
                "num_layers": num_layers,
                "dropout": dropout,
                "input_adapter": input_adapter,
                "input_adapter_size": input_adapter_size,
                "loss_reduction": loss_reduction,
                "readout_init": readout_init,
                "cuda_graphs": cuda_graphs,
            }
        )
        self.automatic_optimization = False  # several optimizer types, one per parameter group
        layer = build_layer(family, self._layer_input_size, hidden_size, dict(family_args or {}), num_layers, dropout)
        self.model = SequenceModel(
            layer,
            self.spec.output_size,
            readout=self.spec.readout,
            vocab_size=self.spec.input_size if self.spec.symbolic else None,
            adapter=adapter,
            readout_init=readout_init,
        )
        # each group's optimizer, and the config key it came from (the one a hint tells a user to change)
        self.optimizer_specs, self.optimizer_keys = self._optimizer_specs(optimizers or DEFAULT_OPTIMIZERS)
        if self.spec.loss not in OBJECTIVES:
            raise ConfigError(
                f"task {self.spec.name!r} asks for loss {self.spec.loss!r}, which no registered objective provides; "
                f"{did_you_mean(self.spec.loss, OBJECTIVES)}choose one of {sorted(OBJECTIVES)} (one of your own: "
                f"{OWN_OBJECTIVE}){aliases.unimportable_note()}"
            )
        if OBJECTIVES[self.spec.loss].classes and self.spec.output_size < 2:
            raise ConfigError(
                f"task {self.spec.name!r}: loss {self.spec.loss!r} scores classes, and its TaskSpec output_size = "
                f"{self.spec.output_size} gives one; a two-class task has output_size 2 (or loss 'mse' on one output)"
            )
        self.objective = OBJECTIVES[self.spec.loss](self.spec)
        if loss_reduction not in ("mean", "sum"):
            raise ConfigError(f"model.loss_reduction = {loss_reduction!r}; give 'mean' or 'sum'")
        if loss_reduction == "sum" and not self.objective.averages_valid_steps:
            raise ConfigError(
                f"model.loss_reduction: sum applies to losses averaged over valid steps; task "
                f"{self.spec.name!r}'s loss {self.spec.loss!r} is not one: use 'mean'"
            )
        self.loss_reduction = loss_reduction
        self.stage_metrics = torch.nn.ModuleDict(
            {f"{stage}_metrics": torch.nn.ModuleDict(self._metrics_of(stage)) for stage in ("train", "val", "test")}
        )
        self.grad_clip_norm = grad_clip_norm
        self.graphed: GraphedTraining | None = None  # made at the start of training when cuda_graphs is set

    def _metrics_of(self, stage: str) -> dict[str, torchmetrics.Metric]:
        """The objective's metrics; for an evaluation also its loss, the mean over the terms each batch's loss
        averages (a masked loss: over valid steps, so a split's loss equals its frame-weighted figure)."""
        metrics = self.objective.metrics()
        if stage == "train":  # training logs each batch's loss as it is
            return metrics
        # NaN replaced by NaN: a NaN loss shows, not dropped ('disable' would also drop the weights, torchmetrics 1.9)
        return {"loss": torchmetrics.MeanMetric(nan_strategy=float("nan")), **metrics}

    def _resolve_hidden_size(self, hidden_size, param_budget, family, family_args, num_layers) -> int:
        """`hidden_size: auto` with `param_budget: N`: the size whose parameter count is closest to N (the
        papers compare families at equal budgets)."""
        if hidden_size != "auto":
            if not isinstance(hidden_size, int) or isinstance(hidden_size, bool):
                raise ConfigError(
                    f"model.hidden_size = {hidden_size!r}; give an integer or 'auto' with model.param_budget"
                )
            if param_budget is not None and hidden_size != self._budget_size(
                family, family_args, param_budget, num_layers
            ):
                raise ConfigError(
                    f"model.param_budget = {param_budget} only applies with model.hidden_size: auto "
                    f"(hidden_size is {hidden_size!r})"
                )
            return hidden_size  # (with the budget: the size a checkpoint of an auto-sized run was built with)
        if param_budget is None:
            raise ConfigError(
                "model.hidden_size is 'auto' but model.param_budget is not set; give the budget "
                "(e.g. --model.param_budget 16000) or an integer hidden size"
            )
        return self._budget_size(family, family_args, param_budget, num_layers)

    def _budget_size(self, family, family_args, param_budget, num_layers) -> int:
        from ortholab.models.sizing import hidden_size_for_budget

        check_family(family, family_args)
        if self._adapter_parameters and param_budget <= self._adapter_parameters:
            raise ConfigError(
                f"model.param_budget = {param_budget} leaves nothing for the recurrent layer: the input "
                f"adapter alone has {self._adapter_parameters} parameters; raise the budget or lower "
                f"model.input_adapter_size"
            )
        param_budget -= self._adapter_parameters  # the adapter's size does not depend on the hidden size
        return hidden_size_for_budget(
            family, param_budget, self._layer_input_size, self.spec.output_size, family_args, num_layers=num_layers
        )

    # parameter groups and their optimizers -------------------------------------------------------
    def parameter_groups(self) -> dict[str, list[torch.nn.Parameter]]:
        """The layer's groups, with the readout in `other`."""
        groups = {name: list(params) for name, params in self.model.layer.parameter_groups().items()}
        check_groups_cover_the_layer(self.model.layer, groups, self.hparams.family)
        groups.setdefault("other", []).extend(self.model.readout.parameters())
        if self.model.adapter is not None:
            groups["other"].extend(self.model.adapter.parameters())
        return groups

    def _optimizer_specs(self, optimizers: dict[str, dict]) -> tuple[dict[str, dict], dict[str, str]]:
        """Each group's optimizer spec (models/optimizers.group_specs) and the config key that sets it."""
        groups = self.parameter_groups()
        family_defaults = self.model.layer.default_optimizers  # e.g. the Stiefel step a unitary W needs
        specs = group_specs(groups, optimizers, family_defaults, family=self.hparams.family)
        serves = {name: name if name in optimizers or name in family_defaults else "default" for name in groups}
        return specs, {name: f"model.optimizers.{entry}" for name, entry in serves.items()}

    def configure_optimizers(self):
        groups = self.parameter_groups()
        return [
            build_optimizer(groups[name], spec, f"model.optimizers.{name}")
            for name, spec in self.optimizer_specs.items()
            if groups[name]
        ]

    def parameter_counts(self) -> dict[str, int]:
        return {name: sum(p.numel() for p in params) for name, params in self.parameter_groups().items()}

    # the run's description in the store -------------------------------------------------------
    def _code(self) -> dict:
        """This start's code and machine, the GPU named when it trains on one, else torch's thread count."""
        code = code_version()
        device = self.trainer.strategy.root_device
        if device.type == "cuda":
            code["machine"] += f", {torch.cuda.get_device_name(device)}"
        elif device.type == "cpu":  # fewer than the cores where fit found other work on them (ortholab/threads.py)
            threads = torch.get_num_threads()
            code["machine"] += f", {threads} torch thread{'s' if threads != 1 else ''}"
        return code

    def setup(self, stage: str) -> None:
        if self.trainer.precision == "64-true":  # a Metric keeps float32 states through .double(): set_dtype does it
            for metric in self.stage_metrics.modules():
                if isinstance(metric, torchmetrics.Metric):
                    metric.set_dtype(torch.float64)
        if stage == "fit" and self.hparams.cuda_graphs:
            strategy = self.trainer.strategy
            check_graphs_allowed(strategy.root_device.type, self.trainer.precision, self.trainer.world_size)
        counts = self.parameter_counts()
        main_metric, baseline = self.spec.main_metric, self.spec.baseline
        if stage == "test":  # a test run ranks by the same metric measured on the test split, against its baseline
            main_metric, baseline = main_metric.replace("val/", "test/", 1), self.spec.baseline_for("test")
        self._run_info = {
            "parameter_counts": counts,
            "task_spec": self.spec.to_dict(),
            "optimizers": self.optimizer_specs,
            "code": [self._code()],  # the store keeps each start's
            "command": command_line(),
            "environment": environment(),  # $ORTHOLAB_DATA and the like: `--run ID` notes a shell without them
        }  # the first start's is kept (db/logger.py)
        for logger in self.loggers:
            if hasattr(logger, "describe_run"):
                logger.describe_run(
                    family=self.hparams.family,
                    task=self.spec.name,
                    main_metric=main_metric,
                    main_metric_mode=self.spec.main_metric_mode,
                    baseline=baseline,
                    parameter_count=sum(counts.values()),
                    world_size=self.trainer.world_size,
                    info=self._run_info,
                )

    def on_train_start(self) -> None:
        """Record the run's planned length: `ortholab runs` shows progress against it and an ETA."""
        if self.hparams.cuda_graphs and self.graphed is None:
            self.graphed = GraphedTraining(self.model)
        total = self.trainer.estimated_stepping_batches  # max_steps, or max_epochs x batches per epoch
        plan = {
            "total_steps": int(total) if math.isfinite(total) else None,
            "steps_per_epoch": int(self.trainer.num_training_batches)
            if math.isfinite(self.trainer.num_training_batches)
            else None,
            "max_epochs": self.trainer.max_epochs if (self.trainer.max_epochs or -1) > 0 else None,
        }
        for logger in self.loggers:
            if hasattr(logger, "describe_run"):
                logger.describe_run(info={**getattr(self, "_run_info", {}), "plan": plan})

    @type(vars(pl.LightningModule)["load_from_checkpoint"])  # Lightning's classmethod, refused on an instance
    def load_from_checkpoint(cls, checkpoint_path, *args, **kwargs):
        """Lightning's `load_from_checkpoint`, but a file that is no Lightning checkpoint (a text file, a
        config.yaml, a tensor saved by hand) is a ValueError naming it, not Lightning's `IndexError: pop from empty
        list` or `KeyError`."""
        check_checkpoint_file(checkpoint_path)
        return super().load_from_checkpoint(checkpoint_path, *args, **kwargs)

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        """Refuse, before any weight is copied, a checkpoint of another model; bring in changed optimizer options.
        Loaded without a trainer (`load_from_checkpoint`), a module saved in float64 is float64 (a 64-true run's)."""
        fitting = self._trainer is None or self.trainer.state.fn == TrainerFn.FITTING  # (no trainer: as a fit would)
        self.refuse_foreign_checkpoint(checkpoint, continues_training=fitting)
        self._changed_optimizer_options(
            (checkpoint.get("hyper_parameters") or {}).get("optimizers"), checkpoint.get("optimizer_states") or []
        )
        # Lightning loads the state dict next: a 64-true run's weights stay float64 (other dtypes load as float32,
        # which a 32-bit trainer's batches match; a trainer's 64-true or half precision converts the module itself)
        if self._trainer is None and floating_dtype(checkpoint.get("state_dict") or {}) == torch.float64:
            self.to(dtype=torch.float64)

    def refuse_foreign_checkpoint(self, checkpoint: dict, continues_training: bool = True) -> None:
        """ConfigError for a checkpoint of another model (family, size, layers, scuRNN's side of D) or task, and, when
        it `continues_training` (fit), of another optimizer for a group; the CLI asks before it records anything, so
        a refused resume leaves its run as it was."""
        saved = checkpoint.get("hyper_parameters") or {}
        if mismatch := checkpoint_model_mismatch(saved, self.hparams):
            key, theirs, ours = mismatch
            raise ConfigError(
                f"--ckpt_path: the checkpoint holds a model with model.{key} = {theirs!r}, this config builds "
                f"model.{key} = {ours!r}; use the config the checkpoint was trained with (`ortholab fit --resume "
                f"RUN_ID` reuses a run's own config) or a checkpoint of this model"
            )
        self._check_scurnn_side(checkpoint.get("state_dict") or {})
        theirs = (saved.get("task") or {}).get("name")
        if theirs is not None and theirs != self.spec.name:
            raise ConfigError(
                f"--ckpt_path: the checkpoint was trained on task {theirs!r}, this config's data is "
                f"task {self.spec.name!r}; give a checkpoint of this task or the matching data config"
            )
        states = checkpoint.get("optimizer_states") if continues_training else None  # validate, test: weights only
        for name, _, old, new in self._optimizer_pairs(saved.get("optimizers"), states):
            if old["name"] != new["name"]:
                raise ConfigError(
                    f"{self.optimizer_keys[name]}.name: the checkpoint's group {name!r} was trained with "
                    f"{old['name']!r}, its state cannot continue as {new['name']!r}; keep {old['name']!r} or start a "
                    f"new run"
                )

    def _optimizer_pairs(self, saved: dict | None, states: list[dict] | None):
        """(group, its saved optimizer state, the spec it was trained with, the spec this config gives) for each
        built group; none where the checkpoint holds no optimizer, or a spec this version no longer reads."""
        if not saved or not states:
            return
        try:
            before, _ = self._optimizer_specs(saved)
        except ConfigError:  # a spec this version no longer reads: the restored options stay as they were
            return
        built = [name for name, params in self.parameter_groups().items() if params and name in self.optimizer_specs]
        for name, state in zip(built, states):  # configure_optimizers' order, the order Lightning saved them in
            yield name, state, before[name], self.optimizer_specs[name]

    def _changed_optimizer_options(self, saved: dict | None, states: list[dict]) -> None:
        """A resume whose config changes an optimizer option (`fit --resume ID --model.optimizers.default.eps 1e-10`):
        the new value goes into the optimizer state about to be restored, which would bring back the old one. Only
        options the config changed: an lr a schedule lowered during training stays as restored."""
        for _, state, old, new in self._optimizer_pairs(saved, states):  # another optimizer: refused before
            defaults = optimizer_defaults(new["name"])
            changed = {
                key: value
                for key, value in {**defaults, **new}.items()
                if key != "name" and {**defaults, **old}.get(key) != value
            }
            for group in state.get("param_groups", []):
                group.update({key: value for key, value in changed.items() if key in group})

    def _check_scurnn_side(self, state: dict) -> None:
        """scuRNN weights trained with D on one side are another function on the other (models/scurnn.py); a
        checkpoint from before `d_side` existed has no `d_on_left` and was trained with D on the right."""
        for key, ours in self.state_dict().items():
            if not key.endswith("d_on_left"):
                continue
            trained_left = bool(state[key]) if key in state else False
            if trained_left != bool(ours):
                side = "left" if trained_left else "right"
                since = "" if key in state else ", the only side before 2026-11-23"
                raise ConfigError(
                    f"--ckpt_path: this scuRNN checkpoint was trained with D on the {side}{since}; "
                    f"load it with model.family_args.d_side: {side}"
                )
            state.setdefault(key, ours.clone())

    # steps ------------------------------------------------------------------------------------
    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if inputs.is_floating_point() and inputs.dtype != self.dtype:  # a 64-true run's model given float32 inputs
            inputs = inputs.to(self.dtype)  # (outside its trainer, whose precision plugin casts them)
        return self.model(inputs) if self.graphed is None else self.graphed(inputs)

    def _shared_step(self, batch, stage: str) -> torch.Tensor:
        inputs, targets, *rest = batch  # an optional third element: the (B, T) mask of valid steps
        mask = rest[0] if rest else None
        outputs = self(inputs)
        loss = self.objective.loss(outputs, targets, mask)
        metrics = self.stage_metrics[f"{stage}_metrics"]
        on_step = stage == "train"  # training metrics per batch; evaluation metrics over the whole split
        if on_step:
            self.log("train/loss", loss, on_step=True, on_epoch=False, prog_bar=True, batch_size=inputs.shape[0])
        else:
            metrics["loss"].update(loss.detach(), self.objective.loss_weight(targets, mask))
        self.objective.update(dict(metrics.items()), outputs.detach(), targets, mask)
        to_loggers = on_step or self.trainer.state.fn != TrainerFn.FITTING  # fit's: on_validation_epoch_end
        for name, metric in metrics.items():
            self.log(
                f"{stage}/{name}",
                metric,
                on_step=on_step,
                on_epoch=not on_step,
                prog_bar=True,
                logger=to_loggers,
                add_dataloader_idx=False,
            )
        return loss

    def on_validation_epoch_end(self) -> None:
        """Record fit's evaluation metrics at the global step, the optimizer steps taken (the weights measured; the
        step of the checkpoint saved on them and of the analyses), where Lightning would record them one lower."""
        if self.trainer.state.fn != TrainerFn.FITTING or self.trainer.sanity_checking:
            return
        values = {
            f"{stage}/{name}": float(metric.compute())
            for stage in ("val", "test")
            for name, metric in self.stage_metrics[f"{stage}_metrics"].items()
            if metric.update_called
        }
        record_metrics(self.trainer, values, self.trainer.global_step)  # (test/*: with --test_every_validation)

    def training_step(self, batch, batch_idx):
        optimizers = self.optimizers()
        optimizers = optimizers if isinstance(optimizers, list) else [optimizers]
        loss = self._shared_step(batch, "train")
        self.last_loss = loss.detach()  # read by the NaN guard after backward
        to_backpropagate = loss
        if self.loss_reduction == "sum":  # the mean times its term count: the sum the music scripts backpropagate
            _, targets, *rest = batch
            to_backpropagate = loss * self.objective.loss_weight(targets, rest[0] if rest else None)
        for opt in optimizers:
            opt.zero_grad()
        # Lightning runs training_step under autocast (bf16-mixed, 16-mixed); backward and the steps run outside
        # it, as PyTorch's AMP recipe has them: the BPTTs and the Cayley/exp updates keep the parameters' precision
        with autocast_off(self.device.type):
            self.manual_backward(to_backpropagate)
            self._step_optimizers(optimizers)
            self.model.layer.after_optimizer_step()
        return loss

    def _step_optimizers(self, optimizers: list) -> None:
        """Clip, then step every group's optimizer; with 16-mixed's GradScaler, every group through the scaler."""
        scaler = getattr(self.trainer.precision_plugin, "scaler", None)  # None unless 16-mixed
        if self.grad_clip_norm is not None:  # over all parameters at once, as torch.nn.utils.clip_grad_norm_
            # the gradients are still multiplied by the scaler's factor s: clipping them to s * norm clips to norm
            factor = scaler.get_scale() if scaler is not None else 1.0
            torch.nn.utils.clip_grad_norm_(self.parameters(), self.grad_clip_norm * factor)
        if scaler is not None:  # unscaled and stepped (or skipped on inf/NaN) before the first group's step updates s
            for opt in optimizers[1:]:
                if any(p.grad is not None for group in opt.optimizer.param_groups for p in group["params"]):
                    scaler.step(opt.optimizer)  # (the scaler refuses an optimizer without a gradient)
        optimizers[0].step()  # through Lightning: counts one global step per batch
        if scaler is None:
            for opt in optimizers[1:]:
                opt.optimizer.step()  # the raw optimizer, so the other groups do not advance global_step again

    def predict_step(self, batch, batch_idx, dataloader_idx: int = 0) -> dict:
        """The raw outputs of a batch with its targets and mask; training/callbacks/predictions.py turns them into
        predictions."""
        inputs, targets, *rest = batch
        return {"outputs": self(inputs), "targets": targets, "mask": rest[0] if rest else None}

    def validation_step(self, batch, batch_idx, dataloader_idx: int = 0):
        # a second loader is the test split, evaluated at every validation with `--test_every_validation`
        self._shared_step(batch, "test" if dataloader_idx == 1 else "val")

    def test_step(self, batch, batch_idx):
        self._shared_step(batch, "test")
