"""The documentation site (mkdocs.yml, docs/): every registered family, task and `ortholab` command is documented
(checked from the registries, so a new one cannot go undocumented), the generated option tables follow the code,
every picture has alt text, the README's links resolve, the dashboard pictures are real non-blank screenshots of
every page, and (slow) `mkdocs build --strict` passes and `tools/screenshots.py` retakes every page."""

from __future__ import annotations

import importlib.util
import inspect
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ortholab.cli import reference

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
# Not round-off: a screenshot is blank when (almost) every pixel is the page's background. A rendered dashboard
# page has text, a sidebar and tables; these floors are far below any rendered page and far above a blank one.
MIN_GREY_STD = 5.0  # standard deviation of the grey levels (0-255); a blank page has 0
MIN_FOREGROUND = 0.02  # share of pixels that differ from the most common colour


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


screenshots = load(REPO / "tools" / "screenshots.py", "docs_screenshots")


def sources() -> dict[str, str]:
    return {str(p.relative_to(DOCS)): p.read_text() for p in DOCS.rglob("*.md") if "_hooks" not in p.parts}


def nav_pages(node) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [page for value in node.values() for page in nav_pages(value)]
    return [page for item in node for page in nav_pages(item)]


def test_every_family_task_and_command_is_documented():
    from ortholab.datamodules import TASKS
    from ortholab.models import FAMILIES

    assert reference.coverage_problems(sources()) == []
    nav = nav_pages(yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"])
    unlisted = sorted({f"families/{name}.md" for name in FAMILIES} - set(nav))
    assert unlisted == [], f"add {', '.join(unlisted)} to mkdocs.yml's nav (under Families)"
    assert set(reference.families()) == set(FAMILIES) and set(reference.tasks()) == set(TASKS)
    assert {"fit", "validate", "test", "predict", "runs", "list", "dashboard", "reproduce"} <= set(reference.commands())


def test_a_new_family_task_or_command_without_docs_is_named():
    pages = sources()
    del pages["families/scornn.md"]
    pages["tasks.md"] = pages["tasks.md"].replace("<!-- ortholab:task speech -->", "")
    pages["cli.md"] = pages["cli.md"].replace("## `ortholab sweep`", "## sweeping")
    problems = " ".join(reference.coverage_problems(pages))
    assert "family 'scornn'" in problems and "task 'speech'" in problems and "command 'sweep'" in problems


def test_family_option_tables_are_read_from_the_code():
    from ortholab.models import FAMILIES

    for name, cls in FAMILIES.items():
        table = reference.family_reference(name)
        options = [
            p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "input_size", "hidden_size")
        ]
        for option in options:
            assert f"| `{option}` |" in table, f"{name}: option {option} missing from its generated table"
        layer = cls(*reference.SMALL_LAYER)
        for group in layer.parameter_groups():
            assert f"| `{group}` |" in table, f"{name}: parameter group {group} missing"
    scornn = reference.family_reference("scornn")
    assert "| `rho` | int \\| float | `0.5` | number of -1 entries of D" in scornn


def test_option_descriptions_cut_at_the_next_option():
    class Layer:
        """A layer.

        alpha: the first; beta: the second, on
            two lines.
        gamma: the third (not beta: a mention).
        """

    found = reference.option_descriptions(Layer, ["alpha", "beta", "gamma", "delta"])
    assert found == {
        "alpha": "the first",
        "beta": "the second, on two lines.",
        "gamma": "the third (not beta: a mention).",
    }


def test_no_option_row_is_cut_short_by_a_line_of_its_own_description():
    """A continuation line opening with a capital ('L - 1 predictions') was read as a new sentence: speech's
    predict_padding row ended at 'default false:'."""
    skip = {"self", "input_size", "hidden_size"}
    for cls in [*reference.families().values(), *reference.tasks().values()]:
        names = [p for p in inspect.signature(cls.__init__).parameters if p not in skip]
        for option, text in reference.option_descriptions(cls, names).items():
            assert not text.endswith(":"), f"{cls.__qualname__}.{option}: {text}"
    assert "default false: only the L - 1 predictions of real frames. With target: next_frame. |" in (
        reference.task_reference("speech")
    )


