"""oRNN and SRNN forward+backward time against nn.RNN(relu) at the same n and nn.LSTM at the same budget.

    python benchmarks/bench_ornn_srnn.py [--seq-len 784] [--batch 128] [--budget 16000] [--repeats 7]
    python benchmarks/bench_ornn_srnn.py --ornn-variants   # how the oRNN's W is formed and applied

Pixel-MNIST shapes (1 input, 10 classes read at the last step). Each family is sized to the budget with
models.sizing (oRNN with m = n reflections; SRNN with f_r 3 x 32 as the paper's pMNIST model); nn.RNN(relu)
gets the same hidden size, nn.LSTM the same budget. All models of a comparison run alternately on the same
input in one process, so a noisy machine slows them alike; ratios of the medians are printed.
"""
from __future__ import annotations

import argparse
import platform
import statistics
import time
from functools import partial

import torch

from ortholab.models import SequenceModel
from ortholab.models.gated import LSTM, RNN
from ortholab.models.householder import compact_wy, householder_product, householder_product_sequential
from ortholab.models.ornn import ORNN
from ortholab.models.sizing import hidden_size_for_budget, parameter_count
from ortholab.models.srnn import SRNN


def time_fwd_bwd(model, x) -> float:
    start = time.perf_counter()
    out = model(x)
    (out[0] if isinstance(out, tuple) else out).sum().backward()
    return time.perf_counter() - start


def medians(models: dict, run, repeats: int) -> dict[str, float]:
    times = {name: [] for name in models}
    for model in models.values():  # warm-up
        run(model)
    for _ in range(repeats):
        for name, model in models.items():
            times[name].append(run(model))
    return {name: statistics.median(t) for name, t in times.items()}


def compare_families(args) -> None:
    x = torch.rand(args.batch, args.seq_len, 1)
    lstm_n = hidden_size_for_budget("lstm", args.budget, 1, 10)
    lstm = SequenceModel(LSTM(1, lstm_n), 10, readout="last_step")
    for family, options, cls in [("ornn", {}, ORNN), ("srnn", {"hyper": 32, "n_layers": 3}, SRNN)]:
        n = hidden_size_for_budget(family, args.budget, 1, 10, options)
        models = {f"{family} n={n}": SequenceModel(cls(1, n, **options), 10, readout="last_step"),
                  f"nn.RNN(relu) n={n}": SequenceModel(RNN(1, n, nonlinearity="relu"), 10, readout="last_step"),
                  f"nn.LSTM n={lstm_n}": lstm}
        result = medians(models, lambda m: time_fwd_bwd(m, x), args.repeats)
        print(f"{family}: {parameter_count(family, n, 1, 10, options)} parameters "
              f"(nn.LSTM {parameter_count('lstm', lstm_n, 1, 10)})")
        for name, median in result.items():
            print(f"  {name:22s} {median * 1000:8.1f} ms")
        mine, rnn, lstm_time = result.values()
        print(f"  ratio {family} / nn.RNN(relu): {mine / rnn:.2f}   {family} / nn.LSTM: {mine / lstm_time:.2f}")


def compare_ornn_variants(args) -> None:
    """Forming W (compact WY vs one reflection at a time) and applying it per step (dense W vs WY factors)."""
    for n, m in [(128, 16), (170, 170), (512, 512)]:
        layer = ORNN(1, n, num_reflections=m)
        u = layer.reflection_vectors().detach().requires_grad_()
        builders = {"W by compact WY": householder_product, "W by m reflections": householder_product_sequential}
        result = medians(builders, partial(_time_forming, u, layer.scalar_last), args.repeats)
        print(f"forming W (forward+backward), n={n} m={m}: "
              + ", ".join(f"{k} {v * 1000:.2f} ms" for k, v in result.items()))
        if m < n:
            result = medians(_step_maps(u.detach()), partial(_time_steps, torch.randn(args.batch, n), args.seq_len),
                             args.repeats)
            print(f"  {args.seq_len} steps of h <- leaky_relu(h W^T), batch {args.batch}, no autograd: "
                  + ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in result.items()))


def _time_forming(u, scalar_last, build) -> float:
    start = time.perf_counter()
    build(u, scalar_last).sum().backward()
    return time.perf_counter() - start


def _step_maps(u: torch.Tensor) -> dict:
    """h -> h W^T with W = I - V C (compact WY, m < n reflections) applied as a dense matrix or through V, C."""
    v, c = compact_wy(u)
    w = torch.eye(u.shape[0]) - v @ c
    ct, vt = c.t().contiguous(), v.t().contiguous()
    maps = {"dense W per step": lambda h: h @ w.t(), "WY factors per step": lambda h: h - (h @ ct) @ vt}
    probe = torch.randn(3, u.shape[0])
    torch.testing.assert_close(maps["WY factors per step"](probe), maps["dense W per step"](probe))
    return maps


def _time_steps(h, steps, apply) -> float:
    start = time.perf_counter()
    with torch.no_grad():
        for _ in range(steps):
            h = torch.nn.functional.leaky_relu(apply(h), 0.1)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seq-len", type=int, default=784)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--budget", type=int, default=16_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--ornn-variants", action="store_true", help="time the ways of forming/applying W instead")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    machine = platform.processor() or platform.machine()
    print(f"T={args.seq_len} batch={args.batch}, median of {args.repeats} "
          f"({machine}, {torch.get_num_threads()} threads, torch {torch.__version__})")
    if args.ornn_variants:
        compare_ornn_variants(args)
    else:
        compare_families(args)


if __name__ == "__main__":
    main()
