"""`ortholab runs`: the recorded runs, filtered (`--export DIR`: those runs as runs.db, runs.csv and export.txt,
app/runs_export.py); `runs show ID`: one run whole; `runs tag ID... LABEL` /
`runs untag ID... LABEL` add or remove a label; `runs delete ID...` removes runs (their rows, metric points,
artifacts and run folders) after a confirmation (`--yes` for scripts), never a run that is being written, never
another run."""

from __future__ import annotations

import functools
import json
import math
import re
import shutil
import sys
import textwrap
from collections import Counter
from pathlib import Path

from ortholab import aliases
from ortholab.cli.common import (
    DB_HELP,
    add_export_extras,
    export_extra_given,
    fmt,
    refuse_export_extras_without_export,
    table,
)
from ortholab.cli.runs_sort import sort_rows
from ortholab.command_name import as_typed
from ortholab.db.progress import copy_note, run_progress, runs_rows
from ortholab.db.provenance import restore_notes, resume_notes
from ortholab.errors import ConfigError, did_you_mean

ACTIONS = ("list", "show", "tag", "untag", "delete")  # list: the default, as `runs` alone
PROVENANCE_TAGS = ("paper:", "scale:", "seed:", "flags:")  # reproduce's tags (db/published.py, db/seeds.py)
SWEEP_TAGS = ("sweep:", "trial:")  # sweep's tags (training/lightning_cli.py's TRIAL_TAGS, without loading Lightning)
USAGE = (
    "runs [list] [--family F] [--task T] [--status S] [--tag T] [--name TEXT] [--columns KEYS] [--sort KEY [--desc]] "
    "[--json] [--export DIR [--with-artifacts] [--with-checkpoints]] | runs show ID | "
    "runs tag|untag|delete ID... [LABEL]"
)
HELP = "list recorded runs (filtered); show one whole; tag, untag or delete runs"
COLUMNS = [
    "id",
    "name",
    "stage",
    "family",
    "task",
    "status",
    "steps",
    "epoch",
    "eta",
    "main_metric",
    "best",
    "baseline",
    "started",
    "reason",
]
MADE_FROM = {  # how `runs delete` names the runs made from a run it deletes, by their stage (Store.runs_made_from)
    "predict": "predictions of run {}",
    "test": "tests of run {}'s checkpoint",
    "validate": "validations of run {}'s checkpoint",
    "fit": "trained on from run {}'s checkpoint",
}
HOW_TORCH_RUNS_IT = {"foreach", "fused", "capturable", "differentiable"}  # options that change no update, left unsaid
STARTED = "started (UTC)"  # the table's header of `started` (--json: "started", an ISO time with its offset)
REASON_WIDTH = 60  # the table shows a failed or stopped run's reason cut to this; --json and the dashboard in full


def add_arguments(parser) -> None:
    parser.add_argument(
        "action",
        nargs="?",
        choices=ACTIONS,
        default=None,
        help="list (the default): the runs, filtered and sorted by the options below; show ID: one run whole "
        "(settings it was started and continued with, its code, folder and "
        "checkpoints); tag ID... LABEL / untag ID... LABEL: add or remove a label; delete ID...: remove runs, "
        "their points, artifacts and run folders (asks first; --yes for scripts)",
    )
    parser.add_argument("targets", nargs="*", help="run ids (then the label, for tag and untag)")
    parser.add_argument("--db", default=None, help=DB_HELP)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    for key in ("family", "task", "status", "tag"):
        parser.add_argument(f"--{key}", default=None, help=f"only the runs of this {key}")
    parser.add_argument("--name", default=None, help="only the runs whose name holds this text (any case)")
    parser.add_argument("--yes", action="store_true", help="delete: without asking")
    parser.add_argument(
        "--columns",
        default=None,
        help="comma-separated keys shown as columns after `baseline`: a config key as fit takes it "
        "(model.optimizers.recurrent.lr, data.seq_len) shows each run's value, a metric (val/acc) its last value",
    )
    parser.add_argument(
        "--sort",
        default=None,
        metavar="KEY",
        help="order the runs by a column (id, name, family, task, status, steps, best, started, ...) or a --columns "
        "key, smallest first (runs without a value last); default: newest first (by id)",
    )
    parser.add_argument("--desc", action="store_true", help="with --sort: largest first")
    parser.add_argument(
        "--export",
        default=None,
        metavar="DIR",
        help="also write the runs listed into DIR, to hand on: runs.db (a store of exactly those runs; "
        "`ortholab dashboard --db DIR/runs.db` draws their curves), runs.csv (a line per run: the listing's "
        "columns and the commit, machine and command that trained it) and export.txt (who wrote them, when, "
        "from which store); no run listed: one line, nothing written",
    )
    add_export_extras(
        parser,
        "with --export: DIR/checkpoints also holds the config and checkpoints of the unfinished runs, so that "
        "`ortholab restore DIR` continues them on another machine",
    )


