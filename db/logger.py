"""A Lightning logger that records runs in the run store.

Only global rank zero writes. The store and the run row are created lazily,
so the logger can be built before the trainer and pickled for ddp_spawn.

A run's folder is `root_dir/store-<first 8 hex digits of the store's id>/<name>/<run id>`: inside root_dir whatever
the name, and never shared by two stores that write into one root_dir. The logger holds the run's lease while it
writes (db/lease.py), renewed by a heartbeat thread, and gives it up when the run ends.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
import weakref
from argparse import Namespace
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import Logger
from lightning.pytorch.utilities import rank_zero_only
from lightning.pytorch.utilities.rank_zero import rank_zero_info, rank_zero_warn

from ortholab.db import folder_lock, lease, provenance
from ortholab.db.store import LeaseLost, RunBusy, Store, StoreError, flatten
from ortholab.errors import OrthoLabWarning

OTHER_RANK_VERSION = "pending"  # version on ranks other than zero, which never see the run row
FINAL_STATUS = {"success": "finished", "failed": "failed"}  # Lightning's finalize() words -> run status
# one folder name any file system takes: a letter or digit of any script first (no '..', no hidden folder, no
# option), then no separator, space, control character or character Windows refuses (<>:"|?*)
RUN_NAME = re.compile(r'[^\W_][^\s/\\<>:"|?*\x00-\x1f\x7f-\x9f]{0,99}')
MAX_NAME_BYTES = 255  # a folder name's limit in bytes (UTF-8) on ext4, APFS, NTFS
STORE_FOLDER_DIGITS = 8  # of the store id, in the folder that holds that store's runs
STAMP_KEY = "ortholab"  # a checkpoint's stamp: which store and run wrote it, and how far the run's record went


def is_run_name(name: str) -> bool:
    """Whether `name` can be a run's folder name as it is (RUN_NAME, printable, at most MAX_NAME_BYTES)."""
    return bool(RUN_NAME.fullmatch(name)) and name.isprintable() and len(name.encode()) <= MAX_NAME_BYTES


def folder_name(name: str) -> str:
    """`name` as one folder name: itself when it is a valid run name (RUN_NAME), else a slug of it."""
    if is_run_name(name):
        return name
    return re.sub(r"[^\w.+-]+", "-", name).strip(".-+_")[:100].rstrip(".-+_") or "run"


def runs_folder_of(run_dir: str | Path) -> Path:
    """The runs folder holding a run folder: RUNS/store-ID/NAME/RUN (or RUNS/NAME/RUN of older runs)."""
    path = Path(run_dir)
    return path.parents[2] if path.parents[1].name.startswith("store-") else path.parents[1]


