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


# Kept by `--analysis false`: their records give a run its pace, ETA and last step (`ortholab runs`)
BOOKKEEPING_CALLBACKS = (Timing,)


def default_callbacks(configured: list, analysis: bool = True) -> list:
    """One instance of each default callback not already configured by the user (theirs take its place): the
    analysis callbacks, or without them (`--analysis false`) the bookkeeping ones."""
    present = {type(c) for c in configured}
    return [cls() for cls in (ANALYSIS_CALLBACKS if analysis else BOOKKEEPING_CALLBACKS) if cls not in present]


__all__ = [
    "ANALYSIS_CALLBACKS",
    "AudioEvaluation",
    "BOOKKEEPING_CALLBACKS",
    "EigenvalueSnapshots",
    "GradientNormProfile",
    "HiddenTrajectory",
    "NaNGuard",
    "NonFiniteError",
    "OrthogonalityDrift",
    "Timing",
    "default_callbacks",
]
