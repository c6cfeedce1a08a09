"""CUDA graphs for training (`model.cuda_graphs: true`): the model's forward and backward captured once per batch
shape with torch.cuda.make_graphed_callables and replayed at every step, one launch per pass instead of one per
operation and time step. On one H200 the captured pass ran scoRNN's torch loop 3.6x and the uRNN 9.5x faster than
eager, scoRNN's also faster than its fused Triton kernel (37.91 against 60.59 ms), so a capture takes the torch
loops (benchmarks/results/gpu-check-h200-2026-11-28); through `ortholab fit` it has not yet run on a GPU."""

from __future__ import annotations

from collections.abc import Callable

import torch
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch import nn

from ortholab.errors import ConfigError, OrthoLabWarning
from ortholab.models.triton_recurrence import torch_loops
from ortholab.training.precision import runs_on_cpu

FULL_PRECISIONS = ("32-true", "32", "64-true", "64")  # autocast's weight cache cannot be captured: no mixed precision


def check_graphs_config(model: dict, trainer: dict) -> None:
    """Before a run is recorded: what the config alone tells (the device kind, the precision, several devices)."""
    if not model.get("cuda_graphs"):
        return
    devices = trainer.get("devices")
    count = len(devices) if isinstance(devices, (list, tuple)) else devices if isinstance(devices, int) else 1
    nodes = trainer.get("num_nodes") or 1
    device = "cpu" if runs_on_cpu(trainer.get("accelerator")) else "cuda"
    check_graphs_allowed(device, trainer.get("precision") or "32-true", max(count, 1) * nodes)


def check_graphs_allowed(device: str, precision: str, world_size: int) -> None:
    """Refuse, naming the key to change, a run where captured passes would not be what eager training computes."""
    if device != "cuda":
        raise ConfigError(
            f"model.cuda_graphs: true needs a CUDA device, and this run trains on {device}: "
            "set trainer.accelerator gpu, or model.cuda_graphs false"
        )
    if str(precision) not in FULL_PRECISIONS:
        raise ConfigError(
            f"model.cuda_graphs: true with trainer.precision {precision}: autocast's cast cache cannot be captured; "
            "use 32-true (or 64-true), or model.cuda_graphs false"
        )
    if world_size > 1:
        raise ConfigError(
            f"model.cuda_graphs: true on {world_size} processes: DDP's gradient hooks are not captured; "
            "train on one device, or set model.cuda_graphs false"
        )


class _Pass(nn.Module):
    """The model's forward as a module of its own, so that a capture replaces this forward, not the model's."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.model(inputs)


class GraphedTraining:
    """Training passes of `model` through CUDA graphs, one captured per input shape and dtype, at most `max_shapes`
    (the full batch and the last, smaller one). Evaluation (eval mode or no grad), further shapes, and every pass
    after a capture that failed (a family that reads a value back to the host while forming its pass) run eagerly.

    The parameters are read in place at every replay, so the optimizers' in-place steps are seen. A replay writes
    its outputs into the same buffers each time; the pass returns a copy, so that what a metric keeps of a step's
    outputs is not changed by the next.
    """

    def __init__(self, model: nn.Module, capture: Callable | None = None, max_shapes: int = 2):
        if max_shapes < 1:
            raise ValueError(f"max_shapes = {max_shapes}; give at least 1")
        self.model = model
        self.capture = capture or torch.cuda.make_graphed_callables
        self.max_shapes = max_shapes
        self.graphs: dict[tuple, Callable] = {}
        self.failure: str | None = None  # why capture failed; then every pass is eager

    def __call__(self, inputs: torch.Tensor) -> torch.Tensor:
        if self.failure is not None or not (self.model.training and torch.is_grad_enabled()):
            return self.model(inputs)
        key = (tuple(inputs.shape), inputs.dtype)
        graphed = self.graphs.get(key)
        if graphed is None:
            if len(self.graphs) >= self.max_shapes:
                return self.model(inputs)
            graphed = self._capture(key, inputs)
            if graphed is None:
                return self.model(inputs)
        return graphed(inputs).clone()  # a copy: the next replay overwrites the captured output's buffer

    def _capture(self, key: tuple, inputs: torch.Tensor) -> Callable | None:
        try:
            with torch_loops():  # graphed, the torch loop beats the fused kernel (module docstring)
                graphed = self.capture(_Pass(self.model), (inputs.detach().clone(),))
        except Exception as err:  # the family cannot be captured (a host read, a host copy): train eagerly
            self.failure = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:300]
            rank_zero_warn(
                f"model.cuda_graphs: capture failed ({self.failure}); this run trains eagerly", category=OrthoLabWarning
            )
            return None
        self.graphs[key] = graphed
        rank_zero_info(f"model.cuda_graphs: captured the training pass for inputs of shape {list(key[0])}")
        return graphed
