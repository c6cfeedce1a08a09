"""Audio evaluation of speech models (scoRNN 5.4 after Wisdom et al. 2016): reconstruct waveforms from predicted
log-magnitudes, score them against the original, store the scores and a few clips with the run.

For the first N utterances of a split (in order), the model's predictions and the "copy the input frame" baseline
are turned into waveforms (ortholab/evaluation/reconstruction.py) and scored against the original waveform
(ortholab/evaluation/speech_quality.py). What is recorded, at the training step of the weights evaluated:
- metric points `<split>_audio/<metric>`: the mean over the utterances that could be scored, and
  `<split>_audio/n_failed_<metric>_utterances` how many could not (their reasons are in the scores artifact);
  `<split>_audio/n_utterances`; the baseline's means and counts as `<split>_audio_baseline/<metric>` and
  `<split>_audio_baseline/n_failed_<metric>_utterances` (a mean over other utterances than the model's is flagged);
- per utterance (unless switched off): `<split>_audio/<metric>/<utterance>` and the baseline's
  `<split>_audio_baseline/<metric>/<utterance>`, NaN where the utterance failed;
- an `audio_scores` artifact (JSON): every utterance's scores of both, each failure with its reason;
- `audio` artifacts (WAV, 16-bit PCM, samples written as they are: levels kept, clipped only outside [-1, 1),
  the count of clipped samples in meta) for the first `clips` utterances: roles `reference` (the original),
  `reconstruction` (the model) and `baseline`, each with meta utterance / role / sample_rate and the clip's
  scores.
"""

from __future__ import annotations

import io
import json
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import soundfile
import torch

from ortholab.datamodules.speech import SpeechPrediction
from ortholab.db.artifacts import AUDIO, AUDIO_SCORES
from ortholab.errors import ConfigError
from ortholab.evaluation.reconstruction import METHODS, copy_input_frames, estimated_frames, reconstruct
from ortholab.evaluation.speech_quality import Score, metric_names, score_utterance

JSON_MEDIA_TYPE = "application/json"
WAV_MEDIA_TYPE = "audio/wav"
HEADLINE = ("segsnr_voicebox", "stoi", "pesq_nb_mos_lqo", "pesq_wb_mos_lqo")  # the scoRNN paper's Table 2 metrics
BASELINES = {"next_frame": "copy the previous frame", "previous_frame": "copy the next frame"}


@dataclass
class UtteranceScores:
    name: str
    sources: list[str]
    model: dict[str, Score]
    baseline: dict[str, Score]


@dataclass
class Clip:
    utterance: str
    role: str  # reference | reconstruction | baseline
    waveform: np.ndarray
    scores: dict[str, Score] = field(default_factory=dict)


