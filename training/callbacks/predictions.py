"""The PredictionWriter callback of `ortholab predict` (its shortcuts: ortholab/cli/train.py): a trained model's
predictions on one split, written into the predict run's folder and recorded as a run of stage 'predict' linked to
the run whose checkpoint it used.

    ortholab predict --run 7 [--checkpoint best|last|PATH] [--predict_split test]     # a recorded run
    ortholab predict --config CONFIG --ckpt_path FILE [--predict_split val]          # as LightningCLI

The file `predictions-<split>.npz` (numpy's format) holds, per sequence of the split in order:
- `predictions`: class scores (softmax probabilities) for classification tasks (copying, MNIST, text), with
  `predicted_class`; the probability of each key being on at the next step for music (the next frame); the
  outputs themselves for regression (adding, generation: the samples; speech: the next log-magnitude frames);
- `targets`, and for sequences of different lengths `mask` (valid steps), padded with zeros to the longest;
- for speech on val/test, `audio/<index>_<utterance>.wav` beside it: the reconstruction of the predicted frames
  with the true phase (ortholab/evaluation/reconstruction.py), 16-bit PCM at the task's sample rate.
The predict run's info holds {source_run, checkpoint, split, predictions, sequences}.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import torch
from lightning.pytorch import Callback

from ortholab.errors import ConfigError
from ortholab.training.objectives import OBJECTIVES, Objective

PREDICT_SPLITS = ("train", "val", "test")


def check_predict_split(split: object) -> None:
    """--predict_split names one of PREDICT_SPLITS (None: the default, test); ConfigError otherwise."""
    if split is not None and split not in PREDICT_SPLITS:
        raise ConfigError(f"--predict_split {split!r}: give {', '.join(PREDICT_SPLITS[:-1])} or {PREDICT_SPLITS[-1]}")


def objective_of(loss: str) -> type[Objective]:
    """The objective of a recorded run's loss name (a loss no longer known: its outputs as they are)."""
    return OBJECTIVES.get(loss, Objective)


def predictions_of(outputs: torch.Tensor, loss: str) -> torch.Tensor:
    """What the loss's objective records (class scores, key probabilities or the outputs as they are)."""
    return objective_of(loss).predictions(outputs)


def _padded(pieces: list[torch.Tensor]) -> np.ndarray:
    """Batches (B, T_b, ...) joined along the batch, zero-padded to the longest T (or stacked when all agree)."""
    if pieces[0].dim() < 2 or all(p.shape[1:] == pieces[0].shape[1:] for p in pieces):
        return torch.cat(pieces).numpy()
    longest = max(p.shape[1] for p in pieces)
    return torch.cat(
        [torch.nn.functional.pad(p, (0, 0) * (p.dim() - 2) + (0, longest - p.shape[1])) for p in pieces]
    ).numpy()


def assemble(batches: list[dict], loss: str) -> dict[str, np.ndarray]:
    """The arrays of the predictions file from the predict steps' outputs, in the split's order."""
    arrays = {
        "predictions": _padded([predictions_of(b["outputs"], loss) for b in batches]),
        "targets": _padded([b["targets"] for b in batches]),
    }
    if batches[0].get("mask") is not None:
        arrays["mask"] = _padded([b["mask"] for b in batches])
    if objective_of(loss).classes:
        arrays["predicted_class"] = arrays["predictions"].argmax(axis=-1)
    arrays["kind"] = np.array(objective_of(loss).prediction_kind)
    return arrays


def write_npz(path: Path, arrays: dict[str, np.ndarray]) -> Path:
    """np.savez into a temporary file beside `path`, renamed once complete."""
    part = path.with_name(path.name + ".part")
    try:
        with open(part, "wb") as stream:
            np.savez(stream, **arrays)
        os.replace(part, path)
    except OSError as err:
        part.unlink(missing_ok=True)  # no half-written file left behind
        if err.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        raise ConfigError(
            f"no space left on the device writing {path} ({err.strerror}); nothing was written there "
            f"and the runs already recorded are kept; free space (or give --runs_dir on another disk) "
            f"and run `ortholab predict` again"
        ) from None
    return path


def write_speech_audio(folder: Path, datamodule, split: str, arrays: dict[str, np.ndarray]) -> int:
    """The predicted frames of every utterance as a waveform (true phase), one WAV each; how many were written."""
    from ortholab.datamodules.speech import EVALUATION_SPLITS
    from ortholab.evaluation.audio import wav_bytes
    from ortholab.evaluation.reconstruction import estimated_frames, reconstruct

    if split not in EVALUATION_SPLITS:
        return 0  # the training split keeps no waveforms, so there is no phase to reconstruct with
    speech = datamodule.speech(split)
    folder.mkdir(parents=True, exist_ok=True)
    for index, (values, mask) in enumerate(zip(arrays["predictions"], arrays["mask"], strict=True)):
        predicted = torch.from_numpy(values[: int(mask.sum()) - datamodule.predict_padding])  # no padding's frame
        frames = estimated_frames(speech.frames_of(index), predicted, datamodule.target)
        waveform = reconstruct(datamodule.frames, frames, speech.waveform(index)).numpy()
        data, _ = wav_bytes(waveform, speech.sample_rate)
        (folder / f"{index:04d}_{speech.names[index]}.wav").write_bytes(data)
    return len(arrays["predictions"])


def source_run_of(store, checkpoint: str) -> int | None:
    """The recorded run whose folder holds `checkpoint` (<runs_dir>/<name>/<run id>/checkpoints/x.ckpt), or None."""
    from ortholab.db import StoreError

    run_dir = Path(checkpoint).resolve().parent.parent
    if not run_dir.name.isdigit():
        return None
    try:
        run = store.get_run(int(run_dir.name))
    except StoreError:
        return None
    return run.id if run.run_dir and Path(run.run_dir).resolve() == run_dir else None


class PredictionWriter(Callback):
    """Collects the predict steps' outputs, writes the predictions file into the run folder, records the link."""

    def __init__(self, split: str, checkpoint: str | None):
        check_predict_split(split)
        self.split, self.checkpoint = split, checkpoint
        self.batches: list[dict] = []
        self.path: Path | None = None

    def on_predict_start(self, trainer, pl_module) -> None:
        self.batches = []

    def on_predict_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        self.batches.append({k: v.detach().cpu() if isinstance(v, torch.Tensor) else v for k, v in outputs.items()})

    def on_predict_end(self, trainer, pl_module) -> None:
        logger = trainer.loggers[0] if trainer.loggers else None
        if not trainer.is_global_zero or logger is None or not hasattr(logger, "describe_run"):
            return
        folder = Path(logger.log_dir)
        folder.mkdir(parents=True, exist_ok=True)
        arrays = assemble(self.batches, pl_module.spec.loss)
        self.path = write_npz(folder / f"predictions-{self.split}.npz", arrays)
        link = {
            "source_run": source_run_of(logger.store, self.checkpoint) if self.checkpoint else None,
            "checkpoint": str(Path(self.checkpoint).resolve()) if self.checkpoint else None,
            "split": self.split,
            "predictions": str(self.path.resolve()),
            "sequences": len(arrays["predictions"]),
        }
        if pl_module.spec.name == "speech":
            link["audio_files"] = write_speech_audio(folder / "audio", trainer.datamodule, self.split, arrays)
        info = logger.store.get_run(logger.run_id).info or {}
        logger.describe_run(info={**info, "predict": link})
