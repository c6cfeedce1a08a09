"""How runs are named on every page (names repeat across runs, so the id leads)."""

from __future__ import annotations

from ortholab.db import RunSummary
from ortholab.db.seeds import SEED_TAG


def run_label(run: RunSummary) -> str:
    """'#12 copying_scornn' — unique, short, and sorted by id where it matters; a seed of a reproduced row (tagged
    seed:N, whose runs share one name) adds its seed: '#12 copying_scornn · seed 5546'."""
    seed = next((tag[len(SEED_TAG) :] for tag in run.tags if tag.startswith(SEED_TAG)), None)
    return f"#{run.id} {run.name}" + (f" · seed {seed}" if seed is not None else "")
