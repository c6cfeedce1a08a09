"""OrthoLab as a wheel in a fresh environment: one top-level name, the CLI and `python -m ortholab` working from a
folder that holds a researcher's own `models/` and `training/` packages, and the package data travelling along."""

import os
import re
import shutil
import site
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

from ortholab.extras import EXTRAS

REPO = Path(__file__).resolve().parents[1]
OURS = {"app", "db", "models", "training", "datamodules"}


@pytest.fixture(scope="module")
def wheel_env(tmp_path_factory):
    """(venv python, venv bin, site-packages) with the wheel built from this checkout installed, and the test
    runner's own packages (torch, lightning, ...) visible through a .pth file, so nothing is downloaded; the
    packages of the extras are made absent there, as after a bare `pip install ortholab`."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"  # what the package is built from, without a checkout's build/ leftovers
    for part in ("ortholab", "app", "training", "models", "datamodules", "db", "configs"):
        shutil.copytree(REPO / part, source / part, ignore=shutil.ignore_patterns("__pycache__", "*.nbi", "*.nbc"))
    shutil.copytree(REPO / "docs", source / "docs", ignore=shutil.ignore_patterns("results", "images", "_hooks"))
    for part in ("pyproject.toml", "setup.py", "README.md", "LICENSE"):
        shutil.copy(REPO / part, source / part)
    git = ["git", "-C", str(source), "-c", "user.name=t", "-c", "user.email=t@t"]  # a checkout: its commit is built in
    for step in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "the wheel's source"]):
        subprocess.run([*git, *step], check=True, capture_output=True, timeout=60)
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            str(source),
            "-w",
            str(root / "dist"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (root / "dist").glob("ortholab-*.whl")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True, timeout=120)
    python = root / "venv" / "bin" / "python"
    venv_site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    # the runner's site-packages as a plain path entry: its .pth files (our editable install) are not executed
    ours = {sysconfig.get_paths()["purelib"], *site.getsitepackages()}
    (venv_site / "runner.pth").write_text("\n".join(sorted(ours)) + "\n")
    bare = sorted(module for _, modules in EXTRAS.values() for module in modules)  # `import pesq` fails, as uninstalled
    (venv_site / "no_extras.pth").write_text(f"import sys; sys.modules.update(dict.fromkeys({bare!r}))\n")
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", str(wheel)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if installed.returncode != 0 and "no such option: --python" in installed.stderr:
        pytest.skip("pip too old for --python (needs pip >= 22.3)")
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return python, python.parent, venv_site, wheel


def test_the_wheel_adds_one_top_level_name_and_carries_its_data(wheel_env):
    _, _, venv_site, wheel = wheel_env
    names = {n.split("/")[0] for n in zipfile.ZipFile(wheel).namelist()}
    assert {n for n in names if not n.endswith(".dist-info")} == {"ortholab"}
    listed = zipfile.ZipFile(wheel).namelist()
    assert "ortholab/configs/demo/copying_scornn.yaml" in listed
    assert any(n.startswith("ortholab/configs/papers/published/") for n in listed)
    assert any(n.startswith("ortholab/db/migrations/versions/") for n in listed)
    pages = {n for n in listed if n.startswith("ortholab/docs/")}  # the pages `ortholab docs` prints, nothing more
    assert {"ortholab/docs/troubleshooting.md", "ortholab/docs/families/scornn.md"} <= pages
    assert {n for n in pages if not n.endswith(".md")} == set()
    # every module of the checkout travels (a new subpackage missing from pyproject's list would not)
    sources = {
        f"ortholab/{part if part != 'ortholab' else ''}/{py.relative_to(REPO / part)}".replace("//", "/")
        for part in ("ortholab", *OURS)
        for py in (REPO / part).rglob("*.py")
        if "__pycache__" not in py.parts
    }
    assert sources - set(listed) == set(), "modules missing from the wheel: add their package to pyproject.toml"
    assert not OURS & {p.name for p in venv_site.iterdir()}


def test_a_run_of_the_installed_wheel_records_the_commit_the_wheel_was_built_from(wheel_env, tmp_path):
    """Without a checkout to ask, runs recorded "commit unknown (an installed wheel)"; setup.py writes the commit
    into the wheel (ortholab/BUILT_FROM) and db/provenance.py reads it there."""
    python, _, _, wheel = wheel_env
    source = wheel.parent.parent / "source"
    built = subprocess.run(
        ["git", "-C", str(source), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert zipfile.ZipFile(wheel).read("ortholab/BUILT_FROM").decode().strip() == built
    said = subprocess.run(
        [str(python), "-c", "from ortholab.db.provenance import code_version; print(code_version()['commit'])"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert said.stdout.strip() == built, said.stderr


def test_every_checkout_folder_the_pages_name_is_said_to_stay_in_the_checkout():
    """The pages travel in the wheel; a folder they name that the wheel lacks (`python benchmarks/...`, a picture in
    docs/images/) is listed where Getting started says what a wheel's user does not have."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout: no checkout's folders to compare the wheel with")
    folders = set()
    for name in filter(None, listed.stdout.decode().split("\0")):
        parts = name.split("/")
        folders |= {parts[0]} if len(parts) > 1 else set()
        folders |= {"/".join(parts[:2])} if parts[0] == "docs" and len(parts) > 2 else set()
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    lacking = (
        folders - {"docs", "docs/families", *setuptools["package-dir"].values()} - {f for f in folders if "." in f}
    )
    named = set()
    for page in [*(REPO / "docs").glob("*.md"), *(REPO / "docs" / "families").glob("*.md")]:
        text = page.read_text(encoding="utf-8").replace("](images/", "](docs/images/")  # a picture's link
        named |= {folder for folder in lacking if re.search(rf"(?<![\w./-]){re.escape(folder)}/", text)}
    guide = (REPO / "docs" / "getting-started.md").read_text(encoding="utf-8")
    said = re.search(r"What stays in the checkout:(.*?)\.\s+[A-Z]", guide, re.DOTALL).group(1)
    unsaid = {f for f in named if not re.search(rf"(?<![\w/]){re.escape(f)}\b", said)}
    assert named >= {"tests", "tools"} and unsaid == set(), f"say in docs/getting-started.md that these stay: {unsaid}"


