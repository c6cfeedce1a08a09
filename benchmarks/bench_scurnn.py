"""scuRNN forward+backward time against nn.RNN(relu) at the same n and nn.LSTM at the same parameter budget.

    python benchmarks/bench_scurnn.py [--seq-len 784] [--batch 128] [--hidden 116] [--repeats 7] [--compare-complex]

The defaults are pixel MNIST's shape (1 input, 10 classes) with the paper's n = 116 (about 16k parameters); the
LSTM's hidden size is the one whose parameter count (layer + readout) is closest to scuRNN's. All models run
alternately on the same input, so a noisy machine slows them alike; ratios of the medians are printed.
--compare-complex also times the same fused recurrence written with torch's complex dtypes (the design
alternative to the [Re | Im] real layout that models/complex_recurrence.py uses).
"""
from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch
from torch import nn

from ortholab.models.complex_recurrence import MODRELU_EPS
from ortholab.models.scurnn import ScuRNN

NUM_CLASSES = 10


def count(module: nn.Module, features: int) -> int:
    """Parameters of a recurrent layer plus a linear readout of its `features` to NUM_CLASSES."""
    return sum(p.numel() for p in module.parameters()) + features * NUM_CLASSES + NUM_CLASSES


def lstm_size_for_budget(input_size: int, budget: int) -> int:
    return min(range(1, 1024), key=lambda n: abs(count(nn.LSTM(input_size, n), n) - budget))


class _ComplexDtypeRecurrence(torch.autograd.Function):
    """models/complex_recurrence.py's algorithm in complex dtypes (torch's complex gradient convention)."""

    @staticmethod
    def forward(ctx, u, w, b, h0):
        wt, eps = w.t(), b.new_tensor(MODRELU_EPS)
        z, h = torch.empty_like(u), torch.empty_like(u)
        r, s = b.new_empty(u.shape), b.new_empty(u.shape)
        prev = h0
        for u_t, z_t, h_t, r_t, s_t in zip(u.unbind(0), z.unbind(0), h.unbind(0), r.unbind(0), s.unbind(0)):
            torch.addmm(u_t, prev, wt, out=z_t)
            re, im = z_t.real, z_t.imag
            torch.sqrt(torch.addcmul(eps, re, re).addcmul_(im, im), out=r_t)
            torch.div(torch.add(r_t, b).relu_(), torch.add(r_t, eps), out=s_t)
            torch.mul(z_t, s_t, out=h_t)
            prev = h_t
        ctx.save_for_backward(w, b, h0, z, h, r, s)
        return h

    @staticmethod
    def backward(ctx, grad_h):
        w, b, h0, z, h, r, s = ctx.saved_tensors
        active, denominator = s > 0, r + MODRELU_EPS
        radial = z * torch.where(active, (MODRELU_EPS - b) / (denominator.square() * r), 0.0)
        grad_h, grad_z, along, wc = grad_h.contiguous(), torch.empty_like(z), torch.empty_like(r), w.conj()
        carry = grad_h[-1]
        for t in range(z.shape[0] - 1, -1, -1):  # Re(conj(z) g) = z . g in real terms
            torch.sum(torch.mul(torch.view_as_real(z[t]), torch.view_as_real(carry),
                                out=torch.view_as_real(grad_z[t])), dim=-1, out=along[t])
            torch.mul(carry, s[t], out=grad_z[t]).addcmul_(radial[t], along[t])
            if t:
                carry = torch.addmm(grad_h[t - 1], grad_z[t], wc)
        n = w.shape[0]
        grad_w = grad_z[1:].reshape(-1, n).t() @ h[:-1].reshape(-1, n).conj() + grad_z[0].t() @ h0.conj()
        return grad_z, grad_w, torch.where(active, along / denominator, 0.0).sum((0, 1)), grad_z[0] @ wc


class ComplexDtypeScuRNN(nn.Module):
    """`layer`'s parameters, run through the complex-dtype recurrence."""

    def __init__(self, layer: ScuRNN):
        super().__init__()
        self.layer = layer

    def forward(self, x):
        layer, n = self.layer, self.layer.hidden_size
        w = layer.cayley()
        weight = torch.complex(layer.input_weight[:n], layer.input_weight[n:])
        u = torch.matmul(x.transpose(0, 1).to(weight.dtype), weight.t())
        h0 = torch.complex(layer.h0[:n], layer.h0[n:]).expand(x.shape[0], -1)
        h = _ComplexDtypeRecurrence.apply(u, w, layer.bias, h0)
        return torch.cat([h.real, h.imag], dim=-1).transpose(0, 1)


def time_fwd_bwd(model, x) -> float:
    start = time.perf_counter()
    out = model(x)
    (out[0] if isinstance(out, tuple) else out).sum().backward()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seq-len", type=int, default=784)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=116)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--compare-complex", action="store_true")
    args = parser.parse_args()

    torch.manual_seed(0)
    x = torch.rand(args.batch, args.seq_len, 1)
    scurnn = ScuRNN(1, args.hidden)
    budget = count(scurnn, scurnn.output_size)
    lstm_size = lstm_size_for_budget(1, budget)
    models = {"scurnn": scurnn,
              "nn.RNN(relu)": nn.RNN(1, args.hidden, nonlinearity="relu", batch_first=True),
              f"nn.LSTM({lstm_size})": nn.LSTM(1, lstm_size, batch_first=True)}
    features = {"scurnn": scurnn.output_size, "nn.RNN(relu)": args.hidden, f"nn.LSTM({lstm_size})": lstm_size}
    if args.compare_complex:
        models["scurnn complex dtype"] = ComplexDtypeScuRNN(scurnn)
        features["scurnn complex dtype"] = scurnn.output_size
    times = {name: [] for name in models}
    for model in models.values():  # warm-up
        time_fwd_bwd(model, x)
    for _ in range(args.repeats):
        for name, model in models.items():
            times[name].append(time_fwd_bwd(model, x))
    medians = {name: statistics.median(t) for name, t in times.items()}
    print(f"T={args.seq_len} batch={args.batch} n={args.hidden}, forward+backward, median of {args.repeats} "
          f"({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, "
          f"torch {torch.__version__})")
    for name, model in models.items():
        print(f"  {name:22s} {medians[name] * 1000:8.1f} ms  ({count(model, features[name])} parameters with a "
              f"{NUM_CLASSES}-class readout)")
    for name in models:
        if name != "scurnn":
            print(f"  ratio scurnn / {name}: {medians['scurnn'] / medians[name]:.2f}")


if __name__ == "__main__":
    main()
