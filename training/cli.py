"""`ortholab`: Lightning's CLI for fit/validate/test/predict, plus `runs` and `list`.

Every run is recorded in the SQL store: the CLI puts a `db.SQLLogger` first among the trainer's loggers
and stores the full resolved config with the run.
"""
from __future__ import annotations

import difflib
import os
import re
import signal
import sys
from pathlib import Path

import yaml
from sqlalchemy.engine import make_url
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.callbacks import ModelCheckpoint, ProgressBar
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback
from lightning.pytorch.utilities import rank_zero_only

from ortholab import aliases
from ortholab.datamodules import TaskDataModule
from ortholab.db import SQLLogger, Store, StoreError, default_db_url
from ortholab.models import ConfigError
from ortholab.training.callbacks import NonFiniteError, default_callbacks
from ortholab.training.allocator import reuse_freed_memory
from ortholab.training.callbacks.lifecycle import ContinueRun, GracefulInterrupt
from ortholab.training.console import StepBudgetProgressBar, quiet_third_party_noise
from ortholab.training.module import RecurrentModule

LIGHTNING_SUBCOMMANDS = ("fit", "validate", "test", "predict")
PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # the checkout, or site-packages/ortholab: configs/ beside


class RecordConfig(SaveConfigCallback):
    """Stores the resolved config with the run in the SQL store and as config.yaml in the run folder."""

    def save_config(self, trainer, pl_module, stage: str) -> None:
        config = yaml.safe_load(self.parser.dump(self.config, skip_none=False))
        if config.get("db"):  # never store a database password
            config["db"] = make_url(config["db"]).render_as_string(hide_password=True)
        for logger in trainer.loggers:
            if isinstance(logger, SQLLogger):
                logger.log_config(config)
                os.makedirs(logger.log_dir, exist_ok=True)
                Path(logger.log_dir, "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


class OrthoLabArgumentParser(LightningArgumentParser):
    """Parse errors as one line that names the key and, for a misspelt key, the nearest valid one."""

    def error(self, message: str, ex: Exception | None = None):
        if not self.exit_on_error:
            return super().error(message, ex)
        parser = getattr(ex, "subcommand_parser", None) or self
        print(f"ortholab: error: {explain_parse_error(message, parser)}", file=sys.stderr)
        self.exit(2)


def _known_keys(parser) -> list[str]:
    keys = []
    for action in parser._actions:
        keys += [o[2:] for o in action.option_strings if o.startswith("--")]
        for sub in getattr(action, "choices", None) or {}:  # subcommands: their own options
            if isinstance(action.choices, dict) and hasattr(action.choices[sub], "_actions"):
                keys += _known_keys(action.choices[sub])
    return keys


def explain_parse_error(message: str, parser) -> str:
    """jsonargparse's message rewritten for a user: the unknown key with a suggestion, a refused class path."""
    unknown = re.search(r"unrecognized arguments: --?(\S+)", message) or re.search(
        r"does not accept option '([^']+)'", message)
    if unknown:
        key = unknown.group(1).split("=")[0]
        close = difflib.get_close_matches(key, _known_keys(parser), n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}?" if close else ""
        return (f"unknown config key {key} (on the command line or in a --config file){hint} "
                f"`ortholab fit --help` lists every key")
    task_option = re.search(r"class_path '([\w.]+)':\s*(?:Option|Key) '([^']+)' is not (?:accepted|expected)", message)
    if task_option:
        import importlib
        import inspect

        module, _, name = task_option.group(1).rpartition(".")
        options = [p for p in inspect.signature(getattr(importlib.import_module(module), name).__init__).parameters
                   if p != "self"]
        key = task_option.group(2)
        close = difflib.get_close_matches(key, options, n=1, cutoff=0.6)
        hint = f"did you mean data.{close[0]}? " if close else ""
        return (f"unknown config key data.{key}: {task_option.group(1)} has no option {key!r}; {hint}"
                f"its options are {options}")
    missing = re.search(r"given class_path '([\w.]+)':\s*module '[\w.]+' has no attribute", message)
    if missing:
        from ortholab.datamodules import TASKS

        close = difflib.get_close_matches(missing.group(1), [f"datamodules.{c.__name__}" for c in TASKS.values()], 1)
        hint = f"did you mean {close[0]}? " if close else ""
        return (f"data.class_path = {missing.group(1)!r} is not a registered task; {hint}`ortholab list tasks` "
                f"shows them")
    refused = re.search(r"Import path (\S+) does not correspond to a subclass of (\w+)", message)
    if refused:
        from ortholab.datamodules import TASKS

        tasks = ", ".join(f"datamodules.{cls.__name__}" for cls in TASKS.values())
        return (f"data.class_path = {refused.group(1)!r} is not an OrthoLab task; a config may only name a "
                f"registered task ({tasks}; `ortholab list tasks`)")
    return " ".join(message.split()) + " (see `ortholab fit --help`)"


class OrthoLabCLI(LightningCLI):
    def __init__(self, args=None, run: bool = True):
        super().__init__(
            RecurrentModule, TaskDataModule, subclass_mode_data=True, parser_class=OrthoLabArgumentParser,
            auto_configure_optimizers=False,  # the model owns its per-group optimizers
            save_config_callback=RecordConfig, save_config_kwargs={"save_to_log_dir": False},
            trainer_defaults={"logger": False},  # the SQL logger is added in instantiate_trainer
            seed_everything_default=5544, args=args, run=run,
        )

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_argument("--db", type=str | None, default=None,
                            help="SQLAlchemy URL of the run store (default: $ORTHOLAB_DB or sqlite:///runs/ortholab.db)")
        parser.add_argument("--name", type=str | None, default=None,
                            help="run name in the store (default: the config file's name)")
        parser.add_argument("--tags", type=list[str], default=[], help="labels stored with the run")
        parser.add_argument("--runs_dir", type=str, default="runs",
                            help="folder for run folders (checkpoints, config.yaml)")
        parser.add_argument("--resume", type=int | None, default=None,
                            help="continue the recorded run with this id from its last checkpoint (`ortholab fit "
                                 "--resume ID` alone reuses the run's stored config)")
        parser.add_argument("--analysis", type=bool, default=True,
                            help="add the default analysis callbacks (orthogonality, eigenvalues, gradient "
                                 "profile, timing, NaN guard) that trainer.callbacks does not already configure")
        parser.add_argument("--test_every_validation", type=bool, default=False,
                            help="fit: also evaluate the test split at every validation, logged as test/* (the "
                                 "scoRNN/scuRNN papers report the best test figure over the epoch ends); the "
                                 "checkpoints are still chosen on the validation split")
        parser.link_arguments("data", "model.task", apply_on="instantiate", compute_fn=lambda dm: dm.spec.to_dict())

    def _parse_ckpt_path(self) -> None:
        """Lightning rebuilds the model from the checkpoint's hyperparameters, which would silently override the
        config's model: refuse a checkpoint of another model instead, naming the key that differs."""
        sub = self.config.get("subcommand")
        path = self.config[sub].get("ckpt_path") if sub else None
        if path and Path(path).is_file():
            import torch

            try:
                saved = torch.load(path, weights_only=True, map_location="cpu").get("hyper_parameters") or {}
            except Exception as err:  # noqa: BLE001 - any unreadable file is the same user error
                raise ConfigError(f"--ckpt_path {path}: cannot read it as a checkpoint ({err.__class__.__name__}); "
                                  f"give a .ckpt file written by `ortholab fit`") from None
            model = self.config[sub].model
            for key, default in (("family", None), ("hidden_size", None), ("num_layers", 1)):
                theirs, ours = saved.get(key, default), model.get(key, default)
                if theirs is not None and ours != "auto" and theirs != ours:
                    raise ConfigError(
                        f"--ckpt_path {path}: the checkpoint holds a model with model.{key} = {theirs!r}, the config "
                        f"builds model.{key} = {ours!r}; use the config the checkpoint was trained with (`ortholab "
                        f"fit --resume RUN_ID` reuses a run's own config) or a checkpoint of this model")
        super()._parse_ckpt_path()

    def _subconfig(self):
        return self.config[self.subcommand] if self.subcommand else self.config

    def before_instantiate_classes(self) -> None:
        config = self._subconfig()
        check_run_name(config.name)
        interval = config.trainer.get("val_check_interval")
        if interval is not None and not isinstance(interval, bool) and interval <= 0:
            raise ConfigError(f"trainer.val_check_interval = {interval} must be positive: a number of training steps "
                              f"(int) or a fraction of an epoch in (0, 1]")
        if rank_zero_only.rank == 0:
            Store(self._subconfig().db)  # fail now, before any training, if the store cannot be written
            _check_writable_folder(self._subconfig().runs_dir)

    def instantiate_trainer(self, **kwargs):
        config = self._subconfig()
        name = config.name or _name_from_config_files(config.get("config")) or self.model.hparams.family
        logger = SQLLogger(db_url=config.db, name=name, root_dir=config.runs_dir, stage=self.subcommand or "fit",
                           run_id=config.resume, tags=config.tags)
        configured = list(self._get(self.config_init, "trainer").get("callbacks") or [])
        extra = [GracefulInterrupt()]
        if config.trainer.enable_checkpointing is not False and not any(
                isinstance(c, ModelCheckpoint) for c in configured):
            spec = self.model.spec  # last and best by the task's main metric, in the run folder; {step}: the optimizer
            # steps taken, the step of the val point that chose it and of the analyses of those weights
            extra.append(ModelCheckpoint(monitor=spec.main_metric, mode=spec.main_metric_mode, save_last=True,
                                         filename="best-step{step}", auto_insert_metric_name=False))
        if config.trainer.enable_progress_bar is not False and not any(isinstance(c, ProgressBar) for c in configured):
            extra.append(StepBudgetProgressBar())  # Lightning's rich bar (rich is a dependency), not its tqdm one
        trainer = super().instantiate_trainer(callbacks=configured + extra, **kwargs)
        if self.subcommand == "fit":
            self.datamodule.test_every_validation = bool(config.get("test_every_validation"))
        trainer.loggers = [logger, *trainer.loggers]
        first = [ContinueRun()] if config.resume is not None else []  # truncate before anything records again
        if config.analysis:
            first += default_callbacks(trainer.callbacks)
        trainer.callbacks[:0] = first
        return trainer

    def after_fit(self) -> None:
        self._print_record()
        interrupt = next((c for c in self.trainer.callbacks if isinstance(c, GracefulInterrupt)), None)
        if interrupt is not None and interrupt.requested:  # the shell's convention: 128 + the signal's number
            store = self.trainer.loggers[0].store
            where = "" if store.url == default_db_url() else f" --db '{store.display_url}'"
            print(f"Interrupted by {interrupt.requested}; checkpoint saved, continue with "
                  f"`ortholab fit --resume {self.trainer.loggers[0].version}{where}`.")
            sys.exit(128 + int(getattr(signal, interrupt.requested)))

    def after_validate(self) -> None:
        self._print_record()

    def after_test(self) -> None:
        self._print_record()

    def _print_record(self) -> None:
        logger = self.trainer.loggers[0]
        if not (self.trainer.is_global_zero and isinstance(logger, SQLLogger)):
            return
        run = logger.store.get_run(logger.run_id)
        if run.best is not None:
            split = run.main_metric.split("/")[0]  # each split against its own baseline
            baseline = f" (baseline on the {split} split: {run.baseline:.4g})" if run.baseline is not None else ""
            print(f"Best {run.main_metric}: {run.best:.4g}{baseline}")
        print(f"Run {run.id} ({run.name}, {run.status}) recorded in {logger.store.display_url}; "
              f"run folder {logger.log_dir}. List runs with `ortholab runs`.")


RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,99}")


