"""Tasks by name. A new task is one file in datamodules/ plus one line here."""
from datamodules.adding import AddingTask
from datamodules.base import TaskDataModule
from datamodules.copying import CopyingTask
from datamodules.spec import TaskSpec

TASKS: dict[str, type[TaskDataModule]] = {
    "copying": CopyingTask,
    "adding": AddingTask,
}

__all__ = ["TASKS", "TaskDataModule", "TaskSpec"]
