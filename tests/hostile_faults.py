"""Faults for the hostile-input tests, loaded by class path (with ORTHOLAB_CONFIG_MODULES=hostile_faults)."""

import errno
import os
from pathlib import Path

from lightning.pytorch import Callback


class FillDisk(Callback):
    """After optimizer step `step`, fill the filesystem holding `folder` (a small tmpfs) to the last byte, so that
    the next checkpoint write meets a real ENOSPC; with `simulate`, make writes of checkpoints raise ENOSPC after
    half their bytes instead (where no small filesystem can be mounted)."""

    def __init__(self, folder: str, step: int = 1, simulate: bool = False):
        self.folder, self.step, self.simulate = Path(folder), step, simulate

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step != self.step:
            return
        if self.simulate:
            import torch

            real_save = torch.save

            def save_half_then_fail(obj, f, *args, **kwargs):
                if hasattr(f, "write"):
                    f.write(b"\0" * 4096)
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

            torch.save = save_half_then_fail
            self._restore = real_save
            return
        fd = os.open(self.folder / "filler", os.O_WRONLY | os.O_CREAT, 0o600)  # unbuffered: nothing left to flush
        try:
            while True:
                os.write(fd, b"\0" * 4096)
        except OSError as err:
            if err.errno != errno.ENOSPC:
                raise
        finally:
            os.close(fd)
