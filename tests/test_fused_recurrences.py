"""Every fused recurrence (a hand-written BPTT over the whole sequence) against its plain-autograd loop, in float64,
outputs and gradients, on the CPU and on CUDA when the machine has a GPU (skipped otherwise, saying so).

The per-family test files check the same on the CPU with their own inputs; this table is the one place that lists
every fused path, so a new one is checked on every device by adding a row (the uRNN's and EURNN's compiled
CPU loops, models/*_kernels.py, run on the CPU only). On CUDA, every family's
forward+backward is also checked for host syncs inside the time loop (their count must not grow with T).
"""

import warnings

import pytest
import torch
from devices import DEVICES, needs_cuda
from tolerances import close, norm

from ortholab.models import FAMILIES, SequenceModel
from ortholab.models.complex_recurrence import complex_modrelu_recurrence, complex_modrelu_recurrence_reference
from ortholab.models.eurnn import EURNN
from ortholab.models.givens_kernels import givens_recurrence_features
from ortholab.models.operator_recurrence import operator_recurrence, operator_recurrence_reference, to_complex
from ortholab.models.pointwise_recurrence import pointwise_recurrence, pointwise_recurrence_reference
from ortholab.models.recurrence import modrelu_recurrence, modrelu_recurrence_reference
from ortholab.models.shift_recurrence import shift_relu_recurrence, shift_relu_recurrence_reference
from ortholab.models.urnn import URNN
from ortholab.models.urnn_kernels import urnn_recurrence_features

T, B, N = 12, 3, 6
# per step at most the uRNN's factors: two reflections and two FFTs of length N on complex states, 8 N roundings;
# T steps for the states, and the sum over T and B for a weight's gradient
STATE_OPS, GRADIENT_OPS = 8 * N * T, (8 * N + B) * T
F64 = torch.float64


def _real(*shape, scale=1.0):
    return torch.randn(*shape, dtype=F64) * scale


def _orthogonal(n):
    return torch.linalg.qr(_real(n, n))[0]


def _modrelu(device):  # scoRNN, expRNN, nnRNN
    args = [_real(T, B, N), _orthogonal(N), _real(N, scale=0.3) - 0.1, _real(B, N, scale=0.5)]
    return modrelu_recurrence, modrelu_recurrence_reference, args, {}


def _complex_modrelu(device):  # scuRNN, full-capacity uRNN, EURNN's dense path
    w = torch.linalg.qr(torch.randn(N, N, dtype=torch.complex128))[0]
    args = [
        _real(T, B, 2 * N),
        w.real.contiguous(),
        w.imag.contiguous(),
        _real(N, scale=0.3) - 0.1,
        _real(B, 2 * N, scale=0.5),
    ]
    return complex_modrelu_recurrence, complex_modrelu_recurrence_reference, args, {}


def _pointwise(activation):  # oRNN
    def build(device):
        args = [_real(T, B, N), _orthogonal(N), _real(B, N, scale=0.5)]
        return pointwise_recurrence, pointwise_recurrence_reference, args, {"activation": activation}

    return build


def _shift_relu(device):  # SRNN
    return shift_relu_recurrence, shift_relu_recurrence_reference, [_real(T, B, N), _real(B, N).relu()], {}


def _factored(layer_class, fused=operator_recurrence, **options):  # uRNN, EURNN: W applied factor by factor
    def build(device):
        layer = layer_class(2, N, **options).double().to(device)  # its buffers (the uRNN's permutation) too
        with torch.no_grad():
            layer.bias.uniform_(-0.6, 0.3)  # mixed signs: some units cut off
        operator = layer.operator()

        def bind(recurrence):  # complex states as real (..., 2) pairs, like every other row's output
            return lambda u, b, h0, *params, offsets=None: torch.view_as_real(
                recurrence(operator, u, b, h0, tuple(params), offsets)
            )

        args = [
            torch.randn(T, B, N, dtype=torch.complex128),
            layer.bias.detach(),
            torch.randn(B, N, dtype=torch.complex128) * 0.5,
            *(p.detach() for p in layer.recurrent_params()),
        ]
        return bind(fused), bind(operator_recurrence_reference), args, {}

    return build


