"""Artifact snapshots taken during training (eigenvalues, phases, gradient profiles, hidden states):
picking the one to show at a step, and what to say when a run has none. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ortholab.app.labels import run_label
from ortholab.db import ArtifactRecord, RunSummary

# families whose recurrence is gated: several recurrent matrices, no single W to take eigenvalues of
GATED_FAMILIES = frozenset({"lstm", "gru"})


def _step(record: ArtifactRecord) -> int:
    return -1 if record.step is None else record.step


def by_step(records: Iterable[ArtifactRecord]) -> list[ArtifactRecord]:
    """One snapshot per step (the last recorded wins), ordered by step; a snapshot without step counts as -1."""
    latest: dict[int, ArtifactRecord] = {}
    for record in records:
        latest[_step(record)] = record
    return [latest[s] for s in sorted(latest)]


def steps_of(*record_lists: Sequence[ArtifactRecord]) -> list[int]:
    """The sorted union of the snapshot steps of several runs."""
    return sorted({_step(r) for records in record_lists for r in records})


def at_step(records: Sequence[ArtifactRecord], step: int) -> ArtifactRecord | None:
    """The latest snapshot taken at or before `step` (None when the run had none yet)."""
    chosen = None
    for record in by_step(records):
        if _step(record) <= step:
            chosen = record
    return chosen


def no_snapshot_note(run: RunSummary, what: str, left_out: bool = False) -> str:
    """Why a run has nothing to show for `what` (e.g. 'eigenvalue snapshots'), in words; `left_out`: the store is an
    export's copy without analyses (Store.copied_without_analyses)."""
    if run.family in GATED_FAMILIES and what.startswith("eigenvalue"):
        return f"{run_label(run)}: the {run.family} family has no single recurrent matrix, so no eigenvalues."
    if run.family == "rtransformer" and what.startswith("eigenvalue"):
        return (
            f"{run_label(run)}: no {what} recorded; an R-Transformer has a single recurrent matrix only when "
            f"its local cell has one (not with the default GRU cell)."
        )
    if left_out:
        return (
            f"{run_label(run)}: no {what} in this store, an export's copy written without the runs' analyses: "
            "`ortholab report TABLE --export DIR --with-artifacts` copies them from the store that recorded the runs."
        )
    return f"{run_label(run)}: no {what} recorded for this run."
