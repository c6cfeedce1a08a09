"""What a task tells the model and the training loop: shapes, what is predicted, the loss, the baseline."""

from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass

from ortholab.errors import ConfigError

READOUTS = ("every_step", "last_step")  # a prediction at every step, or one per sequence at its last step


SELECT_ON = ("main_metric", "loss")  # what may choose a run's best checkpoint (fit's --select_on)


@dataclass(frozen=True)
class TaskSpec:
    """A task's contract with the model.

    name: registry name of the task (e.g. 'copying').
    input_size: real input channels, or the vocabulary size when `vocab_size` inputs are symbol ids.
    symbolic: True when inputs are integer ids (B, T) fed one-hot; False for real inputs (B, T, input_size).
    output_size: classes (classification) or output channels (regression).
    readout: 'every_step' (a prediction per time step) or 'last_step' (one per sequence).
    loss: a name in training/objectives.py's OBJECTIVES ('cross_entropy', 'mse', 'frame_nll', ..., or one of your
        own added with register_objective); class ids as targets where its objective has `classes = True`, real
        values otherwise.
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

    def __post_init__(self):
        """Each field of a task's own TaskSpec checked where it is built: one line naming the field and its fix."""
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"TaskSpec name = {self.name!r}: give the task a short name such as 'sign_of_sum'")
        for field in ("input_size", "output_size"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"TaskSpec {field} = {value!r}: a positive integer (channels, classes or symbols)")
        if self.readout not in READOUTS:
            raise ConfigError(
                f"TaskSpec readout = {self.readout!r}: choose 'every_step' (a prediction at every step) or "
                f"'last_step' (one per sequence)"
            )
        if not isinstance(self.loss, str) or not self.loss:
            raise ConfigError(f"TaskSpec loss = {self.loss!r}: name a loss, e.g. 'cross_entropy' or 'mse'")
        if not isinstance(self.main_metric, str) or not self.main_metric.startswith("val/"):
            raise ConfigError(
                f"TaskSpec main_metric = {self.main_metric!r}: a validation metric, e.g. 'val/loss' or 'val/acc'"
            )
        if self.main_metric_mode not in ("min", "max"):
            raise ConfigError(
                f"TaskSpec main_metric_mode = {self.main_metric_mode!r}: 'min' (lower is better) or 'max'"
            )
        if not isinstance(self.symbolic, bool):
            raise ConfigError(f"TaskSpec symbolic = {self.symbolic!r}: True (integer symbol ids) or False")
        for field in ("baseline", "test_baseline"):
            value = getattr(self, field)
            if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Real)):
                raise ConfigError(f"TaskSpec {field} = {value!r}: a number, or None when the task has none")
            if value is not None and not math.isfinite(value):
                raise ConfigError(f"TaskSpec {field} = {value!r}: a finite number, or None when the task has none")

    def baseline_for(self, split: str) -> float | None:
        """The baseline on `split` ('val' or 'test'): each split is compared with its own."""
        return self.test_baseline if split == "test" and self.test_baseline is not None else self.baseline

    def checkpoint_metric(self, select_on: str = "main_metric") -> tuple[str, str]:
        """(metric, mode) whose best validation point chooses the best checkpoint: the main metric, or with
        select_on='loss' the lowest validation loss (the SRNN paper's pMNIST choice)."""
        if select_on not in SELECT_ON:
            raise ValueError(f"select_on = {select_on!r}: one of {', '.join(SELECT_ON)}")
        return ("val/loss", "min") if select_on == "loss" else (self.main_metric, self.main_metric_mode)

    def to_dict(self) -> dict:
        return asdict(self)
