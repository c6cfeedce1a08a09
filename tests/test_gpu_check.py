"""The GPU check (tools/gpu_check.py, docs/gpus.md) stays ready for the first GPU machine lent: its CPU rehearsal runs
every stage, its verdicts fail what must fail, and the wheels it carries hold everything the device image lacks."""

import importlib.util
import json
import os
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
import torch
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("gpu_check", REPO / "tools" / "gpu_check.py")
gpu_check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_check)

# the device machine's interpreter, for evaluating the wheels' requirement markers there
DEVICE_PYTHON = {
    **default_environment(),
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "platform_system": "Linux",
    "sys_platform": "linux",
    "platform_machine": "x86_64",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
}


def image_packages() -> set[str]:
    lines = (REPO / "tools" / "gpu_image_packages.txt").read_text().splitlines()
    return {canonicalize_name(line) for line in lines if line.strip() and not line.startswith("#")}


def pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def test_a_cuda_stage_with_a_skipped_case_fails_and_the_cpu_rehearsal_may_skip():
    counts = {"cuda": {"tests": 89, "failures": 0, "errors": 0, "skipped": 1, "failed": []}}
    assert gpu_check.verdict("tests", counts, "cuda")[0] is False  # on the GPU nothing may skip
    assert gpu_check.verdict("tests", counts, "cpu")[0] is True
    counts["cuda"].update(skipped=0, failures=1, failed=["tests.test_x::test_y"])
    passed, summary = gpu_check.verdict("tests", counts, "cuda")
    assert not passed and "tests.test_x::test_y" in summary


def test_a_kernel_launch_whose_states_are_off_the_loops_fails_the_stage_however_fast():
    row = {"batch": 50, "n": 170, "vs_torch_loop": 1.0}
    rows = [
        {**row, "what": "scornn (triton)", "ms": 60.0, "vs_rnn_relu": 28.0},
        {**row, "what": "recurrence (torch loop)", "ms": 100.0, "rel_error": 0.0},
        {**row, "what": "recurrence (triton, per-step)", "ms": 5.0, "rel_error": 1e-6},
    ]
    passed, summary = gpu_check.verdict("kernels", {"rows": rows}, "cuda")
    assert passed and "fastest recurrence (triton, per-step) B=50 n=170: 5.0 ms" in summary
    rows[2]["rel_error"] = 0.3  # e.g. a tile width that drops columns
    passed, summary = gpu_check.verdict("kernels", {"rows": rows}, "cuda")
    assert not passed and summary.startswith("states off the torch loop's by more than 0.001: recurrence (triton, per")


def test_cudnn_is_timed_with_tf32_allowed_and_off_and_the_switch_is_restored():
    """torch lets cuDNN's float32 RNNs take TF32 by default, the kernels multiply in IEEE float32: the stage times
    cuDNN both ways, each row naming which, and leaves torch's switch as it found it, also after an error."""
    gpu_timing = _gpu_timing()
    assert gpu_timing.cudnn_names("cuda", 61, tf32=False) == (
        "nn.RNN(relu) (cuDNN, TF32 off)",
        "nn.LSTM n=61 (same budget, cuDNN, TF32 off)",
    )
    rnn, conv = torch.backends.cudnn.rnn, torch.backends.cudnn.conv
    before = (rnn.fp32_precision, conv.fp32_precision)
    with pytest.raises(RuntimeError), gpu_timing.cudnn_tf32(False):
        assert (rnn.fp32_precision, conv.fp32_precision) == ("ieee", before[1])  # the RNNs' switch alone
        raise RuntimeError("a timing failed")
    assert (rnn.fp32_precision, conv.fp32_precision) == before
    with gpu_timing.cudnn_tf32(True):
        assert rnn.fp32_precision == "tf32"
    assert (rnn.fp32_precision, conv.fp32_precision) == before
    row = {"what": "scornn (triton)", "batch": 50, "n": 170, "ms": 60.0, "vs_rnn_relu": 28.0, "vs_rnn_relu_ieee": 9.5}
    assert "60.0 ms (28.00x RNN(relu), 9.50x with TF32 off)" in gpu_check.verdict("kernels", {"rows": [row]}, "cuda")[1]


def _gpu_timing():
    spec = importlib.util.spec_from_file_location("gpu_timing", REPO / "tools" / "gpu_timing.py")
    gpu_timing = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_timing)
    return gpu_timing


