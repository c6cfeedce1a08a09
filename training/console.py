"""None of the noise that is not ours: a third-party logging tip, a deprecation inside Lightning itself.

Imports nothing heavy: every command calls it first."""

from __future__ import annotations

import logging
import warnings

from ortholab.errors import OrthoLabWarning


class _DropMessages(logging.Filter):
    def __init__(self, *fragments: str):
        super().__init__()
        self.fragments = fragments

    def filter(self, record: logging.LogRecord) -> bool:
        return not any(fragment in record.getMessage() for fragment in self.fragments)


def _plain_own_warnings(format_warning):
    """warnings.formatwarning that prints an OrthoLabWarning as one line without Python's file and line."""

    def formatted(message, category, filename, lineno, line=None):
        if issubclass(category, OrthoLabWarning):
            return f"ortholab: warning: {message}\n"
        return format_warning(message, category, filename, lineno, line)

    formatted.plain_own_warnings = True
    return formatted


def quiet_third_party_noise() -> None:
    """Drop Lightning's advertisements for its cloud logger and model registry, the deprecation warning its own pytree
    helper raises under newer torch, its checkpoint callback's warnings on a fit shorter than one validation interval
    and on a resumed run's own checkpoint folder, its warning on epochs shorter than the logging interval, and its
    SLURM auto-requeue notice, which OrthoLab's own handlers replace (none is actionable for an OrthoLab user)."""
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero"):
        logging.getLogger(name).addFilter(_DropMessages("litlogger", "litmodels"))
    # on SLURM: the run's GracefulInterrupt answers SIGUSR1 and SIGTERM itself (a checkpoint, the run interrupted)
    logging.getLogger("lightning.pytorch.trainer.connectors.signal_connector").addFilter(
        _DropMessages("SLURM auto-requeueing enabled")
    )
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)` is deprecated")
    # a fit that ends before its first validation: nothing to compare yet (once one ran, Lightning raises instead)
    warnings.filterwarnings("ignore", message=r"`ModelCheckpoint\(monitor=.*could not find the monitored key")
    # an epoch of fewer batches than log_every_n_steps: training points are still recorded every N steps, across epochs
    warnings.filterwarnings("ignore", message=r"The number of training batches \(\d+\) is smaller than the logging")
    # a run folder holds only its own run's checkpoints (`fit --resume`: its earlier ones), so this is never a clash
    warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty")
    if not getattr(warnings.formatwarning, "plain_own_warnings", False):  # our own: one plain line
        warnings.formatwarning = _plain_own_warnings(warnings.formatwarning)
