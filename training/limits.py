"""Bounds on settings that would otherwise hang or exhaust the machine before failing: how many layers a model
stacks, how many CPU processes the trainer starts. Checked on the parsed config, before anything is built or
recorded; each refusal is one line naming the key, its value and what this machine allows."""

from __future__ import annotations

import os

from ortholab.errors import ConfigError

MAX_LAYERS = 1024  # stacked recurrent layers: the papers stack at most 3; building 10^8 runs for minutes


def check_model_limits(model) -> None:
    layers = model.get("num_layers") if model is not None else None
    if isinstance(layers, int) and not isinstance(layers, bool) and layers > MAX_LAYERS:
        raise ConfigError(
            f"model.num_layers = {layers} is beyond any trainable stack; set --model.num_layers to at "
            f"most {MAX_LAYERS} (the papers stack 1 to 3)"
        )


def _count(devices) -> int | None:
    """How many devices `trainer.devices` asks for; None for 'auto', -1 (all) or a form not counted here."""
    if isinstance(devices, bool):
        return None
    if isinstance(devices, int):
        return devices if devices > 0 else None
    if isinstance(devices, (list, tuple)):
        return len(devices)
    if isinstance(devices, str):
        text = devices.strip()
        if text.lstrip("-").isdigit():
            return int(text) if int(text) > 0 else None
        if "," in text:  # "0,1": device indices
            return len([part for part in text.split(",") if part.strip()])
    return None


def check_trainer_devices(trainer) -> None:
    """trainer.devices on CPU within os.cpu_count() processes (more start and hang at DDP set-up); more GPUs than
    the machine has Lightning refuses itself, in one line (ortholab/user_errors.py `user_error`)."""
    if trainer is None:
        return
    devices, accelerator = trainer.get("devices", "auto"), trainer.get("accelerator", "auto")
    asked = _count(devices)
    if asked is None or not isinstance(accelerator, str) or accelerator.lower() not in ("cpu", "auto"):
        return
    import torch

    if accelerator.lower() == "auto" and torch.cuda.is_available():
        return
    cores = os.cpu_count() or 1
    if asked > cores:
        raise ConfigError(
            f"trainer.devices = {devices} starts {asked} CPU processes, and this machine has {cores} CPU "
            f"core(s); set --trainer.devices {cores} or fewer (1: no data parallelism)"
        )


SPAWNING = ("spawn", "fork", "notebook")  # Lightning's strategies that start the processes from inside the fit


def check_trainer_strategy(trainer) -> None:
    """`ddp_spawn`, `ddp_fork`, `ddp_notebook` start their processes from inside the fit, after the run is recorded:
    the parent's record is never closed (a ghost `running` run) and the children fail on it; `ddp` works."""
    strategy = trainer.get("strategy") if trainer is not None else None
    if isinstance(strategy, str) and any(word in strategy.lower() for word in SPAWNING):
        raise ConfigError(
            f"trainer.strategy = {strategy!r} starts its processes from inside the fit, which the run record cannot "
            f"follow; set --trainer.strategy ddp (the same data parallelism; docs/gpus.md)"
        )