def check_run_name(name: str | None) -> None:
    """A run's name is a folder under --runs_dir: one path component of letters, digits and ._+-, 100 at most."""
    if name is not None and not RUN_NAME.fullmatch(name):
        raise ConfigError(f"--name {name!r}: a run name is one folder name under --runs_dir: letters, digits and "
                          f"._+- (starting with a letter or digit), at most 100 characters; e.g. --name "
                          f"{re.sub(r'[^A-Za-z0-9._+-]+', '-', name).strip('.-')[:100] or 'my-run'}")


def _check_writable_folder(folder: str) -> None:
    """The run folders' parent exists or can be made, and accepts files (checkpoints go there)."""
    try:
        os.makedirs(folder, exist_ok=True)
        probe = Path(folder, f".ortholab-write-check-{os.getpid()}")
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise ConfigError(f"--runs_dir {folder}: cannot write run folders there ({err.strerror}); give a writable "
                          f"folder with --runs_dir") from None


def _config_arguments(argv: list[str]):
    """(index of the value in argv, whether it is `--config=VALUE`, the value) for each `--config` given."""
    for i, arg in enumerate(argv):
        key, eq, value = arg.partition("=")
        if key == "--config" and eq:
            yield i, True, value
        elif key == "--config" and i + 1 < len(argv):
            yield i + 1, False, argv[i + 1]


