"""A run's life across interruptions: stamp checkpoints with their run, continue a recorded run after a resume,
stop cleanly on SIGTERM/Ctrl-C."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path
from typing import Any, NamedTuple

import torch
from lightning.pytorch import Callback
from lightning.pytorch.utilities import rank_zero_info

from ortholab.db.logger import STAMP_KEY
from ortholab.db.masking import mask_url
from ortholab.db.store import db_flag
from ortholab.errors import ConfigError
from ortholab.training.callbacks.checkpoint_io import remove_stale_temporaries

# Kept at the checkpoint's step by a resume from an unstamped checkpoint (written before stamps existed): recorded
# before the checkpoint and never again. Fit's evaluations measured its weights; timing closed the step's record.
EVALUATION_PREFIXES = ("val/", "test/", "time/", "memory/")


def evaluation_points(logger, step: int) -> list[tuple[str, Any]]:
    """(key, point) of the metrics a store-backed logger holds at `step` that a legacy resume keeps."""
    store, run_id = logger.store, logger.run_id
    return [
        (key, point)
        for key in store.metric_keys(run_id)
        if key.startswith(EVALUATION_PREFIXES)
        for point in store.metric_series(run_id, key)
        if point.step == step
    ]


def restore_points(logger, points: list[tuple[str, Any]], step: int) -> None:
    """Write back points removed by a truncation, with their epoch and wall time."""
    for key, point in points:
        logger.store.log_metrics(
            logger.run_id, {key: point.value}, step=step, epoch=point.epoch, wall_time=point.wall_time
        )


BEST_CHECKPOINT = re.compile(r"best-step(\d+)(-v\d+)?\.ckpt")  # the CLI's ModelCheckpoint names them so


def remove_abandoned_checkpoints(folder: str, step: int) -> None:
    """A resume from the checkpoint of `step` re-runs what came after it: the best checkpoints the stopped attempt
    wrote after that step go (the resumed run writes its own; the checkpoint's ModelCheckpoint state does not know
    them, so they would stay forever), and so do the temporary files of a write that was killed."""
    remove_stale_temporaries(folder)
    for path in Path(folder).glob("best-step*.ckpt"):
        match = BEST_CHECKPOINT.fullmatch(path.name)
        if match and int(match.group(1)) > step:
            path.unlink(missing_ok=True)


class CheckpointPoint(NamedTuple):
    """How far a checkpoint's run had trained: its `global_step`, and the epochs its fit loop had begun and ended
    (Lightning's epoch_progress `started` and `processed`: one more begun than ended inside an epoch). None where the
    checkpoint holds none."""

    step: int | None
    epochs_begun: int | None = None
    epochs_ended: int | None = None


def fit_loop_epochs(checkpoint: dict) -> tuple[int | None, int | None]:
    """The epochs begun and ended that a checkpoint's fit loop recorded (None, None where it has no such state)."""
    try:
        progress = checkpoint["loops"]["fit_loop"]["epoch_progress"]["current"]
        begun, ended = progress["started"], progress["processed"]
    except (KeyError, TypeError):
        return None, None
    return (begun, ended) if isinstance(begun, int) and isinstance(ended, int) else (None, None)


def check_resume_checkpoint(path: Path, store, run_id: int, run_checkpoints: Path | None = None) -> CheckpointPoint:
    """Before `ortholab fit --resume RUN_ID` changes anything: the checkpoint it would load is readable and, when
    stamped (db.SQLLogger.checkpoint_stamp), was written by that very run of that very store, or of the store its
    runs were copied from (an export's runs.db, db/extract.py); ConfigError in one line otherwise (two stores
    writing into one --runs_dir, a checkpoint copied from another run), offering the checkpoints of
    `run_checkpoints` (the run's own folder; default: the one `path` is in). Returns how far it had trained."""
    import torch

    try:
        if not path.is_file():  # a mistyped --ckpt_path: no FileNotFoundError, nor the .ckpt files beside it offered
            raise FileNotFoundError("no such file" if not path.exists() else "not a file")
        try:
            checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=True)  # tensors stay on disk
        except RuntimeError:  # a file in torch's legacy format cannot be mapped
            checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # truncated, not a checkpoint, unreadable: the same user error
        folder = run_checkpoints or path.parent
        others = sorted(p.name for p in folder.glob("*.ckpt") if p.is_file() and p.resolve() != path.resolve())
        offer = f"one of {', '.join(others)} in {folder}" if others else f"a checkpoint of run {run_id}"
        raise ConfigError(
            f"--resume {run_id}: cannot read the checkpoint {path} ({err.__class__.__name__}: "
            f"{str(err).splitlines()[0] if str(err) else 'no detail'}); pass --ckpt_path with "
            f"{offer}"
        ) from None
    step = checkpoint.get("global_step") if isinstance(checkpoint, dict) else None
    point = CheckpointPoint(step if isinstance(step, int) else None, *fit_loop_epochs(checkpoint))
    stamp = checkpoint.get(STAMP_KEY) if isinstance(checkpoint, dict) else None
    if not isinstance(stamp, dict):
        return point  # written before checkpoints were stamped: nothing to check against
    theirs_store, theirs_run = str(stamp.get("store_id")), stamp.get("run_id")
    if theirs_store in (store.store_id, store.copied_from) and theirs_run == run_id:  # or the store it came from
        return point
    whose = (
        f"run {theirs_run} of this store"
        if theirs_store == store.store_id
        else f"run {theirs_run} of another store (store id {theirs_store[:8]}, this one is {store.store_id[:8]})"
    )
    raise ConfigError(
        f"--resume {run_id}: the checkpoint {path} was written by {whose}, not by run {run_id}; "
        f"resume that run with its own --db, or pass --ckpt_path with a checkpoint of run {run_id}"
    )


