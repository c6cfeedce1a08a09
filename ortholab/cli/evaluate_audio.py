"""`ortholab evaluate-audio RUN_ID`: score a stored speech run's checkpoint (SegSNR, STOI, PESQ of its
reconstructed audio, ortholab/evaluation/audio.py) and record the scores in that run."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import TYPE_CHECKING

from ortholab.cli.common import DB_HELP
from ortholab.errors import ConfigError

if TYPE_CHECKING:
    from ortholab.datamodules.speech import SpeechPrediction

USAGE = "evaluate-audio RUN_ID [--split val|test] [--utterances N] [--checkpoint best|last|PATH]"
HELP = "SegSNR, STOI and PESQ of a speech run's reconstructions, recorded in the run"


def add_arguments(parser) -> None:
    parser.add_argument("run_id", type=int)
    parser.add_argument("--db", default=None, help=DB_HELP)
    parser.add_argument("--split", choices=["val", "test"], default="val")
    parser.add_argument("--utterances", type=int, default=16, help="how many utterances to score (in order)")
    parser.add_argument("--clips", type=int, default=3, help="how many of them to store as audio clips")
    parser.add_argument(
        "--checkpoint", default=None, help="'best' (default; 'last' for a run that kept none), 'last' or a path"
    )
    parser.add_argument("--method", choices=["true_phase", "griffin_lim"], default="true_phase")


def run(args, extra: list[str]) -> None:
    report = evaluate_run(
        args.db,
        args.run_id,
        split=args.split,
        utterances=args.utterances,
        clips=args.clips,
        checkpoint=args.checkpoint,
        method=args.method,
    )
    print(report.summary())


def load_checkpoint(path: Path) -> dict:
    """A checkpoint's contents, read with `weights_only=True` (tensors and plain containers only: a crafted file
    cannot run code); a file that is not an OrthoLab checkpoint is one ConfigError naming it."""
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # unpickling refused, not a zip archive, truncated: the same user error
        if isinstance(err, pickle.UnpicklingError):
            reason = "it holds Python objects other than tensors and plain values; they were refused, not run"
        else:
            reason = f"{err.__class__.__name__}: {' '.join(str(err).split())[:120]}"
        raise ConfigError(
            f"--checkpoint {path}: cannot be read as a checkpoint of weights ({reason}); give a .ckpt "
            f"file written by `ortholab fit` (--checkpoint best or last)"
        ) from None
    if not isinstance(state, dict) or not {"state_dict", "hyper_parameters"} <= set(state):
        raise ConfigError(
            f"--checkpoint {path}: not a checkpoint written by `ortholab fit` (no state_dict and "
            f"hyper_parameters); use --checkpoint best or last"
        )
    return state


def _datamodule_from_config(config: dict, run_id: int) -> SpeechPrediction:
    import importlib

    from ortholab.datamodules.speech import SpeechPrediction

    data = (config or {}).get("data") or {}
    class_path = data.get("class_path", "")
    module_name, _, class_name = class_path.rpartition(".")
    if module_name:  # the stored config is checked as a config is: nothing outside the allow-list is imported
        from ortholab.aliases import check_class_path

        check_class_path(class_path, f"run {run_id}'s data.class_path")
    cls = getattr(importlib.import_module(module_name), class_name, None) if module_name else None
    if cls is None or not issubclass(cls, SpeechPrediction):
        raise ConfigError(
            f"run {run_id} trained data.class_path = {class_path!r}; audio evaluation needs the speech "
            f"task (datamodules.SpeechPrediction)"
        )
    return cls(**(data.get("init_args") or {}))


def evaluate_run(
    db_url: str | None,
    run_id: int,
    split: str = "val",
    utterances: int | None = 16,
    clips: int = 3,
    checkpoint: str | None = None,
    method: str = "true_phase",
    per_utterance: bool = True,
):
    """`ortholab evaluate-audio RUN_ID`: score a stored speech run's checkpoint on `split` and record the results
    in that run at the checkpoint's training step (see the module docstring for what is recorded)."""
    from ortholab.db import Store
    from ortholab.evaluation.audio import StoreRecorder, best_or_last, checkpoint_of, evaluate_split, record_report
    from ortholab.training.module import RecurrentModule

    if split not in ("val", "test"):
        raise ConfigError(f"--split {split!r}; audio evaluation runs on 'val' or 'test'")
    if utterances is not None and utterances < 1:
        raise ConfigError(f"--utterances {utterances}: give how many utterances to score, 1 or more")
    if clips < 0:
        raise ConfigError(f"--clips {clips}: give how many clips to store, 0 or more")
    store = Store(db_url, access="write")  # records into an existing run: a mistyped --db is never made a store
    run = store.get_run(run_id)  # StoreError naming the id when there is none
    if not run.run_dir:
        raise ConfigError(f"run {run_id} has no run folder recorded, so no checkpoint to evaluate")
    path = checkpoint_of(Path(run.run_dir), checkpoint or best_or_last(Path(run.run_dir)))  # None: best, else last
    state = load_checkpoint(path)  # before any data is read: a file that is not a checkpoint is one line
    datamodule = _datamodule_from_config(run.config, run_id)
    module = RecurrentModule.load_from_checkpoint(path, map_location="cpu", weights_only=True)
    report = evaluate_split(module, datamodule, split, utterances, clips, method)
    record_report(
        report, StoreRecorder(store, run_id, state.get("epoch")), int(state.get("global_step", 0)), per_utterance
    )
    return report
