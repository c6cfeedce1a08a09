"""Point published rows at their configs: `python tools/link_paper_configs.py TABLE ROW CONFIG [TABLE ROW CONFIG ...]`.

Edits configs/papers/published/TABLE.yaml in place: the row's `config:` becomes CONFIG and a
"family pending: <name>; " note is dropped. Text edits, so the files keep their layout.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

PUBLISHED = Path(__file__).resolve().parents[1] / "configs" / "papers" / "published"


def link(table: str, row: str, config: str) -> None:
    path = PUBLISHED / f"{table}.yaml"
    text = path.read_text()
    start = text.index(f"- row: {row}\n")
    end = text.find("\n- row: ", start + 1)
    end = len(text) if end < 0 else end
    block = text[start:end]
    if not (PUBLISHED.parents[2] / config).is_file():
        raise SystemExit(f"{config} does not exist")
    block = re.sub(r"\n  config: .*", f"\n  config: {config}", block, count=1)
    block = re.sub(r"family pending: \w+(; |$)", "", block)
    path.write_text(text[:start] + block + text[end:])


if __name__ == "__main__":
    args = sys.argv[1:]
    for i in range(0, len(args), 3):
        link(*args[i:i + 3])
