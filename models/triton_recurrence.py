"""The real recurrences h_t = sigma(u_t + W h_{t-1}) [+ offsets_t] as two fused Triton kernels on CUDA: one launch
runs the whole forward sequence, one the whole backward sequence (in reversed time), instead of a handful of
launches per step (models/recurrence.py's and models/pointwise_recurrence.py's loops, which remain the oracle).

sigma: modReLU (scoRNN eq. 4.1: sign(z) relu(|z| + b); scoRNN, expRNN, nnRNN) or leaky ReLU (oRNN's default).
Both have a derivative that is a function of the output alone (modReLU: 1 where h != 0; leaky ReLU: 1 where h > 0,
the slope elsewhere), so only the states are saved, as in the torch loops.

Each program owns BLOCK_B rows of the batch for the whole sequence, so no two programs ever need each other's
states. Per step it forms every output tile z[:, j] = u_t[:, j] + sum_k h_{t-1}[:, k] W^T[k, j] from tiles of
h_{t-1} read back from the output (L1/L2-resident) and tiles of W (L2-resident: n = 360 is 0.5 MB), then a
barrier orders step t's stores before step t+1's loads. The products use IEEE float32 (never TF32) so the states
match the torch loop to float32 round-off. dL/dW, dL/db and dL/dh0 are then one product / reduction over all
steps in torch, as in the loops.

That persistent schedule is the default. It keeps ceil(B / BLOCK_B) programs busy (4 of an H200's 132 SMs at batch
50) and took 60.59 ms there for scoRNN n = 170, batch 50, T = 784, forward and backward: 28.77x cuDNN's
`nn.RNN(relu)` (benchmarks/results/gpu-check-h200-2026-11-28). The per-step schedule (`launch(schedule="per_step")`)
launches one kernel a step over every (BLOCK_B, BLOCK_N) tile of the states, for the GPU check to time against it,
eager and in CUDA graphs; it has run only in the interpreter so far. Either schedule also takes fewer than 16 rows a
program (`launch(block_b=1)`: a program per batch row, 50 at batch 50), whose tile products are broadcast products
summed instead of tl.dot (whose tiles are at least 16 on a side); only the interpreter has run those too.

Triton is optional (`pip install 'ortholab[gpu]'`) and imported only when a CUDA tensor comes by; without it, or
for other dtypes, devices or sigma = tanh, the torch loop runs. TRITON_INTERPRET=1 runs the same kernels on the
CPU (tests/test_triton_recurrence.py); on CUDA the persistent kernels passed the same tests on the H200, before
their tile bodies were shared with the per-step kernels (models/triton_kernels.py's forward_tile, backward_tile).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
from typing import Literal

import torch

from ortholab.models.backward_limits import refuse_create_graph
from ortholab.models.choices import checks_choices

ACTIVATIONS = {"modrelu": 0, "leaky_relu": 1}
BLOCK_B, BLOCK_N = 16, 32  # tl.dot's tiles: at least 16 on each side
DISABLE = "ORTHOLAB_TRITON"  # set to 0 to keep the torch loops on CUDA (e.g. to compare)
# How the kernels are launched; the defaults are what ran on the H200 (60.59 ms at n = 170, batch 50). `launch()`
# changes them for a block, so that the GPU check can time the others (tools/gpu_timing.py).
_LAUNCH = {"schedule": "persistent", "block_b": BLOCK_B, "block_n": BLOCK_N, "num_warps": 4}


def triton_installed() -> bool:
    return importlib.util.find_spec("triton") is not None


def interpreting() -> bool:
    """TRITON_INTERPRET=1: Triton's kernels run in its numpy interpreter, on CPU tensors."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


_TORCH_LOOPS = [False]  # set inside `torch_loops()`


@contextlib.contextmanager
def torch_loops():
    """Within the block the fused kernels are not taken: a pass captured in CUDA graphs replays the torch loop,
    which beat the kernel there (one H200: scoRNN n = 170, batch 50, 37.91 ms graphed against 60.59)."""
    _TORCH_LOOPS[0] = True
    try:
        yield
    finally:
        _TORCH_LOOPS[0] = False


