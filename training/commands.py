"""`ortholab runs` and `ortholab list`: what is recorded and what is registered."""
from __future__ import annotations

import argparse
import inspect
import json
import sys
from datetime import datetime, timezone
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DB_HELP = "SQLAlchemy URL (default: $ORTHOLAB_DB, else the SQLite file ortholab.db in $ORTHOLAB_RUNS, else in ./runs)"


LINE_WIDTH = 120  # tables printed for a terminal fit this many columns (their --wide flags show every character)


def _table(rows: list[dict], columns: list[str], width: int | None = None) -> str:
    """Aligned columns; with `width`, long text and then the widest columns are cut (ending in …) to fit it."""
    from ortholab.db.published import clip, shrink_to_fit

    cells = [[_fmt(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) if cells else len(c) for i, c in enumerate(columns)]
    if width is not None:  # long text is cut first; ids a user types back never
        first = tuple(columns.index(c) for c in ("published", "config", "description") if c in columns)
        keep = tuple(i for i, c in enumerate(columns) if c in ("id", "table", "row", "run"))
        widths = shrink_to_fit(widths, width - 2 * (len(widths) - 1), first, keep)
    line = lambda values: "  ".join(clip(v, w).ljust(w) for v, w in zip(values, widths)).rstrip()
    return "\n".join([line(columns), line(["-" * w for w in widths]), *map(line, cells)])


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    text = str(value)  # a name recorded with a newline or a tab (older OrthoLab) stays on its row, escaped
    return text if text.isprintable() else text.encode("unicode_escape").decode("ascii")


# ortholab runs -------------------------------------------------------------------------------------
def runs_rows(db_url: str | None) -> list[dict]:
    from ortholab.db import Store
    from ortholab.db.progress import run_progress

    store = Store(db_url, access="read")  # a reader: never creates a store, opens a read-only one read-only
    rows, now = [], datetime.now(timezone.utc)
    for run in store.list_runs():
        d = run.to_dict()
        row = {"id": d["id"], "name": d["name"], "stage": d["stage"], "family": d["family"], "task": d["task"],
               "status": d["status"], "steps": d["steps"], "main_metric": d["main_metric"],
               "best": d["best"], "baseline": d["baseline"], "started": d["created_at"], "tags": d["tags"]}
        row.update(run_progress(store, run, now))  # running runs only: the only rows whose progress changes
        rows.append(row)
    return rows


# ortholab list -------------------------------------------------------------------------------------
def _options(cls, skip: set[str]) -> dict:
    params = inspect.signature(cls.__init__).parameters.values()
    return {p.name: (None if p.default is inspect.Parameter.empty else p.default)
            for p in params if p.name not in skip and p.kind is not inspect.Parameter.VAR_KEYWORD}


def _summary(cls) -> str:
    return (inspect.getdoc(cls) or "").splitlines()[0]


def family_rows() -> list[dict]:
    from ortholab.models import FAMILIES

    rows = []
    for name, cls in FAMILIES.items():
        layer = cls(2, 4)
        rows.append({"family": name, "class": f"{cls.__module__}.{cls.__qualname__}",
                     "groups": sorted(layer.parameter_groups()), "options": _options(cls, {"self", "input_size",
                                                                                        "hidden_size"}),
                     "recurrent_matrix": layer.recurrent_matrix() is not None, "summary": _summary(cls)})
    return rows


def task_rows() -> list[dict]:
    from ortholab.datamodules import TASKS

    from ortholab.errors import ConfigError

    rows = []
    for name, cls in TASKS.items():
        try:
            spec = cls().spec.to_dict()
        except ConfigError:  # the task needs its data to describe itself (text: the vocabulary of its files)
            spec = None
        rows.append({"task": name, "class": f"{cls.__module__}.{cls.__qualname__}", "spec": spec,
                     "options": _options(cls, {"self"}), "summary": _summary(inspect.getmodule(cls))})
    return rows


# Folders under configs/ holding data, not trainable configs: the papers' published tables and the CPU checks
NOT_TRAINABLE = (Path("papers", "published"), Path("papers", "checks"))
NO_DESCRIPTION = "(no description: add a first comment line to this config)"


def config_description(path: Path) -> str:
    """The config's first comment line, read before any YAML content; NO_DESCRIPTION when it has none."""
    for line in path.read_text().splitlines():
        if line.startswith("#") and line.lstrip("# ").strip():
            return line.lstrip("# ").strip()
        if line.strip() and not line.startswith("#"):
            break
    return NO_DESCRIPTION


def config_rows(root: Path | None = None) -> list[dict]:
    """Every trainable config under `root` (default: ./configs, else the repository's) with its description."""
    root = root or (Path.cwd() / "configs" if (Path.cwd() / "configs").is_dir() else REPO_ROOT / "configs")
    rows = []
    for path in sorted(root.rglob("*.yaml")):
        if any(path.relative_to(root).is_relative_to(folder) for folder in NOT_TRAINABLE):
            continue
        rows.append({"config": str(path.relative_to(root.parent)), "description": config_description(path)})
    return rows


def _positive_ints(text: str, flag: str) -> list[int]:
    """'50,128' -> [50, 128]; anything else is one line naming the flag."""
    from ortholab.errors import ConfigError

    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        values = [0]
    if any(v <= 0 for v in values):
        raise ConfigError(f"{flag} {text!r}: give comma-separated positive integers, e.g. {flag} 50,128")
    return values


class OneLineParser(argparse.ArgumentParser):
    """argparse's errors as the CLI's one line (no usage block), naming the help to read; exit code 2."""

    def error(self, message: str):
        from ortholab.db.masking import known_passwords, mask_secrets

        print(f"ortholab: error: {mask_secrets(message, known_passwords(sys.argv))} (see `{self.prog} --help`)",
              file=sys.stderr)
        sys.exit(2)


def run_command(argv: list[str]) -> None:
    parser = OneLineParser(prog="ortholab")
    sub = parser.add_subparsers(dest="command", required=True)
    runs = sub.add_parser("runs", help="list recorded runs (filtered); tag, untag or delete runs")
    runs.add_argument("action", nargs="?", choices=["tag", "untag", "delete"], default=None,
                      help="tag ID... LABEL / untag ID... LABEL: add or remove a label; delete ID...: remove runs, "
                           "their points, artifacts and run folders (asks first; --yes for scripts)")
    runs.add_argument("targets", nargs="*", help="run ids (then the label, for tag and untag)")
    runs.add_argument("--db", default=None, help=DB_HELP)
    runs.add_argument("--json", action="store_true", help="print JSON instead of a table")
    for key in ("family", "task", "status", "tag"):
        runs.add_argument(f"--{key}", default=None, help=f"only the runs of this {key}")
    runs.add_argument("--name", default=None, help="only the runs whose name holds this text (any case)")
    runs.add_argument("--yes", action="store_true", help="delete: without asking")
    board = sub.add_parser("dashboard", help="start the Streamlit dashboard on the run store")
    board.add_argument("--db", default=None, help=DB_HELP)
    board.add_argument("--port", type=int, default=8501)
    board.add_argument("--host", default="127.0.0.1",
                       help="address to listen on; 0.0.0.0 exposes the dashboard to the network (put "
                            "authentication in front of it)")
    sweep = sub.add_parser("sweep", help="hyperparameter search through Optuna, every trial a recorded run; "
                                         "other --key value flags apply to every trial (e.g. --trainer.max_steps)")
    sweep.add_argument("--config", required=True, help="the config every trial starts from")
    sweep.add_argument("--space", required=True, help="YAML: config keys -> list of choices or {low, high[, log]}")
    sweep.add_argument("--trials", type=int, required=True, help="trials in all, over every worker")
    sweep.add_argument("--workers", type=int, default=1, help="processes on this machine working on the sweep")
    sweep.add_argument("--sampler", choices=["grid", "random", "tpe"], default="tpe")
    sweep.add_argument("--name", default=None, help="the sweep's name; workers with the same name and store join it")
    sweep.add_argument("--seed", type=int, default=0)
    sweep.add_argument("--pruner", choices=["median", "none"], default="median",
                       help="stop a trial whose validation is worse than the median of the completed trials' at the "
                            "same step, once 5 have completed (Optuna's MedianPruner; default), or none")
    sweep.add_argument("--db", default=None, help=DB_HELP)
    audio = sub.add_parser("evaluate-audio", help="score a stored speech run's checkpoint: SegSNR, STOI, PESQ "
                                                  "of reconstructed audio, recorded in that run")
    audio.add_argument("run_id", type=int)
    audio.add_argument("--db", default=None, help=DB_HELP)
    audio.add_argument("--split", choices=["val", "test"], default="val")
    audio.add_argument("--utterances", type=int, default=16, help="how many utterances to score (in order)")
    audio.add_argument("--clips", type=int, default=3, help="how many of them to store as audio clips")
    audio.add_argument("--checkpoint", default="best", help="'best', 'last' or a checkpoint path")
    audio.add_argument("--method", choices=["true_phase", "griffin_lim"], default="true_phase")
    from ortholab.training.bench_suites.settings import SUITES, help_text

    bench = sub.add_parser("bench", help="time every family against nn.RNN(relu) and nn.LSTM (one process)",
                           epilog=help_text(), formatter_class=argparse.RawDescriptionHelpFormatter)
    bench.add_argument("--suite", choices=["families", *SUITES], default="families",
                       help="what to measure (default: families, the main table; the suites are listed below)")
    bench.add_argument("--families", default=None, help="comma-separated families (default: all; a suite: one)")
    bench.add_argument("--sizes", default=None, help="parameter budgets: 16k, 69k (default: both)")
    bench.add_argument("--batches", default=None, help="batch sizes (default: 50,128; a suite: its own)")
    bench.add_argument("--seq-len", type=int, default=None, help="sequence length (default: 784; a suite: its own)")
    bench.add_argument("--repeats", type=int, default=None,
                       help="repetitions, the median reported (default: 5; a suite: its own)")
    bench.add_argument("--device", default=None, help="cpu or cuda (default: cuda where available; a suite: "
                                                       "cpu)")
    bench.add_argument("--memory", default=None, help="sequence lengths for peak memory (default: 784,3136; '' "
                                                      "to skip)")
    bench.add_argument("--param", action="append", metavar="KEY=VALUE", help="a suite's own setting (repeatable)")
    bench.add_argument("--quick", action="store_true", help="T=32, batch 8, 2 repeats, 16k only, no memory: "
                                                            "a smoke run for CI (a suite: its quickest form)")
    bench.add_argument("--in-process", action="store_true", help="measure every family in this process instead "
                                                                  "of one process per family (--quick does)")
    bench.add_argument("--json", action="store_true")
    repro = sub.add_parser("reproduce", help="run the papers' table rows from their configs, tagged with the row; "
                                             "other --key value flags apply to every row (e.g. --data.path)")
    repro.add_argument("table", nargs="?", default=None, help="a published table (`ortholab reproduce --list`)")
    repro.add_argument("--list", action="store_true", help="show every row (of TABLE, if given), its config and "
                                                           "whether it has been run")
    repro.add_argument("--rows", default=None, help="comma-separated row ids of the table (default: all); with "
                                                      "--resume, of any table: resume only those rows")
    repro.add_argument("--scale", default="full", help="full (the paper's settings) or cpu-smoke (a few dozen "
                                                       "steps on CPU, to check every row runs)")
    repro.add_argument("--db", default=None, help=DB_HELP)
    repro.add_argument("--json", action="store_true", help="with --list: print JSON")
    repro.add_argument("--wide", action="store_true", help=f"with --list: every column in full (default: lines fit "
                                                           f"{LINE_WIDTH} columns, long text cut with …)")
    repro.add_argument("--resume", action="store_true",
                       help="continue every paper row whose run stopped early (interrupted, or killed with the "
                            "machine; --rows: only those) from its last checkpoint, as the same run; then evaluate it")
    repro.add_argument("--estimate", action="store_true",
                       help="time each chosen row briefly (a temporary store; nothing recorded) and print the hours "
                            "it would take here")
    repro.add_argument("--workers", type=int, default=1,
                       help="rows run at a time, each in its own process with cpu_count / workers threads unless "
                            "OMP_NUM_THREADS is set (default 1: one after another)")
    repro.add_argument("--seeds", default=None, help="train each row once per seed: a count (3: the config's seed and "
                                                       "the next two) or a list (1,2,3); with --estimate: the hours "
                                                       "for all of them")
    repro.add_argument("--stale_minutes", type=float, default=30.0,
                       help="with --resume: a 'running' run silent this long counts as stopped (default 30)")
    report = sub.add_parser("report", help="published vs reproduced, as Markdown tables")
    report.add_argument("table", nargs="?", default=None, help="one published table (default: all)")
    report.add_argument("--all", action="store_true", help="every row of the tables (default: only the rows with a "
                                                           "recorded run)")
    report.add_argument("--wide", action="store_true", help=f"every column and text in full (default: lines fit "
                                                            f"{LINE_WIDTH} columns: empty columns left out, long text "
                                                            f"cut with …)")
    report.add_argument("--db", default=None, help=DB_HELP)
    report.add_argument("--export", default=None, metavar="DIR",
                        help="also write report.md, report.csv, per table a curve plot (PNG and HTML), runs.db (the "
                             "runs behind the numbers) and export.txt into DIR")
    report.add_argument("--with-artifacts", action="store_true",
                        help="with --export: runs.db also holds the runs' artifacts (eigenvalues, audio: larger)")
    database = sub.add_parser("db", help="manage the run store's schema")
    database.add_argument("action", choices=["upgrade", "version"],
                          help="upgrade: migrate the store to this OrthoLab's schema; version: show revisions")
    database.add_argument("--db", default=None, help=DB_HELP)
    database.add_argument("--allow-foreign", action="store_true",
                          help="upgrade: add OrthoLab's tables to a database that holds other applications' tables "
                               "(refused without it)")
    lister = sub.add_parser("list", help="list registered families, tasks or configs")
    lister.add_argument("what", choices=["families", "tasks", "configs"])
    lister.add_argument("--db", default=None, help="accepted for symmetry; listing does not read the store")
    lister.add_argument("--json", action="store_true", help="print JSON instead of a table")
    lister.add_argument("--family", default=None,
                        help="with `families`: that family's options (model.family_args) with types and defaults")
    args, extra = parser.parse_known_args(argv)
    if extra and args.command not in ("sweep", "reproduce"):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")

    if args.command == "dashboard":
        from ortholab.app.launch import run_dashboard
        from ortholab.db import Store
        from ortholab.extras import require_extra

        require_extra("dashboard")  # before the store: a missing part is named first
        Store(args.db, access="read").close()  # a reader: a mistyped --db is reported, not made into a new store
        run_dashboard(args.db, port=args.port, host=args.host)  # replaces this process with the server
        return
    if args.command == "sweep":
        from ortholab.extras import require_extra

        require_extra("sweeps")
        from ortholab.training.sweep import report, run_sweep

        study = run_sweep(args.config, args.space, args.trials, db=args.db, name=args.name, sampler=args.sampler,
                          seed=args.seed, workers=args.workers, extra=extra, pruner=args.pruner)
        print(report(study))
        return
    if args.command == "reproduce" and args.estimate and (args.scale != "full" or args.resume or args.list):
        from ortholab.errors import ConfigError

        raise ConfigError("--estimate times the rows at the paper's settings (--scale full); it takes no "
                          "--scale cpu-smoke, --resume or --list")
    if args.command == "reproduce" and args.resume and args.table:
        from ortholab.errors import ConfigError

        raise ConfigError(f"reproduce --resume continues every unfinished row and takes no table, got "
                          f"{args.table!r}; if that is the value of an option passed on to the runs, write it as "
                          f"--key=value (e.g. --data.path=DIR)")
    if args.command == "reproduce":
        from ortholab.training.reproduce import finish_reproduce, parse_seeds

        if args.seeds is not None and (args.resume or args.list):
            from ortholab.errors import ConfigError

            raise ConfigError("--seeds chooses the runs to train; --resume continues every seed's unfinished run and "
                              "--list lists them: leave --seeds out there")
    if args.command == "reproduce" and args.resume:
        from ortholab.training.reproduce import resume_unfinished

        outcomes = resume_unfinished(args.db, args.stale_minutes * 60, extra, args.workers,
                                     args.rows.split(",") if args.rows else None)
        finish_reproduce(outcomes)
        return
    if args.command == "reproduce" and args.estimate:
        from ortholab.training.reproduce import estimate

        estimate(args.table, args.rows.split(",") if args.rows else None, extra, parse_seeds(args.seeds))
        return
    if args.command == "reproduce" and not args.list:
        from ortholab.training.reproduce import reproduce

        finish_reproduce(reproduce(args.table, args.rows.split(",") if args.rows else None, args.scale, args.db,
                                   extra, args.workers, parse_seeds(args.seeds)))
        return
    if args.command == "report":
        from ortholab.db import Store
        from ortholab.db.published import load_tables, markdown_report
        from ortholab.errors import ConfigError

        tables = load_tables()
        if args.table is not None and args.table not in tables:
            raise ConfigError(f"no published table {args.table!r}; choose one of {sorted(tables)}")
        chosen = {k: v for k, v in tables.items() if args.table in (None, k)}
        from ortholab.training.reproduce import existing_store

        from ortholab.db.store import StoreMissing

        try:  # --all lists the rows before any run; without it, no store is a refusal: nothing recorded to report
            store = existing_store(args.db) if args.all and not args.export else Store(args.db, access="read")
        except StoreMissing as missing:
            hint = "`ortholab report --all` lists the papers' rows before any has run."
            raise StoreMissing(f"{missing} {hint}") from None
        print(markdown_report(store, chosen, recorded_only=not args.all, width=None if args.wide else LINE_WIDTH))
        if args.export:
            from ortholab.app.export import export_report

            for path in export_report(store, chosen, args.export, with_artifacts=args.with_artifacts):
                print(f"wrote {path}", file=sys.stderr)
        return
    if args.command == "evaluate-audio":
        from ortholab.training.audio_eval import evaluate_run

        report = evaluate_run(args.db, args.run_id, split=args.split, utterances=args.utterances, clips=args.clips,
                              checkpoint=args.checkpoint, method=args.method)
        print(report.summary())
        return
    if args.command == "bench":  # torch imported only here: `runs` starts fast
        from ortholab.training.bench import bench_command

        bench_command(args)
        return
    if args.command == "db":
        from ortholab.db import Store, default_db_url
        from ortholab.db.schema_version import head_revision
        from ortholab.db.masking import mask_url

        shown = mask_url(args.db or default_db_url())  # never the password
        if args.action == "upgrade":
            done = Store.upgrade(args.db, allow_foreign=args.allow_foreign)
            removed = (f"; {done.duplicate_points_removed} duplicate metric point(s) removed (the last logged of "
                       f"each kept)") if done.duplicate_points_removed else ""
            print(f"{shown}: schema revision {done.before or 'none'} -> {done.after}{removed}")
        else:
            print(f"this OrthoLab's schema revision: {head_revision()}")
            Store(args.db, access="read")  # raises, saying what to do, unless the store is at that revision
            print(f"{shown}: at {head_revision()}")
        return
    if args.command == "reproduce":  # --list
        from ortholab.training.reproduce import list_rows

        rows = list_rows(args.db, args.table)
        columns = ["row", "family", "task", "published", "config", "status", "run"]
        columns = columns if args.table else ["table", *columns]  # one table: its name on every line says nothing
    elif args.command == "runs" and args.action:
        from ortholab.training.runs_command import manage

        manage(args.action, args.targets, args.db, yes=args.yes)
        return
    elif args.command == "runs":
        from ortholab.db.progress import duration, steps_of_plan
        from ortholab.training.runs_command import filter_rows

        if args.targets:
            parser.error(f"runs: unexpected {args.targets[0]!r}; filter with --family, --task, --status, --tag or "
                         f"--name, or give an action: tag, untag, delete")
        rows = filter_rows(runs_rows(args.db), args.family, args.task, args.status, args.tag, args.name)
        columns = ["id", "name", "stage", "family", "task", "status", "steps", "epoch", "eta", "main_metric", "best",
                   "baseline", "started"]
        if not args.json:  # the table shows UTC start times to the second; JSON keeps full ISO strings
            for row in rows:
                row["started"] = (row["started"] or "")[:19].replace("T", " ")
                row["steps"] = steps_of_plan(row["steps"], row.get("total_steps"))
                row["eta"] = duration(row.get("eta_s"))
                row["status"] = f"{row['status']} ({row['silent']})" if row.get("silent") else row["status"]
    elif args.what == "families" and args.family is not None:
        from ortholab.training.family_options import describe_options, family_options_rows

        if args.json:
            print(json.dumps(family_options_rows(args.family), indent=2, default=repr))
        else:
            print(describe_options(args.family))
        return
    elif args.what == "families":
        rows, columns = family_rows(), ["family", "groups", "recurrent_matrix", "summary"]
    elif args.what == "tasks":
        rows = task_rows()
        for row in rows:
            spec = row["spec"] or {}
            row.update(loss=spec.get("loss"), readout=spec.get("readout"), baseline=spec.get("baseline"))
        columns = ["task", "loss", "readout", "baseline", "summary"]
    else:
        rows, columns = config_rows(), ["config", "description"]
    if args.json:
        print(json.dumps(rows, indent=2, default=str))
    elif not rows:
        filtered = args.command == "runs" and any(getattr(args, k) for k in ("family", "task", "status", "tag", "name"))
        print("no recorded run matches the filters" if filtered else
              "no runs recorded yet" if args.command == "runs" else "nothing registered")
    else:
        wide = args.command != "reproduce" or args.wide  # `reproduce --list` fits LINE_WIDTH unless --wide
        print(_table(rows, columns, None if wide else LINE_WIDTH))
