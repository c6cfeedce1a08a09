"""The GPU check's kernel stage (tools/gpu_check.py): forward+backward times of the fused Triton recurrences against
the torch loop (ORTHOLAB_TRITON=0) and PyTorch's cuDNN `nn.RNN(relu)` at the same n and `nn.LSTM` at the same
parameter budget, at the papers' pixel-MNIST setting (T = 784, batch 50 and 128, n = 170 and 360, float32).

Two levels: the whole model as `ortholab bench` builds it (input projection, W formed from its parameters, the
recurrence, the readout: what a training step pays), and the bare recurrence h_t = modReLU(u_t + W h_{t-1}) (the
kernel alone). On CUDA each time is the median of CUDA-event timings after warm-up passes; on the CPU (the
rehearsal, --tiny) it is wall time, and the kernels run through Triton's interpreter at tiny sizes, so the numbers
there only prove that the stage runs.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time

import torch
import torch.nn.functional as F

# batch 128 measured on the H200 once (benchmarks/results/gpu-check-h200-2026-11-28): the call's time goes elsewhere
FULL = {"seq_len": 784, "batches": (50,), "sizes": (170, 360), "warmup": 3, "repeats": 7}
TINY = {"seq_len": 16, "batches": (4,), "sizes": (8,), "warmup": 1, "repeats": 3}


@contextlib.contextmanager
def environment(**values: str | None):
    """Environment variables set (None: removed) for the block, restored after it."""
    saved = {key: os.environ.get(key) for key in values}
    _set(values)
    try:
        yield
    finally:
        _set(saved)


def _set(values: dict[str, str | None]) -> None:
    for key, value in values.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def median_ms(run, device: str, warmup: int, repeats: int) -> float:
    """Median milliseconds of run() after `warmup` untimed calls: CUDA events on a GPU, wall time on the CPU."""
    for _ in range(warmup):
        run()
    times = []
    for _ in range(repeats):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            begin = time.perf_counter()
            run()
            times.append(1000 * (time.perf_counter() - begin))
    return statistics.median(times)


def count(model) -> int:
    return sum(p.numel() for p in model.parameters())


def model_pass(model, x, y):
    def run():
        model.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()

    return run


def cudnn_names(device: str, lstm_n: int, tf32: bool) -> tuple[str, str]:
    """The rows of the cuDNN baselines: in float32, torch lets cuDNN's RNNs take TF32 tensor cores by default
    (torch.backends.cudnn.rnn.fp32_precision 'tf32', 10-bit mantissas), while the fused kernels and the torch loop
    multiply in IEEE float32; both are timed, so that a ratio says which it is against (on the CPU the switch changes
    nothing)."""
    setting = ("cuDNN, " if device == "cuda" else "") + ("TF32 allowed" if tf32 else "TF32 off")
    return f"nn.RNN(relu) ({setting})", f"nn.LSTM n={lstm_n} (same budget, {setting})"


@contextlib.contextmanager
def cudnn_tf32(allowed: bool):
    """cuDNN's RNNs with TF32 allowed or not for the block (torch's default allows it), then as before: through the
    RNNs' own switch, torch.backends.cudnn.rnn.fp32_precision ('tf32' or 'ieee'), where torch has it (the device
    image's 2.11 does); else the legacy torch.backends.cudnn.allow_tf32, which convolutions share."""
    rnn = getattr(torch.backends.cudnn, "rnn", None)
    if rnn is not None and hasattr(rnn, "fp32_precision"):
        owner, name, value = rnn, "fp32_precision", "tf32" if allowed else "ieee"
    else:
        owner, name, value = torch.backends.cudnn, "allow_tf32", allowed
    saved = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, saved)


