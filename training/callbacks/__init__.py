"""Analysis callbacks that every run gets by default (each configurable, or replaced, in `trainer.callbacks`)."""

from ortholab.training.callbacks.audio import AudioEvaluation
from ortholab.training.callbacks.matrix import EigenvalueSnapshots, OrthogonalityDrift
from ortholab.training.callbacks.nan_guard import NaNGuard, NonFiniteError
from ortholab.training.callbacks.probes import GradientNormProfile, HiddenTrajectory
from ortholab.training.callbacks.timing import Timing

ANALYSIS_CALLBACKS = (
    OrthogonalityDrift,
    EigenvalueSnapshots,
    GradientNormProfile,
    Timing,
    NaNGuard,
    AudioEvaluation,
)  # AudioEvaluation acts on speech tasks only


def default_callbacks(configured: list) -> list:
    """One instance of each analysis callback not already configured by the user (theirs take its place)."""
    present = {type(c) for c in configured}
    return [cls() for cls in ANALYSIS_CALLBACKS if cls not in present]


__all__ = [
    "ANALYSIS_CALLBACKS",
    "AudioEvaluation",
    "EigenvalueSnapshots",
    "GradientNormProfile",
    "HiddenTrajectory",
    "NaNGuard",
    "NonFiniteError",
    "OrthogonalityDrift",
    "Timing",
    "default_callbacks",
]
