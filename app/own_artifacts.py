"""Artifacts of kinds no other page draws, as a callback of one's own records them (docs/configs.md, 'A callback of
your own'): which kinds a store holds, and how each artifact is shown. Pure."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ortholab.db import ArtifactRecord
from ortholab.db.artifacts import (
    AUDIO,
    AUDIO_SCORES,
    EIGENVALUES,
    GRAD_NORMS,
    HIDDEN_TRAJECTORY,
    NPY_MEDIA_TYPE,
    PHASES,
)

DRAWN_ELSEWHERE = frozenset({EIGENVALUES, PHASES, GRAD_NORMS, HIDDEN_TRAJECTORY, AUDIO, AUDIO_SCORES})
OVER_STEPS = frozenset({"value", "profile"})  # drawn with every step at once; the others at one chosen step


def own_kinds(records: Iterable[ArtifactRecord]) -> list[str]:
    """The kinds among `records` that OrthoLab's other pages do not draw, sorted."""
    return sorted({r.kind for r in records} - DRAWN_ELSEWHERE)


def shown_as(record: ArtifactRecord, array: np.ndarray | None = None) -> str:
    """How an artifact is shown: 'value' (a number per step, one line over the steps), 'profile' (a 1-D array per
    step, one line per step), 'heatmap' (2-D, the chosen step's), 'shape' (more axes: its shape only), 'image',
    'audio', 'json', or 'meta' (its meta and a download of its bytes). `array`: the decoded .npy data."""
    media = record.media_type or ""
    if media == NPY_MEDIA_TYPE and array is not None:
        if array.size == 1:
            return "value"
        return {1: "profile", 2: "heatmap"}.get(array.ndim, "shape")
    if media.startswith("image/"):
        return "image"
    if media.startswith("audio/"):
        return "audio"
    if media == "application/json":
        return "json"
    return "meta"


def real_values(array: np.ndarray) -> tuple[np.ndarray, bool]:
    """The array as floats to draw, and whether they are the modulus of complex values."""
    if np.iscomplexobj(array):
        return np.abs(array).astype(float), True
    return np.asarray(array, dtype=float), False
