"""Lightning's noise an OrthoLab user cannot act on is dropped; everything else it says still shows."""

import logging
import warnings

from lightning.pytorch.utilities.rank_zero import rank_zero_info, rank_zero_warn

from ortholab.training.console import quiet_third_party_noise


def test_lightnings_tips_and_a_resumed_runs_checkpoint_folder_warning_are_dropped(caplog):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_third_party_noise()  # after simplefilter: its filters go first
        rank_zero_warn("Checkpoint directory /runs/store-1/x/7/checkpoints exists and is not empty.")
        rank_zero_warn("The dataloader does not have many workers")
    assert [str(w.message) for w in caught] == ["The dataloader does not have many workers"]
    with caplog.at_level(logging.INFO):
        rank_zero_info("💡 Tip: For seamless cloud uploads and versioning, try installing [litmodels](...)")
        rank_zero_info("GPU available: False, used: False")
    assert [r.getMessage() for r in caplog.records] == ["GPU available: False, used: False"]
