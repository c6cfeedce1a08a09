"""`ortholab bench`: every family's forward+backward and optimizer-step time at the papers' pixel-MNIST settings,
as ratios to PyTorch's fused `nn.RNN(relu)` at the same hidden size and `nn.LSTM` at the same parameter budget.

Each family is measured in a process of its own, alternating within each repetition with its references (`nn.LSTM`
at the budget, `nn.RNN(relu)` at its n), so a noisy machine slows them alike and the ratios hold; the median over
repetitions is reported, of the times and of each repetition's ratio. (One process for all families let the large
buffers of one family fragment the heap for the next: on the 2-core VM the EURNN then read 3.6x LSTM where it reads
1.8x on its own.) Each model's timings follow an untimed pass of the same model, as every step of a training loop
follows another: otherwise the first pass after switching models pays for faulting the previous model's freed memory
back in (on the 2-core VM, seconds for the uRNN/EURNN). Peak memory is measured in a fresh process per model (the
process's peak RSS on CPU, torch's peak allocation on CUDA). A measuring process that dies is named under the table
and the other rows are kept.
"""

from __future__ import annotations

import json
import math
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

from ortholab.db.provenance import cpu_model
from ortholab.models import FAMILIES, ConfigError, SequenceModel
from ortholab.models.optimizers import build_optimizer
from ortholab.models.sizing import hidden_size_for_budget, parameter_count

BUDGETS = {"16k": 16_000, "69k": 69_000}  # the scoRNN/scuRNN papers' MNIST parameter budgets
# The hidden sizes the papers' MNIST tables print at these budgets (scoRNN Table 1, scuRNN Table 1, as in
# configs/papers/published/); every other family is sized to the budget by models/sizing.py.
PAPER_SIZES = {
    "16k": {"scornn": 170, "scurnn": 116, "fcurnn": 116, "urnn": 512},
    "69k": {"scornn": 360, "scurnn": 250, "urnn": 2170, "lstm": 128},
}
CLASSES = 10
BUDGET_TOLERANCE = 0.25  # a family whose nearest size misses the budget by more is not compared at it (NRU's memory)
PMNIST_IMAGES, PMNIST_LENGTH = 55_000, 784  # the papers' permuted-MNIST training split (5,000 held out) and T


@dataclass
class Row:
    family: str
    budget: str
    hidden_size: int
    parameters: int
    batch: int
    seq_len: int
    device: str
    fwd_bwd_ms: float
    step_ms: float
    vs_rnn_relu: float | None = None  # fwd+bwd time / nn.RNN(relu) at the same hidden size
    vs_lstm: float | None = None  # fwd+bwd time / nn.LSTM at the same parameter budget
    sized_by: str = "budget"  # "paper": the hidden size a paper's table prints at this budget
    formation_ms: float | None = None  # forming W from the parameters, forward and backward (once per step)
    formation_share: float | None = None  # formation_ms / step_ms
    peak_mb: dict | None = None
    pmnist_epoch_s: float | None = None  # ceil(55,000 / batch) steps x step_ms: an epoch of permuted MNIST (T = 784)


def pmnist_epoch_seconds(batch: int, seq_len: int, step_ms: float) -> float | None:
    """A permuted-MNIST epoch at this batch size from the measured step time; None unless T is MNIST's 784."""
    if seq_len != PMNIST_LENGTH:
        return None
    return math.ceil(PMNIST_IMAGES / batch) * step_ms / 1000


def build(family: str, hidden_size: int, device: str) -> SequenceModel:
    layer = FAMILIES[family](1, hidden_size)
    return SequenceModel(layer, CLASSES, readout="last_step").to(device)


def plain_rnn(hidden_size: int, device: str) -> SequenceModel:
    """The reference: PyTorch's fused nn.RNN with ReLU at the same hidden size."""
    return SequenceModel(FAMILIES["rnn"](1, hidden_size, nonlinearity="relu"), CLASSES, readout="last_step").to(device)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_fwd_bwd(model: SequenceModel, x: torch.Tensor, y: torch.Tensor, device: str) -> float:
    sync(device)
    start = time.perf_counter()
    F.cross_entropy(model(x), y).backward()
    sync(device)
    return time.perf_counter() - start