class StampCheckpoints(Callback):
    """Every checkpoint carries its logger's stamp (db.SQLLogger.checkpoint_stamp): the store and run that wrote
    it, and how far the run's record went when it was written."""

    def on_save_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        for logger in trainer.loggers:
            stamp = logger.checkpoint_stamp() if hasattr(logger, "checkpoint_stamp") else None
            if stamp is not None:
                checkpoint[STAMP_KEY] = stamp
                return


class NameTheRun(Callback):
    """Say which run a fit records, and where, before it trains: a log cut short (SIGKILL, a closed terminal) still
    names the run to resume. In on_fit_start: after the DDP processes are launched (a forked rank never shares the
    launcher's database connections), before the first step."""

    def on_fit_start(self, trainer, pl_module) -> None:
        logger = trainer.loggers[0] if trainer.loggers else None
        if not trainer.is_global_zero or not hasattr(logger, "run_name"):
            return
        doing = "continues" if logger.resumed else "records"
        where = mask_url(logger.store.url)
        print(f"Run {logger.run_id} ({logger.run_name}) {doing} in {where}; run folder {logger.log_dir}", flush=True)


class ContinueRun(Callback):
    """On a resumed fit: the run's record goes back to what it held when the checkpoint was written, so that the
    re-run steps record their points once, and nothing recorded before the checkpoint is lost.

    With a stamped checkpoint that is exact: points and artifacts of later steps, and those of its step newer than
    its watermark, go (db.Store.rewind_run).
    An unstamped one (older OrthoLab) falls back on steps: what lies at the checkpoint's step or later goes, except
    the evaluation and timing points at that step, recorded before the checkpoint and not repeated.
    """

    def __init__(self):
        self._stamp: dict[str, Any] | None = None

    def on_load_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        self._stamp = checkpoint.get(STAMP_KEY)

    def on_train_start(self, trainer, pl_module) -> None:
        if not trainer.is_global_zero:  # only rank zero writes the store
            return
        for logger in trainer.loggers:
            forgotten = 0
            if self._stamp is not None and hasattr(logger, "continue_after"):
                forgotten = logger.continue_after(self._stamp, trainer.global_step) or 0
            elif hasattr(logger, "continue_from"):
                kept = evaluation_points(logger, trainer.global_step) if hasattr(logger, "store") else []
                forgotten = (logger.continue_from(trainer.global_step) or 0) - len(kept)
                restore_points(logger, kept, trainer.global_step)
            if forgotten:  # training after the checkpoint is lost with the process: say how much is re-run
                rank_zero_info(
                    f"Run {getattr(logger, 'run_id', '')} continues from its checkpoint at step "
                    f"{trainer.global_step}: "
                    + (
                        "the metric point recorded from that step on is removed; training records what an "
                        "uninterrupted run would from there"
                        if forgotten == 1
                        else f"the {forgotten} metric points recorded from that step on are removed; training records "
                        "what an uninterrupted run would from there"
                    )
                )
            folder = getattr(logger, "log_dir", None)
            if folder:
                remove_abandoned_checkpoints(os.path.join(folder, "checkpoints"), trainer.global_step)


# the signals that stop a run with a checkpoint: a scheduler's preemption (SIGTERM; SLURM's `--signal=USR1@90`, which
# Lightning's own handler would answer by saving hpc_ckpt_N.ckpt in the current folder, where the requeued job's new
# run silently loaded it), Ctrl-C
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGUSR1", "SIGINT") if hasattr(signal, name))


