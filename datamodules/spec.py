"""What a task tells the model and the training loop: shapes, what is predicted, the loss, the baseline."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class TaskSpec:
    """A task's contract with the model.

    name: registry name of the task (e.g. 'copying').
    input_size: real input channels, or the vocabulary size when `vocab_size` inputs are symbol ids.
    symbolic: True when inputs are integer ids (B, T) fed one-hot; False for real inputs (B, T, input_size).
    output_size: classes (classification) or output channels (regression).
    readout: 'every_step' (a prediction per time step) or 'last_step' (one per sequence).
    loss: 'cross_entropy' (targets are class ids) or 'mse'.
    main_metric / main_metric_mode: the logged metric that ranks runs of this task, and whether lower is better.
    baseline: the main metric of the task's trivial strategy (the papers' dashed line) on the validation split, or None.
    test_baseline: the same on the test split, for tasks whose baseline depends on the split (None: `baseline`).
    """

    name: str
    input_size: int
    output_size: int
    readout: str
    loss: str
    symbolic: bool = False
    main_metric: str = "val/loss"
    main_metric_mode: str = "min"
    baseline: float | None = None
    description: str = ""
    test_baseline: float | None = None

    def baseline_for(self, split: str) -> float | None:
        """The baseline on `split` ('val' or 'test'): each split is compared with its own."""
        return self.test_baseline if split == "test" and self.test_baseline is not None else self.baseline

    def to_dict(self) -> dict:
        return asdict(self)
