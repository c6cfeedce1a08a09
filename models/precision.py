"""Mixed precision (`trainer.precision: bf16-mixed` / `16-mixed`) for the families whose maps must stay exact.

Under torch.autocast every matrix product runs in bfloat16/float16 (8/11 significant bits). An orthogonal or
unitary W formed from such products (a Cayley solve's operands, a Householder or Givens product, exp(A) base) is
orthogonal only to ~1e-2, and a hand-written BPTT that saves bfloat16 states meets float32 weights in its
backward. So a family that does not declare autocast safe (`RecurrentLayer.autocast_devices`) runs its forward
with autocast off and its low-precision inputs cast up to float32: W is formed, and the recurrence run, in the
parameters' precision (float32, or float64 for a .double() model), as without autocast. The readout, the input
adapter and the loss still run under autocast, and the library layers (nn.RNN/GRU/LSTM, attention) take
autocast's kernels where they have them.
"""

from __future__ import annotations

import contextlib

import torch

LOW_PRECISION = (torch.bfloat16, torch.float16)


def autocast_active(device_type: str) -> bool:
    """Whether torch.autocast is on for this device type (cpu, cuda, ...) in this thread."""
    try:
        return torch.is_autocast_enabled(device_type)
    except (RuntimeError, ValueError):  # a device type autocast does not know
        return False


def autocast_off(device_type: str) -> contextlib.AbstractContextManager:
    """A context with autocast off for `device_type`, or nothing to do when it is off already."""
    if not autocast_active(device_type):
        return contextlib.nullcontext()
    return torch.autocast(device_type, enabled=False)


def to_full_precision(value):
    """A bfloat16/float16 tensor as float32 (differentiably); anything else unchanged."""
    if isinstance(value, torch.Tensor) and value.dtype in LOW_PRECISION:
        return value.float()
    return value


def first_device_type(values) -> str | None:
    """The device type of the first tensor among `values`, or None."""
    return next((v.device.type for v in values if isinstance(v, torch.Tensor)), None)
