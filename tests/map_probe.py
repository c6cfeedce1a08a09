"""A callback a test's config names by class path (conftest admits this module): it keeps the trained module of
the last fit in this process, so the test reads the layer that `ortholab fit` trained."""

from lightning.pytorch import Callback


class LastModule(Callback):
    module = None  # the LightningModule of the last fit that ended in this process
    device = None  # where it trained: Lightning's teardown moves the module back to the CPU after fit

    def on_train_end(self, trainer, pl_module) -> None:
        type(self).module = pl_module
        type(self).device = next(pl_module.parameters()).device.type
