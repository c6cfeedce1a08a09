"""The fused Triton recurrences (models/triton_recurrence.py) against the plain-autograd loops, values and gradients:
on the CPU through Triton's interpreter (TRITON_INTERPRET=1), on CUDA compiled when the machine has a GPU."""

import pytest
import torch
from devices import CUDA_MARKS, needs_cuda
from tolerances import close, norm

from ortholab.models import triton_recurrence as fused
from ortholab.models.pointwise_recurrence import pointwise_recurrence_reference
from ortholab.models.recurrence import modrelu_recurrence, modrelu_recurrence_reference

pytest.importorskip("triton", reason="Triton is not installed (pip install 'ortholab[gpu]')")

# T steps and n > BLOCK_N (two column tiles, the second partial), B > BLOCK_B (two row blocks, the second partial)
T, B, N = 7, 19, 37


@pytest.fixture
def device(request, monkeypatch):
    if request.param == "cpu":
        monkeypatch.setenv("TRITON_INTERPRET", "1")  # the same kernels, run by Triton's numpy interpreter
    else:
        monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    return request.param


def _inputs(dtype, device, with_offsets):
    g = torch.Generator().manual_seed(7)
    q = torch.linalg.qr(torch.randn(N, N, generator=g, dtype=torch.float64))[0]
    tensors = {
        "u": torch.randn(T, B, N, generator=g, dtype=torch.float64),
        "w": q,
        "b": torch.rand(N, generator=g, dtype=torch.float64) * 0.6 - 0.4,  # some units cut off
        "h0": torch.randn(B, N, generator=g, dtype=torch.float64) * 0.5,
    }
    if with_offsets:
        tensors["offsets"] = torch.randn(T, B, N, generator=g, dtype=torch.float64) * 0.1
    return {k: v.to(device=device, dtype=dtype).requires_grad_() for k, v in tensors.items()}


def _compare(run, reference, inputs, dtype):
    probe = torch.randn(T, B, N, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    results = []
    for fn in (run, reference):
        for tensor in inputs.values():
            tensor.grad = None
        out = fn(**inputs)
        (out * probe.to(out)).sum().backward()
        results.append((out.detach(), {k: v.grad.clone() for k, v in inputs.items()}))
    (out, grads), (expected, expected_grads) = results
    # an orthogonal W: states of size ~1 through T steps of n-term sums; a gradient sums T B terms more
    torch.testing.assert_close(out, expected, **close(dtype, n=T * N, scale=norm(expected)))
    for name, grad in grads.items():
        torch.testing.assert_close(
            grad, expected_grads[name], **close(dtype, n=T * (N + B), scale=norm(expected_grads[name])), msg=name
        )


# the launches the GPU check times (tools/gpu_timing.py): the default, the per-step schedule, other tiles and warps
# (one row block wider than B; three column tiles, the last partial)
LAUNCHES = {
    "persistent": {},
    "per_step": {"schedule": "per_step"},
    "persistent_tiles": {"block_b": 32, "block_n": 16, "num_warps": 2},
    "per_step_tiles": {"schedule": "per_step", "block_b": 32, "block_n": 16, "num_warps": 8},
    # under 16 rows a program (tl.dot's least) the products are broadcast and summed: 19 programs, and 5 (the last
    # partial)
    "persistent_rows": {"block_b": 1},
    "per_step_rows": {"schedule": "per_step", "block_b": 2, "block_n": 64},
}


# the interpreter runs every launch; a GPU (the check's tests stage, its time counted) the two schedules and the
# product without tl.dot
DEVICE_LAUNCHES = [pytest.param("cpu", name, id=f"cpu-{name}") for name in LAUNCHES] + [
    pytest.param("cuda", name, marks=CUDA_MARKS, id=f"cuda-{name}")
    for name in ("persistent", "per_step", "persistent_rows")
]


@pytest.fixture
def launch(request):
    with fused.launch(**LAUNCHES[request.param]):
        yield request.param


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("with_offsets", [False, True])
@pytest.mark.parametrize("device,launch", DEVICE_LAUNCHES, indirect=True)
def test_fused_modrelu_recurrence_matches_the_loop(device, dtype, with_offsets, launch):
    inputs = _inputs(dtype, device, with_offsets)
    _compare(fused.fused_modrelu_recurrence, modrelu_recurrence_reference, inputs, dtype)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("with_offsets", [False, True])
@pytest.mark.parametrize("device,launch", DEVICE_LAUNCHES, indirect=True)
def test_fused_leaky_relu_recurrence_matches_the_loop(device, dtype, with_offsets, launch):
    inputs = _inputs(dtype, device, with_offsets)
    del inputs["b"]

    def run(u, w, h0, offsets=None):
        return fused.fused_leaky_relu_recurrence(u, w, h0, 0.1, offsets)

    def reference(u, w, h0, offsets=None):
        return pointwise_recurrence_reference(u, w, h0, "leaky_relu", 0.1, offsets)

    _compare(run, reference, inputs, dtype)


def test_a_launch_is_checked_and_undone_after_its_block():
    before = dict(fused._LAUNCH)
    with fused.launch(schedule="per_step", num_warps=2):
        assert fused._LAUNCH == {**before, "schedule": "per_step", "num_warps": 2}
        with pytest.raises(RuntimeError), fused.launch(block_n=64):
            assert fused._LAUNCH["block_n"] == 64 and fused._LAUNCH["schedule"] == "per_step"
            raise RuntimeError  # undone also when the block raises
        assert fused._LAUNCH["block_n"] == before["block_n"]
    assert fused._LAUNCH == before
    for options, message in (
        ({"schedule": "stepwise"}, "launch: schedule = 'stepwise'; choose one of"),
        ({"block_b": 3}, "launch: block_b = 3; choose one of"),
        ({"block_b": 4, "block_n": 64}, "launch: block_b = 4 with block_n = 64 broadcasts 16384 products a tile"),
        ({"block_n": 48}, "launch: block_n = 48; choose one of"),
        ({"num_warps": 3}, "launch: num_warps = 3; choose one of"),
    ):
        with pytest.raises(ValueError, match=message), fused.launch(**options):
            pass
    assert fused._LAUNCH == before


def test_the_kernels_are_chosen_only_on_cuda(monkeypatch):
    cpu = torch.zeros(2, 2, 2)
    assert not fused.fused_available(cpu)  # the CPU keeps the torch loop, even with the interpreter on
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert not fused.fused_available(cpu)
    if torch.cuda.is_available():
        on_gpu = cpu.cuda()
        assert fused.fused_available(on_gpu) and not fused.fused_available(on_gpu.half())
        assert not fused.fused_available(on_gpu, "tanh")
        monkeypatch.setenv(fused.DISABLE, "0")
        assert not fused.fused_available(on_gpu)


@needs_cuda
def test_scornn_on_cuda_takes_the_kernels_and_agrees_with_the_loop(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    inputs = _inputs(torch.float32, "cuda", with_offsets=False)
    launches = []
    original = fused._FusedRecurrence.apply
    monkeypatch.setattr(fused._FusedRecurrence, "apply", lambda *a: launches.append(1) or original(*a))
    out = modrelu_recurrence(**inputs)
    assert launches == [1]
    monkeypatch.setenv(fused.DISABLE, "0")
    expected = modrelu_recurrence(**inputs)
    torch.testing.assert_close(out, expected, **close(torch.float32, n=T * N, scale=norm(expected)))
