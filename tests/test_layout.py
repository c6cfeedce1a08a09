"""The arrows between packages mean real use: data modules and the store do not import the model zoo."""

import ast
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
