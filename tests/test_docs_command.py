"""`ortholab docs`: the documentation's pages in the terminal, so that every `docs/PAGE.md#section` the program's
messages point at can be read where the program runs, from a checkout or from the wheel (tests/test_wheel.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ortholab.cli import docs
from ortholab.cli.main import main

REPO = Path(__file__).resolve().parents[1]
PRODUCT = ("ortholab", "app", "training", "models", "datamodules", "db")
POINTER = re.compile(r"docs/((?:families/)?[\w-]+)\.md(?:#([\w-]+))?")  # as the program's messages name a page


def run(capsys, *args: str) -> tuple[int, str, str]:
    try:
        main(["docs", *args])
        code = 0
    except SystemExit as stop:
        code = stop.code
    out, err = capsys.readouterr()
    return code, out, err


def test_the_list_names_every_page_of_the_site_with_its_title(capsys):
    code, out, _ = run(capsys)
    assert code == 0
    listed = dict(re.findall(r"^  (\S+)\s+(.+)$", out, re.MULTILINE))
    on_disk = {p.relative_to(REPO / "docs").with_suffix("").as_posix() for p in (REPO / "docs").glob("**/*.md")}
    assert set(listed) == {page for page in on_disk if not page.startswith(("results/", "_hooks/"))}
    assert (
        listed["troubleshooting"] == "Bad input and troubleshooting"
        and listed["families/scornn"] == "scoRNN (`scornn`)"
    )


def test_a_page_prints_with_the_parts_read_from_the_code_filled_in(capsys):
    code, out, _ = run(capsys, "scornn")  # a family's own name finds its page
    assert code == 0 and out.startswith("# scoRNN")
    assert "<!-- ortholab:" not in out
    assert "| `rho` |" in out and "`cayley.upper` (28,)" in out  # the options table and groups, from the class
    code, out, _ = run(capsys, "cli#ortholab-docs")
    assert code == 0 and out.startswith("## `ortholab docs`") and "$ ortholab docs --help" in out
    assert "## `ortholab dashboard`" not in out  # one section: it ends at the next heading of its level


def test_every_page_and_section_the_programs_messages_name_resolves(capsys):
    """Each `docs/X.md#y` in the product's code is a page `ortholab docs` finds, and #y a section of it."""
    pointers = {
        match.group(0)
        for part in PRODUCT
        for source in (REPO / part).rglob("*.py")
        for match in POINTER.finditer(source.read_text())
    }
    assert len(pointers) > 15  # the troubleshooting, checkpoints, configs, tasks ... pointers are all seen
    for pointer in sorted(pointers):
        code, out, err = run(capsys, pointer)
        assert code == 0, f"{pointer}: {err}"
        assert out.strip(), pointer


def test_section_anchors_are_the_sites_own():
    """The anchors MkDocs writes (Python-Markdown's toc slugify), as the pages link to them."""
    assert docs.slug("A family of your own") == "a-family-of-your-own"
    assert docs.slug("`ortholab evaluate-audio`") == "ortholab-evaluate-audio"
    assert docs.slug("From the wheel, without the checkout") == "from-the-wheel-without-the-checkout"
    assert docs.slug("Copying (`CopyingTask`)") == "copying-copyingtask"
    links = {
        (page, anchor)
        for path in (REPO / "docs").glob("*.md")
        for page, anchor in re.findall(r"\]\(((?:families/)?[\w-]+)\.md#([\w-]+)\)", path.read_text())
    }
    assert len(links) > 20
    for page, anchor in links:  # every in-site link's anchor is a heading there, by this slug
        assert anchor in {slug for _, _, slug in docs.headings((REPO / "docs" / f"{page}.md").read_text())}, (
            page,
            anchor,
        )


@pytest.mark.parametrize(
    ("asked", "expected"),
    [
        (
            "troubleshoot",
            "no documentation page 'troubleshoot'; did you mean troubleshooting? `ortholab docs` lists the pages",
        ),
        ("tasks#a-task-of-yr-own", "page tasks has no section #a-task-of-yr-own; did you mean #a-task-of-your-own?"),
        ("#nothing", "page index has no section #nothing; it has no sections: `ortholab docs index` prints it whole"),
        (["--path", "tasks#nothing"], "page tasks has no section #nothing; its sections: #"),
    ],
)
def test_an_unknown_page_or_section_is_one_line_and_exit_2(capsys, asked, expected):
    code, out, err = run(capsys, *([asked] if isinstance(asked, str) else asked))
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.strip().startswith(f"ortholab: error: {expected}")