def time_step(model: SequenceModel, optimizers: list, x: torch.Tensor, y: torch.Tensor, device: str) -> float:
    """zero_grad, forward, backward and every group's optimizer step (the recurrent matrix formed in forward)."""
    sync(device)
    start = time.perf_counter()
    for opt in optimizers:
        opt.zero_grad()
    F.cross_entropy(model(x), y).backward()
    for opt in optimizers:
        opt.step()
    sync(device)
    return time.perf_counter() - start


def time_formation(model: SequenceModel, device: str) -> float:
    """Forming W = recurrent_matrix() and its backward, as every step of a family that forms W does once."""
    w = model.layer.recurrent_matrix()
    upstream = torch.randn_like(w)
    sync(device)
    start = time.perf_counter()
    model.layer.recurrent_matrix().backward(upstream)
    sync(device)
    return time.perf_counter() - start


def paired_ratio(times: list[float], reference: list[float]) -> float:
    """The median over repetitions of each repetition's ratio: both were timed within it, under the same load, so a
    load that drifts between repetitions cancels (the ratio of two medians can pair a quiet moment with a busy one)."""
    return statistics.median(t / r for t, r in zip(times, reference, strict=True))


def per_group_optimizers(model: SequenceModel) -> list:
    groups = {name: list(ps) for name, ps in model.layer.parameter_groups().items()}
    groups.setdefault("other", []).extend(model.readout.parameters())
    defaults = model.layer.default_optimizers  # a group's own optimizer where the family needs one (fcurnn)
    return [
        build_optimizer(ps, defaults.get(name, {"name": "adam", "lr": 1e-4}), f"bench.{name}")
        for name, ps in groups.items()
        if ps
    ]


def measure(families: list[str], budgets: list[str], batch: int, seq_len: int, repeats: int, device: str) -> list[Row]:
    torch.manual_seed(0)
    x = torch.rand(batch, seq_len, 1, device=device)
    y = torch.randint(0, CLASSES, (batch,), device=device)
    rows: list[Row] = []
    for budget_name in budgets:
        budget = BUDGETS[budget_name]
        candidates: dict[str, tuple[SequenceModel, Row]] = {}
        for family in dict.fromkeys([*families, "lstm"]):
            try:
                n = PAPER_SIZES[budget_name].get(family) or hidden_size_for_budget(family, budget, 1, CLASSES)
                model = build(family, n, device)
            except ConfigError as err:
                print(f"skipping {family} at {budget_name}: {err}", file=sys.stderr)
                continue
            count = parameter_count(family, n, 1, CLASSES)
            if abs(count - budget) > BUDGET_TOLERANCE * budget:
                print(
                    f"skipping {family} at {budget_name}: its nearest size (n = {n}) has {count:,} parameters",
                    file=sys.stderr,
                )
                continue
            sized_by = "paper" if family in PAPER_SIZES[budget_name] else "budget"
            candidates[family] = (
                model,
                Row(family, budget_name, n, count, batch, seq_len, device, 0.0, 0.0, sized_by=sized_by),
            )
        references = {n: plain_rnn(n, device) for n in {row.hidden_size for _, row in candidates.values()}}
        samples = {key: [] for key in [*candidates, *[f"rnn{n}" for n in references]]}
        steps = {key: [] for key in candidates}
        formations = {key: [] for key, (model, _) in candidates.items() if model.layer.forms_recurrent_matrix}
        optimizers = {key: per_group_optimizers(model) for key, (model, _) in candidates.items()}
        for repeat in range(repeats + 1):  # the first pass warms up and is discarded
            for key, (model, _) in candidates.items():
                time_fwd_bwd(model, x, y, device)  # untimed: the model's buffers resident again, as in training
                fb = time_fwd_bwd(model, x, y, device)
                st = time_step(model, optimizers[key], x, y, device)
                fm = time_formation(model, device) if key in formations else None
                if repeat:
                    samples[key].append(fb)
                    steps[key].append(st)
                    if fm is not None:
                        formations[key].append(fm)
            for n, model in references.items():
                fb = time_fwd_bwd(model, x, y, device)
                if repeat:
                    samples[f"rnn{n}"].append(fb)
        lstm = samples.get("lstm")
        for key, (_, row) in candidates.items():
            if key == "lstm" and "lstm" not in families:
                continue
            row.fwd_bwd_ms = 1000 * statistics.median(samples[key])
            row.step_ms = 1000 * statistics.median(steps[key])
            row.pmnist_epoch_s = pmnist_epoch_seconds(batch, seq_len, row.step_ms)
            row.vs_rnn_relu = paired_ratio(samples[key], samples[f"rnn{row.hidden_size}"])
            row.vs_lstm = paired_ratio(samples[key], lstm) if lstm else None
            if key in formations:
                row.formation_ms = 1000 * statistics.median(formations[key])
                row.formation_share = row.formation_ms / row.step_ms
            rows.append(row)
    return rows