def run(args, extra: list[str]) -> None:
    if args.action == "list":  # `ortholab runs list`, as a newcomer types it: the listing
        args.action = None
    given = export_extra_given(args)
    if args.action and (args.export is not None or given):
        flag = "--export" if args.export is not None else given
        raise ConfigError(f"runs {args.action}: {flag} exports a listing: `ortholab runs [filters] --export DIR`")
    refuse_export_extras_without_export(args)
    if args.export is not None:  # a folder it may not write into is refused before the store is read
        from ortholab.app.runs_export import check_runs_export_folder

        check_runs_export_folder(args.export)
    if args.action == "show":
        show(args.targets, args.db, as_json=args.json)
        return
    if args.action:
        manage(args.action, args.targets, args.db, yes=args.yes)
        return
    if args.targets:
        raise ConfigError(
            f"runs: unexpected {args.targets[0]!r}; filter with --family, --task, --status, --tag or "
            f"--name, or give an action: tag, untag, delete"
        )
    if args.status is not None:
        from ortholab.db.store import STATUSES

        if args.status not in STATUSES:  # a fixed set: a typo is not "no run matches"
            raise ConfigError(
                f"--status {args.status}: {did_you_mean(args.status, STATUSES)}a run is one of {', '.join(STATUSES)}"
            )
    recorded = runs_rows(args.db)
    refuse_unknown_names(recorded, args.family, args.task)
    rows = filter_rows(recorded, args.family, args.task, args.status, args.tag, args.name)
    keys = [key.strip().replace(".init_args.", ".") for key in (args.columns or "").split(",") if key.strip()]
    if args.columns is not None and not keys:
        raise ConfigError(f"--columns {args.columns!r} names no key; give comma-separated keys (data.seq_len,val/acc)")
    rows = with_columns(rows, keys, args.db) if keys and rows else rows
    if args.sort is not None:
        rows = sort_rows(rows, args.sort, [*COLUMNS, *keys], desc=args.desc)
    elif args.desc:
        raise ConfigError("--desc orders a --sort: give --sort KEY (e.g. --sort best --desc)")
    at = COLUMNS.index("baseline") + 1
    if args.export is not None:  # checked before the listing prints: nothing listed, or a runs.db not to replace
        from ortholab.app.export import check_export_target
        from ortholab.db import Store

        if not rows:  # one line, exit 2: nothing to hand on, nothing written
            raise ConfigError(f"--export {args.export}: {no_match(recorded, args)}; nothing written")
        store = Store(args.db, access="read")
        check_export_target(store, args.export, reader="this listing")
    if args.json:  # full ISO start times; NaN as null (JSON has no NaN)
        plain = [{k: _finite(v) if isinstance(v, float) else v for k, v in row.items()} for row in rows]
        print(json.dumps(plain, indent=2, default=str))
    elif rows:
        lines = [shown(row) for row in rows]  # rows stay as they are for an export
        columns = COLUMNS if any(line["reason"] for line in lines) else COLUMNS[:-1]
        columns = [STARTED if column == "started" else column for column in columns]
        print(table(lines, [*columns[:at], *keys, *columns[at:]]))
        if note := copy_note(args.db):
            print(as_typed(note))
    else:
        print(as_typed(no_match(recorded, args)))
    if args.export is not None:
        from ortholab.app.export import earlier_export
        from ortholab.app.runs_export import export_runs

        earlier = earlier_export(args.export)
        columns = [*COLUMNS[:at], *keys, *COLUMNS[at:]]
        written = export_runs(
            store,
            rows,
            columns,
            args.export,
            with_artifacts=args.with_artifacts,
            with_checkpoints=args.with_checkpoints,
        )
        for path in written:
            print(f"wrote {path}", file=sys.stderr)
        if earlier:
            print(f"(these replace the export {earlier.removeprefix('written ')})", file=sys.stderr)