def test_the_kernel_stage_past_its_deadline_names_what_it_left_and_fails():
    """Killed at its limit, the stage would bring back nothing: past its deadline it stops measuring and names the
    rest (here the deadline has passed before the first timing)."""
    gpu_timing = _gpu_timing()
    result = gpu_timing.measure_all("cpu", tiny=True, deadline=0.0)
    assert result["rows"] == [] and result["graphs"] == {}
    assert result["not_reached"] == ["batch 4, n = 8"] + [f"{f}, eager and graphed" for f in gpu_timing.GRAPH_FAMILIES]
    passed, summary = gpu_check.verdict("kernels", result, "cpu")
    assert not passed and summary.startswith(f"not reached in the stage's time: {1 + len(gpu_timing.GRAPH_FAMILIES)}")


def test_the_call_budget_names_the_epoch_runs_it_left_no_time_for(tmp_path):
    # the stages share --budget seconds: a stage that starts with too little left starts nothing and says so, and
    # the stages before it keep their results
    done = subprocess.run(
        [sys.executable, str(REPO / "tools/gpu_check.py"), "--device", "cpu", "--tiny", "--budget", "30"]
        + ["--stages", "env,epoch", "--out", str(tmp_path / "out"), "--work", str(tmp_path / "work")],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    stages = json.loads((tmp_path / "out" / "summary.json").read_text())["stages"]
    assert stages["env"]["status"] == "pass"
    assert stages["epoch"]["status"] == "FAIL" and "pmnist-epoch-32-true: not reached" in stages["epoch"]["summary"]
    assert "pmnist-epoch-bf16-mixed: not reached" in stages["epoch"]["summary"]


def test_a_stage_past_its_limit_is_killed_with_its_children(tmp_path):
    # a bench process starts measuring processes of its own: the whole group goes at the limit
    marker = tmp_path / "child-alive"
    grandchild = f"import pathlib, time; time.sleep(3); pathlib.Path({str(marker)!r}).touch()"
    script = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {grandchild!r}]); time.sleep(30)"
    with open(tmp_path / "log", "w") as log:
        code, seconds = gpu_check.run_process([sys.executable, "-c", script], dict(os.environ), 1.0, log)
    assert code is None and seconds < 10
    subprocess.run([sys.executable, "-c", "import time; time.sleep(3.5)"])
    assert not marker.exists()  # the grandchild died with the group
    assert "[killed after 1 s]" in (tmp_path / "log").read_text()


def test_the_rehearsal_hides_every_optional_package_the_device_image_lacks():
    extras = pyproject()["project"]["optional-dependencies"]
    optional = {
        canonicalize_name(Requirement(r).name)
        for name in ("postgres", "sweeps", "speech", "dashboard")
        for r in extras[name]
    }
    hidden = {canonicalize_name(name) for name in gpu_check.NOT_ON_DEVICE}
    assert optional - image_packages() <= hidden, optional - image_packages() - hidden