def check_config_files(argv: list[str]) -> None:
    """Every existing `--config FILE` is UTF-8 YAML holding a mapping; else one line naming the file and the fix."""
    for _, _, value in _config_arguments(argv):
        path = Path(value)
        if not path.is_file():
            continue  # jsonargparse reports a missing file itself; a packaged name is resolved later
        fix = "a config is a YAML mapping of model:, data: and trainer: (see configs/demo/copying_scornn.yaml)"
        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
        except UnicodeDecodeError:
            raise ConfigError(f"--config {path}: not a text file (not UTF-8); {fix}") from None
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            problem = getattr(err, "problem", None) or str(err).splitlines()[0]
            hint = " (YAML indents with spaces, not tabs)" if "\t" in path.read_text(encoding="utf-8") else ""
            raise ConfigError(f"--config {path}: not valid YAML{where}: {problem}{hint}") from None
        if loaded is None:
            raise ConfigError(f"--config {path}: the file is empty; {fix}")
        if not isinstance(loaded, dict):
            raise ConfigError(f"--config {path}: holds a {type(loaded).__name__}, not a mapping; {fix}")


def _packaged_configs(argv: list[str]) -> list[str]:
    """`--config configs/demo/copying_scornn.yaml` (as `ortholab list configs` names it) from any folder: a path
    that is not a file here is read from the configs installed with OrthoLab, if it names one of them."""
    out = list(argv)
    for i, joined, path in _config_arguments(argv):
        installed = PACKAGE_ROOT / path
        if not Path(path).exists() and Path(path).parts[:1] == ("configs",) and installed.is_file():
            out[i] = f"--config={installed}" if joined else str(installed)
    return out


