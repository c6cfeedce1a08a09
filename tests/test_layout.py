"""The arrows between packages mean real use: data modules and the store do not import the model zoo."""

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


@pytest.mark.parametrize("package", ["datamodules", "db"])
def test_package_does_not_import_the_models(package):
    offenders = {
        path.name: sorted(m for m in imported_modules(path) if m.startswith("ortholab.models"))
        for path in sorted((REPO / package).rglob("*.py"))
    }
    assert not {name: mods for name, mods in offenders.items() if mods}, (
        "import ConfigError from ortholab.errors, not from ortholab.models"
    )


def test_config_error_is_one_class_everywhere():
    from ortholab.errors import ConfigError
    from ortholab.models import ConfigError as FromModels

    assert FromModels is ConfigError


def test_tests_that_would_run_another_checkouts_code_stop_in_one_line(tmp_path):
    """tests/conftest.py's guard (this venv's editable install maps the packages to another clone) printed as
    'ImportError while loading conftest' with pytest's traceback; now pytest's own one-line exit, code 4."""
    (tmp_path / "tests").mkdir()
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    for helper in ("conftest.py", "standins.py"):
        shutil.copy(REPO / "tests" / helper, tmp_path / "tests")
    (tmp_path / "tests" / "test_nothing.py").write_text("def test_nothing():\n    pass\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=tmp_path, capture_output=True, text=True
    )
    said = (done.stdout + done.stderr).strip().splitlines()
    assert done.returncode == 4 and len(said) == 1, said
    assert said[0].startswith("Exit: these tests would run another checkout's code (ortholab.app from ")
    assert said[0].endswith("`pip install --no-deps -e .` here in the venv you test with")