def test_the_wheels_carry_every_distribution_the_device_image_lacks(tmp_path):
    """tools/gpu_wheels.sh downloads (from PyPI); the closure of pyproject's dependencies over the wheels' own
    requirements, evaluated for CPython 3.12 on Linux, lies in the image or in the wheels."""
    done = subprocess.run(
        ["bash", "tools/gpu_wheels.sh", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHON": sys.executable},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    wheels = {}
    for wheel in tmp_path.glob("*.whl"):
        with zipfile.ZipFile(wheel) as archive:
            metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
            text = archive.read(metadata).decode()
        name = canonicalize_name(re.search(r"^Name: (.+)$", text, re.M).group(1).strip())
        assert re.search(r"(py3|cp312|abi3)", wheel.name) and ("none-any" in wheel.name or "x86_64" in wheel.name)
        wheels[name] = [
            Requirement(line.split(":", 1)[1].strip())
            for line in text.splitlines()
            if line.startswith("Requires-Dist:")
        ]
    available = image_packages() | set(wheels)
    required = [Requirement(r) for r in pyproject()["project"]["dependencies"]]
    required += [Requirement(f"{name}") for name in ("docstring-parser", "typeshed-client")]  # jsonargparse[signatures]
    seen = set()
    while required:
        requirement = required.pop()
        name = canonicalize_name(requirement.name)
        if requirement.marker and not requirement.marker.evaluate({**DEVICE_PYTHON, "extra": ""}):
            continue
        assert name in available, f"{name} is neither on the device image nor among the wheels"
        if name in wheels and name not in seen:
            required += wheels[name]
        seen.add(name)
    assert set(wheels) <= seen, set(wheels) - seen  # nothing carried that nothing needs
    docs = (REPO / "docs" / "gpus.md").read_text()
    assert all(name in docs.lower() for name in wheels), "docs/gpus.md names every carried distribution"


@pytest.mark.slow
@pytest.mark.timeout(2400)  # its stages' limits on the CPU: 3 x 435 s at most
def test_the_cpu_rehearsal_runs_every_stage(tmp_path):
    """`make gpu-check GPU_CHECK_ARGS="--device cpu --tiny"`: every stage runs and passes at tiny sizes, hiding the
    packages the device image lacks, and writes the files a device call brings back."""
    out = tmp_path / "out"
    done = subprocess.run(
        [
            sys.executable,
            "tools/gpu_check.py",
            "--device",
            "cpu",
            "--tiny",
            "--out",
            str(out),
            "--work",
            str(tmp_path / "work"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=2000,
    )
    table = done.stdout[done.stdout.index("| stage |") :]
    for stage in gpu_check.STAGES:
        assert re.search(rf"^\| {stage} \| pass \|", table, re.M), (stage, table, done.stdout[-3000:])
    assert done.returncode == 0
    assert sorted(p.name for p in out.iterdir()) == ["epoch.db", "log.txt", "speed.md", "summary.json", "summary.md"]
    stages = json.loads((out / "summary.json").read_text())["stages"]
    assert stages["tests"]["result"]["cuda"]["tests"] > 50  # every CUDA case collected (and skipped here)
    assert stages["tests"]["result"]["interpreter"]["failures"] == 0
    kernel_rows = stages["kernels"]["result"]["rows"]
    assert {r["what"] for r in kernel_rows} >= {
        "scornn (triton)",
        "scornn (torch loop)",
        "recurrence (triton kernel)",
        "nn.RNN(relu) (TF32 allowed)",
        "nn.RNN(relu) (TF32 off)",
    }
    assert all(r["vs_rnn_relu_ieee"] > 0 for r in kernel_rows if r.get("ms") is not None)
    assert [r["family"] for r in stages["bench"]["result"]["rows"]] == ["scornn", "ornn", "lstm"]
    runs = stages["epoch"]["result"]["runs"]
    assert set(runs) == {"pmnist-epoch-32-true", "pmnist-epoch-bf16-mixed"}
    assert all(run["steps"] == 3 and run["epoch_estimate_s"] > 0 for run in runs.values())
    assert "| scornn (triton) |" in (out / "speed.md").read_text()


DEVICE_CARRY_LIMIT = 64 * 2**20  # the device call's working tree and carried folders together (docs/gpus.md)
PACK_BYTES = 20 * 2**20  # .whl (7.8 MB) and .gpu-data (11.4 MB) from `make gpu-pack`, 2026-11-27, rounded up


def test_the_checkout_the_gpu_check_carries_stays_under_the_device_limit():
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout (an installed wheel): nothing travels to a device from here")
    sizes: dict[str, int] = {}
    for name in filter(None, listed.stdout.decode().split("\0")):
        path = REPO / name
        if path.is_file() and not path.is_symlink():
            top = name.split("/")[0] if "/" in name else "."
            sizes[top] = sizes.get(top, 0) + path.stat().st_size
    tracked = sum(sizes.values())
    largest = ", ".join(f"{top} {size / 2**20:.1f} MiB" for top, size in sorted(sizes.items(), key=lambda i: -i[1])[:5])
    assert tracked + PACK_BYTES < DEVICE_CARRY_LIMIT, (
        f"the tracked files ({tracked / 2**20:.1f} MiB) and the GPU check's carried folders (~20 MiB) exceed the "
        f"device's 64 MiB: {largest}"
    )


def test_the_stages_help_names_the_row_stage_too(capsys):
    """`--stages row` (docs/gpus.md: the second call that trains scoRNN's permuted-MNIST row) was accepted but not
    among the stages --help listed."""
    with pytest.raises(SystemExit):
        gpu_check.parse_args(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert all(stage in out.split("--stages STAGES")[-1].split("--families")[0] for stage in ("bench", "row"))


def test_no_mnist_names_only_folders_that_were_looked_in(tmp_path, monkeypatch):
    """Without $ORTHOLAB_DATA the epoch stage's error named a made-up /nonexistent/mnist among the folders it tried."""
    monkeypatch.delenv("ORTHOLAB_DATA", raising=False)
    monkeypatch.setattr(gpu_check, "REPO", tmp_path / "checkout")
    with pytest.raises(SystemExit) as missing:
        gpu_check.find_mnist(gpu_check.parse_args(["--device", "cpu"]))
    said = str(missing.value)
    assert "nonexistent" not in said and str(tmp_path / "checkout" / ".gpu-data" / "mnist") in said, said
    assert str(tmp_path / "shared" / "data" / "mnist") in said
    monkeypatch.setenv("ORTHOLAB_DATA", str(tmp_path / "data"))
    with pytest.raises(SystemExit) as missing:
        gpu_check.find_mnist(gpu_check.parse_args(["--device", "cpu"]))
    assert str(tmp_path / "data" / "mnist") in str(missing.value)
