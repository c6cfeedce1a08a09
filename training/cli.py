"""`ortholab`: the command line. Dispatches to Lightning's CLI for fit/validate/test/predict (training/lightning_cli.py)
and to the readers and tools (`runs`, `list`, `data`, `db`, `report`, ...).

Nothing here imports Lightning or torch: a reader such as `ortholab runs` starts in a fraction of a second, and the
training commands pay for Lightning's import only when they run.
"""
from __future__ import annotations

import os
import re
import sys
import warnings
from pathlib import Path

import yaml

from ortholab import aliases
from ortholab.errors import ConfigError
from ortholab.training.allocator import reuse_freed_memory
from ortholab.training.console import quiet_third_party_noise
from ortholab.db.masking import MaskedStream, check_db_url, db_urls_in, known_passwords, mask_secrets

LIGHTNING_SUBCOMMANDS = ("fit", "validate", "test", "predict")
PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # the checkout, or site-packages/ortholab: configs/ beside


def _disk_full(err: BaseException) -> ConfigError | None:
    """A write that ran out of space (ENOSPC, EDQUOT) as one line naming the file and the fix."""
    import errno

    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
        where = f" writing {err.filename}" if err.filename else ""
        return ConfigError(f"no space left on the device{where} ({err.strerror}); the run stopped and what it recorded "
                           f"is kept; free space or give --runs_dir on another disk, then continue with `ortholab fit "
                           f"--resume RUN_ID`")
    return None


def _config_arguments(argv: list[str]):
    """(index of the value in argv, whether it is `--config=VALUE`, the value) for each `--config` given."""
    for i, arg in enumerate(argv):
        key, eq, value = arg.partition("=")
        if key == "--config" and eq:
            yield i, True, value
        elif key == "--config" and i + 1 < len(argv):
            yield i + 1, False, argv[i + 1]


MAX_EXPANDED_VALUES = 100_000  # a config's values with every YAML alias (*name) written out; real configs: hundreds


def _check_alias_expansion(path: Path, text: str) -> None:
    """Count the values `text` holds once its aliases are expanded, from YAML's events (nothing is built), and
    refuse a document whose aliases multiply it past MAX_EXPANDED_VALUES ("billion laughs") or refer to themselves."""
    sizes: dict[str, int] = {}  # anchor -> the values its node expands to
    open_nodes: list[list] = []  # [anchor, values so far] of each collection being read
    total = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.AliasEvent):
            if any(anchor == event.anchor for anchor, _ in open_nodes):
                raise ConfigError(f"--config {path}: the alias *{event.anchor} refers to the value that holds it (a "
                                  f"value without end); write the value out instead of the alias")
            count = sizes.get(event.anchor, 0)  # an undefined alias: safe_load names it next
        elif isinstance(event, (yaml.ScalarEvent, yaml.CollectionStartEvent)):
            count = 1
            if isinstance(event, yaml.ScalarEvent) and event.anchor:
                sizes[event.anchor] = 1
        elif isinstance(event, yaml.CollectionEndEvent) and open_nodes:
            anchor, count = open_nodes.pop()
            if anchor:
                sizes[anchor] = count
            if open_nodes:
                open_nodes[-1][1] += count
            continue
        else:
            continue
        total += count
        if total > MAX_EXPANDED_VALUES:
            raise ConfigError(f"--config {path}: its YAML aliases (*name) expand to more than {MAX_EXPANDED_VALUES:,} "
                              f"values (a 'billion laughs' document), refused before expanding them; write the "
                              f"values out, or use fewer aliases")
        if isinstance(event, yaml.CollectionStartEvent):
            open_nodes.append([event.anchor, 1])
        elif open_nodes:
            open_nodes[-1][1] += count


def check_config_files(argv: list[str]) -> None:
    """Every existing `--config FILE` is UTF-8 YAML holding a mapping; else one line naming the file and the fix."""
    for _, _, value in _config_arguments(argv):
        path = Path(value)
        if not path.is_file():
            continue  # jsonargparse reports a missing file itself; a packaged name is resolved later
        fix = "a config is a YAML mapping of model:, data: and trainer: (see configs/demo/copying_scornn.yaml)"
        try:
            _check_alias_expansion(path, path.read_text(encoding="utf-8"))  # before anything expands the aliases
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

    from ortholab.db import Store, StoreError
    from ortholab.training.callbacks.lifecycle import check_resume_checkpoint

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
    store = Store(known.db, access="write")  # a mistyped --db is not a new, empty store
    run = store.get_run(known.resume)  # StoreError naming the id and the store when it is missing
    busy = store.lease_holder(run.id)  # its process still runs: two writers would double its points
    if busy is not None:
        raise StoreError(busy)
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
    check_resume_checkpoint(Path(known.ckpt_path) if known.ckpt_path else last, store, run.id)
    return [argv[0], *extra, *argv[1:]]