SEED_HINT = (  # the nearest key by spelling, data.seed, is the task's data, which `reproduce --seeds` leaves alone
    "did you mean 'seed_everything' (a run's seed, which `reproduce --seeds` sets; data.seed seeds the task's data)? "
)


def with_columns(rows: list[dict], keys: list[str], db: str | None) -> list[dict]:
    """`rows` with each key's value per run: a config key's (`data.seq_len` finds `data.init_args.seq_len`), or a
    metric's last value (a key holding '/'). A key no listed run has is one line naming the nearest one."""
    from ortholab.db import Store
    from ortholab.models import FAMILIES
    from ortholab.training.family_options import optimizer_groups

    store = Store(db, access="read")
    ids = [row["id"] for row in rows]
    settings = {i: {k.replace(".init_args.", "."): v for k, v in p.items()} for i, p in store.params_of(ids).items()}
    metrics = [key for key in keys if "/" in key]
    last = store.last_values(ids, metrics) if metrics else {}

    def setting(run_id: int, key: str):  # a whole group (model.optimizers.recurrent) as the mapping fit takes
        held = settings[run_id]
        inner = {k[len(key) + 1 :]: v for k, v in held.items() if k.startswith(key + ".")}
        if key in held or inner:
            return held[key] if key in held else inner
        group = re.fullmatch(r"model\.optimizers\.(\w+)(\..+)?", key)  # a group the config leaves to `default`
        if group and group[1] != "default" and group[1] in groups_of(run_id):
            return setting(run_id, f"model.optimizers.default{group[2] or ''}")
        return None

    @functools.cache
    def groups_of(run_id: int) -> set[str]:  # the run's family's parameter groups, as its options build them
        held = settings[run_id]
        family = held.get("model.family")
        options = {k[len("model.family_args.") :]: v for k, v in held.items() if k.startswith("model.family_args.")}
        return optimizer_groups(family, options) if family in FAMILIES else set()

    for key in keys:
        if key in COLUMNS:
            raise ConfigError(f"--columns {key}: the table has that column already")
        held = any((i, key) in last for i in ids) if "/" in key else any(setting(i, key) is not None for i in ids)
        if not held:
            known = {k for i in ids for k in settings[i]} | {k for i in ids for k in store.metric_keys(i)}
            hint = SEED_HINT if key.lower() in ("seed", "seeds") else did_you_mean(key, known)
            raise ConfigError(
                f"--columns {key}: no listed run has this {'metric' if '/' in key else 'setting'}; "
                f"{hint}`ortholab runs show ID --json` lists a run's settings (params) and metrics"
            )
    return [
        {
            **row,
            **{key: last.get((row["id"], key)) if "/" in key else setting(row["id"], key) for key in keys},
        }
        for row in rows
    ]


def refuse_unknown_names(recorded: list[dict], family: str | None, task: str | None) -> None:
    """A --family or --task value that no recorded run has and that names no registered family or task (a typo,
    `--family scorn`) is refused in one line with the nearest name; a registered one without runs lists none. The
    registries (torch's import) are read only for a value no run has."""
    for key, value, listed in (("family", family, "families"), ("task", task, "tasks")):
        if value is None or any(row[key] == value for row in recorded):
            continue
        names = registered_names(key)
        if value not in names:
            known = names | {str(row[key]) for row in recorded if row[key] is not None}
            raise ConfigError(
                f"--{key} {value}: no {key} of this name is registered or recorded; {did_you_mean(value, known)}"
                f"`ortholab list {listed}` names them{aliases.unimportable_note()}"
            )


def registered_names(key: str) -> set[str]:
    """The names of the registered families or tasks (`key`), the user's own ($ORTHOLAB_CONFIG_MODULES) among them."""
    aliases.import_user_modules()
    if key == "family":
        from ortholab.models import FAMILIES

        return set(FAMILIES)
    from ortholab.datamodules import TASKS

    return set(TASKS)


