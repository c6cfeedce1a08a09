"""`ortholab reproduce`: run the papers' table rows from their configs, recorded as normal runs tagged with the row.

Each row is one `ortholab fit` in its own process (a failing row is reported and the next one runs; a row and seed
whose run stopped early is continued as that run, one that finished is skipped), tagged
`paper:<table>/<row>`, `scale:<scale>` and `seed:<seed>`; when the row's metric is measured on the test split, an
`ortholab test` of the best checkpoint follows, and for audio metrics `ortholab evaluate-audio` on the test
split. `--scale cpu-smoke` keeps every row's model and task but trains a few dozen steps on small generated
splits, so that every row's path runs on a CPU in minutes; its numbers are not the paper's. `--workers N` runs N
rows at a time (with --resume too), each process given an equal share of the CPU's threads unless
OMP_NUM_THREADS is set. `--seeds 3` trains each row with its config's seed and the next two (`--seeds 1,2,3`:
those seeds), one run per seed; with --resume, the seeds' stopped runs continue first. Flags that change the
experiment (experiment_flags) tag the runs `flags:...`: a row's runs with other flags neither skip nor continue it.
It ends with one line a script can read, `reproduce: N done, N failed, N skipped` (`N timed` with --estimate), and
exits 1 when a row failed.
Ctrl-C or SIGTERM stops the row training at a batch boundary with its checkpoint (cli/children.py), starts no
other, and exits 130 or 143.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

import yaml

from ortholab.aliases import full_class_path
from ortholab.cli import children
from ortholab.cli.common import DB_HELP, LINE_WIDTH, exit_reason, line_width
from ortholab.cli.common import table as text_table
from ortholab.cli.row_claims import claim_key, claimed
from ortholab.db import Store
from ortholab.db.published import (
    FLAGS_TAG,
    PaperRow,
    PaperTable,
    at_paper_settings,
    load_tables,
    reproductions,
    run_flags,
    run_scale,
)
from ortholab.db.seeds import SEED_TAG, seed_of
from ortholab.db.store import ENV_VAR as DB_ENV_VAR
from ortholab.db.store import RUNS_ENV_VAR, StoreMissing, runs_root
from ortholab.errors import ConfigError, did_you_mean
from ortholab.threads import threads_each
from ortholab.training.config_files import PACKAGE_ROOT as REPO_ROOT

USAGE = "reproduce [TABLE] [--rows a,b] [--seeds 3] [--workers N] [--estimate] [--resume] | reproduce [TABLE] --list"
HELP = "run the papers' table rows, each a recorded run tagged with its row (and seed)"
EXTRA_FLAGS = True  # other --key value flags apply to every row (e.g. --data.path)
SCALES = ("full", "cpu-smoke")
SMOKE_STEPS = 40
# flags that say where or how a row runs, not what it trains: a run given only these stands for the paper's row
PLACE_FLAGS = (
    "--data.path",
    "--runs_dir",
    "--trainer.accelerator",
    "--trainer.enable_progress_bar",
    "--trainer.enable_model_summary",
)


@dataclass(frozen=True)
class Outcome:
    """What became of one row (and seed): its line, and whether it is done, failed, stopped (by a signal, with a
    checkpoint: --resume continues it) or skipped."""

    line: str
    state: str = "done"
    resumed: tuple[str, int | None] | None = None  # the (row tag, seed) a --resume continued


def add_arguments(parser) -> None:
    parser.add_argument("table", nargs="?", default=None, help="a published table (`ortholab reproduce --list`)")
    parser.add_argument(
        "--list",
        action="store_true",
        help="show each table with how many of its rows have run; with TABLE, each row, its config and whether it "
        "has been run (--json: every row)",
    )
    parser.add_argument(
        "--rows",
        default=None,
        help="comma-separated row ids of the table (default: all); with --resume, of any table: resume only those rows",
    )
    parser.add_argument(
        "--scale",
        default="full",
        help="full (the paper's settings) or cpu-smoke (a few dozen steps on CPU, to check every row runs)",
    )
    parser.add_argument("--db", default=None, help=DB_HELP)
    parser.add_argument("--json", action="store_true", help="with --list: print JSON")
    parser.add_argument(
        "--wide",
        action="store_true",
        help=f"with --list: every column in full (default: lines fit the terminal, or {LINE_WIDTH} columns in a "
        f"file or pipe; long text cut with …)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue every paper row (of TABLE, if given; --rows: only those) whose run stopped "
        "early (interrupted, or killed with the machine) from its last checkpoint, as the same "
        "run; then evaluate it. With --seeds: only those seeds' runs, then train the seeds not run yet",
    )
    parser.add_argument(
        "--estimate",
        action="store_true",
        help="time each chosen row briefly (a temporary store; nothing recorded) and print the hours "
        "it would take here: each row on stderr as it is timed, then the table",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="rows run at a time, each in its own process with cpu_count / workers threads unless "
        "OMP_NUM_THREADS is set (default 1: one after another)",
    )
    parser.add_argument(
        "--seeds",
        default=None,
        help="train each row once per seed: a count (3: the config's seed "
        "and the next two) or a list (1,2,3); with --estimate: the "
        "hours for all of them; with --resume: stopped runs of these seeds continue first",
    )
    parser.add_argument(
        "--again",
        action="store_true",
        help="train a row (and seed) anew although it already has a finished run (default: skipped) or a "
        "stopped one (default: continued)",
    )
    parser.add_argument(
        "--stale_minutes",
        type=float,
        default=30.0,
        help="with --resume: a 'running' run silent this long counts as stopped (default 30); one whose process on "
        "this machine has ended counts at once",
    )


def run(args, extra: list[str]) -> None:
    from ortholab.db.store import store_url

    args.db = store_url(args.db) if args.db else None  # a file's path as its absolute URL, for every child process
    rows = [row.strip() for row in args.rows.split(",") if row.strip()] if args.rows is not None else None
    if rows == []:  # `--rows ,` or `--rows ""`: not all the rows, silently
        raise ConfigError(f"--rows {args.rows!r} names no row; give comma-separated row ids (`reproduce --list`)")
    if args.estimate and (args.scale != "full" or args.resume or args.list):
        raise ConfigError(
            "--estimate times the rows at the paper's settings (--scale full); it takes no "
            "--scale cpu-smoke, --resume or --list"
        )
    if args.seeds is not None and args.list:
        raise ConfigError("--seeds chooses the runs to train; --list lists every row's runs: leave --seeds out there")
    if args.resume:
        seeds = parse_seeds(args.seeds)
        scale = args.scale if seeds is not None else None  # the scale --seeds trains at; plain --resume: any
        stale_after_s = args.stale_minutes * 60
        with children.stopping_gracefully():
            outcomes = resume_unfinished(args.db, stale_after_s, extra, args.workers, rows, args.table, seeds, scale)
            if seeds is not None and any(o.state in ("failed", "stopped") for o in outcomes):
                print("--seeds: no new seed started, a resumed run failed or was stopped", flush=True)
            elif seeds is not None and not children.stopped_by():  # the seeds with no run yet, as --seeds alone would
                resumed = {o.resumed for o in outcomes}
                outcomes += reproduce(args.table, rows, args.scale, args.db, extra, args.workers, seeds, skip=resumed)
            finish_reproduce(outcomes)
    elif args.estimate:
        with children.stopping_gracefully():  # Ctrl-C and SIGTERM: the rows timed so far, then exit 130 or 143
            estimate(args.table, rows, extra, parse_seeds(args.seeds))
    elif args.list:
        counted = not args.table and not args.json  # one line a table
        listed = list_rows(args.db, args.table, "Every table's rows are counted as not run." if counted else None)
        width = None if args.wide else line_width()
        if args.json:
            print(json.dumps(listed, indent=2, default=str))
        elif not listed:
            print("nothing registered")
        elif args.table:  # a row's flags follow its config: a T = 100 row of a T = 1000 config says so
            shown = [{**r, "config": " ".join([r["config"], *map(shlex.quote, r["args"])])} for r in listed]
            print(text_table(shown, ["row", "family", "task", "published", "config", "status", "run"], width))
        else:  # every table's rows would be hundreds of lines: one line a table, then how to see its rows
            print(text_table(table_counts(listed), ["table", "title", "rows", "with config", "run", "finished"], width))
            print("`ortholab reproduce --list TABLE` lists a table's rows; `ortholab reproduce TABLE` trains them")
    else:
        with children.stopping_gracefully():
            finish_reproduce(
                reproduce(
                    args.table,
                    rows,
                    args.scale,
                    args.db,
                    extra,
                    args.workers,
                    parse_seeds(args.seeds),
                    again=args.again,
                )
            )


AFTER_A_STOP = " (a stopped run continues from its checkpoint)"


def finish_reproduce(outcomes: list[Outcome], after_a_stop: str = AFTER_A_STOP, done: str = "done") -> None:
    """The summary line last; exit 1 when a row failed or was stopped (0 when every row is done or skipped), 128 + the
    signal when Ctrl-C or SIGTERM stopped the command itself (130, 143)."""
    if stopped := children.stopped_by():
        goes_on = (
            "the rows not timed are marked above" if done == "timed" else "the same command again goes on from there"
        )
        print(f"reproduce: stopped by {children.stop_name()}; {goes_on}{after_a_stop}", flush=True)
    print(summary(outcomes, done=done), flush=True)
    if stopped:
        raise SystemExit(128 + stopped)
    if any(o.state in ("failed", "stopped") for o in outcomes):  # a stopped row is not done either
        raise SystemExit(1)


def summary(outcomes: list[Outcome], what: str = "reproduce", done: str = "done") -> str:
    """The last line a script reads: 'reproduce: 3 done, 1 failed, 0 skipped' ('3 timed' for --estimate), and ', 1
    stopped' where a row's fit was stopped by a signal (with a checkpoint: not failed, not done)."""
    counts = {state: sum(o.state == state for o in outcomes) for state in ("done", "failed", "skipped", "stopped")}
    line = f"{what}: {counts['done']} {done}, {counts['failed']} failed, {counts['skipped']} skipped"
    return line + (f", {counts['stopped']} stopped" if counts["stopped"] else "")


MAX_SEED_COUNT = 20  # --seeds N: N runs per row; a larger number is taken for a seed given without its comma


def parse_seeds(text: str | None) -> int | list[int] | None:
    """--seeds: a count ('3': the config's seed and the next ones) or a comma-separated list ('1,2,3')."""
    if text is None:
        return None
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    try:
        values = [int(p) for p in parts]
    except ValueError:
        values = []
    if not values or ("," not in str(text) and values[0] < 1):
        raise ConfigError(
            f"--seeds {text!r}: give a count (--seeds 3: the config's seed and the next two) or "
            f"seeds separated by commas (--seeds 1,2,3; one seed: --seeds 7,)"
        )
    if "," not in str(text) and values[0] > MAX_SEED_COUNT:  # `--seeds 5546` meant as a seed trains 5546 runs
        raise ConfigError(
            f"--seeds {text}: a count of {values[0]} runs per row (at most {MAX_SEED_COUNT}); to train with the seed "
            f"{values[0]} alone, give it as a list: --seeds {values[0]},"
        )
    if "," not in str(text):
        return values[0]
    return _checked_seed_list(text, values)


MAX_SEED = 2**32 - 1  # seed_everything takes 0 .. 2^32 - 1 (numpy's range)


def _checked_seed_list(text: str, values: list[int]) -> list[int]:
    """--seeds 1,2,3: at most MAX_SEED_COUNT seeds, each in numpy's range, none twice."""
    wrong = next((v for v in values if not 0 <= v <= MAX_SEED), None)
    if wrong is not None:
        raise ConfigError(f"--seeds {text}: seed {wrong} is outside 0 .. {MAX_SEED} (the seeds a run can take)")
    if len(values) > MAX_SEED_COUNT:
        raise ConfigError(f"--seeds {text}: {len(values)} seeds, at most {MAX_SEED_COUNT} per command")
    twice = sorted({v for v in values if values.count(v) > 1})
    if twice:
        raise ConfigError(f"--seeds {text}: seed {twice[0]} is given twice; each seed trains one run per row")
    return values


def row_seeds(config: dict, seeds: int | list[int] | None) -> list[int]:
    """The seeds a row trains with: its config's seed (seed_everything, else 0) and the next ones, or those given."""
    first = config.get("seed_everything")
    first = int(first) if isinstance(first, int) and not isinstance(first, bool) else 0
    if isinstance(seeds, list):
        return seeds
    return [first + k for k in range(seeds or 1)]


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


def select_rows(tables: dict[str, PaperTable], table: str | None, rows: list[str] | None) -> list[PaperRow]:
    if table is not None and table not in tables:
        raise ConfigError(
            f"no published table {table!r}; {did_you_mean(table, tables)}choose one of {sorted(tables)} "
            f"(`ortholab reproduce --list`)"
        )
    chosen = [row for t in tables.values() if table in (None, t.id) for row in t.rows]
    if rows:
        known = {row.row for row in chosen}
        missing = [r for r in rows if r not in known]
        if missing:
            raise ConfigError(
                f"--rows: {missing[0]!r} is not a row of {table or 'any table'}; {did_you_mean(missing[0], known)}"
                f"its rows are {sorted(known)}"
            )
        chosen = [row for row in chosen if row.row in rows]
    return chosen


_child_threads: int | None = None  # OMP_NUM_THREADS of the child processes while several rows run at a time


def _ortholab(*args: str, db: str | None = None) -> int | None:
    """A child `ortholab` process; the store's URL travels in its environment, never on its command line (`ps`).
    None: not started, this command was stopped (Ctrl-C, SIGTERM) before it."""
    from ortholab.db.masking import child_env

    env = child_env(db) if db else dict(os.environ)
    if _child_threads is not None:
        env["OMP_NUM_THREADS"] = str(_child_threads)
    return children.run([*children.ORTHOLAB, *args], env)


def _runs_dir_flag(extra: list[str]) -> str | None:
    """The --runs_dir the flags give each fit (the last one), or None."""
    found = None
    for k, token in enumerate(extra):
        key, _, value = token.partition("=")
        if key in ("--runs_dir", "--runs-dir"):
            found = value if value else (extra[k + 1] if k + 1 < len(extra) else None)
    return found


def check_flags(row: PaperRow, extra: list[str], scale: str = "full") -> None:
    """The flags given for every row, read once with the first row's config (and the scale's flags) before any row
    trains: a typo, or a trainer that would validate nothing, is one line and exit 2, not a failed fit per row."""
    if row.config is None:
        return
    config_path = REPO_ROOT / row.config
    flags = smoke_overrides(yaml.safe_load(config_path.read_text())) if scale == "cpu-smoke" else []
    why, printed = children.read_fit_args(["--config", str(config_path), *last_flags_win(list(row.args), flags, extra)])
    why = why or children.validates_nothing(printed, "its run would have no result for the report")
    if why:
        raise ConfigError(f"{why} (the flags given to reproduce, read with row {row.tag}'s config; no row was trained)")


def not_started(label: str, what: str = "not started") -> Outcome:
    """The outcome of a row this command was stopped before: the same command again goes on from there."""
    return Outcome(f"{label}: {what}, reproduce was stopped ({children.stop_name()})", "skipped")


def estimate(table: str | None, rows: list[str] | None, extra: list[str], seeds: int | list[int] | None = None) -> list:
    """`reproduce --estimate`: time every chosen row briefly, one at a time, and print the hours each would take
    (with `seeds`, in all for its seeds); exit 1 when a row's timing run failed."""
    from ortholab.cli.estimate import Estimate, estimate_row, line, render
    from ortholab.db.masking import child_env

    def run_fit(args: list[str], db: str) -> int:  # quiet: its output only where it failed
        with tempfile.TemporaryFile("w+") as errors:  # a file, not a pipe: a pipe left unread could stall the child
            child = children.start(
                [*children.ORTHOLAB, "fit", *args],
                env=child_env(db),
                stdout=subprocess.DEVNULL,
                stderr=errors,
            )
            if child is None:  # stopped before it started
                return 128 + children.stopped_by()
            code = children.wait(child)
            if code and not children.stopped_by():
                errors.seek(0)
                print(errors.read()[-2000:], file=sys.stderr)
        return code

    def stopped(row) -> str:  # a row the stop came before or during: timed again by the same command
        return f"{row.tag}: not timed, the estimate was stopped ({children.stop_name()})"

    busy = os.getloadavg()[0] if hasattr(os, "getloadavg") else None  # other work, before this timing adds to it
    results = []
    for row in select_rows(load_tables(), table, rows):
        if row.config is None:
            results.append(f"{row.tag}: no config (family {row.family!r}: {row.notes or 'not available'})")
            continue
        if children.stopped_by():
            results.append(stopped(row))
            continue
        print(f"timing {row.tag} ...", file=sys.stderr, flush=True)
        measured = estimate_row(row, REPO_ROOT / row.config, extra, run_fit)
        if children.stopped_by():  # a timing cut short is no timing
            measured = stopped(row)
        results.append(measured)
        # each row as it is timed: an estimate stopped midway keeps what it measured
        print(f"  {line(measured) if isinstance(measured, Estimate) else measured}", file=sys.stderr, flush=True)
    print(render(results, busy), flush=True)
    timed = [item for item in results if isinstance(item, Estimate)]
    if seeds is not None and timed:
        per_row = len(seeds) if isinstance(seeds, list) else seeds
        print(
            f"with {per_row} seed{'s' * (per_row > 1)} per row: {per_row * sum(e.hours for e in timed):.3g} hours "
            f"in all, one run at a time",
            flush=True,
        )
    finish_reproduce(
        [
            Outcome(str(item), "done" if isinstance(item, Estimate) else "failed" if "failed" in item else "skipped")
            for item in results
        ],
        after_a_stop="",
        done="timed",
    )
    return results


def _each(work, items: list, workers: int) -> list[Outcome]:
    """work(item) for every item, `workers` at a time (each a child process, so threads suffice here); every
    outcome printed as it comes. Several workers share the CPU: each child gets cpu_count / workers threads
    (OMP_NUM_THREADS, read by torch at its start) unless the user has set it."""
    if workers < 1:
        raise ConfigError(f"--workers {workers}: give a positive number of rows to run at a time")

    def printed(outcome: Outcome) -> Outcome:
        print(outcome.line, flush=True)
        return outcome

    if workers == 1:  # in this thread; Ctrl-C and SIGTERM: cli/children.py
        return [printed(work(item)) for item in items]
    global _child_threads
    _child_threads = threads_each(workers)
    try:  # Ctrl-C in a terminal reaches every child too (one process group), SIGTERM is passed on: cli/children.py
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return [printed(done.result()) for done in as_completed([pool.submit(work, item) for item in items])]
    finally:
        _child_threads = None


_seeds_given: int | list[int] | None = None  # this command's --seeds, for the hint that continues a stopped row


def seeds_flag(seeds: int | list[int] | None) -> str:
    """' --seeds 3', ' --seeds 4,5', ' --seeds 7,' as the command was given them; '' for none."""
    if seeds is None:
        return ""
    if isinstance(seeds, int):
        return f" --seeds {seeds}"
    return f" --seeds {','.join(map(str, seeds))}{',' if len(seeds) == 1 else ''}"


def fit_failed(label: str, code: int, row: PaperRow, db: str | None, extra: list[str], what: str = "fit") -> Outcome:
    """A fit's non-zero exit as an outcome line; a stop by SIGTERM or Ctrl-C (which save a checkpoint,
    training/callbacks/lifecycle.py) says so and how to continue the row: in its store, with the flags it trained
    with (a run trained anew, having no checkpoint here, takes them again)."""
    from ortholab.db.store import db_flag, default_db_url, store_url

    stops = {128 + signal.SIGTERM: "SIGTERM", 128 + signal.SIGINT: "Ctrl-C"}
    if code in stops:
        where, _ = db_flag(store_url(db or default_db_url()))
        flags = f"{seeds_flag(_seeds_given)}{f' {shlex.join(extra)}' if extra else ''}"
        return Outcome(
            f"{label}: {what} stopped by {stops[code]} with a checkpoint; continue it with "
            f"`ortholab reproduce {row.table} --resume --rows {row.row}{where}{flags}`",
            "stopped",
        )
    return Outcome(f"{label}: {what} failed ({exit_reason(code)})", "failed")


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


def run_row(row: PaperRow, scale: str, db: str | None, extra: list[str], seed: int | None = None) -> Outcome:
    """Train (and evaluate) one row with `seed` (default: its config's); returns its outcome."""
    if row.config is None:
        return Outcome(
            f"{row.tag}: skipped, no config (family {row.family!r}: {row.notes or 'not available'})", "skipped"
        )
    config_path = REPO_ROOT / row.config
    config = yaml.safe_load(config_path.read_text())
    seed = row_seeds(config, None)[0] if seed is None else seed
    seed_tag = f"{SEED_TAG}{seed}"
    changes = experiment_flags(extra)  # a run given them is its own experiment, not the paper's row (db/published.py)
    tags = ["--tags", json.dumps([row.tag, f"scale:{scale}", seed_tag, *([FLAGS_TAG + changes] if changes else [])])]
    flags = smoke_overrides(config) if scale == "cpu-smoke" else []
    name = f"{row.table}.{row.row}"
    label = f"{row.tag} (seed {seed})"
    before = _newest_fit_id(db, row.tag, seed_tag)
    code = _ortholab(
        "fit",
        "--config",
        str(config_path),
        "--name",
        name,
        *tags,
        *last_flags_win(list(row.args), flags, extra),
        "--seed_everything",
        str(seed),
        db=db,
    )
    if code is None:
        return not_started(label)
    if code and not _finished_since(db, row.tag, seed_tag, before):  # a stop heard after its end: it finished
        return fit_failed(label, code, row, db, extra)
    store = Store(db)
    return evaluate_row(
        row, _newest_fit(store, row.tag, seed_tag), config_path, name, tags, db, flags, extra, store, label
    )


def _newest_fit(store: Store, tag: str, seed_tag: str):
    """The row's newest fit with that seed, or None."""
    fits = [r for r in store.list_runs() if tag in r.tags and seed_tag in r.tags and r.stage == "fit"]
    return max(fits, key=lambda r: r.id, default=None)


def _newest_fit_read(db: str | None, tag: str, seed_tag: str):
    """The row's newest fit with that seed, read from the store (None: no store, or no such fit)."""
    try:
        store = Store(db, access="read")
    except StoreMissing:
        return None
    try:
        return _newest_fit(store, tag, seed_tag)
    finally:
        store.close()


def _newest_fit_id(db: str | None, tag: str, seed_tag: str) -> int | None:
    fit = _newest_fit_read(db, tag, seed_tag)
    return None if fit is None else fit.id


def _finished_since(db: str | None, tag: str, seed_tag: str, before: int | None) -> bool:
    """Whether a fit of the row and seed newer than run `before` finished (its process may still exit non-zero:
    a Ctrl-C that came as it ended)."""
    newest = _newest_fit_read(db, tag, seed_tag)
    return newest is not None and (before is None or newest.id > before) and newest.status == "finished"


def evaluate_row(
    row: PaperRow,
    run,
    config_path: Path,
    name: str,
    tags: list[str],
    db: str | None,
    flags: list[str],
    extra: list[str],
    store: Store,
    label: str | None = None,
) -> Outcome:
    """After a row's fit: the test run of its best checkpoint and the audio evaluation, where the row asks."""
    label = label or row.tag
    if row.metric.startswith("test/"):
        checkpoints = sorted((Path(store.get_run(run.id).run_dir) / "checkpoints").glob("best-step*.ckpt"))
        checkpoint = str(checkpoints[-1]) if checkpoints else "last"
        code = _ortholab(
            "test",
            "--config",
            str(config_path),
            "--name",
            name,
            *tags,
            *last_flags_win(list(row.args), flags, extra),
            "--ckpt_path",
            checkpoint,
            db=db,
        )
        if code is None:
            return not_started(label, f"run {run.id} trained, its test not started")
        if code:
            return Outcome(f"{label}: run {run.id} trained; test failed ({exit_reason(code)})", "failed")
    if row.metric.startswith("audio/"):
        code = _ortholab("evaluate-audio", str(run.id), "--split", "test", db=db)
        if code is None:
            return not_started(label, f"run {run.id} trained, its audio evaluation not started")
        if code:
            return Outcome(f"{label}: run {run.id} trained; audio evaluation failed ({exit_reason(code)})", "failed")
    return Outcome(
        f"{label}: run {run.id} {run.status}", {"finished": "done", "interrupted": "stopped"}.get(run.status, "failed")
    )


def unfinished_runs(store: Store, stale_after_s: float) -> list[tuple[PaperRow, object]]:
    """Paper rows whose latest fit stopped before its end: interrupted; 'running' with its process on this machine
    gone (killed by SIGKILL, e.g. the out-of-memory killer), or without a sign of life (no write or heartbeat) for
    `stale_after_s` seconds (killed with its machine); and rows whose fit finished but whose evaluation never did
    (stopped between the two, or the fit resumed by hand)."""
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    found = []
    runs = store.list_runs()
    for table in load_tables().values():
        for row in table.rows:
            by_seed: dict[str | None, list] = {}  # each seed of the row on its own (runs before seeds: None)
            for run in (r for r in runs if row.tag in r.tags and r.stage == "fit"):
                by_seed.setdefault(next((t for t in run.tags if t.startswith(SEED_TAG)), None), []).append(run)
            for fits in by_seed.values():
                fit = max(fits, key=lambda r: r.id)
                silent = (now - fit.heartbeat_at.replace(tzinfo=None)).total_seconds()
                if (
                    fit.status == "interrupted"
                    or (fit.status == "running" and (silent > stale_after_s or store.holder_ended(fit.id)))
                    or (fit.status == "finished" and not _evaluated(store, row, fit, runs))
                ):
                    found.append((row, fit))
    return found


def _resumable(store: Store, run) -> bool:
    """Whether `fit --resume` can continue this run: a finished fit (only its evaluation is left) or one with a
    last checkpoint; a run stopped before its first checkpoint is trained anew instead."""
    if run.status == "finished":
        return True
    return (Path(store.get_run(run.id).run_dir or "") / "checkpoints" / "last.ckpt").is_file()


def _chosen_seeds(row: PaperRow, seeds: int | list[int] | None) -> list[int | None]:
    """The seeds `--seeds` gives this row (from its config's seed); [None] for a row without a config."""
    return row_seeds(yaml.safe_load((REPO_ROOT / row.config).read_text()) or {}, seeds) if row.config else [None]


def _evaluated(store: Store, row: PaperRow, fit, runs: list) -> bool:
    """Whether the evaluation `reproduce` runs after this row's fit exists: a finished test run of the row (and of
    the fit's seed) after the fit (test/ metrics), the audio metric in the fit itself (audio/ metrics); nothing to
    run otherwise."""
    if row.metric.startswith("test/"):
        seed = [t for t in fit.tags if t.startswith(SEED_TAG)]
        return any(
            row.tag in r.tags
            and all(t in r.tags for t in seed)
            and r.stage == "test"
            and r.status == "finished"
            and r.id > fit.id
            for r in runs
        )
    if row.metric.startswith("audio/"):
        return row.metric in store.metric_keys(fit.id)
    return True


def resume_unfinished(
    db: str | None,
    stale_after_s: float,
    extra: list[str],
    workers: int = 1,
    rows: list[str] | None = None,
    table: str | None = None,
    seeds: int | list[int] | None = None,
    scale: str | None = None,
) -> list[Outcome]:
    """`ortholab reproduce [TABLE] --resume`: continue every unfinished row's run (of `table`, if given; or those of
    the row ids in `rows`; with `seeds`, only the runs tagged with those seeds, and at `scale` if given) from its
    last checkpoint (the same run id: no point lost or doubled), `workers` at a time, then evaluate it as `reproduce`
    would have (only that, where the fit had finished). A run with no checkpoint here (stopped before its first, or
    its run folder left behind on another machine) is trained anew, with its seed and scale, as a new run."""
    if not stale_after_s >= 0:  # NaN too: it compared as never stale, silently
        raise ConfigError(
            f"--stale_minutes {stale_after_s / 60:g}: give a number of minutes >= 0 after which a "
            f"silent 'running' run counts as stopped (default 30)"
        )
    if rows:
        known = {row.row for table in load_tables().values() for row in table.rows}
        if unknown := [name for name in rows if name not in known]:
            raise ConfigError(
                f"--rows: no published row is called {', '.join(map(repr, unknown))}; "
                f"`ortholab reproduce --list` shows every row id"
            )
    store = Store(db, access="write")

    def resume(found) -> Outcome:
        row, listed = found
        seed = seed_of(listed, {})
        with claimed(db, claim_key(row.tag, seed, run_scale(listed), run_flags(listed))) as holder:
            if holder is not None:  # another command is continuing it
                label = row.tag if seed is None else f"{row.tag} (seed {seed})"
                outcome = Outcome(f"{label}: skipped, {holder} is training it", "skipped")
                return replace(outcome, resumed=(row.tag, seed))
            return resume_claimed(row, listed, seed)

    def resume_claimed(row: PaperRow, listed, seed: int | None) -> Outcome:
        # the store again, just before the row: another process may have trained, or be training, it since
        fit = next(
            (f for r, f in unfinished_runs(store, stale_after_s) if f.id == listed.id and r.tag == row.tag), None
        )
        if fit is None:  # (printed by _each, as every outcome)
            label = row.tag if seed is None else f"{row.tag} (seed {seed})"
            outcome = Outcome(
                f"{label}: skipped, trained or being trained by another process since run {listed.id} was listed",
                "skipped",
            )
            return replace(outcome, resumed=(row.tag, seed))
        if _resumable(store, fit):
            outcome = continue_run(row, fit.id, store, extra)
        else:  # stopped before its first checkpoint, or trained on a machine whose run folders are gone
            scale = run_scale(fit) or "full"
            print(
                f"{row.tag} (seed {seed}): run {fit.id} has no checkpoint at {store.get_run(fit.id).run_dir}: "
                f"trained anew as a new run",
                flush=True,
            )
            outcome = run_row(row, scale, db, extra, seed)
        return replace(outcome, resumed=(row.tag, seed))

    if table is not None:
        select_rows(load_tables(), table, None)  # an unknown table: one line naming the tables
    found = [(row, fit) for row, fit in unfinished_runs(store, stale_after_s) if table in (None, row.table)]
    if seeds is not None:  # only runs tagged with a seed asked for, at `scale`; any other is left as it is
        found = [
            (row, fit)
            for row, fit in found
            if seed_of(fit, {}) in _chosen_seeds(row, seeds) and (scale is None or f"scale:{scale}" in fit.tags)
        ]
    if rows:
        chosen = [(row, fit) for row, fit in found if row.row in rows]
        if idle := [name for name in rows if all(row.row != name for row, _ in chosen)]:
            others = sorted({row.row for row, _ in found} - set(rows))
            failed = failed_fits(store, idle)
            for fit in failed:
                print(failed_note(fit), file=sys.stderr, flush=True)
            if idle := [
                name
                for name in idle
                if not any(tag.startswith("paper:") and tag.endswith(f"/{name}") for fit in failed for tag in fit.tags)
            ]:
                print(
                    f"nothing to resume for {', '.join(idle)}: not stopped early, still running, or never started"
                    + (f" (unfinished rows: {', '.join(others)})" if others else ""),
                    file=sys.stderr,
                    flush=True,
                )
        found = chosen
    outcomes = _each(resume, found, workers)
    if not outcomes:
        print(
            f"no unfinished paper rows in {store.display_url} (a 'running' run counts as stopped once its process "
            f"on this machine has ended, or after {stale_after_s / 60:g} minutes without a write)",
            flush=True,
        )
    return outcomes


def failed_fits(store: Store, row_ids: list[str]) -> list:
    """The latest fit of each of these rows (and seeds) where it failed (the NaN guard, an error): `--resume`
    continues only runs that stopped, since running a failed one again the same way fails the same way."""
    latest: dict[tuple[str, str | None], object] = {}
    for run in store.list_runs():
        row_tags = [t for t in run.tags if t.startswith("paper:") and t.split("/", 1)[-1] in row_ids]
        if run.stage == "fit" and row_tags:
            key = (row_tags[0], next((t for t in run.tags if t.startswith(SEED_TAG)), None))
            if key not in latest or run.id > latest[key].id:
                latest[key] = run
    return [fit for fit in latest.values() if fit.status == "failed"]


def failed_note(fit) -> str:
    """What to do about a failed paper run, in one line: its reason, and the two ways on."""
    reason = (fit.reason or "no reason recorded").split(" (checkpoint before the step")[0]
    return (
        f"{fit.name}: run {fit.id} failed, recorded up to step {fit.steps} ({reason}); --resume continues only "
        f"stopped runs: "
        f"after fixing the cause, continue it with `ortholab fit --resume {fit.id} --KEY VALUE` (the changed keys "
        f"are recorded with the run) or train the row anew with `--again`"
    )


def continue_run(row: PaperRow, fit_id: int, store: Store, extra: list[str]) -> Outcome:
    """A stopped fit of `row` continued from its last checkpoint as the same run (no point lost or doubled), then
    evaluated as `reproduce` would have; a fit that had finished is only evaluated."""
    fit = store.get_run(fit_id)
    seed = seed_of(fit, {})
    label = row.tag if seed is None else f"{row.tag} (seed {seed})"
    code = 0 if fit.status == "finished" else _ortholab("fit", "--resume", str(fit.id), *extra, db=store.url)
    if code is None:
        return not_started(label, f"run {fit.id} not continued")
    if code and store.get_run(fit.id).status != "finished":  # finished: a stop heard as it ended
        return fit_failed(label, code, row, store.url, extra, what=f"resuming run {fit.id}")
    run = store.get_run(fit.id)
    tags = ["--tags", json.dumps(list(run.tags))]
    path = Path(run.run_dir) / "config.yaml"
    return evaluate_row(row, run, path, run.name, tags, store.url, [], extra, store, label)


def existing_store(db: str | None, absent: str = "Every row is listed as not yet run.") -> Store | None:
    """The store at `db` opened for reading, or None (with a note on stderr ending in `absent`) where there is none
    yet: a paper's rows are listed before any of them has run, and a reader never creates a store."""
    try:
        return Store(db, access="read")
    except StoreMissing as missing:
        print(f"{missing} {absent}", file=sys.stderr)
        return None


def list_rows(db: str | None, table: str | None = None, absent: str | None = None) -> list[dict]:
    """Every row (of `table`, else of every table) with its config and whether the store holds a run of it (no store
    yet: none has run, which `absent` says on stderr, or existing_store's default)."""
    every = load_tables()
    select_rows(every, table, None)  # an unknown table is one line naming the tables
    store = existing_store(db) if absent is None else existing_store(db, absent)
    out = []
    for paper in [t for t in every.values() if table in (None, t.id)]:
        for item in reproductions(store, paper, every):
            scale = run_scale(item.fit) or "full"
            out.append(
                {
                    "table": paper.id,
                    "row": item.row.row,
                    "family": item.row.family,
                    "task": item.row.task,
                    "published": item.row.value if item.row.value is not None else item.row.outcome,
                    "config": item.row.config or "-",
                    "args": list(item.row.args),  # the row's own flags on top of its config (e.g. a shorter T)
                    "status": item.status + ("" if scale == "full" else f"; {scale} scale"),
                    "run": item.fit.id if item.fit else None,
                    "paper settings": bool(item.fit) and at_paper_settings(item.fit),  # full scale, no flags
                }
            )
    return out


def table_counts(listed: list[dict]) -> list[dict]:
    """Per table of `list_rows`'s rows: its title, how many rows it has, have a config, have a run, have finished at
    the paper's settings (a smoke run, or one given flags that change the experiment, is a run but no result)."""
    titles = {table.id: table.title for table in load_tables().values()}
    out: dict[str, dict] = {}
    for item in listed:
        zero = {"rows": 0, "with config": 0, "run": 0, "finished": 0}
        counts = out.setdefault(item["table"], {"table": item["table"], "title": titles[item["table"]], **zero})
        counts["rows"] += 1
        counts["with config"] += item["config"] != "-"
        counts["run"] += item["run"] is not None
        counts["finished"] += item["status"].startswith("finished") and item["paper settings"]
    return list(out.values())


def reproduce(
    table: str | None,
    rows: list[str] | None,
    scale: str,
    db: str | None,
    extra: list[str],
    workers: int = 1,
    seeds: int | list[int] | None = None,
    again: bool = False,
    skip: set[tuple[str, int | None]] = frozenset(),
) -> list[Outcome]:
    """Every chosen row, once per seed (`seeds`: a count from the config's seed, or a list; default its seed); a row
    and seed whose run finished (and was evaluated) at this scale, or is being trained now, is skipped, and one
    whose run stopped (interrupted, killed, or not evaluated) is continued as that run, unless `again`; those in
    `skip` (row tag, seed: just resumed) are left out silently."""
    if scale not in SCALES:
        raise ConfigError(f"--scale {scale!r}; choose one of {SCALES}")
    global _seeds_given
    _seeds_given = seeds
    chosen = select_rows(load_tables(), table, rows)
    if scale == "full" and (hint := checkout_hint(db, extra)):
        print(hint, file=sys.stderr, flush=True)
    items = [(row, seed) for row in chosen for seed in _chosen_seeds(row, seeds) if (row.tag, seed) not in skip]
    done, stopped = ({}, {}) if again else recorded_seeds(db, scale, experiment_flags(extra))
    outcomes = [
        Outcome(f"{row.tag} (seed {seed}): skipped, {done[row.tag, seed]}", "skipped")
        for row, seed in items
        if (row.tag, seed) in done
    ]
    for outcome in outcomes:
        print(outcome.line, flush=True)
    todo = [(row, seed) for row, seed in items if (row.tag, seed) not in done]
    if extra and todo:
        check_flags(todo[0][0], extra, scale)
    if todo:  # once, not a failed fit per row and seed
        from ortholab.training.preflight import check_writable_folder, runs_folder_source

        given = _runs_dir_flag(extra)
        check_writable_folder(given or str(runs_root()), runs_folder_source(given))

    def train(item) -> Outcome:
        row, seed = item
        with claimed(db, claim_key(row.tag, seed, scale, experiment_flags(extra))) as holder:
            if holder is not None:  # another command began it a moment ago, before its run was recorded
                return Outcome(f"{row.tag} (seed {seed}): skipped, {holder} is training it", "skipped")
            return train_claimed(row, seed)

    def train_claimed(row: PaperRow, seed: int | None) -> Outcome:
        latest = stopped
        if not again:  # the store again, just before the row: another process may have trained or begun it since
            done_now, latest = recorded_seeds(db, scale, experiment_flags(extra))
            if (row.tag, seed) in done_now:  # (printed by _each, as every outcome)
                return Outcome(f"{row.tag} (seed {seed}): skipped, {done_now[row.tag, seed]}", "skipped")
        if (row.tag, seed) not in latest:
            return run_row(row, scale, db, extra, seed)
        if children.stopped_by():
            return not_started(f"{row.tag} (seed {seed})", f"run {latest[row.tag, seed]} not continued")
        print(f"{row.tag} (seed {seed}): continuing run {latest[row.tag, seed]}, stopped before its end", flush=True)
        store = Store(db, access="write")
        try:
            return continue_run(row, latest[row.tag, seed], store, extra)
        finally:
            store.close()

    return outcomes + _each(train, todo, workers)


def recorded_seeds(
    db: str | None, scale: str, flags: str | None = None
) -> tuple[dict[tuple[str, int], str], dict[tuple[str, int], int]]:
    """Per (row tag, seed) of the runs at `scale` given the same experiment `flags` (experiment_flags): why it
    needs no new run (its latest fit finished and was evaluated, or another process is training it now), and the id
    of its latest fit where that stopped before its end (interrupted; 'running' with no live process holding it;
    finished but not evaluated). Nothing where there is no store yet."""
    try:
        store = Store(db, access="read")
    except StoreMissing:
        return {}, {}
    try:  # closed before the runs start: an open reader would hold the SQLite file
        runs = store.list_runs()
        latest: dict[tuple[str, int], object] = {}
        ours = (r for r in runs if r.stage == "fit" and f"scale:{scale}" in r.tags and run_flags(r) == flags)
        for run in sorted(ours, key=lambda r: r.id):
            seed = seed_of(run, {})
            for tag in (t for t in run.tags if t.startswith("paper:")):
                latest[tag, seed] = run
        rows = {row.tag: row for table in load_tables().values() for row in table.rows}
        found, stopped = {}, {}
        for (tag, seed), run in latest.items():
            if tag in rows and run.status == "finished" and _evaluated(store, rows[tag], run, runs):
                found[tag, seed] = f"run {run.id} finished (--again trains it anew)"
            elif run.status != "finished" and store.lease_holder(run.id) is not None:  # interrupted: still ending
                found[tag, seed] = f"run {run.id} is being trained by another process"
            elif tag in rows and run.status in ("interrupted", "running", "finished") and _resumable(store, run):
                stopped[tag, seed] = run.id
        return found, stopped
    finally:
        store.close()


def checkout_hint(db: str | None, extra: list[str]) -> str | None:
    """A note when hours of runs would go to ./runs inside a git checkout (no --db, $ORTHOLAB_DB, --runs_dir or
    $ORTHOLAB_RUNS), where a fresh clone would not find them; None otherwise."""
    if (
        db
        or os.environ.get(DB_ENV_VAR)
        or os.environ.get(RUNS_ENV_VAR)
        or any(arg.split("=")[0] == "--runs_dir" for arg in extra)
    ):
        return None
    here = Path.cwd().resolve()
    if not any((folder / ".git").exists() for folder in (here, *here.parents)):
        return None
    return (
        f"note: the store and run folders go to {here / 'runs'}, inside a git checkout; to keep long runs "
        f"where a fresh clone finds them, stop this and `export ORTHOLAB_RUNS=~/ortholab-runs` (or give --db "
        f"and --runs_dir)"
    )
