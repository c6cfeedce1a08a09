"""Tasks by name. A new task is one file in datamodules/ plus one line here."""

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

__all__ = ["TASKS", "TaskDataModule", "TaskSpec"]