def _resume_arguments(argv: list[str]) -> list[str]:
    """`fit --resume ID [...]`: the run's stored config first (unless --config is given) and its last checkpoint
    (unless --ckpt_path is given), so that a preempted run continues with one short command."""
    import argparse

    peek = argparse.ArgumentParser(add_help=False)
    peek.add_argument("--resume", type=int)
    peek.add_argument("--db")
    peek.add_argument("--config", action="append")
    peek.add_argument("--ckpt_path")
    known, _ = peek.parse_known_args(argv[1:])
    if known.resume is None:
        return argv
    if argv[0] != "fit":
        raise ConfigError(f"--resume continues training: use `ortholab fit --resume {known.resume}`")
    store = Store(known.db)
    run = store.get_run(known.resume)  # StoreError naming the id and the store when it is missing
    run_dir = Path(run.run_dir or "")
    config, last = run_dir / "config.yaml", run_dir / "checkpoints" / "last.ckpt"
    extra = []
    if not known.config:
        if not config.is_file():
            raise ConfigError(f"run {run.id} has no stored config at {config}; pass --config FILE as well")
        extra += ["--config", str(config), "--db", store.url]  # the stored config's db has its password masked
    if known.ckpt_path is None:
        if not last.is_file():
            raise ConfigError(f"run {run.id} has no checkpoint at {last} (it stopped before its first checkpoint); "
                              f"start a new run instead")
        extra += ["--ckpt_path", str(last)]
    return [argv[0], *extra, *argv[1:]]