def no_match(recorded: list[dict], args) -> str:
    """Why nothing is listed: no run recorded, or none matching the filters (with unmatched_hint's hint)."""
    if any(getattr(args, k) for k in ("family", "task", "status", "tag", "name")):
        return f"no recorded run matches the filters{unmatched_hint(recorded, args)}"
    return "no runs recorded yet"


def unmatched_hint(recorded: list[dict], args) -> str:
    """For a --family, --task or --status value no recorded run has: the values recorded, and the nearest one."""
    for key in ("family", "task", "status"):
        wanted, values = getattr(args, key), sorted({str(row[key]) for row in recorded if row[key] is not None})
        if wanted is not None and wanted not in values and values:
            near = did_you_mean(wanted, values).strip()  # case aside: LSTM finds lstm
            return (
                f"; no run has --{key} {wanted}" + (f" ({near})" if near else "") + (f"; recorded: {', '.join(values)}")
            )
    tags = sorted({tag for row in recorded for tag in row["tags"] or ()})
    if args.tag is not None and args.tag not in tags:
        near = did_you_mean(args.tag, tags).strip()
        return f"; no run has the tag {args.tag}" + (f" ({near})" if near else "")
    return ""


def shown(row: dict) -> dict:
    """A row as the table shows it: UTC start to the second, steps of the plan (none if evaluated), ETA, silence."""
    from ortholab.db.progress import duration, steps_of_plan

    return {
        **row,
        STARTED: (row["started"] or "")[:19].replace("T", " "),
        "steps": steps_of_plan(row["steps"], row.get("total_steps")) if row.get("stage") == "fit" else None,
        "eta": duration(row.get("eta_s")),
        "status": f"{row['status']} ({row['silent']})" if row.get("silent") else row["status"],
        "reason": _cut(row.get("reason") if row["status"] != "finished" else None, REASON_WIDTH),
    }


def _cut(text: str | None, width: int) -> str | None:
    return text if text is None or len(text) <= width else text[: width - 1] + "…"


def filter_rows(
    rows: list[dict],
    family: str | None = None,
    task: str | None = None,
    status: str | None = None,
    tag: str | None = None,
    name: str | None = None,
) -> list[dict]:
    """The rows matching every filter given: family, task and status exactly, a tag among the run's, a part of the
    name (case-insensitive)."""

    def keep(row: dict) -> bool:
        return (
            (family is None or row["family"] == family)
            and (task is None or row["task"] == task)
            and (status is None or row["status"] == status)
            and (tag is None or tag in row["tags"])
            and (name is None or name.lower() in str(row["name"]).lower())
        )

    return [row for row in rows if keep(row)]


def _run_ids(values: list[str], action: str) -> list[int]:
    try:
        ids = [int(v) for v in values]
    except ValueError:
        bad = next(v for v in values if not v.lstrip("-").isdigit())
        raise ConfigError(
            f"runs {action}: {bad!r} is not a run id; give {'a run id' if action == 'show' else 'run ids'} "
            f"(`ortholab runs` lists them)" + (" then the label" if action in ("tag", "untag") else "")
        ) from None
    if not ids:
        usage = "ID... LABEL" if action in ("tag", "untag") else "ID..."
        raise ConfigError(f"runs {action}: give at least one run id: `ortholab runs {action} {usage}`")
    return list(dict.fromkeys(ids))


def show(targets: list[str], db: str | None, as_json: bool = False) -> None:
    """`runs show ID`: what the store holds of one run beyond its `runs` line, as lines (or the whole record)."""
    from ortholab.db import Store

    if len(targets) != 1:
        raise ConfigError("runs show: give one run id, e.g. `ortholab runs show 3` (`ortholab runs` lists them)")
    (run_id,) = _run_ids(targets, "show")
    store = Store(db, access="read")
    run = store.get_run(run_id)  # StoreError naming a missing id and the store
    silent = run_progress(store, run, store.clock()).get("silent")  # as `runs` says it: killed outright?
    if as_json:
        last = {key: _finite(v) for (_, key), v in store.last_values([run_id], store.metric_keys(run_id)).items()}
        kinds = Counter(a.kind for a in store.artifacts(run_id))
        record = {**run.to_dict(), **({"silent": silent} if silent else {})}  # the `silent` of `runs --json`
        print(json.dumps({**record, "last_values": last, "artifacts": dict(kinds)}, indent=2, default=str))
        return
    print(as_typed("\n".join([*run_card(run, silent), *record_lines(store, run_id)])))
    if note := copy_note(store):
        print(as_typed(note))