def test_the_docker_files_the_pages_use_are_said_to_stay_in_the_checkout():
    """gpus.md's docker compose section builds from the checkout's Dockerfile and compose files, which no wheel
    carries: Getting started's list of what stays in the checkout names them (a wheel's user read it and had none)."""
    import fnmatch

    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout: no checkout's files to compare the wheel with")
    docker = {f for f in listed.stdout.decode().split("\0") if f == "Dockerfile" or f.startswith("docker-compose")}
    pages = " ".join(p.read_text(encoding="utf-8") for p in (REPO / "docs").glob("*.md"))
    named = {f for f in docker if f in pages}
    guide = (REPO / "docs" / "getting-started.md").read_text(encoding="utf-8")
    said = re.search(r"What stays in the checkout:(.*?)\.\s+[A-Z]", guide, re.DOTALL).group(1)
    patterns = re.findall(r"`([\w.*-]+)`", said)
    assert named >= {"Dockerfile", "docker-compose.yml"}
    assert {f for f in named if not any(fnmatch.fnmatch(f, pattern) for pattern in patterns)} == set(), said


def test_the_wheel_section_says_what_replaces_the_checkouts_venv_and_names_the_cpu_torch_index():
    """A wheel's user has no .venv: the commands Getting started shows as `.venv/bin/ortholab ...` after the wheel's
    section are said to run from the wheel's own venv; and the CPU torch, which the checkout's make takes with
    TORCH_INDEX, is named for the wheel's `pip install torch` too."""
    guide = (REPO / "docs" / "getting-started.md").read_text(encoding="utf-8")
    section = guide[guide.index("### From the wheel") :]
    venv = re.search(r"python3 -m venv (\S+)", section).group(1)  # the wheel's venv, made in its commands
    if ".venv/bin/" in section:
        assert f"`{venv}/bin/` where it writes `.venv/bin/`" in " ".join(section.split())
    cpu_index = re.search(r"TORCH_INDEX=(\S+) ", guide).group(1)  # the checkout's CPU-only index
    assert f"`--index-url {cpu_index}` after `torch==" in " ".join(section.split())


