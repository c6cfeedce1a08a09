"""`make gpu-check`: every open GPU question in one call, each stage in a process of its own with its own time limit.

    python3 tools/gpu_check.py                         # on the lent GPU machine (docs/gpus.md gives the device call)
    python3 tools/gpu_check.py --device cpu --tiny     # the CPU rehearsal (tests/test_gpu_check.py runs it)

Stages, in this order: env (GPU, driver, versions), tests (`pytest -m cuda`: every CUDA case of the suite, then
nothing may skip), epoch (one permuted-MNIST epoch of scoRNN n = 170 through `ortholab fit`, float32, bf16-mixed
and float32 with CUDA graphs, capped by time and reported as a rate if cut), kernels (tools/gpu_timing.py: the
Triton kernels, the torch loop and cuDNN, eager against CUDA graphs, CUDA-event medians), bench (`ortholab bench
--device cuda`, one process per family, each with its own limit): what the H200's calls left open first. A
failing stage is recorded and the next one runs. The summary table is printed last; everything is written
under --out ($OUT on the device machine): summary.md, summary.json, speed.md, log.txt, epoch.db (at most 8 files
come back from there).

The device image has no SQLAlchemy, Alembic, jsonargparse, soundfile or platformdirs and no network: the wheels
that `bash tools/gpu_wheels.sh` put in .whl/ are installed into a folder of the work directory, and the checkout is
made importable as `ortholab` (its folders linked under one package, as pyproject's package-dir maps them), so
nothing there needs an install; the rehearsal takes the same path. Only the standard library is imported in this
process.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TOOLS = REPO / "tools"
# pyproject's package-dir: the top-level folders that install as ortholab's subpackages
SUBPACKAGES = ("app", "training", "models", "datamodules", "db", "configs")
# what OrthoLab imports that the device image lacks (docs/gpus.md); tools/gpu_wheels.sh carries their wheels
MISSING_ON_DEVICE = (
    "sqlalchemy",
    "alembic",
    "jsonargparse",
    "docstring_parser",
    "typeshed_client",
    "soundfile",
    "platformdirs",
)
# what `make install` adds here that the image lacks and nothing carries (pyproject's extras): the CPU rehearsal hides
# them, and the editable install of ortholab, so a stage that needs one fails here as it would there
# (tests/test_gpu_check.py keeps the list complete)
NOT_ON_DEVICE = ("streamlit", "plotly", "optuna", "psycopg", "pystoi", "pesq", "selenium", "mkdocs")
HIDE = """import importlib.abc, sys
class _Hidden(importlib.abc.MetaPathFinder):  # tools/gpu_check.py: as on the GPU machine's image
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {names!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}} (hidden by the GPU check's rehearsal)", name=name)
sys.meta_path[:] = [_Hidden()] + [f for f in sys.meta_path if "__editable__" not in type(f).__module__]  # no install
"""
STAGES = ("env", "tests", "epoch", "kernels", "bench")
OPTIONAL_STAGES = ("row",)  # asked for by name: scoRNN Table 1's permuted-MNIST n = 170 row, all 70 epochs
# seconds per stage on the GPU: about 7.5 minutes in all by the H200's timings (2026-11-28: env 11, tests 92, each
# epoch run 52, kernels 91 with two batch sizes), so that two calls fit in 15 minutes of GPU time; the call's: 460
LIMITS = {
    "env": 20,
    "tests": 135,  # 92 measured, and since then the per-step kernels' 8 CUDA cases
    "kernels": 120,  # 91 measured with two batch sizes (now one); since then the launch sweep and graphed recurrences
    "bench": 110,
    "epoch": 220,  # three runs of EPOCH_CAP_S + EPOCH_START_S at most
    "row": 570,
}
# the kernels stage's states against the torch loop's, relative to the largest: float32 through T = 784 steps of
# n-term sums with an orthogonal W agree to about 1e-5 (tests/tolerances.py's c n eps); far above it, a launch is wrong
KERNEL_REL_ERROR = 1e-3
CALL_BUDGET_S = 445  # the device call's timeout_s (460) less the time to write the results back
CPU_SLOWER = 3  # the CPU rehearsal's limits are this many times longer: 2 cores, maybe shared with other work
BENCH_FAMILY_LIMIT_S = {"cuda": 25, "cpu": 120}  # one family's `ortholab bench` process, its imports included
EPOCH_CAP_S = 30  # one precision's epoch, training time; cut there and reported as a rate
EPOCH_START_S = 40  # one epoch process's start and finish around its training time (the H200: about 30 s)
PMNIST_STEPS = 1_100  # 55,000 images at batch 50
FAST_EPOCH_S = 6.0  # at or under this, the next call trains scoRNN Table 1's permuted-MNIST row (70 epochs)
PMNIST_ROW_CALL = (
    'run(command="PYTHONUNBUFFERED=1 python3 tools/gpu_check.py --stages row --out $OUT", '
    'carry=[".whl", ".gpu-data"], timeout_s=600)'
)


def stage_limit(stage: str, device: str) -> float:
    return LIMITS[stage] * (CPU_SLOWER if device == "cpu" else 1)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--tiny", action="store_true", help="tiny sizes: the CPU rehearsal of every stage")
    parser.add_argument(
        "--out",
        default=os.environ.get("OUT") or str(REPO / "gpu-check-out"),
        help="where the summary, the logs and the epoch's store go (default: $OUT, else ./gpu-check-out)",
    )
    parser.add_argument(
        "--stages",
        default=",".join(STAGES),
        help=f"comma-separated, of {', '.join(STAGES)} (default: all five), or row: scoRNN's permuted-MNIST row, "
        "70 epochs, asked for by name",
    )
    parser.add_argument(
        "--families",
        default=None,
        help="the bench stage's families (default: every family; with --tiny: scornn,ornn,lstm)",
    )
    parser.add_argument(
        "--mnist",
        default=None,
        help="the folder of MNIST's four IDX files, gzipped or not (default: "
        ".gpu-data/mnist, else $ORTHOLAB_DATA/mnist, else ../shared/data/mnist)",
    )
    parser.add_argument("--work", default="/tmp/ortholab-gpu-check", help="scratch folder (wheels, runs)")
    parser.add_argument(
        "--budget",
        type=float,
        default=None,
        help="seconds for the whole call: a stage gets at most what is left, so that a stage cut by the call's own "
        f"limit does not lose its results (default: {CALL_BUDGET_S} on cuda without the row stage, else none)",
    )
    parser.add_argument("--run-stage", default=None, help=argparse.SUPPRESS)  # a stage, in the child process
    parser.add_argument("--stage-seconds", type=float, default=None, help=argparse.SUPPRESS)  # the child's limit
    args = parser.parse_args(argv)
    stages = args.stages.split(",")
    unknown = [s for s in stages if s not in STAGES + OPTIONAL_STAGES]
    if unknown:
        parser.error(f"--stages: {unknown[0]!r} is not a stage; choose from {', '.join(STAGES + OPTIONAL_STAGES)}")
    args.stages = stages
    return args


# the environment the stages run in -------------------------------------------------------------------------------


def _missing(modules, env) -> list[str]:
    probe = (
        "import importlib.util, sys\n"
        "def absent(m):\n"
        "    try:\n"
        "        return importlib.util.find_spec(m) is None\n"
        "    except ImportError:\n"
        "        return True\n"
        "print(' '.join(m for m in sys.argv[1:] if absent(m)))"
    )
    done = subprocess.run([sys.executable, "-c", probe, *modules], env=env, capture_output=True, text=True)
    return done.stdout.split()


def prepare(work: Path, log, hide: bool) -> dict[str, str]:
    """The environment of every stage: the carried wheels installed and the checkout importable where needed; with
    `hide`, the packages the device image lacks made unimportable (a sitecustomize on the path)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if hide:
        (work / "hide").mkdir()
        (work / "hide" / "sitecustomize.py").write_text(HIDE.format(names=set(NOT_ON_DEVICE)))
        paths.insert(0, str(work / "hide"))
        log(f"prepare: hiding {', '.join(NOT_ON_DEVICE)}, as the device image lacks them")
    missing = _missing(MISSING_ON_DEVICE, env)
    wheels = sorted((REPO / ".whl").glob("*.whl"))
    if missing and wheels:
        site = work / "site"
        log(f"prepare: {', '.join(missing)} missing; installing {len(wheels)} wheels from .whl/ into {site}")
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--no-index",
                "--no-deps",
                "--no-compile",
                "--upgrade",
                "--target",
                str(site),
                *map(str, wheels),
            ],
            check=True,
        )
        paths.insert(0, str(site))
    elif missing:
        log(f"prepare: {', '.join(missing)} missing and no .whl/ here: run `bash tools/gpu_wheels.sh` and carry .whl")
    env["PYTHONPATH"] = os.pathsep.join(paths)
    # the checkout as the package `ortholab`, its folders linked as pyproject's package-dir maps them, first on the
    # path (also where an install exists, so the rehearsal takes this path too); PYTHONSAFEPATH keeps `python -c` and
    # `python -m` run in the checkout from finding its bare ortholab/ folder first
    source = work / "src" / "ortholab"
    shutil.rmtree(source.parent, ignore_errors=True)
    shutil.copytree(REPO / "ortholab", source, ignore=shutil.ignore_patterns("__pycache__"))
    for name in SUBPACKAGES:
        (source / name).symlink_to(REPO / name, target_is_directory=True)
    paths.insert(0, str(source.parent))
    env["PYTHONSAFEPATH"] = "1"
    paths.append(str(REPO / "tests"))  # the suite's helpers (tolerances), as pytest's pythonpath has them
    env["PYTHONPATH"] = os.pathsep.join(paths)
    bin_dir = work / "bin"  # the console script, for tests that call `ortholab`
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "ortholab"
    script.write_text(f"#!{sys.executable}\nfrom ortholab.cli.main import main\nmain()\n")
    script.chmod(0o755)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return env