def _finite(value: float) -> float | None:
    """JSON has no NaN or infinity: such a value is null."""
    return value if math.isfinite(value) else None


def record_lines(store, run_id: int, width: int = 120) -> list[str]:
    """What the run recorded: the last value of each metric key, one line per prefix (keys one level deeper, such as
    each utterance's scores, counted), and the analyses by kind, as `runs show` says them."""
    keys = store.metric_keys(run_id)
    top = [key for key in keys if key.count("/") <= 1]
    last = store.last_values([run_id], top)
    groups: dict[str, list[str]] = {}
    for key in top:
        prefix, _, name = key.rpartition("/")
        if (run_id, key) in last:
            groups.setdefault(prefix or "-", []).append(f"{name} {fmt(last[(run_id, key)])}")
    lines = ["last values:"] if groups else ["last values: (none recorded)"]
    for prefix, items in groups.items():
        lines += textwrap.wrap(f"{prefix}: {', '.join(items)}", width, initial_indent="  ", subsequent_indent="    ")
    if deeper := len(keys) - len(top):
        lines.append(f"  and {deeper} keys one level deeper, such as each utterance's scores (`--json` has them)")
    kinds = Counter(a.kind for a in store.artifacts(run_id))
    if kinds:
        listed = ", ".join(f"{kind} {count}" for kind, count in kinds.items())
        lines.append(f"analyses: {listed} (the dashboard draws them; docs/library.md reads them in Python)")
    return lines


def _optimizer_text(group: str, spec: dict) -> str:
    """'recurrent rmsprop_tf (lr 0.001; defaults: decay 0.9, eps 1e-10, ...)': the options given, then the rest at
    this OrthoLab's defaults (torch is imported here only)."""
    from ortholab.models.optimizers import OPTIMIZERS, optimizer_defaults

    name = spec.get("name")
    given = {k: v for k, v in spec.items() if k != "name"}
    defaults = optimizer_defaults(name) if name in OPTIMIZERS else {}
    rest = {k: v for k, v in defaults.items() if k not in given and k not in HOW_TORCH_RUNS_IT}
    text = ", ".join(f"{k} {fmt(v)}" for k, v in given.items())
    text += f"; defaults: {', '.join(f'{k} {fmt(v)}' for k, v in rest.items())}" if rest else ""
    return f"{group} {name} ({text})"


