"""A Lightning logger that records runs in the run store.

Only global rank zero writes. The store and the run row are created lazily,
so the logger can be built before the trainer and pickled for ddp_spawn.
"""

from __future__ import annotations

import os
import sys
import time
from argparse import Namespace
from collections.abc import Mapping, Sequence
from typing import Any

from lightning.pytorch.loggers import Logger
from lightning.pytorch.utilities import rank_zero_only
from lightning.pytorch.utilities.rank_zero import rank_zero_warn

from ortholab.db.store import Store, StoreError

OTHER_RANK_VERSION = "pending"  # version on ranks other than zero, which never see the run row
FINAL_STATUS = {"success": "finished", "failed": "failed"}  # Lightning's finalize() words -> run status


class SQLLogger(Logger):
    """Log hyperparameters, config and metrics of one run to a SQL database.

    Args:
        db_url: database URL or SQLite path; None means `default_db_url()` when first used.
        name: run name, also the folder under `root_dir` holding the run folder.
        root_dir: where run folders `root_dir/name/<run id>` are made.
        tags: free-form labels stored with the run.
        stage: 'fit', 'validate' or 'test'.
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

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_store"] = None  # engines do not pickle; the copy reconnects when used
        return state

    # ---- identity --------------------------------------------------------------

    @property
    def store(self) -> Store:
        """The run store, opened on first use."""
        if self._store is None:
            self._store = Store(self._db_url)
        return self._store

    @property
    def run_id(self) -> int | None:
        """The run's id on rank zero (creating the run row if needed); None on other ranks."""
        if rank_zero_only.rank != 0:
            return None
        if self._run_id is None and self._resume_id is not None:
            run = self.store.get_run(self._resume_id)  # StoreError naming the id when there is no such run
            self._name = run.name
            self.store.set_status(run.id, "running")
            self._run_id = run.id
        if self._run_id is None:
            self._run_id = self.store.create_run(name=self._name, stage=self._stage, tags=self._tags)
            run_dir = self._run_dir(str(self._run_id))
            os.makedirs(run_dir, exist_ok=True)
            self.store.update_run(self._run_id, run_dir=os.path.abspath(run_dir))
        return self._run_id

    @property
    def name(self) -> str:
        return self._name

    @property
    def version(self) -> str:
        """The run id as a string on rank zero; a placeholder elsewhere (no database access)."""
        if rank_zero_only.rank != 0:
            return OTHER_RANK_VERSION
        return str(self.run_id)

    @property
    def save_dir(self) -> str:
        return self._root_dir

    @property
    def log_dir(self) -> str:
        """The run folder, root_dir/name/version."""
        return self._run_dir(self.version)

    def _run_dir(self, version: str) -> str:
        return os.path.join(self._root_dir, self._name, version)

    # ---- writing ---------------------------------------------------------------

    @rank_zero_only
    def describe_run(self, **fields: Any) -> None:
        """Set run columns such as family, task, main_metric, main_metric_mode, baseline, parameter_count, info."""
        self.store.update_run(self.run_id, **fields)

    @rank_zero_only
    def log_config(self, config: Mapping[str, Any]) -> None:
        """Store the full resolved config on the run and as flattened params."""
        config = _as_dict(config)
        self.store.update_run(self.run_id, config=config)
        self.store.log_params(self.run_id, config)
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
    def log_artifact(self, kind: str, name: str, *, step: int | None = None, epoch: int | None = None,
                     data: bytes | None = None, meta: Mapping[str, Any] | None = None,
                     media_type: str | None = None) -> None:
        """Store an artifact of the run (kinds and encodings: db/artifacts.py)."""
        self.store.add_artifact(self.run_id, kind, name, step=step, epoch=epoch, data=data,
                                meta=dict(meta) if meta is not None else None, media_type=media_type)

    @rank_zero_only
    def continue_from(self, step: int) -> None:
        """Drop what was recorded at steps >= `step`: a resumed run re-runs them (they replace, never duplicate)."""
        self.store.truncate_run(self.run_id, step)

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
        run_status = FINAL_STATUS.get(status, "interrupted")
        if self._interrupted:
            run_status = "interrupted"
        if run_status == "failed" and isinstance(sys.exc_info()[1], KeyboardInterrupt):
            run_status = "interrupted"  # Lightning reports Ctrl+C as "failed"
        try:
            self.store.set_status(self.run_id, run_status)
        except StoreError as e:
            if status == "success":
                raise
            rank_zero_warn(f"Could not record run status {run_status!r}: {e}")  # keep the original error on top


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