def run_process(cmd: list[str], env: dict, limit: float, stdout, stderr=subprocess.STDOUT) -> tuple[int | None, float]:
    """(exit code, or None when killed at `limit` seconds; wall seconds). The whole process group is killed at the
    limit (a bench process starts measuring processes of its own)."""
    start = time.perf_counter()
    print(f"\n$ {' '.join(cmd)}", file=sys.stdout if stderr is None else stdout, flush=True)
    process = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=stdout, stderr=stderr, start_new_session=True)
    try:
        code = process.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        code = None
        print(f"[killed after {limit:.0f} s]", file=sys.stdout if stderr is None else stdout, flush=True)
    return code, time.perf_counter() - start


# the stages (each runs in a child process: `--run-stage NAME`) ------------------------------------------------------


def stage_env(args) -> dict:
    import importlib.metadata as metadata
    import platform

    import torch

    facts = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
    }
    for name in (
        "lightning",
        "pytorch-lightning",
        "torchmetrics",
        "triton",
        "numba",
        "numpy",
        "sqlalchemy",
        "jsonargparse",
        "alembic",
    ):
        try:
            facts[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            facts[name] = None
    if args.device == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit(f"no CUDA device: torch {torch.__version__} (CUDA {torch.version.cuda}) sees no GPU")
        props = torch.cuda.get_device_properties(0)
        facts.update(
            gpu=props.name,
            gpu_memory_gib=round(props.total_memory / 2**30, 1),
            multiprocessors=props.multi_processor_count,
        )
        smi = shutil.which("nvidia-smi")
        if smi:
            query = subprocess.run(
                [smi, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True
            )
            facts["driver"] = query.stdout.strip() or None
    else:
        facts.update(gpu=None, cpu=platform.processor() or platform.machine(), threads=torch.get_num_threads())
    import ortholab.cli.main  # the package imports with what this machine has

    facts["ortholab_from"] = str(Path(ortholab.__file__).parent)  # the linked checkout (prepare)
    return facts


def stage_tests(args, work: Path) -> dict:
    """`pytest -m cuda` (on the CPU these skip, and the Triton kernels run through the interpreter instead)."""
    import importlib.util

    results = {}
    # the files that hold CUDA cases (tests/devices.py's marks): collecting the others would import what the device
    # image lacks (the dashboard's tests: streamlit, selenium)
    files = sorted(
        str(f.relative_to(REPO)) for f in (REPO / "tests").glob("test_*.py") if "from devices import" in f.read_text()
    )
    runs = [("cuda", ["-m", "cuda", *files])]
    if args.device == "cpu":
        runs.append(("interpreter", ["-m", "not slow", "tests/test_triton_recurrence.py", "-k", "cpu"]))
    for name, selection in runs:
        junit = work / f"junit-{name}.xml"
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-rfEs",
            f"--junitxml={junit}",
            *selection,
        ]
        if args.device == "cuda" and importlib.util.find_spec("xdist"):
            cmd += ["-n", "4"]  # four workers on one GPU: these are correctness checks, not timings
        subprocess.run(cmd, cwd=REPO)
        results[name] = junit_counts(junit)
    return results


def junit_counts(path: Path) -> dict:
    if not path.exists():
        return {"error": "pytest wrote no report (see log.txt)"}
    root = ElementTree.parse(path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    counts = {key: int(suite.get(key, 0)) for key in ("tests", "failures", "errors", "skipped")}
    counts["failed"] = [
        f"{case.get('classname')}::{case.get('name')}"
        for case in suite.iter("testcase")
        if case.find("failure") is not None or case.find("error") is not None
    ][:20]
    return counts


def stage_kernels(args, work: Path) -> dict:
    sys.path.insert(0, str(TOOLS))
    import gpu_timing

    # what is left 10 s before the stage's limit is named, not measured: a killed stage would bring back nothing
    deadline = time.monotonic() + (args.stage_seconds or stage_limit("kernels", args.device)) - 10
    return gpu_timing.measure_all(args.device, args.tiny, deadline)


def bench_families(args) -> list[str]:
    if args.families:
        return args.families.split(",")
    if args.tiny:
        return ["scornn", "ornn", "lstm"]
    # the targets first, so that a stage cut by its limit has measured those; of them first those no GPU
    # has measured yet (the H200's call 2 measured scornn and ornn, then ran out of time)
    first = ["exprnn", "urnn", "eurnn", "scurnn", "fcurnn", "scornn", "ornn", "lstm", "lru", "s4d"]
    from ortholab.models import FAMILIES

    return first + [f for f in FAMILIES if f not in first]


def stage_bench(args, work: Path, env: dict) -> dict:
    """`ortholab bench --device D --families F --json`, one process per family, each cut at its own limit."""
    flags = (
        ["--seq-len", "16", "--batches", "4", "--repeats", "1"]
        if args.tiny
        else ["--seq-len", "784", "--batches", "50", "--repeats", "3"]
    ) + ["--in-process"]  # this process is the family's own already: no second start (half of 24 s on the H200)
    deadline = time.monotonic() + (args.stage_seconds or stage_limit("bench", args.device)) - 5
    rows, failed, not_reached = [], {}, []
    for family in bench_families(args):
        left = deadline - time.monotonic()
        if left < 3:
            not_reached.append(family)
            continue
        out = work / f"bench-{family}.json"
        limit = min(BENCH_FAMILY_LIMIT_S[args.device], left)
        cmd = [
            sys.executable,
            "-c",
            "import sys; from ortholab.cli.main import main; main()",
            "bench",
            "--device",
            args.device,
            "--families",
            family,
            "--sizes",
            "16k",
            "--memory",
            "",
            "--json",
            *flags,
        ]
        with open(out, "w") as stdout:  # the JSON; its notes and errors go to stderr, the log
            code, _ = run_process(cmd, env, limit, stdout, stderr=None)
        if code == 0:
            rows += json.loads(out.read_text())["rows"]
        else:
            failed[family] = f"killed at its limit of {limit:.0f} s" if code is None else f"exit code {code}"
    return {"rows": rows, "failed": failed, "not_reached": not_reached}


def find_mnist(args) -> Path:
    candidates = (
        [args.mnist]
        if args.mnist
        else [
            REPO / ".gpu-data" / "mnist",
            *([Path(os.environ["ORTHOLAB_DATA"]) / "mnist"] if os.environ.get("ORTHOLAB_DATA") else []),
            REPO.parent / "shared" / "data" / "mnist",
        ]
    )
    for candidate in map(Path, candidates):
        if candidate.is_dir() and any(candidate.glob("train-images-idx3-ubyte*")):
            return candidate
    raise SystemExit(
        f"no MNIST IDX files in {', '.join(map(str, candidates))}: run `make gpu-pack` and carry "
        f".gpu-data, or give --mnist DIR"
    )


def stage_epoch(args, work: Path, env: dict) -> dict:
    """One permuted-MNIST epoch of scoRNN n = 170 (the paper's config) through `ortholab fit`, per precision."""
    mnist = find_mnist(args)
    db = work / "epoch.db"
    db.unlink(missing_ok=True)
    every = 1 if args.tiny else 50
    overrides = work / "epoch-overrides.yaml"
    overrides.write_text(
        json.dumps(
            {
                "trainer": {
                    "callbacks": [{"class_path": "training.callbacks.Timing", "init_args": {"every_n_steps": every}}]
                }
            }
        )
    )
    results = {}
    cap = 90 if args.tiny else EPOCH_CAP_S  # the rehearsal's batches must all run, also on a loaded CPU
    # float32, float32 with the training pass in CUDA graphs (model.cuda_graphs, refused on the CPU), bf16-mixed
    settings = [("32-true", False)] + ([("32-true", True)] if args.device == "cuda" else []) + [("bf16-mixed", False)]
    deadline = time.monotonic() + (args.stage_seconds or stage_limit("epoch", args.device)) - 5
    for precision, graphs in settings:
        name = f"pmnist-epoch-{precision}" + ("-graphs" if graphs else "")
        left = deadline - time.monotonic()
        if left < EPOCH_START_S:  # the call's time is nearly spent: named, not started
            results[name] = {"not_reached": f"{left:.0f} s were left"}
            continue
        cmd = [
            sys.executable,
            "-c",
            "import sys; from ortholab.cli.main import main; main()",
            "fit",
            "--config",
            str(REPO / "configs/papers/scornn_pmnist_n170.yaml"),
            "--config",
            str(overrides),
            "--db",
            f"sqlite:///{db}",
            "--runs_dir",
            str(work / "runs"),
            "--name",
            name,
            "--data.init_args.path",
            str(mnist),
            "--data.init_args.download",
            "false",
            "--trainer.accelerator",
            "gpu" if args.device == "cuda" else "cpu",
            "--trainer.devices",
            "1",
            "--trainer.precision",
            precision,
            "--trainer.max_epochs",
            "1",
            "--trainer.log_every_n_steps",
            str(every),
            "--trainer.max_time",
            f"00:00:{cap // 60:02d}:{cap % 60:02d}",
            "--trainer.limit_val_batches",
            "0",
            "--trainer.num_sanity_val_steps",
            "0",
            "--test_every_validation",
            "false",
            "--trainer.enable_progress_bar",
            "false",
        ]
        if graphs:
            cmd += ["--model.cuda_graphs", "true"]
        if args.tiny:
            cmd += ["--trainer.limit_train_batches", "3"]
        code, wall = run_process(cmd, env, min(cap + EPOCH_START_S, left), sys.stdout)
        results[name] = {"exit_code": code, "process_s": round(wall, 1)}
    results.update(read_epoch_store(db, env))
    return results


def stage_row(args, work: Path, env: dict) -> dict:
    """scoRNN Table 1's permuted-MNIST n = 170 row (pmnist_scornn_n170) as the paper trains it, 70 epochs with the
    test split at every epoch end, recorded in row.db (export it here with `ortholab report scornn_table1 --db
    sqlite:///row.db --export DIR`); cut at the stage's limit, the run stays interrupted and resumable."""
    mnist = find_mnist(args)
    db = work / "row.db"
    cmd = [
        sys.executable,
        "-c",
        "import sys; from ortholab.cli.main import main; main()",
        "fit",
        "--config",
        str(REPO / "configs/papers/scornn_pmnist_n170.yaml"),
        "--db",
        f"sqlite:///{db}",
        "--runs_dir",
        str(work / "runs"),
        "--data.init_args.path",
        str(mnist),
        "--data.init_args.download",
        "false",
        "--trainer.accelerator",
        "gpu" if args.device == "cuda" else "cpu",
        "--trainer.devices",
        "1",
        "--trainer.enable_progress_bar",
        "false",
        "--tags",
        "[gpu-check]",
    ]
    if args.tiny:
        cmd += ["--trainer.max_epochs", "1", "--trainer.limit_train_batches", "3", "--trainer.limit_val_batches", "2"]
    code, wall = run_process(cmd, env, (args.stage_seconds or stage_limit("row", args.device)) - 15, sys.stdout)
    result = {"exit_code": code, "process_s": round(wall, 1), **read_epoch_store(db, env)}
    return result


READ_STORE = """
import json, sys, statistics
from ortholab.db import Store
store = Store.open_existing(sys.argv[1]) if hasattr(Store, "open_existing") else Store(sys.argv[1])
out = {}
for run in store.list_runs():
    step_s = [p.value for p in store.metric_series(run.id, "time/step_s")]
    epoch_s = [p.value for p in store.metric_series(run.id, "time/epoch_s")]
    points = store.metric_series(run.id, "train/loss")
    out[run.name] = {"run": run.id, "status": run.status, "steps": run.steps,
                     "step_ms": 1000 * statistics.fmean(step_s) if step_s else None,
                     "epoch_s": epoch_s[-1] if epoch_s else None,
                     "last_loss": points[-1].value if points else None}
print(json.dumps(out))
"""


def read_epoch_store(db: Path, env: dict) -> dict:
    if not db.exists():
        return {"store": "no store was written (log.txt)"}
    done = subprocess.run(
        [sys.executable, "-c", READ_STORE, f"sqlite:///{db}"], env=env, capture_output=True, text=True, cwd=REPO
    )
    if done.returncode:
        return {"store": f"could not read the store: {done.stderr.strip().splitlines()[-1:]}"}
    runs = json.loads(done.stdout)
    for run in runs.values():  # the paper's 1,100 steps at the measured rate where the epoch was cut by time
        full = run["steps"] >= PMNIST_STEPS and run["epoch_s"] is not None
        run["epoch_full"] = full
        run["epoch_estimate_s"] = (
            run["epoch_s"] if full else PMNIST_STEPS * run["step_ms"] / 1000 if run["step_ms"] else None
        )
    return {"runs": runs}


STAGE_FUNCTIONS = {
    "env": lambda a, w, e: stage_env(a),
    "tests": lambda a, w, e: stage_tests(a, w),
    "kernels": lambda a, w, e: stage_kernels(a, w),
    "bench": stage_bench,
    "epoch": stage_epoch,
    "row": stage_row,
}


# verdicts and the summary ---------------------------------------------------------------------------------------


def verdict(stage: str, result: dict, device: str) -> tuple[bool, str]:
    """(passed, the key numbers in one line)."""
    if stage == "env":
        return True, ", ".join(
            f"{k} {v}"
            for k, v in result.items()
            if k in ("gpu", "driver", "torch", "triton", "lightning", "python", "cpu")
        )
    if stage == "tests":
        parts, ok = [], True
        for name, c in result.items():
            if "error" in c:
                return False, f"{name}: {c['error']}"
            bad = c["failures"] + c["errors"]
            # on the GPU no CUDA case may skip; on the CPU they all do
            ok &= bad == 0 and c["tests"] > 0 and (device != "cuda" or c["skipped"] == 0)
            parts.append(f"{name}: {c['tests']} run, {bad} failed, {c['skipped']} skipped")
            parts += [f"failed {f}" for f in c["failed"][:3]]
        return ok, "; ".join(parts)
    if stage == "kernels":
        ratios = [
            f"{r['what']} B={r['batch']} n={r['n']}: {r['ms']:.1f} ms" + _against_cudnn(r)
            for r in result["rows"]
            if r["what"].startswith("scornn")
        ]
        first_n = min((r["n"] for r in result["rows"]), default=None)  # where every launch was timed
        timed = [
            r
            for r in result["rows"]
            if r["what"].startswith("recurrence") and r.get("ms") is not None and r["n"] == first_n
        ]
        if timed:  # the fastest way to run the bare recurrence, of the kernels' launches and the torch loop
            best = min(timed, key=lambda r: r["ms"])
            ratios.insert(2, f"fastest {best['what']} B={best['batch']} n={best['n']}: {best['ms']:.1f} ms")
        wrong = [r["what"] for r in result["rows"] if (r.get("rel_error") or 0) > KERNEL_REL_ERROR]
        if wrong:  # a launch whose states are not the loop's fails the stage, however fast
            ratios.insert(0, f"states off the torch loop's by more than {KERNEL_REL_ERROR:g}: {', '.join(wrong)}")
        left = result.get("not_reached") or []
        if left:
            ratios.insert(0, f"not reached in the stage's time: {len(left)} ({left[0]}, ...)")
        return bool(result["rows"]) and not wrong and not left, "; ".join(ratios[:6])
    if stage == "bench":
        lost = [f"{f} ({why})" for f, why in result["failed"].items()] + [
            f"{f} (not reached)" for f in result["not_reached"]
        ]
        text = f"{len(result['rows'])} families measured"
        if result["rows"]:
            text += ": " + ", ".join(
                f"{r['family']} {r['vs_lstm']:.2f}x LSTM" for r in result["rows"] if r.get("vs_lstm")
            )
        if lost:
            text += "; not measured: " + ", ".join(lost)
        return bool(result["rows"]) and not lost, text
    if stage == "row":
        runs = result.get("runs") or {}
        return bool(runs), "; ".join(
            f"run {r['run']}: {r['status']}, {r['steps']} steps" for r in runs.values()
        ) or str(result.get("store"))
    if stage == "epoch":
        runs = result.get("runs") or {}
        parts, ok = [], bool(runs)
        if not runs and not any(isinstance(e, dict) and "not_reached" in e for e in result.values()):
            return False, str(result.get("store"))
        for name, run in runs.items():
            estimate = run["epoch_estimate_s"]
            ok &= (
                run["status"] in ("finished", "interrupted")
                and estimate is not None
                and run["last_loss"] is not None
                and math.isfinite(run["last_loss"])
            )
            kind = "epoch" if run["epoch_full"] else f"{run['steps']} steps, epoch at that rate"
            parts.append(f"{name}: {kind} {estimate:.1f} s" if estimate else f"{name}: {run['status']}, no timing")
        for name, entry in result.items():
            if isinstance(entry, dict) and "not_reached" in entry:
                ok = False
                parts.append(f"{name}: not reached ({entry['not_reached']})")
        return ok, "; ".join(parts)
    return False, "unknown stage"


def render_summary(results: dict, args) -> str:
    lines = ["| stage | result | seconds | key numbers |", "| --- | --- | --- | --- |"]
    for stage, entry in results.items():
        lines.append(f"| {stage} | {entry['status']} | {entry['seconds']:.0f} | {entry['summary']} |")
    text = "\n".join(lines)
    runs = ((results.get("epoch") or {}).get("result") or {}).get("runs", {})  # a stage cut short has no result
    fast = [r for r in runs.values() if r.get("epoch_estimate_s") and r["epoch_estimate_s"] <= FAST_EPOCH_S]
    if fast and args.device == "cuda" and not args.tiny:
        text += (
            "\n\nThe epoch took 6 s or less: the next call trains scoRNN Table 1's permuted-MNIST n = 170 row "
            "(pmnist_scornn_n170) for its 70 epochs:\n\n    " + PMNIST_ROW_CALL
        )
    return text


def _against_cudnn(row: dict) -> str:
    """' (28.77x RNN(relu), 40.10x with TF32 off)': a kernel row's ratios to cuDNN's RNN, where measured."""
    said = [f"{row[key]:.2f}x {what}" for key, what in RATIOS_TO_CUDNN if row.get(key)]
    return f" ({', '.join(said)})" if said else ""


RATIOS_TO_CUDNN = (("vs_rnn_relu", "RNN(relu)"), ("vs_rnn_relu_ieee", "with TF32 off"))


def speed_markdown(results: dict) -> str:
    out = []
    kernels = results.get("kernels", {}).get("result")
    if kernels:
        out += [
            f"## Kernels: forward+backward, T = {kernels['seq_len']}, median of {kernels['repeats']} "
            f"({kernels['timer']})",
            "",
            *([kernels["note"], ""] if kernels.get("note") else []),
            "The cuDNN ratios are against its default float32 (TF32 allowed) unless headed TF32 off; the kernels and"
            " the torch loop multiply in IEEE float32.",
            "",
            "| what | batch | n | params | ms | x RNN(relu) | x RNN(relu), TF32 off | x LSTM | x torch loop "
            "| off the loop |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for r in kernels["rows"]:

            def ratio(key: str, r=r) -> str:
                return f"{r[key]:.2f}" if r.get(key) else "-"

            ms = f"{r['ms']:.2f}" if r.get("ms") is not None else r.get("error", "-")
            out.append(
                f"| {r['what']} | {r['batch']} | {r['n']} | {r.get('params', '-')} | {ms} | "
                f"{ratio('vs_rnn_relu')} | {ratio('vs_rnn_relu_ieee')} | {ratio('vs_lstm')} | "
                f"{ratio('vs_torch_loop')} | "
                + (f"{r['rel_error']:.1e} |" if r.get("rel_error") is not None else "- |")
            )
    if kernels and kernels.get("graphs"):
        out += [
            "",
            "## Unfused recurrences: eager against CUDA graphs (forward+backward)",
            "",
            "| family | n | batch | eager ms | graphed ms | graphed / eager |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for family, g in kernels["graphs"].items():
            graphed = (
                f"{g['graphed_ms']:.2f} | {g['graphed_vs_eager']:.2f}"
                if "graphed_ms" in g
                else f"capture failed: {g['capture_failed']} | -"
            )
            out.append(f"| {family} | {g['n']} | {g['batch']} | {g['eager_ms']:.2f} | {graphed} |")
    if kernels and kernels.get("not_reached"):
        out += ["", "Not measured, the stage's time ran out: " + "; ".join(kernels["not_reached"])]
    bench = results.get("bench", {}).get("result")
    if bench:
        out += [
            "",
            "## `ortholab bench` at the 16k budget",
            "",
            "| family | n | batch | T | fwd+bwd ms | step ms | x RNN(relu) | x LSTM | pMNIST epoch s |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for r in bench["rows"]:
            epoch = f"{r['pmnist_epoch_s']:.1f}" if r.get("pmnist_epoch_s") else "-"
            lstm = f"{r['vs_lstm']:.2f}" if r.get("vs_lstm") else "-"
            out.append(
                f"| {r['family']} | {r['hidden_size']} | {r['batch']} | {r['seq_len']} | {r['fwd_bwd_ms']:.1f} "
                f"| {r['step_ms']:.1f} | {r['vs_rnn_relu']:.2f} | {lstm} | {epoch} |"
            )
        for family, why in bench["failed"].items():
            out.append(f"\nnot measured: {family}: {why}")
        for family in bench["not_reached"]:
            out.append(f"\nnot measured: {family}: the stage's time ran out before it")
    return "\n".join(out) + "\n"


def child(args) -> None:
    """`--run-stage NAME`: run one stage here and write its result as JSON."""
    work = Path(args.work)
    env = dict(os.environ)
    result = STAGE_FUNCTIONS[args.run_stage](args, work, env)
    (work / f"stage-{args.run_stage}.json").write_text(json.dumps(result, indent=1))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    work = Path(args.work)
    if args.run_stage:
        child(args)
        return 0
    budget = args.budget
    if budget is None and args.device == "cuda" and "row" not in args.stages:
        budget = CALL_BUDGET_S
    call_ends = time.monotonic() + budget if budget else None  # counted from here: the wheels' install too
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    log_path = out / "log.txt"
    results: dict[str, dict] = {}
    with open(log_path, "w") as log_file:

        def log(line: str) -> None:
            print(line, flush=True)
            log_file.write(line + "\n")
            log_file.flush()

        log(
            f"gpu-check: device {args.device}{', tiny' if args.tiny else ''}; stages {', '.join(args.stages)}; "
            f"out {out}"
        )
        env = prepare(work, log, hide=args.device == "cpu")
        if args.device == "cpu":
            env.setdefault("TRITON_INTERPRET", "0")
        for stage in args.stages:
            limit = stage_limit(stage, args.device)
            if call_ends is not None:
                limit = min(limit, max(call_ends - time.monotonic(), 1.0))
            cmd = [
                sys.executable,
                str(Path(__file__).resolve()),
                "--run-stage",
                stage,
                "--device",
                args.device,
                "--work",
                str(work),
                "--out",
                str(out),
                *(["--tiny"] if args.tiny else []),
                *(["--families", args.families] if args.families else []),
                *(["--mnist", args.mnist] if args.mnist else []),
                "--stage-seconds",
                str(limit),
            ]
            code, seconds = run_process(cmd, env, limit, log_file)
            result_file = work / f"stage-{stage}.json"
            if code == 0 and result_file.exists():
                result = json.loads(result_file.read_text())
                passed, summary = verdict(stage, result, args.device)
            else:
                result = None
                passed = False
                why = f"killed at its limit of {limit} s" if code is None else f"exit code {code}"
                summary = f"{why}: {last_error(log_path)}"
            results[stage] = {
                "status": "pass" if passed else "FAIL",
                "seconds": seconds,
                "summary": summary,
                "result": result,
            }
            log(f"{stage}: {results[stage]['status']} in {seconds:.0f} s: {summary}")
            write_results(out, work, results, args)  # after every stage: a call cut short still brings them back
    print("\n" + render_summary(results, args))
    return 0 if all(entry["status"] == "pass" for entry in results.values()) else 1


def write_results(out: Path, work: Path, results: dict, args) -> None:
    (out / "summary.md").write_text(
        f"# gpu-check ({args.device}{', tiny' if args.tiny else ''})\n\n{render_summary(results, args)}\n"
    )
    (out / "summary.json").write_text(
        json.dumps({"device": args.device, "tiny": args.tiny, "stages": results}, indent=1, default=str)
    )
    (out / "speed.md").write_text(speed_markdown(results))
    for store in ("epoch.db", "row.db"):
        if (work / store).exists():
            shutil.copy(work / store, out / store)


def last_error(log_path: Path) -> str:
    """The last line of the log that reads like an error, for the summary."""
    lines = [line.strip() for line in log_path.read_text(errors="replace").splitlines() if line.strip()]
    errors = [line for line in lines if re.search(r"Error|error:|FAILED|Traceback|no MNIST|no CUDA", line)]
    return (errors or lines or ["(no output)"])[-1][:300]


if __name__ == "__main__":
    sys.exit(main())