def run_card(run, silent: str | None = None) -> list[str]:
    """One run as lines: what, where, the best value, the code and command it began with, each continuation.
    `silent`: a 'running' run's silence as `runs` says it (db/progress.py), with its last heartbeat."""
    info = run.info or {}
    status = run.status
    if silent:  # killed outright, still 'running' in the store: how long ago, and how to go on
        resume = f"; `ortholab fit --resume {run.id}` continues it" if run.stage == "fit" else ""
        status += f" ({silent}; last heartbeat {run.heartbeat_at:%Y-%m-%d %H:%M} UTC{resume})"
    none = "no validation value yet" if run.stage == "fit" else f"no best value (a {run.stage} run)"
    said = "best " if run.stage == "fit" else ""  # an evaluation's one value, not a best of several
    best = f"{said}{run.main_metric} {run.best:.4g}" if run.best is not None else none
    baseline = f" (baseline {run.baseline:.4g})" if run.baseline is not None else ""
    total = (info.get("plan") or {}).get("total_steps")
    lines = [
        f"run {run.id}: {run.name} · {run.stage} · {run.family or '-'} on {run.task or '-'} · {status}"
        + (f" ({run.reason})" if run.reason else ""),
        (f"steps {run.steps}{f'/{total}' if total else ''} · " if run.stage == "fit" else "")  # an evaluation trains
        + f"{best}{baseline}"  # none: its checkpoint is said below
        + (f" · {run.parameter_count:,} parameters" if run.parameter_count else ""),
        f"started {run.created_at:%Y-%m-%d %H:%M} UTC on {run.hostname or '?'}"
        + (f", {run.world_size} processes" if run.world_size > 1 else "")
        + (f" · ended {run.ended_at:%Y-%m-%d %H:%M} UTC" if run.ended_at else ""),
        f"tags: {', '.join(run.tags) or '(none)'}",
        f"run folder: {run.run_dir or '(none)'}",
    ]
    optimizers = info.get("optimizers") or {}  # as the run resolved them: a config's `optimizers: {}` says nothing
    if optimizers:
        lines.append(f"optimizers: {'; '.join(_optimizer_text(group, spec) for group, spec in optimizers.items())}")
    folder = Path(run.run_dir) / "checkpoints" if run.run_dir else None
    if folder is not None and folder.is_dir():
        lines.append(f"checkpoints: {', '.join(sorted(p.name for p in folder.glob('*.ckpt'))) or '(none)'}")
    code = info.get("code") or []  # the code it started with, then each other code a continuation ran
    if code:
        first = code[0]
        lines.append(
            f"code: commit {first.get('commit') or 'unknown (no checkout, no commit built in)'}, "
            f"ortholab {first.get('ortholab')}, "
            f"torch {first.get('torch')}, on {first.get('machine')}"
        )
    commits = list(dict.fromkeys(str(entry.get("commit") or "unknown") for entry in code))  # another machine: same
    if len(commits) > 1:
        later = ", ".join(commits[1:])
        lines.append(f"continued with other code at: {later} (each continuation whose code differed)")
    if info.get("command"):
        lines.append(f"command: {info['command']}")
    if info.get("environment"):  # what its data and own classes were read from (db/provenance.RUN_ENVIRONMENT)
        lines.append(f"environment: {' '.join(f'{k}={v}' for k, v in info['environment'].items())}")
    evaluated = (run.config or {}).get("ckpt_path") if run.stage in ("validate", "test") else None
    if evaluated:
        lines.append(f"evaluated checkpoint: {evaluated}")
    predicted = info.get("predict") or {}
    if predicted.get("source_run") is not None:
        lines.append(f"predictions of run {predicted['source_run']} ({predicted.get('checkpoint')})")
    if predicted.get("predictions"):  # the file a reader opens with numpy (training/callbacks/predictions.py)
        lines.append(
            f"predictions file: {predicted['predictions']} ({predicted.get('sequences')} sequences of the "
            f"{predicted.get('split')} split{_audio_note(predicted)})"
        )
    lines += restore_notes(info)  # the folder it trained in, before a restore moved it (db/relocate.py)
    lines += resume_notes(info)  # as the dashboard's run details say them (recorded since 2026-11-29)
    return lines


def _audio_note(predicted: dict) -> str:
    """Where a speech run's predictions wrote their wav files, beside the predictions file."""
    count = predicted.get("audio_files") or 0
    return f"; {count} wav files in {Path(predicted['predictions']).parent / 'audio'}" if count else ""