def test_task_tables_and_command_help_are_generated():
    from ortholab.datamodules import TASKS

    for name, cls in TASKS.items():
        table = reference.task_reference(name)
        assert f"datamodules.{cls.__qualname__}" in table
        for option in [p for p in inspect.signature(cls.__init__).parameters if p != "self"]:
            assert f"| `{option}` |" in table, f"{name}: option {option} missing"
    assert "--sampler" in reference.command_help("sweep") and "usage: ortholab list" in reference.command_help("list")


IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)")


def test_every_picture_has_alt_text_and_exists():
    pages = {**{f"docs/{k}": v for k, v in sources().items()}, "README.md": (REPO / "README.md").read_text()}
    seen = 0
    for page, text in pages.items():
        assert "<img" not in text or re.search(r"<img[^>]*\balt=\"[^\"]+\"", text), f"{page}: <img> without alt"
        for alt, target in IMAGE.findall(text):
            seen += 1
            assert len(alt.split()) >= 4, f"{page}: picture {target} needs alt text saying what it shows"
            if not target.startswith("http"):
                assert ((REPO / page).parent / target).is_file(), f"{page}: picture {target} does not exist"
    assert seen >= len(screenshots.dashboard_pages())


def test_the_readme_is_short_and_its_links_resolve():
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 80, "the README is one or two screens; the rest belongs in docs/"
    assert "make demo" in text and "make test" in text
    for target in re.findall(r"\]\(([^)#\s]+)", text):
        if not target.startswith("http"):
            assert (REPO / target).exists(), f"README links to {target}, which does not exist"


def grey_stats(path: Path) -> tuple[float, float]:
    from PIL import Image, ImageStat

    image = Image.open(path).convert("RGB")
    grey = image.convert("L")
    colours = image.getcolors(maxcolors=image.width * image.height)
    background = max(count for count, _ in colours)
    return ImageStat.Stat(grey).stddev[0], 1 - background / (image.width * image.height)


def assert_non_blank(path: Path) -> None:
    assert path.is_file(), f"{path} is missing: run `make screenshots`"
    assert path.read_bytes().startswith(b"\x89PNG\r\n\x1a\n"), f"{path} is not a PNG"
    spread, foreground = grey_stats(path)
    assert spread > MIN_GREY_STD and foreground > MIN_FOREGROUND, (
        f"{path} looks blank: grey-level std {spread:.1f}, {foreground:.1%} of pixels off the background"
    )


def test_every_dashboard_page_has_a_non_blank_screenshot_in_the_docs():
    dashboard = (DOCS / "dashboard.md").read_text()
    for page in screenshots.dashboard_pages():
        assert_non_blank(DOCS / "images" / f"{page['name']}.png")
        assert f"](images/{page['name']}.png)" in dashboard, f"docs/dashboard.md does not show {page['name']}.png"


def test_a_blank_picture_is_refused(tmp_path):
    from PIL import Image

    Image.new("RGB", (200, 100), "white").save(tmp_path / "blank.png")
    with pytest.raises(AssertionError, match="looks blank"):
        assert_non_blank(tmp_path / "blank.png")


def test_the_pages_are_read_from_the_app():
    pages = screenshots.dashboard_pages()
    assert pages[0]["url"] == "" and {"curves", "eigenvalues", "gradients"} <= {p["url"] for p in pages}
    assert len({p["name"] for p in pages}) == len(pages)


@pytest.mark.slow
def test_the_site_builds_strictly(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stderr[-4000:]
    families = (tmp_path / "site" / "families" / "scornn" / "index.html").read_text()
    assert "Options" in families and "rho" in families and "Fidelity notes" in families


@pytest.mark.slow
@pytest.mark.skipif(
    not (shutil.which("chromium") and shutil.which("chromedriver")),
    reason="Debian's chromium and chromium-driver are not installed (apt-get install -y chromium chromium-driver)",
)
def test_make_screenshots_retakes_every_page_from_real_runs(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "tools" / "screenshots.py"),
            "--out",
            str(tmp_path / "images"),
            "--work",
            str(tmp_path / "work"),
            "--steps",
            "40",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    for page in screenshots.dashboard_pages():
        assert_non_blank(tmp_path / "images" / f"{page['name']}.png")
    from ortholab.db import Store

    runs = Store(f"sqlite:///{tmp_path / 'work' / 'store.db'}").list_runs()
    assert {"scornn-copying", "lstm-copying"} <= {r.name for r in runs}
    assert all(r.status == "finished" and r.steps > 0 for r in runs)  # real runs, trained to their end
