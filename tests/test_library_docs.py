"""docs/library.md's examples run: its ```python blocks, in order, as one program in a fresh process and folder."""

import re
import subprocess
import sys
from pathlib import Path

import torch
from tolerances import roundoff

LIBRARY = Path(__file__).resolve().parents[1] / "docs" / "library.md"


def python_blocks(markdown: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", markdown, flags=re.S | re.M)


def test_the_library_page_has_an_example_of_each_part():
    code = "\n".join(python_blocks(LIBRARY.read_text()))
    for part in (
        "onn.ScoRNN(",
        "onn.group_optimizer(",
        "frames.runs(",
        "frames.metrics(",
        "frames.artifacts(",
        "fit(config",
        "load_run(",
    ):
        assert part in code, f"docs/library.md has no example of {part}"


def test_the_library_page_examples_run(tmp_path):
    program = "\n\n".join(python_blocks(LIBRARY.read_text()))
    (tmp_path / "library_examples.py").write_text(program)
    done = subprocess.run(
        [sys.executable, "library_examples.py"], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    printed = done.stdout.splitlines()
    assert printed[1] == "True", printed[:3]  # the two halves with h_n passed on equal the whole sequence
    assert "shorter" in done.stdout  # the second fit's run, read back from the store by name
    shape, loaded = printed[-2].rsplit(" ", 1)
    assert shape == "(20, 28, 9)", printed[-2:]  # val_size sequences of T = 8 + 20 steps over 9 symbols
    # float32: the loaded model's val/loss is the recorded one (the same weights and sequences; a mean of 20 * 28
    # cross-entropies through n = 8 units, 28 steps), to round-off relative to the loss
    assert abs(float(loaded) - float(printed[-1])) < roundoff(torch.float32, 8 * 28 + 20 * 28, scale=float(loaded))
