"""Lightning's CLI for fit/validate/test/predict: the run's record in the SQL store (its checks before recording:
preflight.py; the parser's one-line errors: parse_errors.py; the run's name: run_names.py).

Every run is recorded: the CLI puts a `db.SQLLogger` first among the trainer's loggers and stores the full resolved
config with the run. Imported only by the training commands (Lightning takes seconds to import); `ortholab runs`,
`list`, `db` and the other readers start from ortholab/cli/main.py without it.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import logging
import os
import re
import signal
import sys
import warnings
from contextvars import ContextVar
from pathlib import Path
from typing import Literal

import yaml
from jsonargparse._actions import _ActionPrintConfig  # the one hook of --print_config
from lightning.fabric.plugins import CheckpointIO
from lightning.fabric.utilities.rank_zero import _get_rank, rank_prefixed_message
from lightning.pytorch.callbacks import ModelCheckpoint, ProgressBar
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback
from lightning.pytorch.utilities import rank_zero_only
from lightning.pytorch.utilities.exceptions import SIGTERMException

from ortholab import aliases
from ortholab.command_name import as_typed, console_command
from ortholab.datamodules import TASKS, TaskDataModule, task_class_path
from ortholab.datamodules.spec import SELECT_ON
from ortholab.db import SQLLogger, Store, StoreError, runs_root
from ortholab.db.logger import folder_name, runs_folder_of
from ortholab.db.masking import known_passwords, mask_secrets, mask_url
from ortholab.db.store import StoreMissing, db_flag
from ortholab.errors import ConfigError, home_path
from ortholab.extras import check_logger_extras
from ortholab.models.optimizers import DEFAULT_OPTIMIZERS
from ortholab.training.callbacks import AudioEvaluation, NonFiniteError, default_callbacks
from ortholab.training.callbacks.checkpoint_io import AtomicCheckpointIO
from ortholab.training.callbacks.last_checkpoint import LastCheckpoint
from ortholab.training.callbacks.lifecycle import ContinueRun, GracefulInterrupt, NameTheRun, StampCheckpoints
from ortholab.training.callbacks.predictions import check_predict_split
from ortholab.training.checkpoint_files import check_checkpoint_file, refuse_limits_the_checkpoint_reached
from ortholab.training.cuda_graphs import check_graphs_config
from ortholab.training.family_options import check_family_switch, recorded_family_args
from ortholab.training.family_swap import size_note
from ortholab.training.limits import check_model_limits, check_trainer_devices, check_trainer_strategy
from ortholab.training.model_summary import replace_lightnings_summary
from ortholab.training.module import RecurrentModule, checkpoint_model_mismatch
from ortholab.training.parse_errors import explain_parse_error, trainer_refusal
from ortholab.training.precision import check_precision
from ortholab.training.preflight import (
    check_ckpt_path,
    check_free_space,
    check_manual_optimization,
    check_max_time,
    check_run_name,
    check_validation_interval,
    check_writable_folder,
    ckpt_path_said,
    positive_norm,
    runs_folder_source,
    tag_list,
    task_spec_of,
)
from ortholab.training.progress import PlainProgress, StepBudgetProgressBar
from ortholab.training.run_names import config_file_mappings, name_for_family, name_from_config_files, swapped_task
from ortholab.training.task_check import check_task
from ortholab.user_errors import crash_reason, user_error


class RecordConfig(SaveConfigCallback):
    """Stores the resolved config with the run in the SQL store and as config.yaml in the run folder."""

    def save_config(self, trainer, pl_module, stage: str) -> None:
        config = yaml.safe_load(self.parser.dump(self.config, skip_none=False))
        if config.get("db"):  # never store a database password
            config["db"] = mask_url(config["db"])
        resumed = config.pop("resume", None) is not None  # which record to continue, not the run's configuration:
        # `test --config` of the run folder's config.yaml must not record into the run it was trained as
        data_args = (config.get("data") or {}).get("init_args") or {}
        for key, value in data_args.items():  # data.path, data.train_file, data.cache_dir, ...: a path relative to
            # the folder the run started in is recorded absolute, so `fit --resume` and `reproduce --resume` read
            # this config from any folder
            is_path = key == "path" or key.endswith(("_file", "_dir"))
            if key == "cache_dir" and getattr(trainer.datamodule, "cache_dir", None) is not None:
                data_args[key] = str(trainer.datamodule.cache_dir)  # where place_cache put it (the runs folder)
            elif is_path and isinstance(value, str) and value[:1] not in ("", "~"):  # "~/..." and "" stay as given
                data_args[key] = str(Path(value).absolute())
        start = config.get("ckpt_path")  # the checkpoint a new run starts from, likewise: `fit --config` of the run's
        if not resumed and isinstance(start, str) and "://" not in start and start[:1] not in ("", "~"):  # config.yaml
            config["ckpt_path"] = str(Path(start).absolute())  # starts there again from any folder
        model = config.get("model") or {}
        if model.get("family"):  # every family option with the value it ran with, defaults included: a resume or a
            # side-by-side comparison does not depend on the defaults of the OrthoLab version that reads it
            model["family_args"] = recorded_family_args(model["family"], model.get("family_args"))
        optimizers = model.get("optimizers")
        for group, entry in optimizers.items() if isinstance(optimizers, dict) else ():
            if isinstance(entry, dict) and "name" not in entry:  # recorded as the optimizer it stood in for and ran
                optimizers[group] = dict(pl_module.optimizer_specs.get(group) or DEFAULT_OPTIMIZERS["default"] | entry)
        resolved = {}  # `hidden_size: auto` stays as given in the config (a resume sizes the model again the same
        if model.get("hidden_size") == "auto":  # way); its params give the size it ran with, for columns and groups
            resolved["model.hidden_size"] = pl_module.hparams.hidden_size
        for logger in trainer.loggers:
            if isinstance(logger, SQLLogger):
                if resumed:  # the run's own last.ckpt, which a resume loads, is not where `fit --config` of it starts
                    config["ckpt_path"] = started_from(self.config, Path(logger.log_dir))
                logger.log_config(config, resolved)
                os.makedirs(logger.log_dir, exist_ok=True)
                Path(logger.log_dir, "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


def started_from(config, run_dir: Path) -> str | None:
    """A resumed run's starting checkpoint, as its config.yaml had it: none, or the --ckpt_path it was started from
    (older resumes recorded the run's own last.ckpt there: none)."""
    given = [m["ckpt_path"] for m in config_file_mappings(config) if m.get("ckpt_path") is not None]
    if not given or Path(os.fspath(given[-1])).resolve().is_relative_to(run_dir.resolve()):
        return None
    return str(given[-1])


TRIAL_TAGS = ("sweep:", "trial:")  # `ortholab sweep` marks its trials' runs so (runs --tag, the dashboard count them)


PARSING_COMMAND: ContextVar[str | None] = ContextVar("parsing_command", default=None)  # `ortholab fit` while it parses


class OrthoLabArgumentParser(LightningArgumentParser):
    """Parse errors as one line that names the key and, for a misspelt key, the nearest valid one."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)  # a prefix (--trainer.max_step) is a typo to name, not a key to guess
        if not args and (command := PARSING_COMMAND.get()):  # made while parsing (`fit --data.help copying`'s parser):
            kwargs.setdefault("prog", command)  # its usage line names the command, not bare `ortholab`
        super().__init__(*args, **kwargs)

    def dump(self, cfg=None, *args, **kwargs):
        """`--print_config` shows the chosen family's options and each group's optimizer resolved, defaults filled."""
        model = cfg.get("model") if cfg is not None and _ActionPrintConfig.is_print_config_requested(self) else None
        if model is not None and model.get("family"):
            from ortholab.training.family_options import with_resolved_options

            resolved = with_resolved_options(
                {
                    "family": model.family,
                    "hidden_size": model.get("hidden_size"),
                    "family_args": model.get("family_args"),
                    "optimizers": model.get("optimizers"),
                }
            )
            cfg = cfg.clone()
            cfg["model.family_args"], cfg["model.optimizers"] = resolved["family_args"], resolved["optimizers"]
        return super().dump(cfg, *args, **kwargs)

    def error(self, message: str, ex: Exception | None = None):
        if not self.exit_on_error:
            return super().error(message, ex)
        parser = getattr(ex, "subcommand_parser", None) or self
        argv = getattr(self, "given_args", None)
        line = explain_parse_error(message, parser, sys.argv[1:] if argv is None else argv)
        print(
            as_typed(f"ortholab: error: {mask_secrets(line, known_passwords(sys.argv))}"),
            file=sys.stderr,
        )
        self.exit(2)


SEED_LOGGER = "lightning.fabric.utilities.seed"  # Lightning's "Seed set to N"


def task_short_names(argv: list[str]) -> list[str]:
    """`--data.class_path mnist` or `--data.help mnist` (the name `ortholab list tasks` prints) as that task's class
    path."""
    out = list(argv)
    for i, arg in enumerate(argv):
        key, eq, value = arg.partition("=")
        if key not in ("--data.class_path", "--data", "--data.help"):
            continue
        if not eq and i + 1 < len(argv):
            value = argv[i + 1]
        if value in TASKS:
            path = task_class_path(TASKS[value])
            out[i if eq else i + 1] = f"{key}={path}" if eq else path
    return out


NOT_IN_HELP = {  # refused with what to use instead, or filled in from data: no option a user sets
    "--trainer.gradient_clip_val",
    "--trainer.accumulate_grad_batches",
    "--model.task.help",
}


class OrthoLabCLI(LightningCLI):
    def __init__(self, args=None, run: bool = True, typed: list[str] | None = None):
        """`typed`: the command line as the user wrote it, where `args` is what it became (`--run ID --checkpoint
        NAME` the run's --config and --ckpt_path): a refusal names what the user gave."""
        self._typed_args = typed
        aliases.restrict_config_imports()  # class paths outside the allow-list are refused before any import
        super().__init__(
            RecurrentModule,
            TaskDataModule,
            subclass_mode_data=True,
            parser_class=OrthoLabArgumentParser,
            auto_configure_optimizers=False,  # the model owns its per-group optimizers
            save_config_callback=RecordConfig,
            save_config_kwargs={"save_to_log_dir": False},
            trainer_defaults={"logger": False},  # the SQL logger is added in instantiate_trainer
            seed_everything_default=5544,
            args=args,
            run=run,
        )

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_argument(
            "--db",
            type=str | None,
            default=None,
            help="the run store: a SQLite file's path or an SQLAlchemy URL (default: $ORTHOLAB_DB, else the SQLite "
            "file ortholab.db in $ORTHOLAB_RUNS, else in ./runs)",
        )
        parser.add_argument(
            "--name", type=str | None, default=None, help="run name in the store (default: the config file's name)"
        )
        parser.add_argument(
            "--tags",
            type=list[str] | str,
            default=[],
            help="labels stored with the run: --tags a,b (comma-separated) or --tags '[a, b]' (a "
            "YAML list); in a config file, tags: [a, b]",
        )
        parser.add_argument(
            "--runs_dir",
            type=str | None,
            default=None,  # resolved when used: a printed or stored config does not pin this machine's folder
            help="folder for run folders (checkpoints, config.yaml); default: $ORTHOLAB_RUNS, else ./runs. The "
            "store stays --db's ($ORTHOLAB_DB, else ortholab.db in $ORTHOLAB_RUNS or ./runs): move both with "
            "$ORTHOLAB_RUNS",
        )
        parser.add_argument(
            "--resume",
            type=int | None,
            default=None,
            help="continue the recorded run with this id (or the newest run of this name not finished) from its "
            "last checkpoint (`ortholab fit --resume ID` alone reuses the run's stored config); a run with no "
            "checkpoint on this machine is refused (not started anew)",
        )
        parser.add_argument(
            "--analysis",
            type=bool,
            default=True,
            help="add the default analysis callbacks (orthogonality, eigenvalues, gradient "
            "profile, NaN guard, audio scores) that trainer.callbacks does not already configure; false keeps "
            "only Timing (the run's pace, ETA and last step)",
        )
        parser.add_argument(
            "--test_every_validation",
            type=bool,
            default=False,
            help="fit: also evaluate the test split at every validation, logged as test/* (the "
            "scoRNN/scuRNN papers report the best test figure over the epoch ends); the "
            "checkpoints are still chosen on the validation split",
        )
        parser.add_argument(
            "--select_on",
            type=Literal[SELECT_ON],
            default="main_metric",
            help="fit: what chooses the best checkpoint (best-stepN.ckpt, the one `reproduce` tests): the task's main "
            "metric (`ortholab list tasks`), or loss: the lowest validation loss (the SRNN paper's pMNIST choice)",
        )
        parser.add_argument(
            "--predict_split",
            type=str,
            default="test",
            help="predict: the split whose predictions are written (train, val or test); `ortholab "
            "predict --run ID [--checkpoint best|last|PATH]` takes a recorded run's config and "
            "checkpoint",
        )
        parser.link_arguments("data", "model.task", apply_on="instantiate", compute_fn=task_spec_of)
        for action in parser._actions:  # kept for their one-line refusals (training/preflight.py), not offered
            if set(action.option_strings) & NOT_IN_HELP:
                action.help = argparse.SUPPRESS

    def _parse_ckpt_path(self) -> None:
        """Lightning rebuilds the model from the checkpoint's hyperparameters, which would silently override the
        config's model: refuse a checkpoint of another model instead, naming the key that differs."""
        sub = self.config.get("subcommand")
        path = self.config[sub].get("ckpt_path") if sub else None
        said = ckpt_path_said(path, getattr(self.parser, "given_args", None), getattr(self, "_typed_args", None))
        check_ckpt_path(path, sub, said)  # said: the flag the user typed, or the config file and its key
        if path and Path(path).is_file():
            check_checkpoint_file(path, said=said)  # a config.yaml, a tensor saved by hand: one line
            import torch

            try:
                self._checkpoint_to_check = torch.load(path, weights_only=True, map_location="cpu")
                self._checkpoint_said = said
                saved = self._checkpoint_to_check.get("hyper_parameters") or {}
            except Exception as err:  # any unreadable file is the same user error
                raise ConfigError(
                    f"{said}: cannot read it as a checkpoint ({err.__class__.__name__}); "
                    f"give a .ckpt file written by `ortholab fit`"
                ) from None
            if mismatch := checkpoint_model_mismatch(saved, self.config[sub].model):
                key, theirs, ours = mismatch
                refusal = _as_said_by(
                    sub,
                    f"{said}: the checkpoint holds a model with model.{key} = {theirs!r}, the config "
                    f"builds model.{key} = {ours!r}; use the config the checkpoint was trained with (`ortholab "
                    f"fit --resume RUN_ID` reuses a run's own config) or a checkpoint of this model",
                )
                resume = self.config[sub].get("resume") if sub == "fit" else None  # (a test of an old config.yaml)
                raise ConfigError(refusal if resume is None else _as_said_by_resume(refusal, resume))
        model = self.config[sub].model if path else None
        keys = set(getattr(self, "_command_line_model_keys", ()))
        if sub == "fit" and self.config[sub].get("resume") is not None:  # the run's config.yaml holds its latest
            # settings, and its last checkpoint may predate them: the config's model keys win too
            models = [mapping.get("model") for mapping in config_file_mappings(self.config[sub])]
            keys |= {key for model_keys in models if isinstance(model_keys, dict) for key in model_keys}
        given = {key: copy.deepcopy(model.get(key)) for key in sorted(keys)} if model else {}
        super()._parse_ckpt_path()
        for key, value in given.items():  # a --model.* flag wins over the checkpoint's hyperparameters: a resume
            # with another setting (`fit --resume ID --model.optimizers.default.eps 1e-10`) trains with it, and so
            # does the next resume (killed before its first checkpoint, the checkpoint still holds the old setting)
            self.config[sub].model[key] = value

    def parse_arguments(self, parser, args) -> None:
        """Remember which model options the command line gives (`--model.KEY ...`): those win over a checkpoint's."""
        argv = sys.argv[1:] if args is None else args if isinstance(args, (list, tuple)) else []
        flags = [str(arg).split("=", 1)[0] for arg in argv]
        self._command_line_model_keys = sorted(
            {f[len("--model.") :].split(".")[0] for f in flags if f.startswith("--model.")}
        )
        self._command_line_tags = any(f == "--tags" for f in flags)  # a sweep gives its trials' tags so
        subcommands = getattr(parser, "_subcommands_action", None)
        for each in (parser, *(subcommands.choices.values() if subcommands else ())):  # a key's error says whether
            each.given_args = list(argv)  # the command line or which --config file has it
        command = argv[0] if argv and subcommands and argv[0] in subcommands.choices else None
        parsing = PARSING_COMMAND.set(f"{console_command()} {command}" if command else None)
        try:
            super().parse_arguments(parser, args)
        finally:
            PARSING_COMMAND.reset(parsing)

    def _own_tags(self, tags: list) -> list:
        """The new run's tags: a config file's sweep:/trial: ones left off (a sweep's trial gets them as --tags). A
        trial's run folder's config.yaml holds them: a run trained or tested anew with it (the best trial trained
        longer) was counted as a trial of the sweep, and the dashboard named it the sweep's best."""
        trial_tags = [tag for tag in tags or () if str(tag).startswith(TRIAL_TAGS)]
        if not trial_tags or getattr(self, "_command_line_tags", True):
            return tags
        print(
            f"note: the config's tags {', '.join(map(str, trial_tags))} are left off: this run is no trial of that "
            "sweep (--tags gives them)",
            file=sys.stderr,
        )
        return [tag for tag in tags if tag not in trial_tags]

    def _runs_dir(self) -> str:
        """--runs_dir; else, for `fit --resume`, the runs folder the run was recorded in (its folder's checks and a
        relative cache go there, whatever the current folder and $ORTHOLAB_RUNS); else the runs root
        ($ORTHOLAB_RUNS, else ./runs) as this process finds it."""
        config = self._subconfig()
        if config.runs_dir:  # `--runs_dir '~/runs'` or a config file's: not a folder named ~ in the current one
            return str(home_path(config.runs_dir, "--runs_dir"))
        if self.subcommand == "fit" and config.get("resume") is not None:
            if (recorded := self._recorded_runs_dir(config)) is not None:
                return recorded
        return str(runs_root())

    def _runs_dir_source(self) -> tuple[str, str | None]:
        """How _runs_dir was found and what gives another, as its errors name them: --runs_dir, the resumed run's
        recorded folder (only --runs_dir moves it), or the runs root ($ORTHOLAB_RUNS, else the default)."""
        config = self._subconfig()
        if not config.runs_dir and self.subcommand == "fit" and config.get("resume") is not None:
            if self._recorded_runs_dir(config) is not None:
                return f"run {config.resume}'s recorded runs folder", "--runs_dir"
        return runs_folder_source(config.runs_dir), None

    def _recorded_runs_dir(self, config) -> str | None:
        """The runs folder holding the resumed run's folder (RUNS/store-ID/NAME/RUN, or RUNS/NAME/RUN of older runs);
        None where the store or the run cannot be read (the resume itself then says why)."""
        if not hasattr(self, "_recorded_runs_folder"):
            try:
                folder = Store(config.db, access="read").get_run(config.resume).run_dir
            except StoreError:
                folder = None
            self._recorded_runs_folder = str(runs_folder_of(folder)) if folder else None
        return self._recorded_runs_folder

    def _subconfig(self):
        return self.config[self.subcommand] if self.subcommand else self.config

    def _set_seed(self) -> None:
        """Deferred to the end of `before_instantiate_classes`, and said once the trainer is built: a config, model or
        task refused says one line, without Lightning's "Seed set to ..." before it; the classes are still built
        after seeding."""

    def before_instantiate_classes(self) -> None:
        config = self._subconfig()
        aliases.refuse_callables(config)  # a function a value resolved to is never called
        config.tags = tag_list(config.tags)
        check_run_name(config.name)
        self._task_swap = swapped_task(config)  # (the note, the run's name) when the command line swapped the task
        check_family_switch(config.model, getattr(self, "_command_line_model_keys", ()))  # all of it in one line
        check_precision(config.trainer.get("precision"), config.trainer.get("accelerator"), config.model.get("family"))
        check_model_limits(config.model)  # a stack of 10^8 layers, 64 processes on 2 cores: refused, not started
        check_graphs_config(config.model, config.trainer)  # CUDA graphs: one CUDA device, full precision
        check_trainer_devices(config.trainer)
        check_trainer_strategy(config.trainer)  # ddp_spawn: a ghost run, children failing on it
        check_logger_extras(config.trainer.get("logger"))  # MLFlowLogger without mlflow: one line, not a traceback
        clip = config.model.get("grad_clip_norm")
        if clip is not None and not positive_norm(clip):  # a negative norm would flip gradients
            raise ConfigError(
                f"model.grad_clip_norm = {clip!r} must be a positive finite number (e.g. 1.0), or null for no clipping"
            )
        check_manual_optimization(config.trainer)
        check_max_time(config.trainer, getattr(self.parser, "given_args", None))
        seed = config.get("seed_everything")
        if isinstance(seed, int) and not isinstance(seed, bool) and not 0 <= seed <= 2**32 - 1:
            raise ConfigError(f"seed_everything = {seed} must lie in 0 .. 2**32 - 1 (numpy's seeds), or be true/false")
        if self.subcommand == "fit" and config.trainer.get("max_steps") == 0:  # a run "finished" at step 0
            raise ConfigError("trainer.max_steps = 0 trains nothing; give 1 or more, or -1 for no step limit")
        check_predict_split(config.get("predict_split"))
        interval = config.trainer.get("val_check_interval")
        if interval is not None and not isinstance(interval, bool) and interval <= 0:
            raise ConfigError(
                f"trainer.val_check_interval = {interval} must be positive: a number of training steps "
                f"(int) or a fraction of an epoch in (0, 1]"
            )
        if rank_zero_only.rank == 0:
            try:  # fail now, before any training, if the store cannot be written
                Store(self._subconfig().db, access="write")
                self._store_to_create = False
            except StoreMissing:  # made once the model and task are built (instantiate_trainer): a refused
                self._store_to_create = True  # config leaves no new, empty store behind
            check_writable_folder(self._runs_dir(), *self._runs_dir_source())
        seed_log = logging.getLogger(SEED_LOGGER)
        level = seed_log.level
        seed_log.setLevel(logging.WARNING)  # "Seed set to N" is said once the trainer is built (instantiate_trainer)
        try:
            super()._set_seed()  # the config passed every check: seed, then Lightning builds the classes
        finally:
            seed_log.setLevel(level)

    def _check_checkpoint(self, config) -> None:
        """The model and task are built: another model's checkpoint, or one past the new run's limits, is refused
        before the run is recorded (a refused resume changes nothing of it)."""
        checkpoint, self._checkpoint_to_check = getattr(self, "_checkpoint_to_check", None), None
        if checkpoint is None:
            return
        try:
            self.model.refuse_foreign_checkpoint(checkpoint, continues_training=self.subcommand == "fit")
        except ConfigError as refused:
            if self.subcommand != "fit":
                raise ConfigError(_as_said_by(self.subcommand, str(refused))) from None
            if config.resume is None:
                raise
            raise ConfigError(_as_said_by_resume(str(refused), config.resume)) from None
        if self.subcommand == "fit" and config.resume is None:  # `fit --resume` refused its own (cli/train.py)
            refuse_limits_the_checkpoint_reached(checkpoint, config.trainer, self._checkpoint_said)

    def instantiate_trainer(self, **kwargs):
        config = self._subconfig()
        self._check_checkpoint(config)
        self._check_task_data(config)
        if rank_zero_only.rank == 0 and self.subcommand == "fit":
            check_free_space(self._runs_dir(), self.model)  # before the run is recorded: a full disk is one line
        _make_store(config.db, getattr(self, "_store_to_create", False))  # every check passed: the run is recorded
        swapped_name = self._say_swaps(config)
        family = self.model.hparams.family
        derived = swapped_name or name_for_family(name_from_config_files(config.get("config")), config, family)
        name = config.name or folder_name(derived)  # a config file's name may hold anything: as a folder name
        resume = config.resume if self.subcommand == "fit" else None  # only training continues a recorded run:
        # testing with a run folder's config.yaml (older resumes wrote `resume: ID` into it) records a run of its own
        logger = SQLLogger(
            db_url=config.db,
            name=name,
            root_dir=self._runs_dir(),
            stage=self.subcommand or "fit",
            run_id=resume,
            tags=self._own_tags(config.tags),
        )
        configured = list(self._get(self.config_init, "trainer").get("callbacks") or [])
        extra = [GracefulInterrupt(), *([NameTheRun()] if self.subcommand == "fit" else [])]
        if (
            self.subcommand == "predict"
        ):  # training/callbacks/predictions.py: the split's predictions into the run folder
            from ortholab.training.callbacks.predictions import PredictionWriter

            if not config.get("ckpt_path"):
                raise ConfigError(
                    "predict needs trained weights: `ortholab predict --run RUN_ID` (its best "
                    "checkpoint) or --ckpt_path FILE with the config it was trained with"
                )
            self.datamodule.predict_split = config.predict_split
            extra.append(PredictionWriter(config.predict_split, config.ckpt_path))
            # predicting restores weights only: the training callbacks Lightning asks for have nothing to restore
            warnings.filterwarnings("ignore", message="Be aware that when using `ckpt_path`, callbacks used")
        # the checkpoint callback's state from another run's folder: an evaluation saves no checkpoint, and a new run
        # from a checkpoint (`fit --ckpt_path`) keeps its own best in its own folder, so Lightning's warning that it
        # will not reload the other run's best_k_models changes nothing
        warnings.filterwarnings("ignore", message="The dirpath has changed from")
        if (
            config.trainer.enable_checkpointing is not False
            and self.subcommand != "predict"
            and not any(isinstance(c, ModelCheckpoint) for c in configured)
        ):
            spec = self.model.spec  # best by the task's main metric or the loss, in the run folder; {step}: the
            # optimizer steps taken, the step of the val point that chose it and of the analyses of those weights
            monitor, mode = spec.checkpoint_metric(config.get("select_on") or "main_metric")
            extra.append(
                ModelCheckpoint(
                    monitor=monitor,
                    mode=mode,
                    filename="best-step{step}",
                    auto_insert_metric_name=False,
                )
            )
            extra.append(LastCheckpoint())  # last.ckpt at every validation and at the end of training
        if config.trainer.enable_progress_bar is not False and not any(isinstance(c, ProgressBar) for c in configured):
            # Lightning's rich bar on a terminal (rich is a dependency); plain lines in a log file or a scheduler's
            extra.append(StepBudgetProgressBar() if sys.stdout.isatty() else PlainProgress())
        plugins = self._get(self.config_init, "trainer").get("plugins") or []
        plugins = list(plugins) if isinstance(plugins, (list, tuple)) else [plugins]
        if not any(isinstance(p, CheckpointIO) for p in plugins):  # checkpoints written atomically in their folder
            plugins.append(AtomicCheckpointIO())
        if not config.trainer.get("default_root_dir"):  # not the current folder: under SLURM, Lightning loads the
            kwargs.setdefault("default_root_dir", self._runs_dir())  # hpc_ckpt_N.ckpt it finds there into a new run
        try:
            trainer = super().instantiate_trainer(callbacks=configured + extra, plugins=plugins, **kwargs)
        except (ValueError, TypeError) as err:  # Lightning refuses a trainer.* value (`accelerator='gpuu'`)
            if user_error(err) is not None:  # already one line (a MisconfigurationException: user_errors.py)
                raise
            raise ConfigError(trainer_refusal(err, config.trainer, getattr(self.parser, "given_args", None))) from None
        _prepare_evaluation(self.datamodule, trainer.world_size, self.subcommand, config)
        if self.subcommand == "fit":  # before the run is recorded
            check_validation_interval(trainer, self.datamodule)
        trainer.callbacks = replace_lightnings_summary(trainer.callbacks, configured)  # no 'Total FLOPs: 0'
        trainer.loggers = [logger, *trainer.loggers]
        first = [StampCheckpoints()]  # every checkpoint names its store and run, and how far their record went
        if resume is not None:
            first.append(ContinueRun())  # rewinds the record before anything records again
        first += default_callbacks(trainer.callbacks, analysis=config.analysis)
        trainer.callbacks[:0] = first
        for callback in trainer.callbacks:  # a speech task without PESQ/STOI, or a user's one on another task: one line
            if isinstance(callback, AudioEvaluation):  # before the run is recorded
                callback.check_task(self.datamodule, given=any(callback is c for c in configured))
        seed = config.get("seed_everything")
        if seed is not False and seed is not None:  # said now: a model or task refused above says only why
            logging.getLogger(SEED_LOGGER).info(rank_prefixed_message(f"Seed set to {seed}", _get_rank()))
        return trainer

    def _say_swaps(self, config) -> str | None:
        """Once the model and task are built (a refused one says only why): a note for a task or a family swapped on
        the command line; the run's name after a swapped task."""
        note, swapped_name = getattr(self, "_task_swap", None) or (None, None)
        if rank_zero_only.rank != 0:
            return swapped_name
        if note:
            print(note, file=sys.stderr)
        if self.subcommand == "fit" and config.resume is None:
            sized = size_note(self.model, config_file_mappings(config), getattr(self, "_command_line_model_keys", ()))
            if sized:  # a family swapped on the command line kept the size the file chose for its own
                print(sized, file=sys.stderr)
        return swapped_name

    def _check_task_data(self, config) -> None:
        """The task's data there and its first batches as its TaskSpec says, before the run is recorded."""
        place_cache = getattr(self.datamodule, "place_cache", None)
        if place_cache is not None:  # a relative cache_dir lies under the runs folder, not the current one
            place_cache(self._runs_dir())
        check_data = getattr(self.datamodule, "check_data", None)
        if check_data is not None:  # a corpus not there: one line, and no failed run left behind
            check_data()
        check_task(self.datamodule, self.subcommand, config.get("predict_split") or "test")  # training/task_check.py

    def _run_subcommand(self, subcommand: str) -> None:
        """A run stopped by a user error (a full disk, a bad checkpoint) keeps the one-line reason with its status."""
        try:
            super()._run_subcommand(subcommand)
        except SystemExit as stop:  # Lightning's exit 1 after a Ctrl-C it caught itself: before GracefulInterrupt
            trainer = getattr(self, "trainer", None)  # listens (the first moments of a fit), or a second Ctrl-C
            if isinstance(stop, SIGTERMException) and trainer is not None:  # Lightning's own SIGTERM handler (the
                self._interrupted_at_once(trainer, "SIGTERM")  # sanity check; validate, test): an exit 0 before
                raise SystemExit(128 + signal.SIGTERM) from None
            if stop.code != 1 or trainer is None or not trainer.interrupted:
                raise
            self._interrupted_at_once(trainer, "SIGINT")
            raise SystemExit(128 + signal.SIGINT) from None  # the shell's convention, as a first Ctrl-C exits
        except Exception as err:  # re-raised; main() prints the same line, or the traceback of a bug
            logger = self.trainer.loggers[0] if getattr(self, "trainer", None) and self.trainer.loggers else None
            reported = user_error(err)
            if (
                isinstance(logger, SQLLogger)
                and not isinstance(reported, NonFiniteError)  # the NaN guard recorded its own reason
                and getattr(logger, "_run_id", None) is not None
            ):  # only a run that exists (no new row)
                reason = str(reported) if reported is not None else crash_reason(err, self.trainer.global_step)
                with contextlib.suppress(Exception):  # the original error matters more than its record
                    logger.record_failure(mask_secrets(" ".join(reason.split())))
            raise

    def _interrupted_at_once(self, trainer, name: str) -> None:
        """A Ctrl-C (SIGINT) or SIGTERM that stopped the command at once: the run says so, and how (or whether) it
        goes on."""
        logger = trainer.loggers[0] if trainer.loggers else None
        if not isinstance(logger, SQLLogger) or getattr(logger, "_run_id", None) is None or not trainer.is_global_zero:
            return
        run, step = logger.run_id, trainer.global_step
        where, note = db_flag(logger.store.url)
        by = "Ctrl-C" if name == "SIGINT" else name
        if self.subcommand != "fit":
            reason, said = f"stopped by {by} during {self.subcommand}", "run the same command again"
        elif step == 0:
            reason = f"stopped by {by} before its first training step"
            said = (
                f"run {run} holds nothing to continue; run the same command again "
                f"(`ortholab runs delete {run}{where}`{note})"
            )
        else:
            again = "a second Ctrl-C" if name == "SIGINT" else by
            reason = f"stopped at once by {again} at step {step}; continue from its last checkpoint"
            said = f"continue run {run} from its last checkpoint with `ortholab fit --resume {run}{where}`{note}"
        with contextlib.suppress(Exception):  # the stop matters more than its record
            logger.mark_interrupted(reason)
        print(f"Interrupted by {name}: {said}", file=sys.stderr)

    def _take_free_cores(self) -> None:
        """On a CPU with other work on its cores: run with the threads the free cores hold, and say so once."""
        import torch

        from ortholab.threads import train_beside_other_work

        self._threads_before = torch.get_num_threads()  # given back after: `main` may run in a longer process
        self._numba_before = os.environ.get("NUMBA_NUM_THREADS")  # which train_beside_other_work may set
        if type(self.trainer.accelerator).__name__ == "CPUAccelerator" and self.trainer.is_global_zero:
            doing = {"validate": "validating", "test": "testing", "predict": "predicting"}.get(self.subcommand)
            train_beside_other_work(self._threads_before, self.trainer.world_size == 1, doing or "training")

    def _give_back_threads(self) -> None:
        import torch

        torch.set_num_threads(self._threads_before)
        if self._numba_before is None:
            os.environ.pop("NUMBA_NUM_THREADS", None)

    def _say_untrained(self) -> None:
        """`test|validate|predict --config F` without --ckpt_path scores the model as F initialises it: said, since the
        number it records looks like a trained run's."""
        self._take_free_cores()
        if self.config[self.subcommand].get("ckpt_path") is None and self.trainer.is_global_zero:
            print(
                f"ortholab: warning: no --ckpt_path: {self.subcommand} scores the model as its config initialises it, "
                f"untrained; `ortholab {self.subcommand} --run ID` takes a recorded run's checkpoint (--ckpt_path FILE "
                "any)",
                file=sys.stderr,
            )

    before_fit = _take_free_cores
    before_validate = before_test = before_predict = _say_untrained

    def after_fit(self) -> None:
        self._give_back_threads()
        interrupt = next((c for c in self.trainer.callbacks if isinstance(c, GracefulInterrupt)), None)
        if interrupt is None or interrupt.stopped_at is None:  # a stopped run validates once it goes on
            self._note_no_validation()
        self._print_record()
        if interrupt is not None and interrupt.stopped_at is not None:  # the shell's convention: 128 + the signal
            if self.trainer.is_global_zero:  # the other ranks know no run id
                where, said = db_flag(self.trainer.loggers[0].store.url)
                print(
                    f"Interrupted by {interrupt.requested}; checkpoint saved, continue with "
                    f"`{console_command()} fit --resume {self.trainer.loggers[0].version}{where}`{said}."
                )
            sys.exit(128 + int(getattr(signal, interrupt.requested)))

    def _note_no_validation(self) -> None:
        """A fit shorter than its validation interval (`--trainer.max_steps 20` on a config validating every 100
        steps) records no best value and keeps no best checkpoint: said, with the key that changes it."""
        trainer, logger = self.trainer, self.trainer.loggers[0] if self.trainer.loggers else None
        if not (trainer.is_global_zero and isinstance(logger, SQLLogger)) or trainer.global_step == 0:
            return
        if trainer.limit_val_batches == 0:  # validation turned off on purpose
            return
        run = logger.store.get_run(logger.run_id)
        if run.best is None and run.main_metric != "val/loss" and logger.store.metric_series(run.id, "val/loss"):
            print(
                f"Validation ran, but the main metric {run.main_metric} was never logged, so the run has no best "
                "value and no best checkpoint: the objective's update() must call each metric its metrics() gives."
            )
            return
        if run.best is None:
            every = trainer.check_val_every_n_epoch
            key = f"trainer.check_val_every_n_epoch = {every}" if every and every > 1 else None
            key = key or f"trainer.val_check_interval = {trainer.val_check_interval}"
            sooner = f"a smaller --{key.split(' = ')[0]} validates sooner"
            if key.startswith("trainer.val_check_interval") and isinstance(trainer.val_check_interval, float):
                sooner = "--trainer.val_check_interval K (an int: every K steps) validates sooner"  # not a fraction
            print(
                f"No validation ran in its {trainer.global_step} steps ({key}), so the run has no best value and no "
                f"best checkpoint; {sooner}."
            )

    def after_validate(self) -> None:
        self._give_back_threads()
        self._print_record()

    def after_test(self) -> None:
        self._give_back_threads()
        self._print_record()

    def after_predict(self) -> None:
        from ortholab.training.callbacks.predictions import PredictionWriter

        self._give_back_threads()

        writer = next((c for c in self.trainer.callbacks if isinstance(c, PredictionWriter)), None)
        if writer is not None and writer.path is not None:
            print(f"Predictions on the {writer.split} split written to {writer.path}")
        self._print_record()

    def _print_record(self) -> None:
        logger = self.trainer.loggers[0]
        if not (self.trainer.is_global_zero and isinstance(logger, SQLLogger)):
            return
        run = logger.store.get_run(logger.run_id)
        if run.best is not None:
            split = run.main_metric.split("/")[0]  # each split against its own baseline
            baseline = f" (baseline on the {split} split: {run.baseline:.4g})" if run.baseline is not None else ""
            said = "Best " if run.stage == "fit" else ""  # test/validate evaluate once: no best of several
            print(f"{said}{run.main_metric}: {run.best:.4g}{baseline}")
        where, said = db_flag(logger.store.url)
        print(
            f"Run {run.id} ({run.name}, {run.status}) recorded in {mask_url(logger.store.url)}; "
            f"run folder {logger.log_dir}. List runs with `{console_command()} runs{where}`{said}."
        )


def _prepare_evaluation(datamodule, world_size: int, subcommand: str | None, config) -> None:
    """`--test_every_validation` handed to the task; a split smaller than the DDP processes refused before the run is
    recorded (datamodules/sharding.py)."""
    if subcommand == "fit":
        datamodule.test_every_validation = bool(config.get("test_every_validation"))
    check_split_sizes = getattr(datamodule, "check_evaluation_shards", None)
    if check_split_sizes is not None and world_size > 1:
        check_split_sizes(world_size, subcommand)


def _as_said_by_resume(message: str, run_id: int) -> str:
    """A checkpoint's refusal worded for `fit --resume ID`, which reads the run's checkpoint itself (no --ckpt_path
    was given) and whose flags, not its config, changed the model."""
    message = re.sub(r"^--ckpt_path(?: .*?)?: (?:the|this) ", f"--resume {run_id}: the run's ", message)
    return message.replace(
        "(`ortholab fit --resume RUN_ID` reuses a run's own config)",
        f"(`ortholab fit --resume {run_id}` without the flag that changes it)",
    )


def _as_said_by(subcommand: str | None, message: str) -> str:
    """A checkpoint's refusal for `validate`, `test` or `predict`, whose own `--run ID` reads a run's config and
    checkpoint together (a fit's refusal is left as it is)."""
    if subcommand in (None, "fit"):
        return message
    return message.replace(
        "(`ortholab fit --resume RUN_ID` reuses a run's own config)",
        f"(`ortholab {subcommand} --run RUN_ID` reads a run's own config and checkpoint)",
    )


def _make_store(db: str, missing: bool) -> None:
    """Create the store a run records in where it was `missing`, saying so (rank 0): a first run, or a mistyped --db,
    shows where runs now go."""
    if not missing or rank_zero_only.rank != 0:
        return
    store = Store(db)
    if store.created:
        print(f"New run store {mask_url(store.url)}: nothing was recorded there before.", flush=True)