PEAK_SCRIPT = """
import sys, torch, torch.nn.functional as F
from ortholab.bench.families import build, CLASSES
from ortholab.training.callbacks.timing import peak_memory_mb
family, n, batch, seq_len, device = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
model = build(family, n, device)
x = torch.rand(batch, seq_len, 1, device=device); y = torch.randint(0, CLASSES, (batch,), device=device)
if device.startswith("cuda"):
    torch.cuda.reset_peak_memory_stats()
F.cross_entropy(model(x), y).backward()
print(peak_memory_mb(torch.device(device)))  # the CUDA peak allocated, else the process's peak resident memory
"""


class MeasurementFailed(RuntimeError):
    """A measuring process died (out of memory, a crash): its rows are missing, the others are still reported."""


def run_measuring_process(script: str, args: list[str], what: str) -> str:
    """The last line `script` prints in a fresh Python process, or MeasurementFailed naming `what` and the cause."""
    done = subprocess.run([sys.executable, "-c", script, *args], stdout=subprocess.PIPE, text=True)
    if done.returncode == 0:
        return done.stdout.strip().splitlines()[-1]
    if done.returncode == -signal.SIGKILL:
        cause = (
            "killed by SIGKILL, which is how the kernel's out-of-memory killer stops a process: measure it "
            "alone, or with smaller --batches/--memory"
        )
    elif done.returncode < 0:
        cause = f"killed by {signal.Signals(-done.returncode).name}"
    else:
        cause = f"exit status {done.returncode} (its error is printed above)"
    raise MeasurementFailed(f"{what}: the measuring process died, {cause}")


def peak_memory_mb(family: str, hidden_size: int, batch: int, seq_len: int, device: str) -> float:
    return float(
        run_measuring_process(
            PEAK_SCRIPT,
            [family, str(hidden_size), str(batch), str(seq_len), device],
            f"peak memory of {family} (n = {hidden_size}) at batch {batch}, T = {seq_len}",
        )
    )