@dataclass
class AudioReport:
    split: str
    sample_rate: int
    method: str
    baseline: str  # what the baseline predictor does
    utterances: list[UtteranceScores]
    clips: list[Clip]

    @property
    def metrics(self) -> tuple[str, ...]:
        return metric_names(self.sample_rate)

    def mean(self, metric: str, who: str = "model") -> tuple[float | None, int]:
        """(mean over the utterances that were scored or None, how many failed)."""
        scores = [getattr(u, who)[metric] for u in self.utterances]
        values = [s.value for s in scores if s.ok]
        return (float(np.mean(values)) if values else None), len(scores) - len(values)

    def metric_points(self, per_utterance: bool = True) -> dict[str, float]:
        points = {f"{self.split}_audio/n_utterances": float(len(self.utterances))}
        for who, prefix in (("model", f"{self.split}_audio"), ("baseline", f"{self.split}_audio_baseline")):
            for metric in self.metrics:
                mean, failed = self.mean(metric, who)
                if mean is not None:
                    points[f"{prefix}/{metric}"] = mean
                points[f"{prefix}/n_failed_{metric}_utterances"] = float(failed)  # its mean is over the rest
                if per_utterance:
                    for u in self.utterances:
                        score = getattr(u, who)[metric]
                        points[f"{prefix}/{metric}/{u.name}"] = score.value if score.ok else math.nan
        return points

    def table(self) -> dict:
        """Everything, as JSON: per utterance the scores of model and baseline and each failure's reason."""

        def values(scores):
            return {m: _json_number(s.value) for m, s in scores.items()}

        def reasons(scores):
            return {m: s.reason for m, s in scores.items() if not s.ok}

        return {
            "split": self.split,
            "sample_rate": self.sample_rate,
            "reconstruction": self.method,
            "baseline": self.baseline,
            "metrics": list(self.metrics),
            "means": {
                who: {m: _json_number(self.mean(m, who)[0]) for m in self.metrics} for who in ("model", "baseline")
            },
            "failed": {who: {m: self.mean(m, who)[1] for m in self.metrics} for who in ("model", "baseline")},
            "utterances": [
                {
                    "utterance": u.name,
                    "sources": u.sources,
                    "model": values(u.model),
                    "baseline": values(u.baseline),
                    "failures": {"model": reasons(u.model), "baseline": reasons(u.baseline)},
                }
                for u in self.utterances
            ],
        }

    def summary(self) -> str:
        def line(who):
            parts = []
            for metric in self.metrics:
                mean, failed = self.mean(metric, who)
                text = "n/a" if mean is None else f"{mean:.3g}"
                parts.append(f"{metric} {text}" + (f" ({failed} failed)" if failed else ""))
            return ", ".join(parts)

        text = (
            f"Audio evaluation on {len(self.utterances)} {self.split} utterances ({self.method.replace('_', ' ')} "
            f"reconstruction): {line('model')}\n  baseline ({self.baseline}): {line('baseline')}"
        )
        reasons = Counter(
            score.reason
            for u in self.utterances
            for who in (u.model, u.baseline)
            for score in who.values()
            if not score.ok
        )
        if reasons:  # each failure's reason is in the audio_scores artifact; the most common one here
            reason, count = reasons.most_common(1)[0]
            text += f"\n  failed scores: {sum(reasons.values())}; the most common reason ({count}): {reason}"
        return text


def _json_number(value: float | None) -> float | None:
    """JSON has no infinity or NaN: those become null (scores record a non-finite value as a reason, not a value)."""
    return value if value is not None and math.isfinite(value) else None


# computing ---------------------------------------------------------------------------------------------------
@torch.no_grad()
def predict(module: torch.nn.Module, datamodule: SpeechPrediction, split: str, count: int) -> list[torch.Tensor]:
    """The model's outputs at the valid steps of the split's first `count` utterances, (T_i - 1, bins) each (with
    `predict_padding`, the prediction of the padding after the last frame is left out: it is no frame to hear)."""
    data = datamodule.dataset(split)
    was_training = module.training
    module.eval()
    weight = next(p for p in module.parameters() if p.is_floating_point())
    outputs = []
    try:
        for first in range(0, count, datamodule.eval_batch_size):
            inputs, _, mask = data.batch(range(first, min(first + datamodule.eval_batch_size, count)))
            predicted = module(inputs.to(weight.device, weight.dtype)).float().cpu()  # a 64-true model's float64
            outputs += [p[: int(m.sum()) - datamodule.predict_padding] for p, m in zip(predicted, mask, strict=True)]
    finally:
        module.train(was_training)
    return outputs


def evaluate_split(
    module: torch.nn.Module,
    datamodule: SpeechPrediction,
    split: str = "val",
    utterances: int | None = 16,
    clips: int = 3,
    method: str = "true_phase",
) -> AudioReport:
    """Reconstruct and score the first `utterances` (None: all) of `split`; keep `clips` of them as audio."""
    if method not in METHODS:
        raise ConfigError(f"audio evaluation method {method!r}; choose one of {list(METHODS)}")
    speech = datamodule.speech(split)
    count = len(speech) if utterances is None else min(utterances, len(speech))
    fs = speech.sample_rate
    report = AudioReport(split, fs, method, BASELINES[datamodule.target], [], [])
    for index, predicted in enumerate(predict(module, datamodule, split, count)):
        true, waveform = speech.frames_of(index), speech.waveform(index)
        estimates = {
            "reconstruction": estimated_frames(true, predicted, datamodule.target),
            "baseline": copy_input_frames(true, datamodule.target),
        }
        audio = {
            role: reconstruct(datamodule.frames, frames, waveform, method).numpy() for role, frames in estimates.items()
        }
        reference = waveform.numpy()
        scores = {role: score_utterance(samples, reference, fs) for role, samples in audio.items()}
        name = speech.names[index]
        report.utterances.append(
            UtteranceScores(name, speech.sources[index], scores["reconstruction"], scores["baseline"])
        )
        if index < clips:
            report.clips += [
                Clip(name, "reference", reference),
                *(Clip(name, role, audio[role], scores[role]) for role in audio),
            ]
    return report


