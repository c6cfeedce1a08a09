"""scoRNN forward+backward time against nn.RNN(relu) at the same size, measured in one process.

    python benchmarks/bench_scornn.py [--seq-len 784] [--batch 128] [--hidden 170] [--repeats 7]

Both models run alternately on the same input, so a noisy machine slows both alike; the ratio of the
medians is printed.
"""
from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch

from ortholab.models.scornn import ScoRNN


def time_fwd_bwd(model, x) -> float:
    start = time.perf_counter()
    out = model(x)
    (out[0] if isinstance(out, tuple) else out).sum().backward()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seq-len", type=int, default=784)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=170)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()

    torch.manual_seed(0)
    x = torch.rand(args.batch, args.seq_len, 1)
    models = {"scornn": ScoRNN(1, args.hidden, rho=0.1),
              "nn.RNN(relu)": torch.nn.RNN(1, args.hidden, nonlinearity="relu", batch_first=True)}
    times = {name: [] for name in models}
    for name, model in models.items():  # warm-up
        time_fwd_bwd(model, x)
    for _ in range(args.repeats):
        for name, model in models.items():
            times[name].append(time_fwd_bwd(model, x))
    medians = {name: statistics.median(t) for name, t in times.items()}
    print(f"T={args.seq_len} batch={args.batch} n={args.hidden}, forward+backward, median of {args.repeats} "
          f"({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__})")
    for name, median in medians.items():
        print(f"  {name:14s} {median * 1000:8.1f} ms")
    print(f"  ratio scornn / nn.RNN(relu): {medians['scornn'] / medians['nn.RNN(relu)']:.2f}")


if __name__ == "__main__":
    main()
