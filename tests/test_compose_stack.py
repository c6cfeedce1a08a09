"""The compose stack on a real Docker engine, as a user runs it (issue 29): `make test-docker`.

One image is built per session (the module's fixture) with the project's Dockerfile and docker-compose.yml; a
small override file, written here, only names a per-session image tag and, where the machine needs it, the build
network. Each stack runs under its own compose project name and is taken down with its volumes at the end.

Where no engine runs, these tests skip and say why; with ORTHOLAB_REQUIRE_DOCKER=1 (.ci/run sets it where it
ran `../shared/tools/docker-stand-ins.sh up`) they fail instead. ORTHOLAB_DOCKER_TORCH_INDEX and
ORTHOLAB_DOCKER_BUILD_NETWORK pass the build a local torch index and `host` networking (the stand-ins' CPU
wheel); without them the build uses the Dockerfile's defaults, as on a user's machine.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.docker, pytest.mark.timeout(3600)]  # the first test builds the image (minutes)

REPO = Path(__file__).resolve().parents[1]
IMAGE_COMMIT = "0123abc"  # passed as the build argument ORTHOLAB_COMMIT (docker-compose.yml), as a user would
HEALTHY_WITHIN_S = 240  # the start period (60 s) plus slack for a 2-core machine busy with other work
# issue 29: the image with CPU torch under 1.5 GB. What this Dockerfile adds to its base is held to 1.35 GB, which
# leaves 150 MB for python:3.11-slim-bookworm (Docker Hub's, about 130 MB; the stand-in built on machines without
# Docker Hub is bigger, about 250 MB, so the whole image is measured too but held to the layers' limit only)
ADDED_LIMIT_BYTES = 1.35e9
BASE_IMAGE = "python:3.11-slim-bookworm"
TINY_STEPS = 20
# The killed and the stopped runs: first checkpoint at step 20, then 1,980 steps (about 15 ms each on a 2-core Xeon,
# 30 s) before they would finish. 200 steps finished on a CI machine before a poll through `docker exec` saw the
# checkpoint; the host now watches the volume (every 0.1 s) where it can read it, and the margin is ten times wider.
LONG_STEPS = 2000


def _compose_tool() -> list[str] | None:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    return None


def _engine_problem() -> str | None:
    if shutil.which("docker") is None:
        return "the docker client is not installed"
    if _compose_tool() is None:
        return "neither docker-compose nor `docker compose` is installed"
    info = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True)
    if info.returncode != 0:
        return (
            f"no Docker engine answers ({(info.stderr.strip().splitlines() or ['docker info failed'])[-1]}); "
            f"start Docker (the project's CI machines: `bash ../shared/tools/docker-stand-ins.sh up`)"
        )
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _tiny_config(max_steps: int, seq_len: int, hidden_size: int) -> dict:
    """The demo config of the default `train` service, shrunk to seconds on a CPU."""
    config = yaml.safe_load((REPO / "configs" / "demo" / "copying_scornn.yaml").read_text())
    config["model"].update(
        hidden_size=hidden_size, family_args={**config["model"]["family_args"], "rho": hidden_size // 2}
    )
    config["data"]["init_args"].update(seq_len=seq_len, batch_size=10, train_size=400, val_size=20, test_size=20)
    config["trainer"].update(max_steps=max_steps, val_check_interval=TINY_STEPS, log_every_n_steps=5)
    return config


class Stack:
    """One compose project: the repository's compose files plus this session's override."""

    def __init__(self, project: str, files: list[Path], env: dict[str, str]):
        self.project, self.files, self.env = project, files, env

    def compose(self, *args: str, timeout: float = 600, check: bool = True, env: dict | None = None):
        command = [*_compose_tool(), "--project-name", self.project, "--project-directory", str(REPO)]
        for file in self.files:
            command += ["--file", str(file)]
        done = subprocess.run(
            [*command, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**self.env, **(env or {})},
            cwd=REPO,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"{' '.join(args)} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            )
        return done

    def container(self, service: str) -> str:
        return self.compose("ps", "-q", service).stdout.strip()

    def health(self, service: str = "dashboard") -> str:
        container = self.container(service)
        if not container:
            return "absent"
        done = subprocess.run(
            ["docker", "inspect", "--format", "{{.State.Status}} {{.State.Health.Status}}", container],
            capture_output=True,
            text=True,
        )
        state, _, health = done.stdout.strip().partition(" ")
        return health if state == "running" else state

    def wait_healthy(self, service: str = "dashboard", within_s: float = HEALTHY_WITHIN_S) -> float:
        start = time.monotonic()
        while (status := self.health(service)) != "healthy":
            if time.monotonic() - start > within_s:
                logs = self.compose("logs", "--tail", "30", service, check=False).stdout
                raise AssertionError(f"{service} is {status!r} after {within_s} s; its last lines:\n{logs}")
            time.sleep(2)
        return time.monotonic() - start

    def runs(self) -> list[dict]:
        """`ortholab runs --json` as the dashboard container reads its store."""
        out = self.compose("exec", "-T", "dashboard", "ortholab", "runs", "--json").stdout
        return json.loads(out)

    def down(self) -> None:
        self.compose("down", "--volumes", "--remove-orphans", "--timeout", "5", check=False, timeout=300)


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    """The image, built once: (stack factory, image tag, build seconds). Every stack is taken down at the end."""
    problem = _engine_problem()
    if problem:
        if os.environ.get("ORTHOLAB_REQUIRE_DOCKER") == "1":
            pytest.fail(f"ORTHOLAB_REQUIRE_DOCKER=1 but {problem}")
        pytest.skip(problem)
    work = tmp_path_factory.mktemp("compose")
    name = f"ortholabtest{os.getpid()}{secrets.token_hex(3)}"
    image = f"{name}:latest"
    configs = work / "configs"  # mounted read-only at /configs by the uid-1000 containers: world-readable
    configs.mkdir(mode=0o755)
    configs.chmod(0o755)
    for file, config in {
        "tiny.yaml": _tiny_config(TINY_STEPS, 10, 16),
        "long.yaml": _tiny_config(LONG_STEPS, 10, 16),
        "stopped.yaml": _tiny_config(LONG_STEPS, 10, 16),
    }.items():
        (configs / file).write_text(yaml.safe_dump(config, sort_keys=False))
        (configs / file).chmod(0o644)
    build = (
        {"network": os.environ["ORTHOLAB_DOCKER_BUILD_NETWORK"]}
        if os.environ.get("ORTHOLAB_DOCKER_BUILD_NETWORK")
        else {}
    )
    service = {"image": image, **({"build": build} if build else {})}
    override = work / "docker-compose.test.yml"
    override.write_text(yaml.safe_dump({"version": "3.9", "services": {"train": service, "dashboard": service}}))
    keep = ("PATH", "HOME", "DOCKER_HOST", "DOCKER_CONFIG", "DOCKER_CERT_PATH", "DOCKER_TLS_VERIFY")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.update(CONFIGS_DIR=str(configs), ORTHOLAB_DB_WAIT_S="300", ORTHOLAB_COMMIT=IMAGE_COMMIT)
    if os.environ.get("ORTHOLAB_DOCKER_TORCH_INDEX"):
        env["TORCH_INDEX"] = os.environ["ORTHOLAB_DOCKER_TORCH_INDEX"]
    stacks: list[Stack] = []

    def stack(suffix: str = "", extra_files: tuple[str, ...] = (), **more_env: str) -> Stack:
        files = [REPO / "docker-compose.yml", *(REPO / f for f in extra_files), override]
        made = Stack(name + suffix, files, {**env, "DASHBOARD_PORT": str(_free_port()), **more_env})
        stacks.append(made)
        return made

    start = time.monotonic()
    stack().compose("build", "dashboard", timeout=3600)
    build_s = time.monotonic() - start
    yield stack, image, build_s
    for made in stacks:
        made.down()
    subprocess.run(["docker", "image", "rm", "--force", image], capture_output=True)


@pytest.fixture(scope="module")
def sqlite_stack(session):
    stack, _, _ = session
    return stack()


def _docker_run(image: str, *args: str, entrypoint: str = "python") -> subprocess.CompletedProcess:
    return subprocess.run(
        ["docker", "run", "--rm", "--entrypoint", entrypoint, image, *args], capture_output=True, text=True, timeout=300
    )


def test_the_image_is_lean_has_no_compiler_and_finds_its_packaged_configs(session):
    _, image, build_s = session
    size, base = (
        int(
            subprocess.run(
                ["docker", "image", "inspect", "--format", "{{.Size}}", name],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        for name in (image, BASE_IMAGE)
    )
    print(
        f"\nimage {image}: built in {build_s:.0f} s, {size / 1e9:.2f} GB, of which {(size - base) / 1e9:.2f} GB "
        f"above its base {BASE_IMAGE} ({base / 1e9:.2f} GB)"
    )
    assert size - base < ADDED_LIMIT_BYTES, f"the image adds {(size - base) / 1e9:.2f} GB to its base"
    assert _docker_run(image, "-c", "command -v gcc cc || true", entrypoint="sh").stdout.strip() == ""
    probe = _docker_run(
        image,
        "-c",
        (
            "import json, torch, importlib.metadata as m, pesq, pystoi, optuna, psycopg, streamlit, pyarrow.parquet; "
            "from ortholab.db.published import load_tables; from ortholab.cli.listing import config_rows; "
            "from ortholab.db.provenance import commit; "
            "d = m.distribution('ortholab'); u = d.read_text('direct_url.json'); "
            "print(json.dumps({'editable': bool(u and json.loads(u).get('dir_info', {}).get('editable')), "
            "'location': str(d.locate_file('ortholab')), 'cuda': torch.version.cuda, 'tables': len(load_tables()), "
            "'configs': [r['config'] for r in config_rows()], 'commit': commit()}))"
        ),
    )
    assert probe.returncode == 0, probe.stderr
    facts = json.loads(probe.stdout.strip().splitlines()[-1])
    assert not facts["editable"] and "site-packages" in facts["location"], facts
    assert facts["tables"] > 0 and "configs/demo/copying_scornn.yaml" in facts["configs"], facts
    assert facts["commit"] == IMAGE_COMMIT, "the build argument ORTHOLAB_COMMIT is the commit the image's runs record"
    if not os.environ.get("TORCH_INDEX") and "cpu" in os.environ.get("ORTHOLAB_DOCKER_TORCH_INDEX", "cpu"):
        assert facts["cuda"] is None, "the default build should be PyTorch's CPU build"


def _trainer_makes_the_store(stack: Stack) -> None:
    """The trainer's wait creates the store (the dashboard's only reads it), then `ortholab runs` lists it."""
    stack.compose("run", "--rm", "-T", "train", "runs")


def _never_healthy_for(stack: Stack, seconds: float) -> str:
    """Watch the dashboard for `seconds`, asserting it never turns healthy; returns its logs."""
    watched = time.monotonic() + seconds
    while time.monotonic() < watched:
        assert stack.health() != "healthy"
        time.sleep(2)
    return stack.compose("logs", "dashboard").stdout


def test_the_dashboard_turns_healthy_and_serves_the_page(sqlite_stack):
    sqlite_stack.compose("up", "-d", "--no-build", "dashboard")  # a fresh volume: it waits for the trainer's store
    logs = _never_healthy_for(sqlite_stack, 20)
    assert "waiting for the run database" in logs and "does not exist" in logs, logs[-2000:]
    start = time.monotonic()
    _trainer_makes_the_store(sqlite_stack)
    sqlite_stack.wait_healthy()
    print(f"\ndashboard healthy {time.monotonic() - start:.0f} s after the trainer's first start")
    port = sqlite_stack.env["DASHBOARD_PORT"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=10) as answer:
        assert answer.read().decode().strip() == "ok"
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as answer:
        assert answer.status == 200 and "<title>Streamlit</title>" in answer.read().decode()


def _run_named(stack: Stack, name: str) -> dict:
    rows = [row for row in stack.runs() if row["name"] == name]
    assert len(rows) == 1, rows
    return rows[0]


def test_a_cpu_training_run_through_the_default_train_service_lands_in_the_store(sqlite_stack):
    done = sqlite_stack.compose("run", "--rm", "-T", "train", env={"CONFIG": "configs/tiny.yaml"})
    assert "could not select device driver" not in done.stderr
    run = _run_named(sqlite_stack, "tiny")  # read by the dashboard's container from the shared volume
    assert run["status"] == "finished" and run["steps"] == TINY_STEPS, run


def test_down_and_up_keep_the_store(sqlite_stack):
    sqlite_stack.compose("down", "--timeout", "5")
    assert sqlite_stack.health() == "absent"
    sqlite_stack.compose("up", "-d", "--no-build", "dashboard")
    sqlite_stack.wait_healthy()
    assert _run_named(sqlite_stack, "tiny")["status"] == "finished"


def _checkpoints(stack: Stack) -> set[str]:
    """Every run's last.ckpt on the volume, whatever the run folders' layout, as the dashboard's container sees it."""
    code = "import glob; print(*glob.glob('/data/runs/**/last.ckpt', recursive=True))"
    return set(stack.compose("exec", "-T", "dashboard", "python", "-c", code).stdout.split())