TOP_HELP = """usage: ortholab {fit,validate,test,predict,runs,list,reproduce,report,...} ...

Train orthogonal/unitary RNNs and record every run in a SQL store.

  fit|validate|test|predict --config FILE [--key value ...] [--db URL]
                         Lightning CLI (see `ortholab fit --help`, `--print_config`)
  predict --run ID [--checkpoint best|last|PATH] [--predict_split test|val|train]
                         a recorded run's predictions, written into a predict run linked to it
  runs [--json] [--db URL]
                         list recorded runs
  list families|tasks|configs [--json] | list families --family NAME
                         what is registered; one family's options (model.family_args)
  data list [NAME] [--json] | data fetch NAME|all [--mirror URL]
                         the data sets that can be fetched (license, size, present?) into $ORTHOLAB_DATA
  sweep --config FILE --space SPACE.yaml --trials N [--workers K] [--sampler grid|random|tpe]
                         hyperparameter search; every trial a recorded run tagged with the sweep
  evaluate-audio RUN_ID [--split val|test] [--utterances N] [--checkpoint best|last|PATH]
                         SegSNR, STOI and PESQ of a speech run's reconstructions, recorded in the run
  bench [--families ...] [--sizes 16k,69k] [--batches 50,128] [--quick] [--json]
                         speed of every family against nn.RNN(relu) and nn.LSTM
  reproduce [TABLE] [--rows a,b] [--scale full|cpu-smoke] [--workers N] [--estimate] | reproduce [TABLE] --list
                         run the papers' table rows, each a recorded run tagged with its row
  report [TABLE] [--all] [--wide]
                         published vs reproduced, as Markdown tables (the rows run; --all: every row)
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
    warnings.filterwarnings("ignore", message="LightningCLI's args parameter")  # it prints the args: --db's password
    try:
        for url in db_urls_in(argv):  # a password that would be misread (and quoted back) is refused first
            check_db_url(url, "--db" if url != os.environ.get("ORTHOLAB_DB") else "$ORTHOLAB_DB =")
        if argv[0] in ("runs", "list", "dashboard", "db", "sweep", "evaluate-audio", "bench", "reproduce",
                       "report"):
            from ortholab.training.commands import run_command

            run_command(argv)
        elif argv[0] == "data":
            from ortholab.training.data_command import data_command

            data_command(argv[1:])
        elif argv[0] in LIGHTNING_SUBCOMMANDS and "--model.family_args.help" in argv:
            from ortholab.training.family_options import describe_options

            at = argv.index("--model.family_args.help")
            if at + 1 >= len(argv):
                raise ConfigError("--model.family_args.help needs a family name, e.g. `ortholab fit "
                                  "--model.family_args.help scornn` (`ortholab list families` names them)")
            print(describe_options(argv[at + 1]))
        elif argv[0] in LIGHTNING_SUBCOMMANDS:
            from ortholab.training.lightning_cli import OrthoLabCLI, task_short_names
            from ortholab.training.predict import predict_arguments
            from ortholab.training.mapping_flags import merge_deep_mapping_flags

            check_config_files(argv)
            packaged = _packaged_configs(argv)
            if packaged != argv:
                given, argv = True, packaged
            resumed = _resume_arguments(predict_arguments(argv))
            if resumed != argv:
                given, argv = True, resumed
            merged = merge_deep_mapping_flags(task_short_names(argv))  # --data.class_path mnist: the task's class;
            # --model.optimizers.other.lr: that option, not the whole group
            if merged != argv:
                given, argv = True, merged
            stdout = sys.stdout
            if "--print_config" in argv or any(a.startswith("--print_config=") for a in argv):
                sys.stdout = MaskedStream(stdout, known_passwords([*argv, *sys.argv]))  # it prints db: too
            try:
                OrthoLabCLI(args=argv if given else None)  # Lightning reads sys.argv itself
            finally:
                sys.stdout = stdout
        else:
            raise ConfigError(f"unknown command {argv[0]!r}; use one of fit, validate, test, predict, runs, list, "
                              f"data, dashboard, db, sweep, evaluate-audio, bench, reproduce, report")
    except BrokenPipeError:  # the reader went away (`ortholab runs | head`): stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush at exit
        sys.exit(0)
    except Exception as err:  # noqa: BLE001 - a user error anywhere in the chain is reported as one line
        user_error = _user_error(err)
        if user_error is None:
            raise
        print(f"ortholab: error: {mask_secrets(str(user_error), known_passwords(argv))}", file=sys.stderr)
        sys.exit(2)


def _loaded(module: str, name: str) -> type | None:
    """A class from a module already imported, else None: an error of a class never imported was never raised, and
    importing it (Lightning, the store) only to test for it would cost seconds."""
    return getattr(sys.modules.get(module), name, None)


def _user_error(err: BaseException | None) -> BaseException | None:
    """The user-facing error behind `err` (jsonargparse wraps errors raised while instantiating)."""
    from ortholab.extras import explain_missing_module

    seen, cause = set(), err
    while cause is not None and id(cause) not in seen:  # an optional package missing: name its extra
        if (missing := explain_missing_module(cause)) is not None:
            return missing
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    reported = tuple(c for c in (ConfigError, _loaded("ortholab.db.store", "StoreError"),
                                 _loaded("ortholab.training.callbacks.nan_guard", "NonFiniteError")) if c is not None)
    misconfigured = _loaded("lightning.fabric.utilities.exceptions", "MisconfigurationException")
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, reported):
            return err
        if (full := _disk_full(err)) is not None:
            return full
        if isinstance(err, RuntimeError) and re.search(r"can't allocate memory|out of memory", str(err), re.I):
            asked = re.search(r"allocate (\d+) bytes", str(err))
            size = f" ({int(asked.group(1)) / 2**30:.3g} GiB in one piece)" if asked else ""
            return ConfigError(f"not enough memory{size}: lower model.hidden_size (or model.num_layers, "
                               f"data.batch_size, data.seq_len)")
        if misconfigured is not None and isinstance(err, misconfigured):  # Lightning's verdict on the trainer settings
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