def table(rows: list[Row]) -> str:
    head = [
        "family",
        "budget",
        "n",
        "params",
        "batch",
        "T",
        "fwd+bwd ms",
        "step ms",
        "×RNN(relu)",
        "×LSTM",
        "form W",
        "pMNIST epoch",
        "peak MB",
    ]
    lines = [head]
    for r in rows:
        peak = " / ".join("failed" if v is None else f"{v:.0f}" for v in r.peak_mb.values()) if r.peak_mb else "-"
        lines.append(
            [
                r.family,
                r.budget,
                f"{r.hidden_size}{'*' if r.sized_by == 'paper' else ''}",
                f"{r.parameters:,}",
                str(r.batch),
                str(r.seq_len),
                f"{r.fwd_bwd_ms:.1f}",
                f"{r.step_ms:.1f}",
                f"{r.vs_rnn_relu:.2f}",
                f"{r.vs_lstm:.2f}" if r.vs_lstm else "-",
                f"{100 * r.formation_share:.1f}%" if r.formation_share is not None else "-",
                f"{r.pmnist_epoch_s:.0f} s" if r.pmnist_epoch_s is not None else "-",
                peak,
            ]
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    return "\n".join("  ".join(cell.rjust(w) for cell, w in zip(line, widths)) for line in lines)


def machine() -> str:
    cpu = cpu_model()
    gpu = f", {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ""
    return f"{cpu}, {torch.get_num_threads()} threads{gpu}, torch {torch.__version__}"


ISOLATED_SCRIPT = """
import json, sys
from dataclasses import asdict
from ortholab.training.allocator import reuse_freed_memory
from ortholab.training.subnormals import flush_subnormals
reuse_freed_memory()  # as `ortholab fit` trains
flush_subnormals()
from ortholab.bench.families import measure
print(json.dumps([asdict(row) for row in measure(*json.loads(sys.argv[1]))]))
"""


def measure_isolated(family: str, budgets: list[str], batch: int, seq_len: int, repeats: int, device: str) -> list[Row]:
    """`measure([family], ...)` in a fresh process (its skip notes go to this process's stderr)."""
    out = run_measuring_process(
        ISOLATED_SCRIPT,
        [json.dumps([[family], budgets, batch, seq_len, repeats, device])],
        f"{family} at batch {batch} ({', '.join(budgets)})",
    )
    return [Row(**row) for row in json.loads(out)]


def check_device(device: str) -> None:
    """Refuse, in one line, a device this machine does not have (before any measuring process starts)."""
    try:
        kind = torch.device(device).type
    except RuntimeError:
        raise ConfigError(f"--device {device!r} is not a device; use cpu, cuda or cuda:N") from None
    if kind == "cuda" and not torch.cuda.is_available():
        why = (
            f"torch {torch.__version__} is a CPU-only build"
            if torch.version.cuda is None
            else f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no GPU"
        )
        raise ConfigError(
            f"--device {device}: CUDA is not available on this machine ({why}); run it on a machine "
            f"with an NVIDIA GPU, or use --device cpu"
        )
    index, count = torch.device(device).index, torch.cuda.device_count() if kind == "cuda" else 0
    if kind == "cuda" and index is not None and index >= count:
        raise ConfigError(
            f"--device {device}: this machine has {count} CUDA device(s) (cuda:0 to cuda:{count - 1}); "
            f"use one of them, or --device cpu"
        )


def run_bench(
    families: list[str] | None,
    sizes: list[str],
    batches: list[int],
    seq_len: int,
    repeats: int,
    device: str,
    memory_lengths: list[int],
    as_json: bool,
    isolate: bool = True,
) -> None:
    check_device(device)
    families = families or list(FAMILIES)
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        raise ConfigError(f"--families: {unknown[0]!r} is not registered; choose from {sorted(FAMILIES)}")
    unknown = [s for s in sizes if s not in BUDGETS]
    if unknown:
        raise ConfigError(f"--sizes: {unknown[0]!r}; choose from {sorted(BUDGETS)}")
    rows, failures = [], []  # a family whose process dies is named at the end; the other rows are still reported

    def failed(err: MeasurementFailed) -> None:
        print(err, file=sys.stderr, flush=True)
        failures.append(str(err))

    for batch in batches:
        if not isolate:
            rows += measure(families, sizes, batch, seq_len, repeats, device)
            continue
        for family in families:
            try:
                rows += measure_isolated(family, sizes, batch, seq_len, repeats, device)
            except MeasurementFailed as err:
                failed(err)
    for row in rows:
        if memory_lengths and row.batch == batches[0]:
            row.peak_mb = {}
            for t in memory_lengths:
                try:
                    row.peak_mb[f"T={t}"] = peak_memory_mb(row.family, row.hidden_size, row.batch, t, device)
                except MeasurementFailed as err:
                    row.peak_mb[f"T={t}"] = None
                    failed(err)
    if as_json:
        print(json.dumps({"machine": machine(), "rows": [asdict(r) for r in rows], "failures": failures}, indent=2))
    else:
        print(f"forward+backward (and a full optimizer step) at T={seq_len}, median of {repeats}; {machine()}")
        print(table(rows))
        print(
            "n*: the hidden size the papers' MNIST tables print at this budget; form W: forming the recurrent "
            "matrix (forward and backward) as a share of a step; pMNIST epoch: ceil(55,000 / batch) steps at the "
            "measured step time (only at T = 784), data loading and validation not counted"
        )
        for failure in failures:
            print(f"not measured: {failure}")
    if failures:
        raise SystemExit(1)
