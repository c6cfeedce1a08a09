"""A task of the user's own and its loss: docs/tasks.md's examples list, train and are recorded as OrthoLab's tasks
are; a task whose batches or TaskSpec disagree is one line naming the split, the tensor and the fix, before anything
is recorded."""

import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from test_cli import ortholab
from tolerances import roundoff
from torch.utils.data import TensorDataset

from ortholab.cli.main import main
from ortholab.datamodules import TASKS, TaskDataModule, TaskSpec, register_task
from ortholab.datamodules.adding import AddingTask
from ortholab.datamodules.copying import CopyingTask
from ortholab.db import Store
from ortholab.errors import ConfigError
from ortholab.training.objectives import OBJECTIVES, CrossEntropy, MeanSquaredError, register_objective
from ortholab.training.task_check import check_batch, check_id_ranges, check_task, splits_checked

REPO = Path(__file__).resolve().parents[1]


def _docs_example() -> str:
    """docs/tasks.md's module, as a user copies it."""
    text = (REPO / "docs" / "tasks.md").read_text()
    return re.search(r"```python\n(# mytasks\.py\n.*?)```", text, re.DOTALL).group(1)


def _docs_objective() -> str:
    """docs/tasks.md's loss of one's own: its one example registering an objective."""
    blocks = re.findall(r"```python\n(.*?)```", (REPO / "docs" / "tasks.md").read_text(), re.DOTALL)
    (block,) = [block for block in blocks if "register_objective(" in block]
    return block


