"""`ortholab evaluate-audio RUN_ID`: score a stored speech run's checkpoint (SegSNR, STOI, PESQ of its
reconstructed audio, ortholab/evaluation/audio.py) and record the scores in that run."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import TYPE_CHECKING

from ortholab.cli.common import DB_HELP
from ortholab.command_name import as_typed
from ortholab.errors import ConfigError

if TYPE_CHECKING:
    from ortholab.datamodules.speech import SpeechPrediction

USAGE = (
    "evaluate-audio RUN_ID|--run ID [--split val|test] [--utterances N] [--checkpoint best|last|PATH] [--replace] "
    "[--data.path DIR]"
)
HELP = "SegSNR, STOI and PESQ of a speech run's reconstructions, recorded in the run"


def add_arguments(parser) -> None:
    parser.add_argument("run_id", type=int, nargs="?", help="the speech run to score (or --run ID)")
    parser.add_argument(
        "--run", type=int, default=None, help="the same as RUN_ID, as `ortholab predict --run` takes it"
    )
    parser.add_argument("--db", default=None, help=DB_HELP)
    parser.add_argument("--split", choices=["val", "test"], default="val", help="the split to score (default: val)")
    parser.add_argument(
        "--utterances",
        type=int,
        default=None,
        help="how many utterances to score (in order); default: as many as the run's own AudioEvaluation, else 16",
    )
    parser.add_argument(
        "--clips",
        type=int,
        default=None,
        help="how many of them to store as audio clips; default: as many as the run's own AudioEvaluation, else 3",
    )
    parser.add_argument(
        "--checkpoint",
        default=None,
        help="'best' (default; 'last' for a run that kept none), 'last', a file in its checkpoints/ or a path",
    )
    parser.add_argument(
        "--method",
        choices=["true_phase", "griffin_lim"],
        default="true_phase",
        help="waveform from the predicted magnitudes with the reference's phase (default) or by Griffin-Lim",
    )
    parser.add_argument(
        "--data.path",
        dest="data_path",
        default=None,
        help="the corpus's folder where it is now, if it moved since the run trained (TIMIT's folder holding TRAIN/ "
        "and TEST/, FSDD's recordings/); default: the run's own data.path",
    )
    parser.add_argument(
        "--replace",
        action="store_true",
        help="record the scores in place of those the run already holds for the split at the checkpoint's step",
    )


def run(args, extra: list[str]) -> None:
    if (args.run_id is None) == (args.run is None):
        raise ConfigError(
            "evaluate-audio: give one run id, e.g. `ortholab evaluate-audio 6` (or --run 6; `ortholab runs` lists them)"
        )
    run_id = args.run if args.run_id is None else args.run_id
    report = evaluate_run(
        args.db,
        run_id,
        split=args.split,
        utterances=args.utterances,
        clips=args.clips,
        checkpoint=args.checkpoint,
        method=args.method,
        replace=args.replace,
        data_path=args.data_path,
    )
    print(report.summary())
    print(
        as_typed(
            f"recorded in run {run_id} (`ortholab runs show {run_id}`; the dashboard's Audio page plays its clips)"
        )
    )


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


def _datamodule_from_config(config: dict, run_id: int, data_path: str | None = None) -> SpeechPrediction:
    from ortholab.aliases import config_class
    from ortholab.datamodules.speech import SpeechPrediction

    data = (config or {}).get("data") or {}
    class_path = data.get("class_path", "")
    cls = config_class(str(class_path), f"run {run_id}'s data.class_path")  # nothing outside the allow-list imported
    if cls is None or not issubclass(cls, SpeechPrediction):
        raise ConfigError(
            f"run {run_id} trained data.class_path = {class_path!r}; audio evaluation needs the speech "
            f"task (datamodules.SpeechPrediction)"
        )
    init_args = dict(data.get("init_args") or {})  # a recorded config's cache_dir is absolute (RecordConfig)
    if data_path is not None:  # the corpus moved since the run trained: the features are the same
        init_args["path"] = data_path
    return cls(**init_args)


DEFAULTS = {"utterances": 16, "clips": 3, "per_utterance": True}  # AudioEvaluation's (training/callbacks/audio.py)


def evaluate_run(
    db_url: str | None,
    run_id: int,
    split: str = "val",
    utterances: int | None = None,
    clips: int | None = None,
    checkpoint: str | None = None,
    method: str = "true_phase",
    per_utterance: bool | None = None,
    replace: bool = False,
    data_path: str | None = None,
):
    """`ortholab evaluate-audio RUN_ID`: score a stored speech run's checkpoint on `split` and record the results
    in that run at the checkpoint's training step (see the module docstring for what is recorded). `utterances`,
    `clips` and `per_utterance` None: as the run's own AudioEvaluation has them (else 16, 3 and True), so that a
    run whose callback kept per-utterance points out of the store (`per_utterance: false`) gets none here. Scores
    the run already holds for `split` at that step are a ConfigError unless `replace`: the fit's own are never lost
    to a re-evaluation by mistake. `data_path`: the corpus's folder in place of the run's data.path (it moved)."""
    from ortholab.db import Store
    from ortholab.db.artifacts import AUDIO, AUDIO_SCORES
    from ortholab.evaluation.audio import (
        StoreRecorder,
        evaluate_split,
        record_report,
        recorded_names,
    )
    from ortholab.training.checkpoint_choice import best_or_last, run_checkpoint
    from ortholab.training.module import RecurrentModule

    if split not in ("val", "test"):
        raise ConfigError(f"--split {split!r}; audio evaluation runs on 'val' or 'test'")
    if utterances is not None and utterances < 1:
        raise ConfigError(f"--utterances {utterances}: give how many utterances to score, 1 or more")
    if clips is not None and clips < 0:
        raise ConfigError(f"--clips {clips}: give how many clips to store, 0 or more")
    store = Store(db_url, access="write")  # records into an existing run: a mistyped --db is never made a store
    run = store.get_run(run_id)  # StoreError naming the id when there is none
    if not run.run_dir:
        raise ConfigError(f"run {run_id} has no run folder recorded, so no checkpoint to evaluate")
    try:  # None: best, else last
        chosen = checkpoint or best_or_last(run.run_dir)
        path = run_checkpoint(run_id, run.run_dir, chosen, flag="--checkpoint", default=not checkpoint)
    except ValueError as error:  # what the run holds, in the command line's words
        raise ConfigError(str(error)) from None
    state = load_checkpoint(path)  # before any data is read: a file that is not a checkpoint is one line
    step = int(state.get("global_step", 0))
    if not replace:
        refuse_recorded_scores(store, run_id, split, step)
    configured = configured_evaluation(run.config)
    utterances = configured["utterances"] if utterances is None else utterances
    clips = configured["clips"] if clips is None else clips
    per_utterance = configured["per_utterance"] if per_utterance is None else per_utterance
    datamodule = _datamodule_from_config(run.config, run_id, data_path)
    try:
        datamodule.check_data()  # the corpus where the run's data.path (or --data.path) says, before the model loads
    except ConfigError as error:  # a folder named that is not there: perhaps moved since (a data-root FSDD has none)
        folder = getattr(datamodule, "path", None)
        if folder is None or Path(folder).is_dir():
            raise
        given = "--data.path" if data_path is not None else f"run {run_id}'s data.path"
        raise ConfigError(f"{error} (evaluate-audio reads {given}; give --data.path DIR where it is now)") from None
    module = RecurrentModule.load_from_checkpoint(path, map_location="cpu", weights_only=True)
    report = evaluate_split(module, datamodule, split, utterances, clips, method)
    record_report(report, StoreRecorder(store, run_id, state.get("epoch")), step, per_utterance)  # replaces alike
    if replace:  # then what the earlier evaluation held beyond these (utterances and clips not scored now) goes
        keys, names = recorded_names(report, per_utterance)
        prefixes = [f"{split}_audio/", f"{split}_audio_baseline/"]
        store.remove_at_step(
            run_id, step, prefixes, (AUDIO, AUDIO_SCORES), name_prefix=f"{split}/", keep_keys=keys, keep_names=names
        )
    return report


def refuse_recorded_scores(store, run_id: int, split: str, step: int) -> None:
    """A ConfigError when the run holds `split`'s audio scores at `step` (recording again would replace them)."""
    key = f"{split}_audio/n_utterances"
    held = [point for point in store.metric_series(run_id, key) if point.step == step]
    if held:
        raise ConfigError(
            f"run {run_id} already holds its {split} audio scores at step {step} ({held[0].value:.0f} utterances); "
            f"add --replace to record these in their place (the earlier ones are then gone), or score another "
            f"checkpoint or split (--checkpoint, --split)"
        )


def configured_evaluation(config: dict | None) -> dict:
    """The run's own AudioEvaluation's utterances (None: all), clips and per_utterance, each defaulting to the
    callback's own default (DEFAULTS) where the run's config has no such callback or leaves the option out."""
    callbacks = ((config or {}).get("trainer") or {}).get("callbacks") or []
    for callback in callbacks if isinstance(callbacks, list) else []:
        if isinstance(callback, dict) and str(callback.get("class_path", "")).endswith("AudioEvaluation"):
            init_args = callback.get("init_args") or {}
            return {name: init_args.get(name, default) for name, default in DEFAULTS.items()}
    return dict(DEFAULTS)