def test_a_folder_prints_its_index_page(capsys):
    """`ortholab docs families` is the families' overview (docs/families/index.md), not 'no documentation page'."""
    code, out, _ = run(capsys, "families")
    assert code == 0 and out == (REPO / "docs" / "families" / "index.md").read_text(encoding="utf-8")


def test_the_api_reference_directives_print_as_signatures_and_docstrings(capsys):
    """library.md and architecture.md end in mkdocstrings' `::: ortholab.x.y` lines, which the site renders from the
    docstrings: `ortholab docs library` printed them raw, so a wheel's user read no reference at all."""
    directives = {
        page.relative_to(REPO / "docs").with_suffix("").as_posix(): re.findall(r"^::: ([\w.]+)", text, re.MULTILINE)
        for page in (REPO / "docs").glob("*.md")
        if (text := page.read_text(encoding="utf-8"))
    }
    assert directives["library"] and directives["architecture"]
    for page, names in directives.items():
        code, out, _ = run(capsys, page)
        assert code == 0 and not re.search(r"^:::", out, re.MULTILINE) and "not importable here" not in out, page
        for name in names:
            assert re.search(rf"^###+ `{re.escape(name)}[(`]", out, re.MULTILINE), (page, name)
    code, out, _ = run(capsys, "library#reference")
    assert "`ortholab.models.layers.paper_optimizers(config" in out and "One optimizer per parameter group" in out
    assert "#### `FamilyRNN.recurrent_matrices(self)" in out and "FamilyRNN.forward" not in out  # no inherited text
    code, out, _ = run(capsys, "architecture#python-api-reference")
    assert "#### `ortholab.db.frames.metrics(run_ids" in out and "members:" not in out  # the options block is read
    assert docs.api_reference("ortholab.no_such_module").endswith("in the environment with it)\n")


def test_path_prints_the_file(capsys):
    code, out, _ = run(capsys, "--path", "docs/getting-started.md")
    assert code == 0 and Path(out.strip()) == REPO / "docs" / "getting-started.md"


def test_pages_read_and_print_under_a_locale_without_utf8():
    """LC_ALL=C with Python's UTF-8 mode and locale coercion off (as on a system whose encoding is ASCII): the
    pages are UTF-8 whatever the locale, and what the terminal cannot show prints as '?', not a traceback."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONIOENCODING", "PYTHONUTF8", "LANG", "LC_CTYPE")}
    env.update(LC_ALL="C", LANG="C", PYTHONUTF8="0", PYTHONCOERCECLOCALE="0")
    for page in ([], ["benchmarks"]):  # the list reads every page's title; benchmarks.md holds 'λ', '·', '—'
        done = subprocess.run([sys.executable, "-m", "ortholab", "docs", *page], env=env, capture_output=True)
        assert done.returncode == 0, done.stderr.decode("ascii", "replace")
        assert done.stdout.isascii() and done.stdout.strip()
    assert done.stdout.startswith(b"# ") and b"?" in done.stdout


def test_a_broken_config_module_is_one_line_and_exit_2_as_fit_says_it(tmp_path, monkeypatch, capsys):
    """`ortholab docs cli` fills in each command's --help, which imports $ORTHOLAB_CONFIG_MODULES: a module that
    fails as it runs was a RuntimeError traceback ('`ortholab list --help` printed nothing')."""
    from ortholab.cli import reference

    (tmp_path / "brokendocslab.py").write_text("x = 1\nraise RuntimeError('no GPU here')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("ORTHOLAB_CONFIG_MODULES", "brokendocslab")
    reference.command_help.cache_clear()  # an earlier test's filled --help texts
    code, out, err = run(capsys, "cli")
    reference.command_help.cache_clear()
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [
        f"ortholab: error: $ORTHOLAB_CONFIG_MODULES names 'brokendocslab', whose import failed at "
        f"{tmp_path / 'brokendocslab.py'}, line 2: RuntimeError: no GPU here; fix it, or drop it from "
        "$ORTHOLAB_CONFIG_MODULES"
    ]
