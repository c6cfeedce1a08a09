"""The shape of the code: imports flow one way between the packages, no module cycle, no private name imported from
another module, no product function over 100 lines, and a command line whose registry builds its help."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FOLDERS = {
    "ortholab": "ortholab",
    "app": "ortholab.app",
    "training": "ortholab.training",
    "models": "ortholab.models",
    "datamodules": "ortholab.datamodules",
    "db": "ortholab.db",
}  # as pyproject's package-dir installs them
# Each package may import only packages of a lower tier (and itself); the root modules may import one another.
TIERS = [
    {
        "ortholab",
        "ortholab.errors",
        "ortholab.aliases",
        "ortholab.extras",
        "ortholab.threads",
        "ortholab.user_errors",
        "ortholab.command_name",
    },
    {"ortholab.models", "ortholab.datamodules", "ortholab.db"},
    {"ortholab.evaluation"},
    {"ortholab.training"},
    {"ortholab.bench", "ortholab.app", "ortholab.nn"},
    {"ortholab.cli"},
    {"ortholab.__main__"},
]
MAX_FUNCTION_LINES = 100


def product_modules() -> dict[str, Path]:
    """Every product module under its installed name (ortholab.training.module, ...); migrations excluded."""
    modules = {}
    for folder, package in FOLDERS.items():
        for path in (REPO / folder).rglob("*.py"):
            if "migrations" in path.parts or "__pycache__" in path.parts:
                continue
            parts = [p for p in path.relative_to(REPO / folder).with_suffix("").parts if p != "__init__"]
            modules[".".join([package, *parts])] = path
    return modules


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, str | None]]:
    """(imported product module, imported name or None) for every import in the file, at any depth."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the module's package
                base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                target = ".".join(base[: len(base) - node.level + 1] + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:  # `from package import module` imports the module
                full = f"{target}.{alias.name}"
                found.append((full, None) if full in modules else (target, alias.name))
    out = []
    for target, imported in found:
        while target not in modules and "." in target:
            target = target.rsplit(".", 1)[0]
        if target in modules and target != name:
            out.append((target, imported))
    return out


@pytest.fixture(scope="module")
def graph() -> dict[str, list[tuple[str, str | None]]]:
    modules = product_modules()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def package_of(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else parts[0]


def tier_of(package: str) -> int:
    return next(i for i, tier in enumerate(TIERS) if package in tier)


def test_every_package_has_a_tier(graph):
    assert sorted({package_of(m) for m in graph} - set().union(*TIERS)) == []


def test_imports_flow_down_between_packages(graph):
    upward = [
        f"{module} imports {target}"
        for module, targets in graph.items()
        for target, _ in targets
        if package_of(target) != package_of(module)
        and (
            tier_of(package_of(target)) > tier_of(package_of(module))
            or tier_of(package_of(target)) == tier_of(package_of(module)) > 0  # the root modules: one another
        )
    ]
    assert upward == []


def test_no_import_cycle_between_modules(graph):
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> list[str] | None:
        state[module] = 1
        for target, _ in graph.get(module, []):
            if state.get(target) == 1:
                return path + [module, target]
            if target not in state and (cycle := visit(target, path + [module])):
                return cycle
        state[module] = 2
        return None

    cycles = [cycle for module in graph if module not in state and (cycle := visit(module, []))]
    assert cycles == []


def test_no_private_name_is_imported_from_another_module(graph):
    private = [
        f"{module}: {imported} from {target}"
        for module, targets in graph.items()
        for target, imported in targets
        if imported and imported.startswith("_")
    ]
    assert private == []


def test_the_checker_sees_an_upward_import_and_a_cycle(tmp_path):
    """The rules can fail: a models module importing the command line, and two modules importing each other."""
    (tmp_path / "a.py").write_text("from ortholab.cli.main import main\nfrom ortholab.models.b import _x\n")
    (tmp_path / "b.py").write_text("import ortholab.models.a\n")
    modules = {
        "ortholab.models.a": tmp_path / "a.py",
        "ortholab.models.b": tmp_path / "b.py",
        "ortholab.cli.main": tmp_path / "a.py",
    }
    found = imports_of("ortholab.models.a", tmp_path / "a.py", modules)
    assert ("ortholab.cli.main", "main") in found and ("ortholab.models.b", "_x") in found
    assert tier_of(package_of("ortholab.cli.main")) > tier_of(package_of("ortholab.models.a"))
    assert imports_of("ortholab.models.b", tmp_path / "b.py", modules) == [("ortholab.models.a", None)]


def test_no_product_function_is_longer_than_100_lines():
    long = []
    for name, path in product_modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if (lines := node.end_lineno - node.lineno + 1) > MAX_FUNCTION_LINES:
                    long.append(f"{name}.{node.name}: {lines} lines")
    assert long == []


def test_every_registered_command_builds_its_parser_help_and_docs():
    """One module and one registry line per command: its usage line in `ortholab --help` and in docs/cli.md, a
    parser that builds, and `ortholab NAME --help` printing its one sentence."""
    import importlib
    import subprocess
    import sys

    from ortholab.cli import COMMANDS
    from ortholab.cli.common import OneLineParser
    from ortholab.cli.main import top_help

    helped, docs = top_help(), (REPO / "docs" / "cli.md").read_text()
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(f"ortholab.cli.{module_name}")
        for usage, summary in getattr(module, "HELP_ENTRIES", None) or [(module.USAGE, module.HELP)]:
            assert f"  {usage}\n" in helped and summary in helped, name
        assert f"## `ortholab {name}`" in docs, f"docs/cli.md has no section for `ortholab {name}`"
        if module_name != "train":  # Lightning's CLI builds its own parser
            parser = OneLineParser(prog=f"ortholab {name}", description=module.HELP)
            module.add_arguments(parser)
            assert " ".join(module.HELP.split()) in " ".join(parser.format_help().split()), name
    shown = subprocess.run(
        [sys.executable, "-c", "from ortholab.cli.main import main; main()", "report", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert shown.startswith("usage: ortholab report") and "published vs reproduced" in shown


def test_a_command_module_imports_nothing_heavy_at_import_time():
    """`ortholab --help` imports every command module: none may import torch, Lightning or Optuna at its top."""
    import subprocess
    import sys

    code = (
        "import sys; from ortholab.cli.main import top_help; top_help(); "
        "print(sorted(m for m in ('torch', 'lightning', 'optuna', 'streamlit') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