def _name_from_config_files(paths) -> str | None:
    paths = [p for p in (paths or []) if p is not None]
    return Path(str(paths[-1])).stem if paths else None


TOP_HELP = """usage: ortholab {fit,validate,test,predict,runs,list,reproduce,report,...} ...

Train orthogonal/unitary RNNs and record every run in a SQL store.

  fit|validate|test|predict --config FILE [--key value ...] [--db URL]
                         Lightning CLI (see `ortholab fit --help`, `--print_config`)
  runs [--json] [--db URL]
                         list recorded runs
  list families|tasks|configs [--json]
                         what is registered
  sweep --config FILE --space SPACE.yaml --trials N [--workers K] [--sampler grid|random|tpe]
                         hyperparameter search; every trial a recorded run tagged with the sweep
  evaluate-audio RUN_ID [--split val|test] [--utterances N] [--checkpoint best|last|PATH]
                         SegSNR, STOI and PESQ of a speech run's reconstructions, recorded in the run
  bench [--families ...] [--sizes 16k,69k] [--batches 50,128] [--quick] [--json]
                         speed of every family against nn.RNN(relu) and nn.LSTM
  reproduce [TABLE] [--rows a,b] [--scale full|cpu-smoke] | reproduce --list
                         run the papers' table rows, each a recorded run tagged with its row
  report [TABLE]         published vs reproduced, as Markdown tables
  db upgrade|version [--db URL]
                         migrate a store written by an older OrthoLab / show schema revisions
  dashboard [--db URL] [--port 8501] [--host 127.0.0.1]
                         the Streamlit dashboard (localhost only unless --host says otherwise)
"""


def main(argv: list[str] | None = None) -> None:
    given = argv is not None
    argv = list(argv if given else sys.argv[1:])
    aliases.install()  # configs' short class paths (datamodules.CopyingTask) in this process
    if not argv or argv[0] in ("-h", "--help"):
        print(TOP_HELP)
        return
    if not given and argv[0] in (*LIGHTNING_SUBCOMMANDS, "bench"):  # the console script: a training process
        reuse_freed_memory()
    quiet_third_party_noise()
    try:
        if argv[0] in ("runs", "list", "dashboard", "db", "sweep", "evaluate-audio", "bench", "reproduce",
                       "report"):
            from ortholab.training.commands import run_command

            run_command(argv)
        elif argv[0] in LIGHTNING_SUBCOMMANDS:
            check_config_files(argv)
            packaged = _packaged_configs(argv)
            if packaged != argv:
                given, argv = True, packaged
            resumed = _resume_arguments(argv)
            if resumed != argv:
                given, argv = True, resumed
            OrthoLabCLI(args=argv if given else None)  # Lightning reads sys.argv itself
        else:
            raise ConfigError(f"unknown command {argv[0]!r}; use one of fit, validate, test, predict, runs, list, "
                              f"dashboard, db, sweep, evaluate-audio, bench, reproduce, report")
    except BrokenPipeError:  # the reader went away (`ortholab runs | head`): stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush at exit
        sys.exit(0)
    except Exception as err:  # noqa: BLE001 - a user error anywhere in the chain is reported as one line
        user_error = _user_error(err)
        if user_error is None:
            raise
        print(f"ortholab: error: {user_error}", file=sys.stderr)
        sys.exit(2)


def _user_error(err: BaseException | None) -> BaseException | None:
    """The user-facing error behind `err` (jsonargparse wraps errors raised while instantiating)."""
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, (ConfigError, StoreError, NonFiniteError)):
            return err
        if isinstance(err, MisconfigurationException):  # Lightning's verdict on the trainer settings
            import torch

            message = " ".join(str(err).split())
            if not re.search(r"accelerator|device|gpu|cuda|mps|tpu|strategy", message, re.IGNORECASE):
                return ConfigError(f"{message} (a --trainer.* setting; `ortholab fit --help` lists them)")
            return ConfigError(f"{message} — check --trainer.accelerator and --trainer.devices "
                               f"(this machine has {torch.cuda.device_count()} CUDA device(s); "
                               f"`--trainer.accelerator cpu` runs anywhere)")
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return None
