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

Its parts, each a module of its own: the seeds (cli/reproduce_seeds.py), the flags passed on to every row
(cli/reproduce_flags.py), the rows chosen and listed (cli/reproduce_listing.py), a row trained and evaluated
(cli/reproduce_rows.py), stopped rows found and continued (cli/reproduce_resume.py) and --estimate
(cli/estimate.py). The names other code and the tests import from here are those modules' own (__all__).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

from ortholab.cli import children
from ortholab.cli.common import DB_HELP, LINE_WIDTH, line_width
from ortholab.cli.common import table as text_table
from ortholab.cli.estimate import estimate
from ortholab.cli.reproduce_flags import (
    SMOKE_STEPS,
    check_flags,
    experiment_flags,
    last_flags_win,
    runs_dir_flag,
    smoke_overrides,
)
from ortholab.cli.reproduce_listing import list_rows, select_rows, table_counts
from ortholab.cli.reproduce_resume import continue_run, recorded_seeds, resume_unfinished, unfinished_runs
from ortholab.cli.reproduce_rows import (
    Outcome,
    finish_reproduce,
    fit_failed,
    not_started,
    remember_seeds,
    run_each,
    run_row,
    summary,
)
from ortholab.cli.reproduce_seeds import chosen_seeds, parse_seeds, row_seeds
from ortholab.cli.row_claims import claim_key, claimed
from ortholab.command_name import as_typed
from ortholab.db import Store
from ortholab.db.published import PaperRow, load_tables
from ortholab.db.store import ENV_VAR as DB_ENV_VAR
from ortholab.db.store import RUNS_ENV_VAR, runs_root
from ortholab.errors import ConfigError

__all__ = [  # their homes: cli/reproduce_*.py (tests patch run_row and run_each here, where reproduce() calls them)
    "SMOKE_STEPS",
    "Outcome",
    "experiment_flags",
    "fit_failed",
    "last_flags_win",
    "parse_seeds",
    "resume_unfinished",
    "row_seeds",
    "run_each",
    "run_row",
    "smoke_overrides",
    "summary",
    "unfinished_runs",
]

USAGE = "reproduce [TABLE] [--rows a,b] [--seeds 3] [--workers N] [--estimate] [--resume] | reproduce [TABLE] --list"
HELP = "run the papers' table rows, each a recorded run tagged with its row (and seed)"
EXTRA_FLAGS = True  # other --key value flags apply to every row (e.g. --data.path)
SCALES = ("full", "cpu-smoke")


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
            print(
                as_typed(
                    "`ortholab reproduce --list TABLE` lists a table's rows; `ortholab reproduce TABLE` trains them"
                )
            )
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
    remember_seeds(seeds)
    chosen = select_rows(load_tables(), table, rows)
    if scale == "full" and (hint := checkout_hint(db, extra)):
        print(as_typed(hint), file=sys.stderr, flush=True)
    items = [(row, seed) for row in chosen for seed in chosen_seeds(row, seeds) if (row.tag, seed) not in skip]
    done, stopped = ({}, {}) if again else recorded_seeds(db, scale, experiment_flags(extra))
    outcomes = [
        Outcome(f"{row.tag} (seed {seed}): skipped, {done[row.tag, seed]}", "skipped")
        for row, seed in items
        if (row.tag, seed) in done
    ]
    for outcome in outcomes:
        print(as_typed(outcome.line), flush=True)
    todo = [(row, seed) for row, seed in items if (row.tag, seed) not in done]
    if todo:  # the flags given, and the data of tasks that check theirs (TIMIT's folder)
        check_flags(list(dict.fromkeys(row for row, _ in todo)), extra, scale)
    if todo:  # once, not a failed fit per row and seed
        from ortholab.training.preflight import check_writable_folder, runs_folder_source

        given = runs_dir_flag(extra)
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
            if (row.tag, seed) in done_now:  # (printed by run_each, as every outcome)
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

    return outcomes + run_each(train, todo, workers)


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