def test_the_docs_task_of_ones_own_is_listed_trained_and_recorded_by_its_name(tmp_path):
    (tmp_path / "mytasks.py").write_text(_docs_example())
    env = {k: v for k, v in os.environ.items() if k != "ORTHOLAB_DB"} | {
        "ORTHOLAB_CONFIG_MODULES": "mytasks",
        "PYTHONPATH": str(tmp_path),
        "ORTHOLAB_RUNS": str(tmp_path / "runs"),
    }
    listed = ortholab("list", "tasks", cwd=tmp_path, env=env)
    assert listed.returncode == 0, listed.stderr
    (row,) = [line for line in listed.stdout.splitlines() if line.startswith("sign_of_sum ")]
    assert "cross_entropy" in row and "last_step" in row, row
    args = ["--data", "sign_of_sum", "--data.seq_len", "20", "--model.family", "scornn", "--model.hidden_size", "8"]
    steps = ["--trainer.max_steps", "20", "--trainer.val_check_interval", "10"]
    done = ortholab("fit", *args, *steps, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    store = Store(f"sqlite:///{tmp_path / 'runs' / 'ortholab.db'}")
    (run,) = store.list_runs()
    assert (run.name, run.status, run.steps) == ("sign_of_sum_scornn", "finished", 20)
    points = store.metric_series(run.id, "val/acc")
    assert [p.step for p in points] == [10, 20] and all(0 <= p.value <= 1 for p in points)


class Coin(TaskDataModule):
    """A well-formed task of one's own (N sequences of T Gaussian steps, the class the sign of their sum); the
    broken ones below each change one thing of it."""

    def __init__(self, seq_len: int = 6, size: int = 20, batch_size: int = 10, **spec):
        super().__init__(batch_size)
        self.seq_len, self.size = seq_len, size
        fields = dict(input_size=1, output_size=2, readout="last_step", loss="cross_entropy", main_metric="val/acc")
        self.spec = TaskSpec(name="coin", main_metric_mode="max", **(fields | spec))

    def make_split(self, split):
        inputs = torch.randn(self.size, self.seq_len, 1, generator=torch.Generator().manual_seed(len(split)))
        return inputs, (inputs.sum(dim=(1, 2)) > 0).long()


class TwoChannels(Coin):
    def make_split(self, split):
        inputs, targets = super().make_split(split)
        return torch.cat([inputs, inputs], dim=2), targets


class NoChannelAxis(Coin):
    def make_split(self, split):
        inputs, targets = super().make_split(split)
        return inputs[..., 0], targets


class FloatClasses(Coin):
    def make_split(self, split):
        inputs, targets = super().make_split(split)
        return inputs, targets.float()


class ClassPerStep(Coin):
    def make_split(self, split):
        inputs, targets = super().make_split(split)
        return inputs, targets[:, None].expand(-1, self.seq_len).contiguous()


class ClassesFromOne(Coin):
    def make_split(self, split):
        inputs, targets = super().make_split(split)
        return inputs, targets + 1


class ThirdClassLate(Coin):
    """Two classes in its first sequences, a third (id 2, beyond output_size = 2) in sequence 17 of each split."""

    def make_split(self, split):
        inputs, targets = super().make_split(split)
        targets[17] = 2
        return inputs, targets


class FloatMask(Coin):
    def make_split(self, split):
        inputs, targets = super().make_split(split)
        return inputs, targets, torch.ones(inputs.shape[:2])


class OnlyInputs(Coin):
    def make_split(self, split):
        return (super().make_split(split)[0],)


class InputsAlone(Coin):
    def make_split(self, split):
        return super().make_split(split)[0]


class BrokenInValidationOnly(Coin):
    def make_split(self, split):
        inputs, targets = super().make_split(split)
        return (inputs, targets) if split == "train" else (inputs, targets[:, None])


class NoSplits(TaskDataModule):
    def __init__(self, batch_size: int = 10):
        super().__init__(batch_size)
        self.spec = TaskSpec(name="nothing", input_size=1, output_size=2, readout="last_step", loss="cross_entropy")


class OneClass(Coin):
    def __init__(self, batch_size: int = 10):
        super().__init__(batch_size=batch_size, output_size=1)


class NoSuper(Coin):
    def __init__(self, batch_size: int = 10):  # forgets super().__init__
        self.seq_len, self.size = 6, 20
        self.spec = TaskSpec(name="coin", input_size=1, output_size=2, readout="last_step", loss="cross_entropy")


class MetricNotLogged(Coin):
    def __init__(self, batch_size: int = 10):
        super().__init__(batch_size=batch_size, main_metric="val/accuracy")


class SpecAsDict(Coin):
    def __init__(self, batch_size: int = 10):
        super().__init__(batch_size=batch_size)
        self.spec = self.spec.to_dict()


def _fit_fails(tmp_path, monkeypatch, capsys, task: str) -> str:
    """`ortholab fit --data test_own_task.<task>`: the one error line (exit 2, no traceback), and no store made."""
    monkeypatch.setenv("ORTHOLAB_CONFIG_MODULES", "test_own_task")  # the user's module, opted in
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "runs.db"
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--data", f"test_own_task.{task}", "--model.hidden_size", "8", "--db", f"sqlite:///{db}"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err, err
    (line,) = [line for line in err.splitlines() if line.startswith("ortholab: error:")]
    assert not db.exists() and not (tmp_path / "runs").exists()  # nothing recorded
    return line


@pytest.mark.parametrize(
    "task,expected",
    [
        ("TwoChannels", "TwoChannels (train split): the inputs are torch.float32 (2, 6, 2); the TaskSpec expects real "
         "values (batch, steps, 1) (input_size = 1); set input_size = 2, or return float inputs of that shape"),
        ("NoChannelAxis", "the inputs are torch.float32 (2, 6); the TaskSpec expects real values (batch, steps, 1) "
         "(input_size = 1); add the channel axis"),
        ("FloatClasses", "FloatClasses (train split): the targets are torch.float32 (2,); the TaskSpec expects class "
         "ids for loss 'cross_entropy' and readout 'last_step': an integer (batch,) = (2,) tensor"),
        ("ClassPerStep", "the targets are torch.int64 (2, 6); the TaskSpec expects class ids for loss "
         "'cross_entropy' and readout 'last_step'"),
        ("ClassesFromOne", "the target classes run from 1 to 2; the TaskSpec expects classes 0..1 (output_size = 2); "
         "set output_size = 3 or number the classes from 0"),
        ("ThirdClassLate", "ThirdClassLate (train split): the target classes run from 0 to 2 (1 out of range, first in "
         "sequence 17); the TaskSpec expects ids in 0..1 (output_size = 2); set output_size = 3"),
        ("FloatMask", "the mask is torch.float32 (2, 6); the TaskSpec expects a bool (batch, steps) = (2, 6) mask"),
        ("OnlyInputs", "OnlyInputs (train split): a batch is (inputs, targets) or (inputs, targets, mask), got 1 "
         "items"),
        ("InputsAlone", "InputsAlone (train split): make_split returned a Tensor, not a tuple; return (inputs, "
         "targets) or (inputs, targets, mask)"),  # was: "a batch is (inputs, targets) ..., got 40 items"
        ("BrokenInValidationOnly", "BrokenInValidationOnly (val split): the targets are torch.int64 (2, 1)"),
        ("NoSplits", "NoSplits does not define make_split(split): return the split's (inputs, targets) tensors"),
        ("MetricNotLogged", "MetricNotLogged: TaskSpec main_metric = 'val/accuracy' is not logged by loss "
         "'cross_entropy'; choose one of ['val/loss', 'val/acc']"),
        ("SpecAsDict", "SpecAsDict.spec is a dict, not a TaskSpec: set self.spec = TaskSpec("),
        ("NoSuper", "NoSuper.__init__ does not call super().__init__(batch_size)"),  # was: no attribute '_splits'
    ],
)  # fmt: skip
def test_a_task_whose_batches_disagree_with_its_spec_is_one_line_and_records_nothing(
    tmp_path, monkeypatch, capsys, task, expected
):
    line = _fit_fails(tmp_path, monkeypatch, capsys, task)
    assert expected in line and "docs/tasks.md#a-task-of-your-own" in line, line


def test_a_class_task_with_one_output_is_one_line(tmp_path, monkeypatch, capsys):
    """torchmetrics' "Expected argument num_classes to be an integer larger than 1" traceback, before."""
    line = _fit_fails(tmp_path, monkeypatch, capsys, "OneClass")
    assert "loss 'cross_entropy' scores classes, and its TaskSpec output_size = 1 gives one" in line, line


@pytest.mark.parametrize(
    "field,value,expected",
    [
        ("input_size", 0, "TaskSpec input_size = 0: a positive integer"),
        ("output_size", 2.0, "TaskSpec output_size = 2.0: a positive integer"),
        ("readout", "last", "TaskSpec readout = 'last': choose 'every_step'"),
        ("loss", "", "TaskSpec loss = '': name a loss"),
        ("main_metric", "acc", "TaskSpec main_metric = 'acc': a validation metric"),
        ("main_metric_mode", "maximum", "TaskSpec main_metric_mode = 'maximum': 'min'"),
        ("symbolic", 1, "TaskSpec symbolic = 1: True"),
        ("baseline", float("nan"), "TaskSpec baseline = nan: a finite number"),
        ("test_baseline", "0.5", "TaskSpec test_baseline = '0.5': a number"),
    ],
)
def test_a_taskspec_field_out_of_range_is_a_value_error_naming_it(field, value, expected):
    fields = dict(name="t", input_size=1, output_size=2, readout="last_step", loss="mse") | {field: value}
    with pytest.raises(ValueError, match=re.escape(expected)):
        TaskSpec(**fields)


def test_register_task_refuses_a_taken_name_or_a_class_that_is_not_a_task():
    with pytest.raises(ValueError, match="name 'copying' is OrthoLab's CopyingTask already"):
        register_task("copying", Coin)
    with pytest.raises(ValueError, match="name must be a short identifier"):
        register_task("my task", Coin)
    with pytest.raises(TypeError, match="cls must be a subclass of ortholab.datamodules.TaskDataModule"):
        register_task("coin", dict)
    assert "coin" not in TASKS and TASKS["copying"] is CopyingTask  # nothing registered by a refusal


def test_the_shipped_generated_tasks_pass_the_check_on_every_split_a_command_reads():
    """Copying (symbol ids, a class per step) and adding (one value per sequence): each layout the check knows is the
    layout OrthoLab's own tasks serve. Copying serves its training batches through a loader of its own (fresh
    batches drawn every step when asked): that split is left to it, and no training set is built for the check."""
    tasks = [
        CopyingTask(seq_len=5, train_size=20, val_size=10, test_size=10, batch_size=10, eval_batch_size=10),
        CopyingTask(seq_len=5, val_size=10, test_size=10, batch_size=10, eval_batch_size=10, fresh_batches=True),
        AddingTask(seq_len=5, train_size=20, val_size=10, test_size=10, batch_size=10, eval_batch_size=10),
    ]
    for task in tasks:
        for stage in ("fit", "validate", "test", "predict"):
            check_task(task, stage)
    assert [sorted(task._splits) for task in tasks] == [["test", "val"], ["test", "val"], ["test", "train", "val"]]


class StreamedTraining(Coin):
    """Training batches streamed by a loader of the task's own: no training split to build."""

    def train_dataloader(self):
        return [(torch.randn(10, self.seq_len, 1), torch.zeros(10, dtype=torch.long))]

    def make_split(self, split):
        if split == "train":
            raise NotImplementedError
        return super().make_split(split)


def test_a_split_served_by_a_loader_of_the_tasks_own_is_left_to_it():
    assert splits_checked(StreamedTraining(), "fit") == ["val"]
    check_task(StreamedTraining(), "fit")  # no "does not define make_split"
    assert splits_checked(Coin(), "predict", "train") == ["train"] and splits_checked(Coin(), None) == []


def test_a_padded_batch_with_a_per_step_real_target_and_its_mask_passes():
    spec = TaskSpec(name="frames", input_size=3, output_size=3, readout="every_step", loss="frame_mse")
    inputs, mask = torch.zeros(2, 4, 3), torch.tensor([[True] * 4, [True, True, False, False]])
    check_batch((inputs, torch.zeros(2, 4, 3), mask), spec, "frames")
    with pytest.raises(ConfigError, match=re.escape("the targets are torch.float32 (2, 4, 2)")):
        check_batch((inputs, torch.zeros(2, 4, 2), mask), spec, "frames")
    with pytest.raises(ConfigError, match=re.escape("the inputs are torch.int64 (2, 4, 3)")):
        check_batch((inputs.long(), torch.zeros(2, 4, 3), mask), spec, "frames")


def test_symbol_ids_beyond_the_vocabulary_name_the_size_that_holds_them():
    spec = TaskSpec(name="ids", input_size=5, output_size=5, readout="every_step", loss="cross_entropy", symbolic=True)
    with pytest.raises(ConfigError, match=re.escape("the input ids run from 0 to 7; the TaskSpec expects ids in 0..4")):
        check_batch((torch.tensor([[0, 7]]), torch.tensor([[0, 1]])), spec, "ids")
    with pytest.raises(ConfigError, match=re.escape("set symbolic = False for real inputs")):
        check_batch((torch.zeros(1, 2, 5), torch.tensor([[0, 1]])), spec, "ids")


def test_ids_out_of_range_past_the_first_batch_are_found_at_the_steps_the_mask_keeps():
    """The first batch held two sequences; an id further into a split reached torch's embedding or cross_entropy as
    an index error mid-training (left alone in stop 79). Padding beyond the mask may hold any id."""
    spec = TaskSpec(name="ids", input_size=5, output_size=5, readout="every_step", loss="cross_entropy", symbolic=True)
    ids = torch.zeros(30, 4, dtype=torch.long)
    mask = torch.ones(30, 4, dtype=torch.bool)
    ids[20, 3], mask[20, 3] = -1, False  # a pad id at a masked step: not the model's to read
    check_id_ranges(TensorDataset(ids, ids.clone(), mask), spec, "ids")
    ids[25, 1] = 9
    late = "run from 0 to 9 (1 out of range, first in sequence 25); the TaskSpec expects ids in 0..4"
    with pytest.raises(ConfigError, match=re.escape("the input ids " + late)):
        check_id_ranges(TensorDataset(ids, torch.zeros(30, 4, dtype=torch.long), mask), spec, "ids")
    with pytest.raises(ConfigError, match=re.escape("the target classes " + late)):
        check_id_ranges(TensorDataset(torch.zeros(30, 4, dtype=torch.long), ids, mask), spec, "ids")
    real = TaskSpec(name="values", input_size=1, output_size=1, readout="last_step", loss="mse")
    check_id_ranges(TensorDataset(torch.zeros(30, 4, 1), torch.full((30, 1), 9.0)), real, "values")  # no ids to check


def test_a_mistyped_name_of_ones_own_task_is_answered_with_its_class_path(tmp_path, monkeypatch, capsys):
    (tmp_path / "mytasks.py").write_text(_docs_example())
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("ORTHOLAB_CONFIG_MODULES", "mytasks")
    monkeypatch.chdir(tmp_path)
    try:
        for given, meant in (
            ("sign_of_sun", "sign_of_sum (mytasks.SignOfSum)"),
            ("mytasks.SignOfSun", "mytasks.SignOfSum"),
        ):
            with pytest.raises(SystemExit) as exit_info:
                main(["fit", "--data", given, "--db", f"sqlite:///{tmp_path / 'runs.db'}"])
            err = capsys.readouterr().err
            assert exit_info.value.code == 2 and f"did you mean {meant}?" in err, err
    finally:
        TASKS.pop("sign_of_sum", None)  # registered by importing the module in this process


class SequenceCrossEntropy(CrossEntropy):
    """A classification loss of one's own, registered in OBJECTIVES by its name."""


class ForgetfulAccuracy(CrossEntropy):
    """Declares its accuracy in metrics() and never updates it (the Objective docs' update() left out)."""

    def update(self, metrics, outputs, targets, mask=None):
        pass


class OwnClasses(Coin):
    def __init__(self, batch_size: int = 10):
        super().__init__(batch_size=batch_size, loss="sequence_cross_entropy")


class ForgetfulTask(Coin):
    def __init__(self, batch_size: int = 10):
        super().__init__(batch_size=batch_size, loss="forgetful_accuracy")


def _fit_with_objective(tmp_path, monkeypatch, loss: str, objective, task: str) -> str:
    """`objective` registered as `loss` for this test, then 4 steps of test_own_task.<task>, validated every 2; the
    store's URL."""
    monkeypatch.setitem(OBJECTIVES, loss, objective)
    monkeypatch.setenv("ORTHOLAB_CONFIG_MODULES", "test_own_task")
    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    steps = ["--trainer.max_steps", "4", "--trainer.val_check_interval", "2"]
    main(["fit", "--data", f"test_own_task.{task}", "--model.hidden_size", "8", "--db", db, *steps])
    return db


def test_a_classification_objective_of_ones_own_takes_class_ids_and_predicts_class_scores(
    tmp_path, monkeypatch, capsys
):
    """Review: the target check and `predict` knew the classifiers by their names, so a new one with
    `classes = True` was refused ('the targets are torch.int64 ... expects real values') and predicted raw logits."""
    db = _fit_with_objective(tmp_path, monkeypatch, "sequence_cross_entropy", SequenceCrossEntropy, "OwnClasses")
    (run,) = Store(db).list_runs()
    assert run.status == "finished" and run.best is not None
    main(["predict", "--run", str(run.id), "--db", db])
    (path,) = list(tmp_path.rglob("predictions*.npz"))
    arrays = np.load(path)
    assert str(arrays["kind"]) == "class_scores" and "predicted_class" in arrays
    assert np.allclose(arrays["predictions"].sum(axis=-1), 1, atol=roundoff(torch.float32, 2))  # softmax rows


def test_a_main_metric_the_objective_never_updates_is_said_after_the_fit(tmp_path, monkeypatch, capsys):
    """Review: validation ran, yet the fit said 'No validation ran in its 20 steps' and blamed val_check_interval."""
    _fit_with_objective(tmp_path, monkeypatch, "forgetful_accuracy", ForgetfulAccuracy, "ForgetfulTask")
    said = capsys.readouterr().out
    assert "No validation ran" not in said
    assert "Validation ran, but the main metric val/acc was never logged" in said and "update()" in said


class MisspeltLoss(Coin):
    def __init__(self, batch_size: int = 10):
        super().__init__(batch_size=batch_size, loss="cross_entropi")


def test_a_loss_no_objective_provides_is_one_line_naming_register_objective(tmp_path, monkeypatch, capsys):
    line = _fit_fails(tmp_path, monkeypatch, capsys, "MisspeltLoss")
    expected = "task 'coin' asks for loss 'cross_entropi', which no registered objective provides; did you mean "
    assert expected in line and "register_objective in a module named by $ORTHOLAB_CONFIG_MODULES" in line, line


def test_register_objective_refuses_a_taken_name_or_a_class_that_is_not_an_objective():
    with pytest.raises(ValueError, match="name 'mse' is OrthoLab's MeanSquaredError already"):
        register_objective("mse", CrossEntropy)
    for name in ("mean abs", "", 3):
        with pytest.raises(ValueError, match="name must be a short identifier"):
            register_objective(name, CrossEntropy)
    spec = TaskSpec(name="t", input_size=1, output_size=2, readout="last_step", loss="cross_entropy")
    for cls in (torch.nn.L1Loss, CrossEntropy(spec), "CrossEntropy"):
        with pytest.raises(TypeError, match="cls must be a subclass of ortholab.training.objectives.Objective"):
            register_objective("mae", cls)
    register_objective("mse", MeanSquaredError)  # the same class again: nothing changes, as register_task
    assert "mae" not in OBJECTIVES and OBJECTIVES["mse"] is MeanSquaredError


MEAN_OF_STEPS = """
import torch

from ortholab.datamodules import TaskDataModule, TaskSpec, register_task


class MeanOfSteps(TaskDataModule):
    def __init__(self, batch_size: int = 10):
        super().__init__(batch_size)
        self.spec = TaskSpec(
            name="mean_of_steps", input_size=1, output_size=1, readout="last_step", loss="mean_abs_error",
            main_metric="val/mae",
        )

    def make_split(self, split):
        inputs = torch.randn(20, 6, 1, generator=torch.Generator().manual_seed(len(split)))
        return inputs, inputs.mean(dim=1)


register_task("mean_of_steps", MeanOfSteps)
"""


def test_a_loss_of_ones_own_registered_in_a_config_module_trains_and_records_its_metric(tmp_path, monkeypatch):
    """docs/tasks.md's objective and a regression task naming its loss, in one $ORTHOLAB_CONFIG_MODULES module: `fit`
    trains on it and the store holds the objective's metric at each validation."""
    (tmp_path / "mylosses.py").write_text(_docs_objective() + MEAN_OF_STEPS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("ORTHOLAB_CONFIG_MODULES", "mylosses")
    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    steps = ["--trainer.max_steps", "4", "--trainer.val_check_interval", "2"]
    try:
        main(["fit", "--data", "mean_of_steps", "--model.hidden_size", "8", "--db", db, *steps])
    finally:  # registered by importing the module in this process
        TASKS.pop("mean_of_steps", None)
        OBJECTIVES.pop("mean_abs_error", None)
        sys.modules.pop("mylosses", None)
    (run,) = Store(db).list_runs()
    points = Store(db).metric_series(run.id, "val/mae")
    assert (run.status, run.steps, run.main_metric) == ("finished", 4, "val/mae")
    assert [p.step for p in points] == [2, 4] and all(p.value > 0 for p in points)
    assert run.best == min(p.value for p in points)
