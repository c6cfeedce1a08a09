"""Kills at the worst moments, for the resume tests (loaded by class path in configs; tests/test_reliability_*.py).

Each fault fires once: a marker file remembers it, so the resumed run (which reloads the same callbacks from the
stored config) is not killed again.
"""

import errno
import os
import shutil
import signal
from pathlib import Path

from lightning.pytorch import Callback

SIMULATE_EXDEV_VAR = "RELIABILITY_SIMULATE_EXDEV"  # "1": renames across folders fail as across filesystems


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class KillDuringValidation(Callback):
    """SIGKILL in the middle of the validation run at optimizer step `step` (after its first batch)."""

    def __init__(self, step: int, marker: str = "killed-in-validation"):
        self.step, self.marker = step, Path(marker)

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        if not trainer.sanity_checking and trainer.global_step == self.step and not self.marker.exists():
            self.marker.write_text("SIGKILL")
            _die()


class KillInCheckpointWrite(Callback):
    """SIGKILL while the checkpoint `target` (a file name) of optimizer step `step` is being written: at the first
    fsync (the bytes are written, not yet renamed into place) or halfway through a copy into place (what a move
    across filesystems does), whichever the checkpoint writer reaches first."""

    def __init__(self, step: int, target: str = "last.ckpt", marker: str = "killed-in-checkpoint"):
        self.step, self.target, self.marker = step, target, Path(marker)

    def setup(self, trainer, pl_module, stage):
        if os.environ.get(SIMULATE_EXDEV_VAR) == "1":
            _simulate_cross_device_renames()
        save = trainer.save_checkpoint

        def save_checkpoint(filepath, *args, **kwargs):
            if (
                os.path.basename(str(filepath)) == self.target
                and trainer.global_step == self.step
                and not self.marker.exists()
            ):
                self.marker.write_text("SIGKILL")
                _arm()
            return save(filepath, *args, **kwargs)

        trainer.save_checkpoint = save_checkpoint


def _arm() -> None:
    """From now on the process dies at the next fsync, or halfway through the next file copy."""

    def sendfile(out_fd, in_fd, offset, count):  # shutil's copy asks for more than the file holds: half of it
        real_sendfile(out_fd, in_fd, offset, max(os.fstat(in_fd).st_size // 2, 1))
        _die()

    def copyfileobj(source, target, length=0):
        target.write(source.read(max(os.fstat(source.fileno()).st_size // 2, 1)))
        target.flush()
        _die()

    real_sendfile = os.sendfile
    os.fsync = lambda fd: _die()
    os.sendfile = sendfile
    shutil.copyfileobj = copyfileobj


def _simulate_cross_device_renames() -> None:
    """os.rename/os.replace between two folders fail with EXDEV, as between two filesystems."""
    for name in ("rename", "replace"):
        real = getattr(os, name)

        def across(src, dst, *args, _real=real, **kwargs):
            if os.path.dirname(os.path.abspath(src)) != os.path.dirname(os.path.abspath(dst)):
                raise OSError(errno.EXDEV, os.strerror(errno.EXDEV), src, None, dst)
            return _real(src, dst, *args, **kwargs)

        setattr(os, name, across)
