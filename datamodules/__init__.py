"""Tasks by name. A new task is one file in datamodules/ plus one line here; a task of your own, outside this package,
is registered with register_task from a module named by $ORTHOLAB_CONFIG_MODULES."""

from ortholab.datamodules.adding import AddingTask
from ortholab.datamodules.base import TaskDataModule
from ortholab.datamodules.copying import CopyingTask
from ortholab.datamodules.generation import SequenceGeneration
from ortholab.datamodules.mnist import PixelMNIST
from ortholab.datamodules.music import PolyphonicMusic
from ortholab.datamodules.spec import TaskSpec
from ortholab.datamodules.speech import SpeechPrediction
from ortholab.datamodules.text import CharText

TASKS: dict[str, type[TaskDataModule]] = {
    "copying": CopyingTask,
    "adding": AddingTask,
    "mnist": PixelMNIST,
    "music": PolyphonicMusic,
    "text": CharText,
    "generation": SequenceGeneration,
    "speech": SpeechPrediction,
}


def register_task(name: str, cls: type[TaskDataModule]) -> None:
    """Train `cls` as `--data name` and list it in `ortholab list tasks`, as OrthoLab's own tasks (call it in a module
    named by $ORTHOLAB_CONFIG_MODULES, which every training and listing command imports first)."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"name must be a short identifier such as 'sign_of_sum', not {name!r}")
    if not (isinstance(cls, type) and issubclass(cls, TaskDataModule)):
        raise TypeError(f"cls must be a subclass of ortholab.datamodules.TaskDataModule, as every task is; got {cls!r}")
    if TASKS.get(name, cls) is not cls:
        raise ValueError(f"name {name!r} is OrthoLab's {TASKS[name].__name__} already; choose another")
    TASKS[name] = cls


def task_class_path(cls: type[TaskDataModule]) -> str:
    """The class path a config names a task by: datamodules.<class> for OrthoLab's, the full path for one's own."""
    own = cls.__module__.startswith("ortholab.datamodules")
    return f"datamodules.{cls.__qualname__}" if own else f"{cls.__module__}.{cls.__qualname__}"


__all__ = ["TASKS", "TaskDataModule", "TaskSpec", "register_task", "task_class_path"]