def _volume_on_host(container: str) -> Path | None:
    """Where the engine keeps the container's /data, if this process can read it (a local engine, run as root)."""
    done = subprocess.run(
        [
            "docker",
            "inspect",
            "--format",
            '{{range .Mounts}}{{if eq .Destination "/data"}}{{.Source}}{{end}}{{end}}',
            container,
        ],
        capture_output=True,
        text=True,
    )
    source = Path(done.stdout.strip()) if done.returncode == 0 and done.stdout.strip() else None
    return source if source and os.access(source, os.R_OK | os.X_OK) else None


def _resume(stack: Stack, run_id: int) -> subprocess.CompletedProcess:
    """`fit --resume` through the train service. A killed container's lease on its run is taken over once it has
    expired (db/lease.py: LEASE_S after its last heartbeat; another container cannot see that the holder is gone)."""
    deadline = time.monotonic() + 180
    while True:
        done = stack.compose("run", "--rm", "-T", "train", "fit", "--resume", str(run_id), check=False)
        if done.returncode == 0 or "still being written" not in done.stderr or time.monotonic() > deadline:
            return done
        time.sleep(15)


def _train_until_first_checkpoint(stack: Stack, config: str) -> str:
    """A detached `run train` with configs/<config>.yaml, returned (its container's name) once it has checkpointed.
    The host globs the volume itself where it can (milliseconds); otherwise it asks the dashboard (seconds a poll)."""
    container = f"{stack.project}_{config}"
    before = _checkpoints(stack)
    stack.compose("run", "-d", "--name", container, "train", env={"CONFIG": f"configs/{config}.yaml"})
    volume = _volume_on_host(container)

    def checkpoints() -> set[str]:
        if volume is None:
            return _checkpoints(stack)
        return {"/data/" + str(path.relative_to(volume)) for path in (volume / "runs").glob("**/last.ckpt")}

    deadline = time.monotonic() + 300
    while not checkpoints() - before:
        if time.monotonic() > deadline:
            subprocess.run(["docker", "rm", "--force", container], capture_output=True)
            raise AssertionError("no checkpoint after 300 s")
        time.sleep(0.1 if volume else 1)
    return container


