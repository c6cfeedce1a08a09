"""The README's results table (issue 48): one short line per claim, each linking the export it comes from, and
every number it quotes found in that export's report.csv."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?:e[-+]?\d+)?(?![\w.])")
WORDS = 40


def results_rows() -> list[list[str]]:
    text = (REPO / "README.md").read_text()
    section = text[text.index("## Results at the papers' full settings") :]
    section = section[: section.index("\n\n![")]
    lines = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| paper's")]
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines]


def test_each_claim_is_one_short_line_with_its_export():
    rows = results_rows()
    assert len(rows) >= 10
    for claim, ours, export in rows:
        assert len(f"{claim} {ours}".split()) <= WORDS, claim
        links = re.findall(r"\]\((docs/results/[^)]+/report\.csv)\)", export)
        assert links and all((REPO / link).is_file() for link in links), export


def test_every_number_quoted_appears_in_the_linked_report_csv():
    for claim, ours, export in results_rows():
        cells = set()
        for link in re.findall(r"\]\(([^)]+)\)", export):
            for line in (REPO / link).read_text().splitlines():
                cells |= set(NUMBER.findall(line))
        quoted = NUMBER.findall(ours.replace("T = 1000", "").replace("T = 2000", ""))
        assert quoted, ours
        missing = [number for number in quoted if number not in cells]
        assert not missing, (claim, missing)


def test_every_exported_plot_opens_offline():
    """Issue 48: the first exports loaded plotly from a CDN and showed nothing offline; each HTML under docs/results
    loads a plotly.min.js from the repository (beside it, or shared in docs/results with --shared-plotly)."""
    pages = sorted((REPO / "docs" / "results").glob("*/*.html"))
    assert len(pages) >= 10
    for page in pages:
        sources = re.findall(r'<script[^>]*\bsrc="([^"]+)"', page.read_text())
        assert sources, page
        for source in sources:
            assert "://" not in source and (page.parent / source).resolve().is_file(), (page.name, source)