def wav_bytes(waveform: np.ndarray, sample_rate: int) -> tuple[bytes, int]:
    """16-bit PCM WAV of the samples as they are (no normalisation), and how many had to be clipped (samples
    outside [-1, 1), and non-finite ones, written as 0)."""
    top = 32767 / 32768
    clipped = int(np.count_nonzero(~((waveform >= -1.0) & (waveform <= top))))
    samples = np.clip(np.nan_to_num(waveform, nan=0.0, posinf=0.0, neginf=0.0), -1.0, top)
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, sample_rate, format="WAV", subtype="PCM_16")
    return buffer.getvalue(), clipped


# recording ---------------------------------------------------------------------------------------------------
class Recorder(Protocol):
    def metrics(self, values: dict[str, float], step: int) -> None: ...

    def artifact(self, kind: str, name: str, step: int, data: bytes, meta: dict, media_type: str) -> None: ...


class StoreRecorder:
    """Writes straight into a run of the store (for a stored checkpoint, outside training)."""

    def __init__(self, store, run_id: int, epoch: int | None = None):
        self.store, self.run_id, self.epoch = store, run_id, epoch

    def metrics(self, values, step):
        self.store.log_metrics(self.run_id, values, step=step, epoch=self.epoch)

    def artifact(self, kind, name, step, data, meta, media_type):
        self.store.add_artifact(
            self.run_id, kind, name, step=step, epoch=self.epoch, data=data, meta=meta, media_type=media_type
        )


def recorded_names(report: AudioReport, per_utterance: bool = True) -> tuple[set[str], set[str]]:
    """The metric keys and artifact names `record_report` writes for `report`."""
    names = {f"{report.split}/scores"} | {f"{report.split}/{clip.utterance}/{clip.role}" for clip in report.clips}
    return set(report.metric_points(per_utterance)), names


def record_report(report: AudioReport, recorder: Recorder, step: int, per_utterance: bool = True) -> None:
    recorder.metrics(report.metric_points(per_utterance), step)
    table = report.table()
    meta = {
        "split": report.split,
        "utterances": len(report.utterances),
        "reconstruction": report.method,
        "failed": table["failed"],
    }
    recorder.artifact(
        AUDIO_SCORES, f"{report.split}/scores", step, json.dumps(table, allow_nan=False).encode(), meta, JSON_MEDIA_TYPE
    )
    for clip in report.clips:
        data, clipped = wav_bytes(clip.waveform, report.sample_rate)
        meta = {
            "utterance": clip.utterance,
            "role": clip.role,
            "sample_rate": report.sample_rate,
            "split": report.split,
            "reconstruction": report.method,
            "clipped_samples": clipped,
        }
        if clip.role == "baseline":
            meta["baseline"] = report.baseline
        # the headline scores as top-level keys (the dashboard shows them per clip); all of them under "scores"
        meta.update({m: _json_number(s.value) for m, s in clip.scores.items() if m in HEADLINE and s.ok})
        if clip.scores:
            meta["scores"] = {m: _json_number(s.value) for m, s in clip.scores.items()}
            meta["failures"] = {m: s.reason for m, s in clip.scores.items() if not s.ok}
        recorder.artifact(AUDIO, f"{report.split}/{clip.utterance}/{clip.role}", step, data, meta, WAV_MEDIA_TYPE)
