"""Tasks by name. A new task is one file in datamodules/ plus one line here."""
from datamodules.adding import AddingTask
from datamodules.base import TaskDataModule
from datamodules.copying import CopyingTask
from datamodules.generation import SequenceGeneration
from datamodules.mnist import PixelMNIST
from datamodules.music import PolyphonicMusic
from datamodules.spec import TaskSpec
from datamodules.speech import SpeechPrediction
from datamodules.text import CharText

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