def out_of_time(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() > deadline


def measure_all(device: str, tiny: bool, deadline: float | None = None) -> dict:
    """Every timing of the stage, the first size's (with the launch sweep) and the graphed families before the
    second size's; past `deadline` (time.monotonic()) what is left is named in `not_reached`, not measured."""
    from ortholab.bench.families import build, plain_rnn
    from ortholab.models.sizing import hidden_size_for_budget

    setting = TINY if tiny else FULL
    seq_len, warmup, repeats = setting["seq_len"], setting["warmup"], setting["repeats"]
    interpreter = "1" if device == "cpu" else None  # on the CPU only the interpreter runs Triton's kernels
    rows, graphs, not_reached = [], {}, []
    # on the CPU the capture is a stand-in that returns the model (graphs need a GPU): the rest of the code runs
    capture = torch.cuda.make_graphed_callables if device == "cuda" else lambda model, args: model
    for batch in setting["batches"]:
        torch.manual_seed(0)
        x = torch.rand(batch, seq_len, 1, device=device)
        y = torch.randint(0, 10, (batch,), device=device)
        for n in setting["sizes"]:
            if n != setting["sizes"][0] and not graphs:
                graphs = graph_rows(device, setting, capture, deadline, not_reached)
            if out_of_time(deadline):
                not_reached.append(f"batch {batch}, n = {n}")
                continue
            timed = {}
            for family in ("scornn", "ornn"):
                model = build(family, n, device)
                for kernel, switch in (("triton", "1"), ("torch loop", "0")):
                    with environment(ORTHOLAB_TRITON=switch):
                        timed[f"{family} ({kernel})"] = (
                            median_ms(model_pass(model, x, y), device, warmup, repeats),
                            count(model),
                        )
            rnn = plain_rnn(n, device)
            scornn_params = timed["scornn (triton)"][1]
            lstm_n = hidden_size_for_budget("lstm", scornn_params, 1, 10)
            lstm = build("lstm", lstm_n, device)
            rnn_key, lstm_key = cudnn_names(device, lstm_n, tf32=True)
            rnn_ieee, lstm_ieee = cudnn_names(device, lstm_n, tf32=False)
            for (rnn_name, lstm_name), tf32 in (((rnn_key, lstm_key), True), ((rnn_ieee, lstm_ieee), False)):
                with cudnn_tf32(tf32):
                    timed[rnn_name] = (median_ms(model_pass(rnn, x, y), device, warmup, repeats), count(rnn))
                    timed[lstm_name] = (median_ms(model_pass(lstm, x, y), device, warmup, repeats), count(lstm))
            for what, (ms, params) in timed.items():
                rows.append(
                    {
                        "what": what,
                        "batch": batch,
                        "n": n,
                        "params": params,
                        "ms": ms,
                        "vs_rnn_relu": ms / timed[rnn_key][0],
                        "vs_lstm": ms / timed[lstm_key][0],
                        "vs_rnn_relu_ieee": ms / timed[rnn_ieee][0],
                    }
                )
            references = {"vs_rnn_relu": timed[rnn_key][0], "vs_rnn_relu_ieee": timed[rnn_ieee][0]}
            sweep = LAUNCH_SWEEP if n == setting["sizes"][0] else {}
            rows += recurrence_rows(
                batch, n, seq_len, device, warmup, repeats, interpreter, references, sweep, deadline, not_reached
            )
    if not graphs:
        graphs = graph_rows(device, setting, capture, deadline, not_reached)
    timer = "CUDA events" if device == "cuda" else "wall time, CPU rehearsal"
    note = (
        None
        if device == "cuda"
        else (
            "CPU rehearsal: the layers never take the kernels, so both model rows of a "
            "family run the torch loop, only the recurrence rows run a kernel "
            "(interpreted), and the 'graphed' runs are the eager model (no capture)"
        )
    )
    return {
        "seq_len": seq_len,
        "repeats": repeats,
        "timer": timer,
        "rows": rows,
        "note": note,
        "graphs": graphs,
        "not_reached": not_reached,
        "device_name": torch.cuda.get_device_name() if device == "cuda" else "cpu",
    }


# The Triton kernels' other launches (models/triton_recurrence.launch), timed eager at the first n beside the
# default (persistent, block_b 16, block_n 32, 4 warps): which one the kernels should take is a measurement. No GPU
# has timed them yet; past the stage's deadline the rest is named, not timed, so the likeliest gain comes first
LAUNCH_SWEEP = {
    # under 16 rows a program the products are broadcast and summed: B / block_b programs (50 of the 132 SMs at
    # block_b 1), each reading W from L2 at every step, against 4 programs of 16 rows
    "persistent, block_b 1": {"block_b": 1},
    "persistent, block_b 1, block_n 64": {"block_b": 1, "block_n": 64},
    "persistent, block_b 2, 2 warps": {"block_b": 2, "num_warps": 2},
    "persistent, block_b 4": {"block_b": 4},
    "per-step, block_b 1, block_n 64": {"schedule": "per_step", "block_b": 1, "block_n": 64},
    "persistent, 1 warp": {"num_warps": 1},
    "persistent, 2 warps": {"num_warps": 2},
    "persistent, 8 warps": {"num_warps": 8},
    "persistent, block_n 16": {"block_n": 16},
    "persistent, block_n 64": {"block_n": 64},
    # a step's product in 4 tile products instead of 36 (n = 170): whether the step's time is their latency
    "persistent, block_n 128, 8 warps": {"block_n": 128, "num_warps": 8},
    "per-step, block_n 16": {"schedule": "per_step", "block_n": 16},
    "per-step, block_n 64": {"schedule": "per_step", "block_n": 64},
    "per-step, 2 warps": {"schedule": "per_step", "num_warps": 2},
    "per-step, block_b 32": {"schedule": "per_step", "block_b": 32},
}


def captured(go, device: str):
    """go() (a forward and backward) recorded once in a CUDA graph after warm-up on a side stream, returned as the
    graph's replay; on the CPU go itself (graphs need a GPU)."""
    if device != "cuda":
        return go
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            go()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        go()
    return graph.replay


def recurrence_rows(
    batch, n, seq_len, device, warmup, repeats, interpreter, references, sweep, deadline=None, not_reached=None
) -> list[dict]:
    """The bare modReLU recurrence: the fused kernels (persistent, the default, and per-step) against the torch
    loop (models/recurrence.py), eager and captured in a CUDA graph; then the kernels' other launches in `sweep`.
    `references`: a ratio's key and the milliseconds it divides by (cuDNN's RNN with TF32 allowed, and off).
    A capture that fails is a row with its error instead of a time."""
    from ortholab.models import triton_recurrence as fused
    from ortholab.models.recurrence import modrelu_recurrence

    g = torch.Generator().manual_seed(1)
    w = torch.linalg.qr(torch.randn(n, n, generator=g))[0]
    tensors = [
        torch.randn(seq_len, batch, n, generator=g),
        w,
        torch.rand(n, generator=g) * 0.2 - 0.1,
        torch.zeros(batch, n),
    ]
    u, w, b, h0 = (t.to(device).requires_grad_() for t in tensors)
    probe = torch.randn(seq_len, batch, n, device=device)

    def run(fn):
        def go():
            for t in (u, w, b, h0):
                t.grad = None
            (fn(u, w, b, h0) * probe).sum().backward()

        return go

    variants = {  # label: (the function, ORTHOLAB_TRITON, the kernels' launch)
        "triton kernel": (fused.fused_modrelu_recurrence, None, {}),
        "triton, per-step": (fused.fused_modrelu_recurrence, None, {"schedule": "per_step"}),
        "torch loop": (modrelu_recurrence, "0", {}),
    }
    with environment(ORTHOLAB_TRITON="0"), torch.no_grad():
        expected = modrelu_recurrence(u, w, b, h0)
    scale = expected.abs().max().item()

    def off_by(fn) -> float:
        """How far fn's states are from the torch loop's, relative to the largest state (a fast launch that computes
        something else shows here)."""
        with torch.no_grad():
            return (fn(u, w, b, h0) - expected).abs().max().item() / scale

    timed: dict[str, float | str] = {}
    errors: dict[str, float] = {}
    with environment(TRITON_INTERPRET=interpreter):
        for label, (fn, switch, options) in variants.items():
            with environment(ORTHOLAB_TRITON=switch), fused.launch(**options):
                errors[label] = off_by(fn)
                timed[label] = median_ms(run(fn), device, warmup, repeats)
                try:
                    timed[f"{label}, graphed"] = median_ms(captured(run(fn), device), device, warmup, repeats)
                except Exception as err:  # reported, not raised: the answer is which ones capture
                    timed[f"{label}, graphed"] = (
                        f"capture failed: {type(err).__name__}: {str(err).splitlines()[0][:160]}"
                    )
        for label, options in sweep.items():
            if out_of_time(deadline):
                not_reached.append(f"recurrence (triton, {label}) B={batch} n={n}")
                continue
            with fused.launch(**options):
                errors[f"triton, {label}"] = off_by(fused.fused_modrelu_recurrence)
                timed[f"triton, {label}"] = median_ms(run(fused.fused_modrelu_recurrence), device, warmup, repeats)
    loop_ms = timed["torch loop"]
    rows = []
    for label, ms in timed.items():
        row = {"what": f"recurrence ({label})", "batch": batch, "n": n}
        if isinstance(ms, str):
            rows.append({**row, "ms": None, "error": ms})
        else:
            error = errors.get(label.removesuffix(", graphed"))
            ratios = {key: ms / reference for key, reference in references.items()}
            rows.append({**row, "ms": ms, "vs_torch_loop": ms / loop_ms, **ratios, "rel_error": error})
    return rows


# the recurrences Triton does not fuse (docs/gpus.md), and scoRNN's and oRNN's torch loop: graphed, it may beat
# their Triton kernel (the H200's first call, 2026-11-28: srnn 10x faster graphed, the kernel 30x cuDNN)
GRAPH_FAMILIES = {
    "scurnn": ("scurnn", None),
    "urnn": ("urnn", None),
    "eurnn": ("eurnn", None),
    "srnn": ("srnn", None),
    "scornn (torch loop)": ("scornn", "0"),
    "ornn (torch loop)": ("ornn", "0"),
    "exprnn (torch loop)": ("exprnn", "0"),  # with fcurnn, the rest of the targets
    "fcurnn": ("fcurnn", None),
}


def graph_rows(device: str, setting: dict, capture, deadline=None, not_reached=None) -> dict:
    """Where Triton is not the answer: each unfused family's forward+backward eager against the same captured in
    CUDA graphs (torch.cuda.make_graphed_callables: one replay per pass instead of a launch per operation), at the
    16k budget and the first batch size. A capture that fails is named with its error."""
    from ortholab.bench.families import BUDGETS, CLASSES, PAPER_SIZES, build
    from ortholab.models.sizing import hidden_size_for_budget

    batch, seq_len = setting["batches"][0], setting["seq_len"]
    x = torch.rand(batch, seq_len, 1, device=device)
    y = torch.randint(0, CLASSES, (batch,), device=device)
    out = {}
    for label, (family, triton) in GRAPH_FAMILIES.items():
        if out_of_time(deadline):
            not_reached.append(f"{label}, eager and graphed")
            continue
        n = PAPER_SIZES["16k"].get(family) or hidden_size_for_budget(family, BUDGETS["16k"], 1, CLASSES)
        if setting is TINY:
            n = 8
        with environment(ORTHOLAB_TRITON=triton):
            out[label] = graph_row(model_pass, build(family, n, device), x, y, n, setting, capture)
    return out


def graph_row(model_pass, model, x, y, n: int, setting: dict, capture) -> dict:
    """One model's forward+backward, eager and captured; a capture that fails is named with its error."""
    batch = x.shape[0]
    eager = median_ms(model_pass(model, x, y), x.device.type, setting["warmup"], setting["repeats"])
    try:
        graphed = capture(model, (x,))
        ms = median_ms(model_pass_with(model, graphed, x, y), x.device.type, setting["warmup"], setting["repeats"])
        return {"n": n, "batch": batch, "eager_ms": eager, "graphed_ms": ms, "graphed_vs_eager": ms / eager}
    except Exception as err:  # reported, not raised: the answer is which families capture
        return {
            "n": n,
            "batch": batch,
            "eager_ms": eager,
            "capture_failed": f"{type(err).__name__}: {str(err).splitlines()[0][:200]}",
        }


def model_pass_with(model, graphed, x, y):
    def run():
        model.zero_grad(set_to_none=True)
        F.cross_entropy(graphed(x), y).backward()

    return run
