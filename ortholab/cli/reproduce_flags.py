"""The flags `reproduce` passes on to every row: merged with the row's own, checked once, and those of a smoke run."""

from __future__ import annotations

import functools
import os
from concurrent.futures import ThreadPoolExecutor

import yaml

from ortholab.aliases import full_class_path
from ortholab.cli import children
from ortholab.db.published import PaperRow
from ortholab.errors import ConfigError
from ortholab.training.config_files import PACKAGE_ROOT as REPO_ROOT

SMOKE_STEPS = 40
# flags that say where or how a row runs, not what it trains: a run given only these stands for the paper's row
PLACE_FLAGS = (
    "--data.path",
    "--runs_dir",
    "--trainer.accelerator",
    "--trainer.enable_progress_bar",
    "--trainer.enable_model_summary",
)
ORDERED_FLAGS = ("--config", "-c", "--data", "--data.class_path", "--model.class_path")


def _flag_pairs(tokens: list[str]) -> list[tuple[str, list[str]]]:
    """`--key value` and `--key=value` flags as (key, their tokens)."""
    out, i = [], 0
    while i < len(tokens):
        token = tokens[i]
        takes_next = token.startswith("-") and "=" not in token and i + 1 < len(tokens)
        if takes_next and not tokens[i + 1].startswith("--"):
            out.append((token, tokens[i : i + 2]))
            i += 2
        else:
            out.append((token.partition("=")[0], [token]))
            i += 1
    return out


def last_flags_win(*groups: list[str]) -> list[str]:
    """The groups' flags in order, less a key that a later group gives again (the last one wins anyway; the recorded
    command then says each setting once). Flags whose meaning depends on their order are all kept: config files,
    callbacks (`--trainer.callbacks+ X --trainer.callbacks.steps ...` sets the one appended just before) and class
    paths (the options after one apply to its class)."""
    out = []
    for k, group in enumerate(groups):
        later = {key for rest in groups[k + 1 :] for key, _ in _flag_pairs(rest)}
        for key, tokens in _flag_pairs(group):
            if key not in later or key in ORDERED_FLAGS or key.startswith("--trainer.callbacks"):
                out += tokens
    return out