def _resumed_to_the_end(stack: Stack, stopped: dict, lease_left: bool) -> None:
    assert stopped["status"] != "finished", (
        f"the run finished ({stopped['steps']} steps) before it could be stopped: this machine trains faster than "
        f"LONG_STEPS ({LONG_STEPS}) allows for; raise it"
    )
    assert 0 < stopped["steps"] < LONG_STEPS, stopped
    done = (
        _resume(stack, stopped["id"])
        if lease_left
        else stack.compose("run", "--rm", "-T", "train", "fit", "--resume", str(stopped["id"]), check=False)
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    resumed = _run_named(stack, stopped["name"])
    assert resumed["id"] == stopped["id"] and resumed["status"] == "finished", resumed
    assert resumed["steps"] == LONG_STEPS, resumed


def test_a_training_container_killed_after_its_first_checkpoint_resumes_with_fit_resume(sqlite_stack):
    container = _train_until_first_checkpoint(sqlite_stack, "long")
    try:
        subprocess.run(["docker", "kill", container], capture_output=True, check=True)
    finally:
        subprocess.run(["docker", "rm", "--force", container], capture_output=True)
    _resumed_to_the_end(sqlite_stack, _run_named(sqlite_stack, "long"), lease_left=True)


def test_a_stopped_training_container_records_the_interruption_and_resumes_at_once(sqlite_stack):
    """`docker stop` sends SIGTERM to `ortholab` itself (the entrypoint execs it): checkpoint, `interrupted`, 143."""
    container = _train_until_first_checkpoint(sqlite_stack, "stopped")
    try:
        subprocess.run(["docker", "stop", "--time", "60", container], capture_output=True, check=True)
        code = subprocess.run(
            ["docker", "inspect", "--format", "{{.State.ExitCode}}", container],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    finally:
        subprocess.run(["docker", "rm", "--force", container], capture_output=True)
    stopped = _run_named(sqlite_stack, "stopped")
    assert code == "143" and stopped["status"] == "interrupted", (code, stopped)
    started = time.monotonic()
    _resumed_to_the_end(sqlite_stack, stopped, lease_left=False)  # a stopped run released its lease
    print(f"\nstopped run resumed and finished in {time.monotonic() - started:.0f} s")


@pytest.fixture(scope="module")
def postgres_stack(session):
    stack, _, _ = session
    return stack("pg", ("docker-compose.postgres.yml",), POSTGRES_PASSWORD=secrets.token_urlsafe(18))


def test_the_postgres_file_refuses_to_start_without_a_password(session):
    stack, _, _ = session
    made = stack("nopw", ("docker-compose.postgres.yml",))
    done = made.compose("config", "-q", check=False)
    assert done.returncode != 0 and "set POSTGRES_PASSWORD" in done.stderr, done.stderr


def test_with_the_postgres_file_a_run_is_stored_in_postgresql(postgres_stack):
    postgres_stack.compose("up", "-d", "--no-build", "dashboard")  # starts PostgreSQL first, once healthy
    assert postgres_stack.health("postgres") == "healthy"
    postgres_stack.compose("run", "--rm", "-T", "train", env={"CONFIG": "configs/tiny.yaml"})  # makes the tables
    postgres_stack.wait_healthy()  # the dashboard waited for them
    stored = postgres_stack.compose(
        "exec",
        "-T",
        "postgres",
        "psql",
        "--username",
        "ortholab",
        "--dbname",
        "runs",
        "--tuples-only",
        "--no-align",
        "--command",
        "SELECT name, status FROM runs",
    ).stdout.split()
    assert stored == ["tiny|finished"], stored
    assert _run_named(postgres_stack, "tiny")["status"] == "finished"  # and the dashboard reads it there


def test_a_dashboard_whose_database_is_down_is_never_healthy(postgres_stack):
    postgres_stack.compose("up", "-d", "--no-build", "dashboard")
    _trainer_makes_the_store(postgres_stack)  # made already where the test before ran
    postgres_stack.wait_healthy()
    postgres_stack.compose("stop", "--timeout", "5", "postgres")
    deadline = time.monotonic() + 120  # 3 failed checks 10 s apart
    while postgres_stack.health() != "unhealthy":
        assert time.monotonic() < deadline, f"still {postgres_stack.health()!r} 120 s after the database stopped"
        time.sleep(2)
    # a dashboard started while the database is down waits for it, and is never healthy meanwhile
    postgres_stack.compose("up", "-d", "--no-build", "--no-deps", "--force-recreate", "dashboard")
    logs = _never_healthy_for(postgres_stack, 40)
    assert "waiting for the run database" in logs and "postgres" in logs, logs[-2000:]
    assert postgres_stack.env["POSTGRES_PASSWORD"] not in logs
    postgres_stack.compose("start", "postgres")
    postgres_stack.wait_healthy()  # it goes on by itself once the database is back
