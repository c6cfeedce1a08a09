"""Audio evaluation of speech runs at the end of `fit` (on the validation split) and of `test` (on the test split).

See ortholab/evaluation/audio.py for what is reconstructed, scored and recorded. Runs on global rank zero only, with
the weights the model has at that moment (after fit: the last ones), recorded at the trainer's global step.
Every run gets one (training/callbacks/__init__.py), which skips tasks other than speech; one a user puts in
`trainer.callbacks` for another task is refused before training (it would record nothing). Skipped when training was
stopped by a signal (the job is being preempted). PESQ and STOI (the `speech` extra) are required only when the
callback meets a speech task: a bare install trains the others.
"""

from __future__ import annotations

from lightning.pytorch import Callback

from ortholab.datamodules.speech import SpeechPrediction
from ortholab.errors import ConfigError
from ortholab.evaluation.audio import evaluate_split, record_report
from ortholab.evaluation.reconstruction import METHODS
from ortholab.extras import require_extra
from ortholab.training.callbacks.lifecycle import GracefulInterrupt
from ortholab.training.callbacks.record import record_artifact, record_metrics


class TrainerRecorder:
    """Writes through the trainer's loggers (db.SQLLogger stores artifacts; other loggers get the metrics)."""

    def __init__(self, trainer):
        self.trainer = trainer

    def metrics(self, values, step):
        record_metrics(self.trainer, values, step)

    def artifact(self, kind, name, step, data, meta, media_type):
        record_artifact(self.trainer, kind, name, step, data=data, meta=meta, media_type=media_type)


class AudioEvaluation(Callback):
    """utterances: how many of the split's utterances (in order) to score (null: all); clips: how many of them to
    store as audio (reference, reconstruction, baseline); method: 'true_phase' or 'griffin_lim';
    per_utterance: also record each utterance's scores as metric points; after_fit / after_test: when to run."""

    def __init__(
        self,
        utterances: int | None = 16,
        clips: int = 3,
        method: str = "true_phase",
        per_utterance: bool = True,
        after_fit: bool = True,
        after_test: bool = True,
    ):
        if method not in METHODS:
            raise ConfigError(f"AudioEvaluation method {method!r}; choose one of {list(METHODS)}")
        if utterances is not None and utterances < 1:
            raise ConfigError(f"AudioEvaluation utterances = {utterances}; give 1 or more (null: all)")
        self.utterances, self.clips, self.method = utterances, clips, method
        self.per_utterance, self.after_fit, self.after_test = per_utterance, after_fit, after_test

    def check_task(self, datamodule, given: bool = False) -> None:
        """Before training: speech without PESQ and STOI installed is refused, and so is another task when the user
        `given` this callback (the instance every run gets skips other tasks)."""
        if given and not isinstance(datamodule, SpeechPrediction):
            kind = type(datamodule)
            ours = kind.__module__.startswith("ortholab.datamodules")  # named as a config names it
            task = f"datamodules.{kind.__name__}" if ours else f"{kind.__module__}.{kind.__name__}"
            task = "no data module" if datamodule is None else task
            raise ConfigError(
                f"trainer.callbacks: AudioEvaluation scores the speech task (datamodules.SpeechPrediction) only, and "
                f"this run trains {task}, where it would record nothing; remove it from trainer.callbacks "
                "(`--trainer.callbacks '[]'` empties a config's list)"
            )
        if isinstance(datamodule, SpeechPrediction):
            require_extra("speech")

    def setup(self, trainer, pl_module, stage: str) -> None:
        self.check_task(trainer.datamodule)  # the CLI checked already; a Trainer built by hand is checked here

    def on_fit_end(self, trainer, pl_module) -> None:
        interrupted = any(isinstance(c, GracefulInterrupt) and c.requested for c in trainer.callbacks)
        if self.after_fit and not interrupted:
            self._evaluate(trainer, pl_module, "val")

    def on_test_end(self, trainer, pl_module) -> None:
        if self.after_test:
            self._evaluate(trainer, pl_module, "test")

    def _evaluate(self, trainer, pl_module, split: str) -> None:
        datamodule = trainer.datamodule
        if not trainer.is_global_zero or not isinstance(datamodule, SpeechPrediction):
            return
        report = evaluate_split(pl_module, datamodule, split, self.utterances, self.clips, self.method)
        record_report(report, TrainerRecorder(trainer), trainer.global_step, self.per_utterance)
        print(report.summary())


__all__ = ["AudioEvaluation", "TrainerRecorder"]