def smoke_overrides(config: dict) -> list[str]:
    """Flags that shorten a row to a CPU smoke run: few steps, validation twice, a few evaluation batches."""
    flags = [
        "--trainer.max_steps",
        str(SMOKE_STEPS),
        "--trainer.max_epochs",
        "null",
        "--trainer.val_check_interval",
        str(SMOKE_STEPS // 2),
        "--trainer.check_val_every_n_epoch",
        "null",
        "--trainer.limit_val_batches",
        "4",
        "--trainer.limit_test_batches",
        "4",
        "--trainer.accelerator",
        "cpu",
        "--trainer.devices",
        "1",
        "--trainer.log_every_n_steps",
        "5",
    ]
    data = config.get("data") or {}
    from ortholab.datamodules import TASKS, task_class_path  # lightning: only where a row is about to run

    named = full_class_path(str(data.get("class_path")))
    task = next((cls for cls in TASKS.values() if full_class_path(task_class_path(cls)) == named), None)
    if getattr(task, "generated_splits", False):  # their split sizes are free to shrink
        batch = int((data.get("init_args") or {}).get("batch_size", 50))
        flags += ["--data.train_size", str(SMOKE_STEPS * batch), "--data.val_size", "200", "--data.test_size", "200"]
    return flags


def experiment_flags(extra: list[str]) -> str | None:
    """The flags of `extra` that change the experiment (all but PLACE_FLAGS) as one text, '--key=value' written as
    '--key value' ('--trainer.max_steps 20 --data.val_size 100'); None when there are none."""
    given: list[list[str]] = []
    for token in extra:
        if token.startswith("--"):
            key, equals, value = token.partition("=")
            given.append([key, value] if equals else [key])
        elif given:
            given[-1].append(token)
    kept = [" ".join(flag) for flag in given if flag[0] not in PLACE_FLAGS]
    return " ".join(kept) or None


def runs_dir_flag(extra: list[str]) -> str | None:
    """The --runs_dir the flags give each fit (the last one), or None."""
    found = None
    for k, token in enumerate(extra):
        key, _, value = token.partition("=")
        if key in ("--runs_dir", "--runs-dir"):
            found = value if value else (extra[k + 1] if k + 1 < len(extra) else None)
    return found


def check_flags(rows: list[PaperRow], extra: list[str], scale: str = "full") -> None:
    """The flags given for every row, read before any row trains with the config of one row of each family and task
    among `rows` (and the scale's flags), side by side up to the cores: a typo, an option another family does not
    take (`--model.family_args.rho` for an LSTM row), or a trainer that would validate nothing is one line and exit 2,
    not a failed fit per row. So is a task's data that is not there (TIMIT without --data.path), for the tasks that
    check theirs: without flags, only one row of each of those is read."""
    kinds: dict[tuple, PaperRow] = {}
    for row in rows:
        if row.config is None:
            continue
        if extra:  # what a flag's validity rests on: the model and the data
            kinds.setdefault((row.family, row.task), row)
        elif _checks_its_data(row.config):
            kinds.setdefault((row.task,), row)
    if not kinds:
        return
    workers = max(1, min(len(kinds), os.cpu_count() or 1, 4))  # each read imports torch: a few hundred MB
    with ThreadPoolExecutor(max_workers=workers) as pool:
        reads = list(pool.map(lambda row: _read_with(row, extra, scale), kinds.values()))
    given = "the flags given to reproduce, read with " if extra else "read with "
    for row, (why, printed) in zip(kinds.values(), reads):
        why = why or children.validates_nothing(printed, "its run would have no result for the report")
        if why:
            raise ConfigError(f"{why} ({given}row {row.tag}'s config; no row was trained)")
    checked: set[str] = set()
    for row, (_, printed) in zip(kinds.values(), reads):
        if row.task not in checked and _checks_its_data(row.config):
            checked.add(row.task)
            if missing := _data_missing(printed):
                raise ConfigError(f"{missing} (row {row.tag}'s data, read as its fit would; no row was trained)")


def _task_class(class_path: object) -> type | None:
    from ortholab import aliases

    try:
        return aliases.config_class(str(class_path or ""), "data.class_path")
    except (ConfigError, ImportError):  # fit itself names what is wrong with it
        return None


@functools.lru_cache(maxsize=None)
def _checks_its_data(config: str) -> bool:
    """Whether the task of this row config checks that its data is there (TIMIT's folder, a music file): a
    check_data of its own, where TaskDataModule's checks nothing."""
    from ortholab.datamodules.base import TaskDataModule

    loaded = yaml.safe_load((REPO_ROOT / config).read_text(encoding="utf-8")) or {}
    data = loaded.get("data") if isinstance(loaded, dict) else None
    task = _task_class(data.get("class_path") if isinstance(data, dict) else None)
    return task is not None and task.check_data is not TaskDataModule.check_data


def _data_missing(printed: dict | None) -> str | None:
    """The task's one line where its data is not there, the task built as fit's printed config says; None where it
    is there, or where anything else goes wrong (the fit names that in its own words)."""
    data = (printed or {}).get("data")
    task = _task_class(data.get("class_path")) if isinstance(data, dict) else None
    if task is None:
        return None
    try:
        task(**(data.get("init_args") or {})).check_data()
    except ConfigError as error:
        return str(error)
    except Exception:  # not this check's to report: the row's fit says it
        return None
    return None


def _read_with(row: PaperRow, extra: list[str], scale: str) -> tuple[str | None, dict | None]:
    """fit's reading of `row`'s config with the row's own flags, the scale's and `extra` (children.read_fit_args)."""
    config_path = REPO_ROOT / row.config
    flags = smoke_overrides(yaml.safe_load(config_path.read_text(encoding="utf-8"))) if scale == "cpu-smoke" else []
    return children.read_fit_args(["--config", str(config_path), *last_flags_win(list(row.args), flags, extra)])