class SQLLogger(Logger):
    """Log hyperparameters, config and metrics of one run to a SQL database.

    Args:
        db_url: database URL or SQLite path; None means `default_db_url()` when first used.
        name: run name; its folder name (`folder_name`) holds the run folders.
        root_dir: where run folders `root_dir/store-<id>/<name>/<run id>` are made.
        tags: free-form labels stored with the run.
        stage: 'fit', 'validate' or 'test'.
        run_id: continue this recorded run (a resume) in its recorded folder, once no live process writes it.
    """

    def __init__(
        self,
        db_url: str | None = None,
        name: str | None = None,
        root_dir: str = "runs",
        tags: Sequence[str] = (),
        stage: str = "fit",
        run_id: int | None = None,
    ):
        super().__init__()
        self._db_url = db_url
        self._name = name or "run"
        self._root_dir = os.fspath(root_dir)
        self._tags = tuple(tags)
        self._stage = stage
        self._store: Store | None = None
        self._run_id: int | None = None
        self._resume_id = run_id  # continue this recorded run instead of creating one
        self._config_logged = False  # log_config stored the full config, which holds every hyperparameter
        self._interrupted = False  # set by mark_interrupted: the run ends `interrupted` whatever finalize says
        self._fallback_step = 0  # step for log_metrics(step=None)
        self._folder: str | None = None  # the run folder, once the run row exists
        self._owner = lease.current_owner().token  # the lease holder: this logger and its pickled copies
        self._refused: str | None = None  # why the run could not be taken (another process writes it)
        self._heartbeat: tuple[threading.Thread, threading.Event] | None = None
        self._resume: dict[str, Any] | None = None  # a resume's record, written once its step is known
        self._folder_lock: str | None = None  # the run folder's lock while this process writes it (folder_lock.py)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_store"] = None  # engines do not pickle; the copy reconnects when used
        state["_heartbeat"] = None  # nor do threads
        state["_folder_lock"] = None  # the process that took the folder holds it
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if self._run_id is not None and rank_zero_only.rank == 0:
            self._claim_again = True  # a copy in another process (ddp_spawn) writes under the same lease

    # ---- identity --------------------------------------------------------------

    @property
    def store(self) -> Store:
        """The run store, opened on first use (under this logger's lease once the run row exists)."""
        if self._store is None:
            self._store = Store(self._db_url)
            if self._run_id is not None and getattr(self, "_claim_again", False):
                self._store.acquire_run(self._run_id, self._owner)
                self._start_heartbeat()
        return self._store

    @property
    def run_id(self) -> int | None:
        """The run's id on rank zero (creating the run row if needed); None on other ranks."""
        if rank_zero_only.rank != 0:
            return None
        if self._refused is not None:
            raise RunBusy(self._refused)
        if self._run_id is None and self._resume_id is not None:
            run = self.store.get_run(self._resume_id)  # StoreError naming the id when there is no such run
            folder = self._resumed_folder(run.id, run.name, run.run_dir)
            try:  # the folder first: a process of another store (a copy of this one) may be writing it
                self._folder_lock = folder_lock.hold(folder, self.store.store_id, run.id, self.store.url)
                self.store.acquire_run(run.id, self._owner)
            except RunBusy as e:
                folder_lock.release(self._folder_lock)
                self._folder_lock, self._refused = None, str(e)
                raise
            self._resume = {"stopped": run.status, **({"reason": run.reason} if run.reason else {})}
            self.store.set_status(run.id, "running", clear_reason=True)  # the stop's reason moves to info.resumes
            self._name = run.name
            self._folder = folder
            self._run_id = run.id
            self._start_heartbeat()
        if self._run_id is None:
            run_id = self.store.create_run(name=self._name, stage=self._stage, tags=self._tags, owner=self._owner)
            self._folder = self._new_folder(run_id)
            os.makedirs(self._folder, exist_ok=True)
            self._folder_lock = folder_lock.hold(self._folder, self.store.store_id, run_id, self.store.url)
            self.store.update_run(run_id, run_dir=os.path.abspath(self._folder))
            self._run_id = run_id
            self._start_heartbeat()
        return self._run_id

    def _new_folder(self, run_id: int) -> str:
        """root_dir/store-<id>/<folder name>/<run id> as an absolute path (checkpoints remember their folder as
        given, and a resume from another working directory must give the same), refused if it leaves root_dir."""
        root = os.path.abspath(self._root_dir)
        store_folder = f"store-{self.store.store_id[:STORE_FOLDER_DIGITS]}"
        folder = os.path.normpath(os.path.join(root, store_folder, folder_name(self._name), str(run_id)))
        if os.path.commonpath([root, folder]) != root:
            raise StoreError(f"The run folder {folder} would lie outside the runs folder {self._root_dir}.")
        return folder

    def _resumed_folder(self, run_id: int, name: str, recorded: str | None) -> str:
        """A resumed run's folder: the recorded one, spelt as its checkpoints remember it (Lightning's
        ModelCheckpoint restores its best and last files only when the folder's path is the same string); runs
        recorded before store folders existed were placed at root_dir/name/id, relative when root_dir was."""
        if not recorded:
            return self._new_folder(run_id)
        legacy = os.path.join(self._root_dir, name, str(run_id))
        return legacy if os.path.abspath(legacy) == os.path.normpath(recorded) else recorded

    @property
    def resumed(self) -> bool:
        """Whether this logger continues a recorded run (`fit --resume ID`) rather than recording a new one."""
        return self._resume_id is not None

    @property
    def run_name(self) -> str:
        """The run's name as recorded (a resumed run's own name)."""
        self.run_id  # noqa: B018 - a resume reads the recorded name when it takes the run
        return self._name

    @property
    def name(self) -> str:
        """The folder name the run folders of this name share (the run's name when it is a valid folder name)."""
        if self._folder is not None:
            return os.path.basename(os.path.dirname(os.path.normpath(self._folder)))
        return folder_name(self._name)

    @property
    def version(self) -> str:
        """The run id as a string on rank zero; a placeholder elsewhere (no database access)."""
        if rank_zero_only.rank != 0:
            return OTHER_RANK_VERSION
        return str(self.run_id)

    @property
    def save_dir(self) -> str:
        """The folder holding this store's run folders (Lightning puts checkpoints in save_dir/name/version)."""
        if rank_zero_only.rank != 0:
            return self._root_dir
        return os.path.dirname(os.path.dirname(os.path.normpath(self.log_dir)))

    @property
    def log_dir(self) -> str:
        """The run folder: root_dir/store-<id>/<name>/<run id>, or the recorded folder of a resumed run."""
        if rank_zero_only.rank != 0:
            return os.path.join(self._root_dir, folder_name(self._name), OTHER_RANK_VERSION)
        self.run_id  # noqa: B018 - the property creates the run (and its folder) on first use
        return self._folder

    # ---- the lease -------------------------------------------------------------

    def _start_heartbeat(self) -> None:
        """Renew the run's lease every lease.HEARTBEAT_S seconds while the run is written (long validations
        included), so that `ortholab fit --resume` refuses it; a daemon thread, stopped by finalize."""
        if self._heartbeat is not None:
            return
        stop = threading.Event()
        store, run_id = self.store, self._run_id

        def beat() -> None:
            while not stop.wait(lease.HEARTBEAT_S):
                try:
                    store.renew(run_id)
                except LeaseLost:
                    return  # the next write from training raises it
                except StoreError:
                    continue  # e.g. the database briefly unreachable: try again at the next beat

        thread = threading.Thread(target=beat, name=f"ortholab-lease-run{run_id}", daemon=True)
        thread.start()
        weakref.finalize(self, stop.set)  # a logger dropped without finalize() stops beating too
        self._heartbeat = (thread, stop)

    def _stop_heartbeat(self) -> None:
        if self._heartbeat is not None:
            thread, stop = self._heartbeat
            stop.set()
            thread.join(timeout=lease.HEARTBEAT_S)
            self._heartbeat = None

    # ---- writing ---------------------------------------------------------------

    @rank_zero_only
    def describe_run(self, **fields: Any) -> None:
        """Set run columns such as family, task, main_metric, main_metric_mode, baseline, parameter_count, info.
        info['code'] (the code starting this process) is added to the code already recorded when it differs, so a
        run resumed by other code lists both, in order."""
        info = fields.get("info")
        if info and "code" in info:
            recorded = self.store.get_run(self.run_id).info or {}
            before = recorded.get("code", [])
            if not before and self._resume_id is not None:  # trained so far by an OrthoLab that did not say
                before = [provenance.UNRECORDED]
            fields["info"] = {**info, "code": before + [c for c in info["code"] if c not in before[-1:]]}
            if recorded.get("command"):  # the command that started the run, not the one that resumed it
                fields["info"]["command"] = recorded["command"]
            for kept in ("resumes", "restores"):  # kept, as the command is (restores: the folders it trained in)
                if recorded.get(kept):
                    fields["info"][kept] = recorded[kept]
        self.store.update_run(self.run_id, **fields)

    @rank_zero_only
    def log_config(self, config: Mapping[str, Any], resolved: Mapping[str, Any] | None = None) -> None:
        """Store the full resolved config on the run and as flattened params; `resolved` (dotted keys) gives the
        params of values the config leaves to the run (model.hidden_size: auto) as the run took them."""
        config = _as_dict(config)
        run_id = self.run_id  # a resume is known once the run is taken
        if self._resume is not None and "changed" not in self._resume:  # against the config before this resume
            before = self.store.get_run(run_id).config or {}
            self._resume["changed"] = config_changes(before, config)
        self.store.update_run(self.run_id, config=config)
        self.store.log_params(self.run_id, {**flatten(config), **(resolved or {})})
        self._config_logged = True

    @rank_zero_only
    def log_hyperparams(self, params: Mapping[str, Any] | Namespace, *args: Any, **kwargs: Any) -> None:
        """Store hyperparameters as params, without private keys such as Lightning CLI's '_instantiator'.
        Skipped when the full config was stored (the CLI does so first): it already holds them, under their
        config keys (model.hidden_size, ...)."""
        if self._config_logged:
            return
        self.store.log_params(self.run_id, _as_dict(params))

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Store scalar metrics at `step`; Lightning's 'epoch' entry becomes the points' epoch."""
        metrics = dict(metrics)
        epoch = metrics.pop("epoch", None)
        if step is None:
            step = self._fallback_step
        self._fallback_step = step + 1
        values = {key: float(value) for key, value in metrics.items()}  # tensors -> float
        epoch = None if epoch is None else int(epoch)
        self.store.log_metrics(self.run_id, values, step=step, epoch=epoch, wall_time=time.time())

    @rank_zero_only
    def log_artifact(
        self,
        kind: str,
        name: str,
        *,
        step: int | None = None,
        epoch: int | None = None,
        data: bytes | None = None,
        meta: Mapping[str, Any] | None = None,
        media_type: str | None = None,
    ) -> None:
        """Store an artifact of the run (kinds and encodings: db/artifacts.py)."""
        self.store.add_artifact(
            self.run_id,
            kind,
            name,
            step=step,
            epoch=epoch,
            data=data,
            meta=dict(meta) if meta is not None else None,
            media_type=media_type,
        )

    def checkpoint_stamp(self) -> dict[str, Any] | None:
        """What a checkpoint written now records about the run (rank zero; None elsewhere): the store's id and the
        run's id (a resume checks that the checkpoint is the run's own) and the ids of the run's newest point and
        artifact (a resume keeps everything recorded up to them)."""
        if rank_zero_only.rank != 0:
            return None
        return {"store_id": self.store.store_id, "run_id": self.run_id, **self.store.watermark(self.run_id)}

    @rank_zero_only
    def continue_after(self, stamp: Mapping[str, Any], step: int) -> int:
        """A resume from a checkpoint with this stamp at `step`: forget what the run recorded after the checkpoint
        was written (it is re-run and recorded again); everything recorded before it stays. Returns the number of
        metric points forgotten."""
        forgotten = self.store.rewind_run(self.run_id, int(stamp["metrics_upto"]), int(stamp["artifacts_upto"]), step)
        self._record_resume(step)
        return forgotten

    @rank_zero_only
    def continue_from(self, step: int) -> int:
        """Drop what was recorded at steps >= `step` (a resume from a checkpoint without a stamp, written before
        stamps existed): a resumed run re-runs them (they replace, never duplicate). Returns the points dropped."""
        dropped = self.store.truncate_run(self.run_id, step)
        self._record_resume(step)
        return dropped

    def _record_resume(self, step: int) -> None:
        """Append this resume to the run's info['resumes']: the step it continued from, how the run had stopped
        (status and reason, which the resume clears from the run's columns), the config keys it changed (before,
        after) and its command, so that a run continued with another setting says so."""
        if self._resume is None:
            return
        info = self.store.get_run(self.run_id).info or {}
        entry = {"step": int(step), **self._resume, "command": provenance.command_line()}
        self.store.update_run(self.run_id, info={**info, "resumes": [*info.get("resumes", []), entry]})
        self._resume = None
        if settings := provenance.changed_settings(entry):  # the flags took effect: say so where the user looks
            rank_zero_info(f"Run {self.run_id} goes on from step {step} with {settings}")
        if task_keys := [key for key in entry.get("changed", {}) if changes_the_data(key)]:
            rank_zero_warn(  # a curriculum may mean it; a summary that mixes two tasks must not come by surprise
                f"Run {self.run_id}'s data changes at step {step} ({', '.join(task_keys)}): its points before and "
                f"after are of different data, and its best value and baseline mix the two; a new run from the "
                f"checkpoint (`ortholab fit --config CONFIG --ckpt_path CHECKPOINT`) keeps them apart.",
                category=OrthoLabWarning,
            )

    @rank_zero_only
    def mark_interrupted(self, reason: str) -> None:
        """Training was stopped on purpose (SIGTERM, Ctrl-C): the run stays `interrupted`, even when it then ends
        normally."""
        self._interrupted = True
        self.store.set_status(self.run_id, "interrupted", reason=reason)

    @rank_zero_only
    def record_failure(self, reason: str) -> None:
        """Mark the run failed with the reason; a later finalize('failed') keeps the reason."""
        self.store.set_status(self.run_id, "failed", reason=reason)

    @rank_zero_only
    def finalize(self, status: str) -> None:
        """End the run: 'success' -> finished, 'failed' -> failed (interrupted on Ctrl+C), else interrupted."""
        if self._refused is not None:  # the run belongs to another live process: leave its row alone
            return
        self._stop_heartbeat()
        run_status = FINAL_STATUS.get(status, "interrupted")
        if self._interrupted:
            run_status = "interrupted"
        if run_status == "failed" and isinstance(sys.exc_info()[1], KeyboardInterrupt):
            run_status = "interrupted"  # Lightning reports Ctrl+C as "failed"
        try:  # a finished run no longer carries why an earlier attempt stopped; the lease is given up
            self.store.set_status(self.run_id, run_status, clear_reason=run_status == "finished", release=True)
        except StoreError as e:
            if status == "success":
                raise
            # a warning: the original error stays the one reported
            rank_zero_warn(f"Could not record run status {run_status!r}: {e}", category=OrthoLabWarning)
        finally:
            folder_lock.release(self._folder_lock)
            self._folder_lock = None


NOT_SETTINGS = ("ckpt_path", "db")  # where a resume reads from and writes to, not how the run trains
SAME_DATA = (  # data keys that leave the sequences as they are: where and how fast they are read
    "path",
    "num_workers",
    "batch_size",
    "eval_batch_size",
    "download",
    "mirrors",
    "memory_map",
)


def changes_the_data(key: str) -> bool:
    """Whether a changed config key makes other sequences (data.init_args.seq_len), not where or how fast they are
    read (data.init_args.path, a *_file or *_dir, SAME_DATA)."""
    parts = key.split(".")
    return parts[0] == "data" and parts[-1] not in SAME_DATA and not parts[-1].endswith(("_file", "_dir"))


def config_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, list[Any]]:
    """The dotted config keys a resume gives another value: {key: [before, after]}. An optimizer option only one side
    sets (`--model.optimizers.other.eps 1e-6` where the config left eps to Adam) has None on the other; other keys
    only one side has (added or dropped by another OrthoLab version, whose commit info['code'] records) are left
    out."""
    old, new = flatten(before), flatten(after)
    keys = old.keys() & new.keys() | {k for k in old.keys() ^ new.keys() if k.startswith(provenance.OPTIMIZER_OPTIONS)}
    return {
        key: [old.get(key), new.get(key)]
        for key in sorted(keys)
        if old.get(key) != new.get(key) and key.split(".")[0] not in NOT_SETTINGS
    }


def _as_dict(params: Any) -> Any:
    """Namespaces and mappings as plain nested dicts, dropping keys that start with '_'."""
    if hasattr(params, "as_dict") and callable(params.as_dict):  # jsonargparse.Namespace
        params = params.as_dict()
    elif isinstance(params, Namespace):
        params = vars(params)
    if isinstance(params, Mapping):
        return {key: _as_dict(value) for key, value in params.items() if not str(key).startswith("_")}
    if isinstance(params, (list, tuple)):
        return [_as_dict(value) for value in params]
    return params