Schedule = Literal["persistent", "per_step"]
Tile = Literal[16, 32, 64, 128]  # tl.dot's tiles are at least 16 on each side
Rows = Literal[1, 2, 4, 8, 16, 32, 64, 128]  # under 16 rows a tile's product is a broadcast and a sum, not tl.dot
# the most products one broadcast holds (block_b x block_n x block_n): 64 a thread at 4 warps. ptxas (sm_90, Triton
# 3.9) put 1.9 KB on the stack at 8 x 64 x 64 and 4.9 KB at 4 x 128 x 128, none at the check's launches (4096 at most)
BROADCAST_LIMIT = 8192
Warps = Literal[1, 2, 4, 8, 16]


@contextlib.contextmanager
@checks_choices(key_prefix="launch: ")
def launch(
    schedule: Schedule | None = None,
    block_b: Rows | None = None,
    block_n: Tile | None = None,
    num_warps: Warps | None = None,
):
    """Within the block the kernels launch so: `schedule` "persistent" (one launch a pass, each program looping over
    the whole sequence for its BLOCK_B rows) or "per_step" (one launch a step over every tile of the states),
    tiles of `block_b` rows by `block_n` columns, `num_warps` warps a program. Under 16 rows (`block_b` 1 to 8) the
    tile products are broadcast products summed, not tl.dot, so that a batch of B rows keeps B / block_b programs
    busy. None keeps the current value."""
    chosen = {"schedule": schedule, "block_b": block_b, "block_n": block_n, "num_warps": num_warps}
    launching = {**_LAUNCH, **{k: v for k, v in chosen.items() if v is not None}}
    rows, width = launching["block_b"], launching["block_n"]
    if rows < 16 and rows * width * width > BROADCAST_LIMIT:
        raise ValueError(
            f"launch: block_b = {rows} with block_n = {width} broadcasts {rows * width * width} products a tile "
            f"step, past {BROADCAST_LIMIT} (they would spill registers); under 16 rows keep block_b x block_n^2 "
            f"at most {BROADCAST_LIMIT} (block_b 2 with block_n 64, or block_b 8 with block_n 32)"
        )
    saved = dict(_LAUNCH)
    _LAUNCH.update(launching)
    try:
        yield
    finally:
        _LAUNCH.clear()
        _LAUNCH.update(saved)


def fused_available(u: torch.Tensor, activation: str = "modrelu") -> bool:
    """Whether the fused kernels take this recurrence: a CUDA float32/float64 tensor, Triton installed, sigma one
    of ACTIVATIONS, the kernels not disabled by ORTHOLAB_TRITON=0 and not inside `torch_loops()`."""
    return (
        u.device.type == "cuda"
        and u.dtype in (torch.float32, torch.float64)
        and activation in ACTIVATIONS
        and os.environ.get(DISABLE, "1") != "0"
        and not _TORCH_LOOPS[0]
        and triton_installed()
    )