def givens_recurrence(operator, u, b, h0, params, offsets=None):  # complex states, as operator_recurrence
    return to_complex(givens_recurrence_features(operator, u, b, h0, params, offsets))


def urnn_recurrence(operator, u, b, h0, params, offsets=None):
    return to_complex(urnn_recurrence_features(operator, u, b, h0, params, offsets))


CASES = {
    "modrelu (scoRNN, expRNN, nnRNN)": _modrelu,
    "complex modrelu (scuRNN, fcuRNN, EURNN dense)": _complex_modrelu,
    "leaky relu (oRNN)": _pointwise("leaky_relu"),
    "tanh (oRNN)": _pointwise("tanh"),
    "shifted relu (SRNN)": _shift_relu,
    "uRNN factors": _factored(URNN),
    "uRNN factors, compiled CPU kernels": _factored(URNN, urnn_recurrence),
    "EURNN rotation layers": _factored(EURNN, style="tunable", capacity=3, recurrence="layers"),
    "EURNN FFT-style layers": _factored(EURNN, style="fft", recurrence="layers"),
    "EURNN rotation layers, compiled CPU loops": _factored(
        EURNN, givens_recurrence, style="tunable", capacity=3, recurrence="layers"
    ),
    "EURNN FFT-style layers, compiled CPU loops": _factored(EURNN, givens_recurrence, style="fft", recurrence="layers"),
}


# the compiled loops run on the CPU only (other devices take the torch BPTT): no CUDA case for them, so that the GPU
# check's `pytest -m cuda` skips nothing
CASE_DEVICES = [
    pytest.param(case, *device.values, marks=device.marks) if not isinstance(device, str) else (case, device)
    for case in CASES
    for device in DEVICES
    if device == "cpu" or not case.endswith(("compiled CPU kernels", "compiled CPU loops"))
]


@pytest.mark.parametrize(("case", "device"), CASE_DEVICES)
@pytest.mark.parametrize("with_offsets", [False, True])
def test_fused_recurrence_matches_the_plain_loop(case, device, with_offsets):
    torch.manual_seed(0)
    fused, plain, args, options = CASES[case](device)
    args = [a.to(device) for a in args]
    offsets = torch.randn_like(args[0]) * 0.1 if with_offsets else None
    leaves = args + ([offsets] if with_offsets else [])
    mine, theirs = ([a.clone().requires_grad_() for a in leaves] for _ in range(2))

    def run(recurrence, tensors):
        return recurrence(*tensors[: len(args)], **options, offsets=tensors[-1] if with_offsets else None)

    out, expected = run(fused, mine), run(plain, theirs)
    assert out.device.type == device
    torch.testing.assert_close(out, expected, **close(F64, STATE_OPS, norm(expected)))
    assert (expected != 0).any()
    probe = torch.randn_like(out)
    (out * probe).sum().backward()
    (expected * probe).sum().backward()
    for a, c in zip(mine, theirs):
        assert a.grad is not None and c.grad is not None
        torch.testing.assert_close(a.grad, c.grad, **close(F64, GRADIENT_OPS, norm(c.grad)))


def _host_syncs(family: str, seq_len: int) -> int:
    """How many times one forward+backward of `family` (2 -> 16 units, 10 classes) waits for the GPU."""
    torch.manual_seed(0)
    model = SequenceModel(FAMILIES[family](2, 16), 10, readout="last_step").cuda()
    x, y = torch.randn(4, seq_len, 2, device="cuda"), torch.randint(0, 10, (4,), device="cuda")
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            torch.nn.functional.cross_entropy(model(x), y).backward()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchronizing" in str(w.message) for w in caught)


@needs_cuda
@pytest.mark.parametrize("family", [f for f in FAMILIES if f != "rtransformer"])
def test_no_host_sync_per_time_step_on_cuda(family):
    # a sync inside the time loop would make the count grow with T; forming W may sync once (a solve's checks);
    # a first pass at a length may sync once more (lazy initialisation, Triton compiling for a length divisible by
    # 16), so the counted passes follow a warm-up at both lengths
    _host_syncs(family, 16), _host_syncs(family, 8)
    assert _host_syncs(family, 16) == _host_syncs(family, 8)
