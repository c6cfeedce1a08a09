"""Suite-wide settings: the data root is ../shared/data where this checkout has it (MNIST, FSDD, JSB Chorales,
Nottingham), so the demos read their data sets from there; no test fetches through a mirror it did not set."""

import os
import sys
from pathlib import Path

import pytest

# Each pytest-xdist worker (`make test` runs two) and the `ortholab` processes it starts get their share of the cores
# for torch's, OpenMP's and numba's threads: two workers at a thread per core each spin against each other in OpenMP's
# wait loop (the 95 s NRU learning check took over 600 s beside another worker on 2 cores, 2026-12-01; docs/testing.md).
from ortholab.threads import size_numba_pool, threads_each  # imports neither torch nor numba


def imported_from_elsewhere(checkout: Path) -> list[str]:
    """The packages of pyproject's package-dir that Python would import from outside `checkout` (a second clone
    beside a venv whose editable install maps them to the first one), found without importing them."""
    import importlib.util
    import tomllib

    setuptools = tomllib.loads((checkout / "pyproject.toml").read_text())["tool"]["setuptools"]
    elsewhere = []
    for package, folder in setuptools["package-dir"].items():
        if package == "ortholab":  # a copy of it is fine (tools/gpu_check.py links the folders beside one)
            continue
        spec = importlib.util.find_spec(package)
        if spec is None or spec.origin is None:  # a folder of data only (the docs' pages)
            continue
        if Path(spec.origin).resolve().parent != (checkout / folder).resolve():
            elsewhere.append(f"{package} from {Path(spec.origin).parent}")
    return elsewhere


ELSEWHERE = imported_from_elsewhere(Path(__file__).resolve().parents[1])


def pytest_configure(config):
    if ELSEWHERE:  # refused here, not as the conftest is imported (pytest printed that as an ImportError)
        pytest.exit(
            f"these tests would run another checkout's code ({'; '.join(ELSEWHERE)}): give this checkout a venv of its "
            "own (`make install`), or `pip install --no-deps -e .` here in the venv you test with",
            returncode=4,  # pytest's own code for a usage error
        )


WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if WORKERS > 1 and (share := threads_each(WORKERS)):
    os.environ["OMP_NUM_THREADS"] = str(share)
    size_numba_pool()  # `import ortholab` above ran it before OMP_NUM_THREADS was set
from standins import SHARED_DATA  # noqa: E402 (imports torch, which reads OMP_NUM_THREADS once)

if SHARED_DATA.is_dir():
    os.environ["ORTHOLAB_DATA"] = str(SHARED_DATA)  # read-only there: fetch tests give their own data root
os.environ.pop("ORTHOLAB_DATA_MIRROR", None)
# a user's own run store never receives test runs: tests that want one name it (or set these themselves)
os.environ.pop("ORTHOLAB_DB", None)
os.environ.pop("ORTHOLAB_RUNS", None)
# the tests' own callbacks and fault injectors (faults.SignalAt, ...) that configs name by class path: the
# allow-list of config modules admits them only through this variable, as a user admits their own packages
os.environ["ORTHOLAB_CONFIG_MODULES"] = "faults,hostile_faults,test_bad_input,map_probe"
# the venv's scripts on PATH, as `make test` puts them: messages name `ortholab` as typed in an activated venv
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"

# A test that names a store but no run folder (--runs_dir) from the checkout puts run folders in the checkout's runs/
# (the default root is ./runs): the suite fails if it made one (test_sweep_pruner did, 2026-12-03)
CHECKOUT_RUNS = Path(__file__).resolve().parents[1] / "runs"
RUNS_BEFORE = CHECKOUT_RUNS.exists()


@pytest.fixture
def fresh_dashboard_caches():
    """st.cache_data/cache_resource outlive an AppTest; each test starts from the database itself (the dashboard's
    tests use it: `pytestmark = pytest.mark.usefixtures("fresh_dashboard_caches")`)."""
    from ortholab.app.data import clear_caches

    clear_caches()
    yield
    clear_caches()


def pytest_sessionfinish(session, exitstatus):
    if not RUNS_BEFORE and CHECKOUT_RUNS.exists() and not hasattr(session.config, "workerinput"):
        made = sorted(str(p.relative_to(CHECKOUT_RUNS)) for p in CHECKOUT_RUNS.glob("*/*"))[:5]
        print(f"\nconftest: the tests made {CHECKOUT_RUNS} ({made}): give such a test --runs_dir or chdir(tmp_path)")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