@functools.lru_cache(maxsize=2)
def _kernels(interpret: bool):
    """The forward and backward kernels, compiled for the interpreter or the GPU: triton.jit reads TRITON_INTERPRET
    when it decorates, so each mode executes its own copy of models/triton_kernels.py."""
    spec = importlib.util.find_spec("ortholab.models.triton_kernels")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _grid(batch: int) -> tuple[int]:
    return ((batch + _LAUNCH["block_b"] - 1) // _LAUNCH["block_b"],)


def _step_grid(batch: int, n: int) -> tuple[int, int]:
    return ((batch + _LAUNCH["block_b"] - 1) // _LAUNCH["block_b"], (n + _LAUNCH["block_n"] - 1) // _LAUNCH["block_n"])


def _tiles() -> dict:
    """The launch's tile sizes and warps, as the kernels take them."""
    return {"BLOCK_B": _LAUNCH["block_b"], "BLOCK_N": _LAUNCH["block_n"], "num_warps": _LAUNCH["num_warps"]}


class _FusedRecurrence(torch.autograd.Function):
    @staticmethod
    def forward(ctx, u, w, b, h0, offsets, activation: str, slope: float):
        kernels = _kernels(interpreting())
        u, w, h0 = u.contiguous(), w.contiguous(), h0.contiguous()
        steps, batch, n = u.shape
        bias = b.contiguous() if b is not None else u.new_zeros(n)
        h = torch.empty_like(u)
        offsets_arg = offsets.contiguous() if offsets is not None else h  # never read without HAS_OFFSETS
        slope_arg = u.new_full((1,), slope)
        flags = {"ACTIVATION": ACTIVATIONS[activation], "HAS_OFFSETS": offsets is not None, **_tiles()}
        if _LAUNCH["schedule"] == "persistent":
            kernels.forward_kernel[_grid(batch)](u, w, bias, h0, offsets_arg, h, steps, batch, n, slope_arg, **flags)
        else:
            grid = _step_grid(batch, n)
            for t in range(steps):  # one launch a step: the step's tiles in parallel
                prev = h0 if t == 0 else h[t - 1]
                kernels.forward_step_kernel[grid](
                    u[t], w, bias, prev, offsets_arg[t], h[t], batch, n, slope_arg, **flags
                )
        ctx.activation, ctx.slope, ctx.has_bias = activation, slope, b is not None
        ctx.save_for_backward(w, h0, h, offsets_arg if offsets is not None else None)
        return h

    @staticmethod
    def backward(ctx, grad_h):
        refuse_create_graph("fused Triton recurrence", "models/triton_recurrence.py")
        kernels = _kernels(interpreting())
        w, h0, h, offsets = ctx.saved_tensors
        steps, batch, n = h.shape
        grad_h = grad_h.contiguous()
        grad_z = torch.empty_like(h)
        want_total = ctx.needs_input_grad[4]
        total = torch.empty_like(h) if want_total else grad_z  # never written without WANT_TOTAL
        offsets_arg = offsets if offsets is not None else h
        slope_arg = h.new_full((1,), ctx.slope)
        flags = {
            "ACTIVATION": ACTIVATIONS[ctx.activation],
            "HAS_OFFSETS": offsets is not None,
            "WANT_TOTAL": want_total,
            **_tiles(),
        }
        if _LAUNCH["schedule"] == "persistent":
            kernels.backward_kernel[_grid(batch)](
                grad_h, w, h, offsets_arg, grad_z, total, steps, batch, n, slope_arg, **flags
            )
        else:
            grid = _step_grid(batch, n)
            for t in reversed(range(steps)):  # one launch a step, in reversed time
                later = grad_z[t + 1] if t + 1 < steps else grad_z[t]  # never read at the last step
                kernels.backward_step_kernel[grid](
                    grad_h[t],
                    w,
                    h[t],
                    offsets_arg[t],
                    later,
                    grad_z[t],
                    total[t],
                    batch,
                    n,
                    slope_arg,
                    HAS_LATER=t + 1 < steps,
                    **flags,
                )
        grad_w = grad_z[1:].reshape(-1, n).t() @ h[:-1].reshape(-1, n)  # sum_t dz_t h_{t-1}^T
        grad_w.addmm_(grad_z[0].t(), h0)
        grad_h0 = grad_z[0] @ w
        grad_b = None
        if ctx.has_bias:  # modReLU: d h/d b = sign(z) = sign(h) where active
            activation = h if offsets is None else h - offsets
            grad_b = torch.sign(activation).mul_(grad_z).sum(dim=(0, 1))
        return grad_z, grad_w, grad_b, grad_h0, (total if want_total else None), None, None


def fused_modrelu_recurrence(
    u: torch.Tensor, w: torch.Tensor, b: torch.Tensor, h0: torch.Tensor, offsets: torch.Tensor | None = None
) -> torch.Tensor:
    """models/recurrence.py's modrelu_recurrence in two kernel launches (u (T, B, n), w (n, n), b (n,), h0 (B, n))."""
    return _FusedRecurrence.apply(u, w, b, h0, offsets, "modrelu", 0.0)


def fused_leaky_relu_recurrence(
    u: torch.Tensor, w: torch.Tensor, h0: torch.Tensor, slope: float, offsets: torch.Tensor | None = None
) -> torch.Tensor:
    """models/pointwise_recurrence.py's leaky-ReLU recurrence in two kernel launches."""
    return _FusedRecurrence.apply(u, w, None, h0, offsets, "leaky_relu", slope)
