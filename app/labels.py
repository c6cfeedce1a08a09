"""How runs are named on every page (names repeat across runs, so the id leads)."""

from __future__ import annotations

from ortholab.db import RunSummary


def run_label(run: RunSummary) -> str:
    """'#12 copying_scornn' — unique, short, and sorted by id where it matters."""
    return f"#{run.id} {run.name}"