class GracefulInterrupt(Callback):
    """SIGTERM or SIGUSR1 (a scheduler's preemption) or a first Ctrl-C stop training at the end of the current batch,
    write `checkpoints/last.ckpt` and leave the run `interrupted`; a second Ctrl-C interrupts at once.

    The checkpoint is written in on_train_batch_end, which Lightning resumes natively (it counts the batch as
    completed on restart; the loaders' state counts batches processed). A request during an epoch's last batch
    waits one batch (once), so the epoch's end (its validation and checkpoint) runs whole and the stop falls inside the
    next epoch. Lightning would also validate because of the stop; unless a validation is due at that step anyway,
    the stop turns it off: the run is already `interrupted`, its resume validates on its own schedule, and the pass
    can take minutes. A validation due at that step runs, and its checkpoints (last.ckpt again, a best-step file if
    it improved) are written after it as at any validation, so the resume neither loses nor repeats it; a second
    Ctrl-C during it leaves the checkpoint written before it. No checkpoint is written at the end of the cut-short
    epoch, which Lightning then ends: it would resume in the next epoch, skipping the rest of this one. The stop stands
    over `trainer.min_steps` and `min_epochs` (Lightning trained on, the run marked `interrupted`, until they were
    met); a resume reads them from the config again."""

    def __init__(self):
        self.requested: str | None = None
        self.stopped_at: int | None = None  # the step training stopped at (None: a request training outran)
        self._waited = False  # the stop waited out an epoch's last batch
        self._previous = {}

    def _request(self, signum, frame) -> None:
        self.requested = signal.Signals(signum).name
        signal.signal(signal.SIGINT, signal.default_int_handler)  # a second Ctrl-C is not graceful

    def on_train_start(self, trainer, pl_module) -> None:
        self.requested, self.stopped_at, self._waited = None, None, False
        connector = getattr(trainer, "_signal_connector", None)  # a SIGTERM that Lightning's own handler heard in
        if getattr(connector, "received_sigterm", False):  # the sanity check's last batch: this stop's, not an
            self.requested, connector.received_sigterm = "SIGTERM", False  # exit 0 from Lightning a batch later
        for sig in STOP_SIGNALS:  # (after Lightning's SLURM handlers, which these replace for the fit)
            try:
                self._previous[sig] = signal.signal(sig, self._request)
            except ValueError:  # not the main thread: leave signals to Lightning
                return

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        requested = self._requested_on_any_rank(trainer, pl_module)  # every rank stops at the same batch
        if requested is None or self.stopped_at is not None:
            return
        self.requested = requested  # a rank not signalled itself names the signal another rank was sent
        if trainer.fit_loop.epoch_loop.batch_progress.is_last_batch and not self._waited:
            self._waited = True  # once: with one batch an epoch every batch is the last
            return
        folder = trainer.loggers[0].log_dir if trainer.loggers else trainer.default_root_dir
        trainer.save_checkpoint(os.path.join(folder, "checkpoints", "last.ckpt"), weights_only=False)
        due = trainer.fit_loop.epoch_loop._should_check_val_fx(trainer.fit_loop._data_fetcher)
        if not due:  # else the validation's own checkpoints follow it (on_train_epoch_end)
            self._no_more_checkpoints(trainer)
        for logger in trainer.loggers:
            if hasattr(logger, "mark_interrupted"):
                where = db_flag(logger.store.url)[0] if hasattr(logger, "store") else ""  # read from the dashboard too
                logger.mark_interrupted(
                    f"{requested} at step {trainer.global_step}; resume with "
                    f"`ortholab fit --resume {getattr(logger, 'run_id', '<run id>')}{where}`"
                )
        if not due:
            trainer.limit_val_batches = 0  # none due now: Lightning would validate for the stop alone (minutes)
        trainer.fit_loop.min_epochs, trainer.fit_loop.epoch_loop.min_steps = None, None  # else Lightning trains on
        trainer.should_stop = True
        self.stopped_at = trainer.global_step

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        if self.stopped_at is not None and self.stopped_at == trainer.global_step:  # before the checkpoint callbacks,
            self._no_more_checkpoints(trainer)  # which Lightning calls last: none writes the cut-short epoch's end

    @staticmethod
    def _no_more_checkpoints(trainer) -> None:
        for callback in trainer.checkpoint_callbacks:  # Lightning's own "already saved at this step"
            callback._last_global_step_saved = trainer.global_step

    def _requested_on_any_rank(self, trainer, pl_module) -> str | None:
        """The signal any rank was sent (the highest number: SIGTERM, then SIGUSR1, then SIGINT), so that a signal to
        one node's processes alone stops them all: rank 0's alone left a SIGTERM to another rank unheard."""
        if trainer.world_size == 1:
            return self.requested
        number = int(getattr(signal, self.requested)) if self.requested else 0
        number = int(trainer.strategy.reduce(torch.tensor(number, device=pl_module.device), reduce_op="max").item())
        return signal.Signals(number).name if number else None

    def teardown(self, trainer, pl_module, stage: str) -> None:
        for sig, handler in self._previous.items():  # only where ours still listens: Lightning's own teardown has
            if signal.getsignal(sig) == self._request:  # put SIGTERM back as the process had it, and the handler
                signal.signal(sig, handler)  # saved here was Lightning's, which ignores SIGTERM once it is done
        self._previous = {}