def manage(action: str, targets: list[str], db: str | None, yes: bool = False) -> None:
    """Tag, untag or delete the runs named in `targets` (for tag/untag the last target is the label)."""
    from ortholab.db import Store

    if action in ("tag", "untag"):
        if len(targets) < 2:
            raise ConfigError(f"runs {action}: give run ids then the label: `ortholab runs {action} 3 4 best`")
        ids, label = _run_ids(targets[:-1], action), targets[-1]
        if not label.strip() or any(c in label for c in "\n\t,"):
            raise ConfigError(f"runs {action}: the label {label!r} must be text without commas, tabs or line breaks")
        if label.startswith(SWEEP_TAGS):
            raise ConfigError(
                f"runs {action}: {label!r} is one of the tags `ortholab sweep` gives its trials' runs "
                f"({', '.join(SWEEP_TAGS)}), by which `runs --tag` and the dashboard list a sweep; give another label"
            )
        if label.startswith(PROVENANCE_TAGS):
            raise ConfigError(
                f"runs {action}: {label!r} is one of the tags `reproduce` records ({', '.join(PROVENANCE_TAGS)}: the "
                f"row, scale, seed and changed flags a run was trained with), which `report` reads; they are not "
                f"edited by hand: give another label"
            )
    else:
        ids, label = _run_ids(targets, action), None
    store = Store(db, access="write")  # never creates a store: a mistyped --db is named
    runs = {run_id: store.get_run(run_id) for run_id in ids}  # StoreError naming a missing one, before any change
    if action == "untag" and not any(label in run.tags for run in runs.values()):
        held = sorted({tag for run in runs.values() for tag in run.tags})
        raise ConfigError(
            f"runs untag: no run of {', '.join(map(str, ids))} has the tag {label!r}; "
            f"{did_you_mean(label, held)}their tags: {', '.join(held) or '(none)'}"
        )
    if action in ("tag", "untag"):
        for run_id in ids:
            tags = store.set_tags(
                run_id, add=[label] if action == "tag" else [], remove=[label] if action == "untag" else []
            )
            print(f"run {run_id}: tags {', '.join(tags) or '(none)'}")
        return
    busy = [message for run_id in ids if (message := store.lease_holder(run_id))]
    if busy:  # nothing deleted while one of them is being written
        raise ConfigError(busy[0].replace(", then resume;", ", then delete it;"))
    listed = "; ".join(
        f"{run_id} {run.name} ({run.status}{', folder ' + run.run_dir if run.run_dir else ''})"
        for run_id, run in runs.items()
    )
    made = store.runs_made_from(ids)  # runs that stay, made from a run about to go (its checkpoints, its link)
    if made:
        listed += "; " + "; ".join(
            f"keeping {_runs_named(kept)} ({MADE_FROM[stage].format(source)})"
            for source, stages in made.items()
            for stage, kept in stages.items()
        )
    if not yes:
        if not sys.stdin.isatty():
            raise ConfigError(
                f"runs delete: cannot ask for a confirmation here (stdin is not a terminal); add --yes "
                f"to delete {listed}"
            )
        answer = input(f"delete {len(ids)} run(s): {listed}? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing deleted")
            return
    for run_id, run in runs.items():
        store.delete_run(run_id)
        folder = Path(run.run_dir) if run.run_dir else None
        removed = ""
        if folder is not None and folder.is_dir() and folder.name == str(run_id):  # a run folder: .../<name>/<id>
            whose = _folder_owner(store, folder)
            if whose is None:
                shutil.rmtree(folder)
                removed = f" and its folder {folder}"
            else:
                removed = f"; its folder {folder} is {whose}: kept"
        print(f"deleted run {run_id} ({run.name}){removed}")
        for stage, kept in made.get(run_id, {}).items():
            print(as_typed(_kept_note(stage, run_id, kept)))


def _folder_owner(store, folder: Path) -> str | None:
    """None where `folder` is this store's to delete; otherwise whose it is, in words. The folder's lock file names
    the store that last wrote it (a byte copy of a SQLite store has the same id in another file); folders written
    before it did are this store's when they lie under store-<its id>/."""
    from ortholab.db import folder_lock

    facts = folder_lock.written_by(folder)
    if facts.get("store"):
        if facts["store"] == folder_lock.store_place(store.url) and facts.get("store_id") == store.store_id:
            return None
        return f"written by the store at {facts['store']}, not this one (a copy of it, or moved since)"
    if folder.parent.parent.name == f"store-{store.store_id[:8]}":  # .../store-<this store's id>/<name>/<id>
        return None
    return "not this store's (a copy's, or from before store folders)"


def _kept_note(stage: str, source: int, kept: list[int]) -> str:
    """What `runs delete` says of the runs it kept that were made from a run it deleted."""
    what = f"kept {_runs_named(kept)} ({MADE_FROM[stage].format(source)})"
    if stage == "fit":  # a run of its own: it trained and checkpoints in its own folder
        return f"{what}: {'its' if len(kept) == 1 else 'their'} own folder and checkpoints stay"
    return (
        f"{what}, naming a run no longer in this store: "
        f"`ortholab runs delete {' '.join(map(str, kept))}` removes {'it' if len(kept) == 1 else 'them'} too"
    )


def _runs_named(ids: list[int]) -> str:
    return f"run {ids[0]}" if len(ids) == 1 else f"runs {', '.join(map(str, ids))}"