def test_the_cli_and_imports_work_beside_a_users_own_models_package(wheel_env, tmp_path):
    python, bin_dir, _, _ = wheel_env
    for package in ("models", "training"):  # a researcher's project, the folder they run from
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("raise ImportError('the user package was imported')\n")
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path)}

    def run(*argv):
        done = subprocess.run(list(argv), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    assert "scornn" in run(str(bin_dir / "ortholab"), "list", "families")
    assert "copying" in run(str(python), "-m", "ortholab", "list", "tasks")
    assert "copying_scornn" in run(str(bin_dir / "ortholab"), "list", "configs")
    # the pages travel: a message's docs/... pointer prints its section, read from the wheel's copy
    assert "site-packages/ortholab/docs" in run(str(bin_dir / "ortholab"), "docs")
    assert run(str(bin_dir / "ortholab"), "docs", "docs/troubleshooting.md#exit-codes").startswith("## Exit codes")
    assert "scornn_table1" in run(
        str(bin_dir / "ortholab"), "reproduce", "--list", "--db", f"sqlite:///{tmp_path / 'r.db'}"
    )
    assert "Table 1" in run(
        str(bin_dir / "ortholab"), "report", "scornn_table1", "--all", "--db", f"sqlite:///{tmp_path / 'r.db'}"
    )
    assert (
        "pip install 'ortholab[speech]'"
        in subprocess.run(  # no extras here: the speech metrics are absent
            [str(python), "-c", "from ortholab.extras import require_extra; require_extra('speech')"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        ).stderr
    )
    out = run(
        str(python),
        "-c",
        "import ortholab, ortholab.models, ortholab.cli.main, sys; "
        "print(ortholab.models.__file__); print(sorted(k for k in sys.modules if k in "
        f"{sorted(OURS)!r}))",
    )
    assert "site-packages/ortholab/models/__init__.py" in out and out.strip().endswith("[]")
    # a short class path in a config (datamodules.CopyingTask) trains from the wheel with no extras installed (issue
    # 49: the audio evaluation refused every task without PESQ), the user's folders untouched
    assert "(copying_scornn, finished) recorded in" in run(
        str(bin_dir / "ortholab"),
        "fit",
        "--config",
        "configs/demo/copying_scornn.yaml",
        "--model.hidden_size",
        "8",
        "--model.family_args",
        "{rho: 4}",
        "--data.seq_len",
        "5",
        "--data.train_size",
        "20",
        "--data.val_size",
        "10",
        "--data.batch_size",
        "10",
        "--trainer.max_steps",
        "2",
        "--trainer.val_check_interval",
        "2",
        "--trainer.enable_progress_bar",
        "false",
        "--db",
        f"sqlite:///{tmp_path / 'r.db'}",
    )


def test_a_wheel_built_without_git_records_the_commit_in_ortholab_commit(wheel_env, tmp_path):
    """The Docker build context and an sdist have no .git: setup.py takes ORTHOLAB_COMMIT there, and none without it."""
    _, _, _, wheel = wheel_env
    source = tmp_path / "source"
    shutil.copytree(
        wheel.parent.parent / "source", source, ignore=shutil.ignore_patterns(".git", "build", "*.egg-info")
    )
    recorded = {}
    for given in ("abc1234", None):
        env = {k: v for k, v in os.environ.items() if k != "ORTHOLAB_COMMIT"} | (
            {"ORTHOLAB_COMMIT": given} if given else {}
        )
        out = tmp_path / f"dist-{given}"
        built = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", str(source), "-w", str(out)],
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
        )
        assert built.returncode == 0, built.stdout + built.stderr
        (made,) = out.glob("ortholab-*.whl")
        names = zipfile.ZipFile(made).namelist()
        recorded[given] = (
            zipfile.ZipFile(made).read("ortholab/BUILT_FROM").decode().strip()
            if "ortholab/BUILT_FROM" in names
            else None
        )
        shutil.rmtree(source / "build", ignore_errors=True)
    assert recorded == {"abc1234": "abc1234", None: None}
