"""`ortholab report --export DIR`: the published-vs-reproduced tables and one curve plot per paper table/figure.

Writes report.md (the tables of `ortholab report`), report.csv (per row one `row` line with the seeds' aggregate, a
`selected` line with that of their values chosen on validation where two or more seeds have them, and one `seed`
line per seed, each with its run, the commit, machine and command that trained it), for each table with a recorded
run `<table>.png` (matplotlib, for documents) and `<table>.html` (plotly, interactive, with plotly.min.js beside it
so that it opens offline): per row its run's curve of the row's metric over training steps (several seeds: their
mean, min-max band and each seed thin), the task's baseline dotted and the published value dash-dotted, one panel
per setting and metric (scoRNN Figure 1: T = 1000 left, T = 2000 right); runs.db, the runs behind the numbers as a
store of their own (db/extract.py), from which the same report.md and report.csv are written again; and export.txt:
the command, date, commit, machine and store that wrote them. Every file is written under a temporary name and
renamed, so none looks complete unless it is.
"""

from __future__ import annotations

import csv
import datetime as dt
import errno
import os
import shutil
import sys
from functools import partial
from pathlib import Path

from ortholab.app.style import run_style
from ortholab.db import Store
from ortholab.db.extract import MAX_BYTES, copy_resume_files, write_run_store_within
from ortholab.db.provenance import UNRECORDED, changed_settings, code_version, describe, machine
from ortholab.db.published import (
    REPORT_COLUMNS,
    UNFINISHED,
    PaperTable,
    Reproduction,
    comparison_rows,
    load_tables,
    markdown_report,
    reproductions,
)
from ortholab.db.seeds import Spread
from ortholab.db.sqlite_files import sqlite_file
from ortholab.db.store import EXPORT_FILES, StoreError
from ortholab.errors import ConfigError

RUNS_CSV = "runs.csv"  # `ortholab runs --export DIR`'s table of runs (app/runs_export.py): DIR is no report's
PLOTLY_JS = "plotly.min.js"  # the name plotly's include_plotlyjs="directory" writes beside the HTML

# plotly's marker symbols (app/style.py) as matplotlib draws them
MATPLOTLIB_MARKERS = {
    "circle": "o",
    "square": "s",
    "diamond": "D",
    "triangle-up": "^",
    "x": "x",
    "cross": "P",
    "star": "*",
    "triangle-down": "v",
    "pentagon": "p",
    "hexagon": "h",
}
# plotly's dashes (app/style.py: a run's dash tells apart runs 24 ids apart, which share a colour) in matplotlib's
MATPLOTLIB_DASHES = {
    "solid": "-",
    "dash": "--",
    "dot": ":",
    "dashdot": "-.",
    "longdash": (0, (8, 3)),
    "longdashdot": (0, (8, 3, 1.5, 3)),
}


def _series(store: Store, run_id: int, metric: str) -> tuple[str, list]:
    """The run's points of `metric` (of its val/ twin where the test/ one is missing) and the metric read."""
    points = store.metric_series(run_id, metric)
    if not points and metric.startswith("test/"):
        metric = metric.replace("test/", "val/", 1)
        points = store.metric_series(run_id, metric)
    return metric, points


def _curves(store: Store, items: list[Reproduction]) -> list[dict]:
    """Per row with a run: its label, steps and values of the row's metric, the run's baseline and the published
    value; a row of several seeds: each seed's curve (`seeds`) and their mean with its min-max band over the steps
    every seed logged (`band`)."""
    out = []
    for item in items:
        if item.fit is None:
            continue
        metric, points = _series(store, item.fit.id, item.row.metric)
        if not points:
            continue
        unfinished = f"; {item.fit.status}, {item.length}" if item.fit.status != "finished" and item.length else ""
        curve = {
            "label": f"{item.row.row} (run {item.fit.id}, {metric}{unfinished})",  # a curve that stopped says so
            "metric": metric,
            "run": item.fit.id,
            "steps": [p.step for p in points],
            "values": [p.value * item.row.scale for p in points],
            "baseline": item.fit.baseline,
            "published": item.row.value,
            "mode": item.row.mode,
            "scale": item.row.scale,
            "panel": " · ".join(filter(None, [item.row.setting, metric])),
            "task": item.row.task,
        }
        if len(item.seeds) > 1:
            seeds = [
                (seed, {p.step: p.value * item.row.scale for p in _series(store, seed.fit.id, metric)[1]})
                for seed in item.seeds
            ]
            curve["seeds"] = [
                {
                    "label": f"seed {seed.seed} (run {seed.fit.id})",
                    "steps": list(values),
                    "values": list(values.values()),
                }
                for seed, values in seeds
            ]
            # the band and mean over the seeds that ended; one still training or stopped is drawn thin only
            ended = [(seed, values) for seed, values in seeds if seed.fit.status not in UNFINISHED] or seeds
            common = sorted(set.intersection(*(set(values) for _, values in ended)))
            at = [[values[step] for _, values in ended] for step in common]
            curve["band"] = {
                "steps": common,
                "mean": [sum(v) / len(v) for v in at],
                "low": [min(v) for v in at],
                "high": [max(v) for v in at],
            }
            curve.update(
                label=f"{item.row.row} ({f'mean of {len(ended)} seeds' if len(ended) > 1 else '1 seed'}, {metric})",
                steps=common,
                values=curve["band"]["mean"],
            )
        out.append(curve)
    return out


def _panels(curves: list[dict]) -> dict[str, list[dict]]:
    """The curves by panel: one per setting and metric (the papers' T = 1000 left, T = 2000 right), in row order;
    a setting and metric that rows of several tasks share (cpu_checks' copying and adding at T = 200) make a panel
    per task, named by it: a cross-entropy and an MSE never share an axis."""
    tasks: dict[str, set[str]] = {}
    for curve in curves:
        tasks.setdefault(curve["panel"], set()).add(curve["task"])
    panels: dict[str, list[dict]] = {}
    for curve in curves:
        shared = len(tasks[curve["panel"]]) > 1
        panels.setdefault(f"{curve['task']} · {curve['panel']}" if shared else curve["panel"], []).append(curve)
    return panels


def _log_axis(curves: list[dict]) -> bool:
    """Losses that fall by orders of magnitude (copying) read on a log axis; accuracies on a linear one."""
    values = [v for c in curves for v in c["values"] if v > 0]
    return all(c["mode"] == "min" for c in curves) and bool(values) and max(values) / min(values) > 100


ZOOM_SHARE = 0.1  # a panel zooms in when what it compares fills less than this share of its full range


def _zoom(curves: list[dict]) -> tuple[float, float] | None:
    """The y range of a linear panel with published values when they and the last half of each curve fill less
    than ZOOM_SHARE of everything drawn: their span, a quarter of it above and below; None: the full range. SRNN
    Table 4's NLLs end 0.03-0.25 from the published 2.27-3.22, gaps of 0.4-3 % of a linear axis stretched to the
    task's baseline at 10, and of 1-6 % of a log axis over 2-10; zoomed, each fills a third of the panel or more."""
    published = [c["published"] for c in curves if c["published"] is not None]
    if not published or _log_axis(curves):
        return None
    late = [v for c in curves for v in c["values"][len(c["values"]) // 2 :]]
    baselines = [c["baseline"] * c["scale"] for c in curves if c["baseline"] is not None and c["mode"] == "min"]
    everything = [v for c in curves for v in c["values"]] + published + baselines
    low, high = min(published + late), max(published + late)
    if (high - low) >= ZOOM_SHARE * (max(everything) - min(everything)):
        return None
    pad = max(0.25 * (high - low), 0.01 * max(abs(low), abs(high)), 1e-9)
    return low - pad, high + pad


def _legend_title(curves: list[dict], zoom: tuple[float, float] | None) -> str | None:
    """What the panel's lines mean, naming only the lines it draws in view: the dotted task baseline (a line
    outside a zoomed axis is named with its value instead) and the dash-dotted published value."""

    def seen(y: float) -> bool:
        return zoom is None or zoom[0] <= y <= zoom[1]

    baselines = sorted({c["baseline"] * c["scale"] for c in curves if c["baseline"] is not None and c["mode"] == "min"})
    published = [c["published"] for c in curves if c["published"] is not None]
    keys = []
    if any(seen(b) for b in baselines):
        keys.append("dotted: task baseline")
    if any(not seen(b) for b in baselines):
        keys.append(f"task baseline {', '.join(f'{b:.3g}' for b in baselines if not seen(b))} off the zoomed axis")
    if any(seen(v) for v in published):
        keys.append("dash-dot: published")
    return "; ".join(keys) or None


def _grid(count: int) -> tuple[int, int]:
    """Rows and columns for `count` panels, two side by side at most."""
    columns = min(count, 2)
    return -(-count // columns), columns


def _png(path: Path, table: PaperTable, curves: list[dict]) -> None:
    import matplotlib.pyplot as plt

    fig = _matplotlib_figure(table, curves)
    fig.savefig(path, format="png")
    plt.close(fig)


def _matplotlib_figure(table: PaperTable, curves: list[dict]):
    """The PNG's figure: a panel per setting and metric (see the module docstring)."""
    import matplotlib

    matplotlib.use("Agg")  # no display: files only
    import matplotlib.pyplot as plt

    panels = _panels(curves)
    rows, columns = _grid(len(panels))
    fig, axes = plt.subplots(
        rows, columns, figsize=(7.0 * columns, 4.2 * rows), dpi=150 if columns == 1 else 110, squeeze=False
    )
    for ax, (name, group) in zip(axes.flat, panels.items()):
        for curve in group:
            style = run_style(curve["run"])  # the run's colour and marker on the dashboard too
            sparse = len(curve["steps"]) <= 60  # a point per validation: show each one
            ax.plot(
                curve["steps"],
                curve["values"],
                color=style.color,
                linestyle=MATPLOTLIB_DASHES[style.dash],
                linewidth=1.4,
                label=curve["label"],
                marker=MATPLOTLIB_MARKERS[style.symbol],
                markersize=3,
                markevery=None if sparse else 0.1,
            )
            if "band" in curve:  # the seeds: each a thin line, their min-max a band around the mean
                band = curve["band"]
                ax.fill_between(band["steps"], band["low"], band["high"], color=style.color, alpha=0.15, linewidth=0)
                for seed in curve["seeds"]:
                    ax.plot(seed["steps"], seed["values"], color=style.color, linewidth=0.5, alpha=0.6)
            if curve["baseline"] is not None and curve["mode"] == "min":
                ax.axhline(curve["baseline"] * curve["scale"], color=style.color, linestyle=":", linewidth=1.0)
            if curve["published"] is not None:
                ax.axhline(curve["published"], color=style.color, linestyle="-.", linewidth=1.0)
        if _log_axis(group):
            ax.set_yscale("log")
        zoom = _zoom(group)
        if zoom is not None:  # the gaps to the published values, readable (see _zoom)
            ax.set_ylim(*zoom)
        ax.set_xlabel("training step")
        metric = group[0]["metric"]
        ax.set_ylabel(f"{metric} (x{group[0]['scale']:g})" if group[0]["scale"] != 1 else metric)
        ax.set_title(name, fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, title=_legend_title(group, zoom), title_fontsize=7)  # only the lines drawn
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    fig.suptitle(f"{table.paper} {table.table}", fontsize=10)
    fig.tight_layout()
    return fig


def _html(path: Path, table: PaperTable, curves: list[dict], plotly_js: str = "directory") -> None:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    panels = _panels(curves)
    rows, columns = _grid(len(panels))
    fig = make_subplots(rows=rows, cols=columns, subplot_titles=list(panels))
    for index, group in enumerate(panels.values()):
        at = dict(row=index // columns + 1, col=index % columns + 1)
        lines_drawn: set[tuple[str, float]] = set()  # a baseline or published value shared by curves: drawn once
        for curve in group:
            mode = "lines+markers" if len(curve["steps"]) <= 60 else "lines"
            style = run_style(curve["run"])
            fig.add_trace(
                go.Scatter(
                    x=curve["steps"],
                    y=curve["values"],
                    mode=mode,
                    name=curve["label"],
                    line=dict(color=style.color, dash=style.dash),
                    marker=dict(symbol=style.symbol),
                ),
                **at,
            )
            if "band" in curve:  # the seeds' min-max band and each seed as a thin line
                band = curve["band"]
                fig.add_trace(
                    go.Scatter(
                        x=band["steps"] + band["steps"][::-1],
                        y=band["high"] + band["low"][::-1],
                        fill="toself",
                        fillcolor=style.color,
                        opacity=0.15,
                        line=dict(width=0),
                        name=f"{curve['label']}: min-max of the seeds",
                        hoverinfo="skip",
                    ),
                    **at,
                )
                for seed in curve["seeds"]:
                    fig.add_trace(
                        go.Scatter(
                            x=seed["steps"],
                            y=seed["values"],
                            mode="lines",
                            name=seed["label"],
                            line=dict(color=style.color, width=0.7),
                            opacity=0.6,
                        ),
                        **at,
                    )
            baseline = curve["baseline"] * curve["scale"] if curve["baseline"] is not None else None
            if baseline is not None and curve["mode"] == "min" and ("baseline", baseline) not in lines_drawn:
                lines_drawn.add(("baseline", baseline))
                fig.add_hline(y=baseline, line_dash="dot", annotation_text=f"baseline {curve['baseline']:.4g}", **at)
            if curve["published"] is not None and ("published", curve["published"]) not in lines_drawn:
                lines_drawn.add(("published", curve["published"]))
                fig.add_hline(
                    y=curve["published"], line_dash="dashdot", annotation_text=f"published {curve['published']}", **at
                )
        fig.update_xaxes(title_text="training step", **at)
        zoom = _zoom(group)
        fig.update_yaxes(
            title_text=group[0]["metric"],
            type="log" if _log_axis(group) else "linear",
            **({"range": list(zoom)} if zoom else {}),
            **at,
        )
    fig.update_layout(title=f"{table.paper} {table.table}: {table.title}", height=450 * rows)
    # a local plotly.min.js, never a CDN: it opens offline; the figure's id fixed, so that two exports of the same runs
    # are the same file (plotly draws a random one)
    fig.write_html(path, include_plotlyjs=plotly_js, div_id=f"ortholab-{table.id}")


CSV_COLUMNS = [
    "table",
    "kind",
    *REPORT_COLUMNS,
    "seed",
    "value",
    "selected",
    "seeds_n",
    "mean",
    "std",
    "min",
    "max",
    "spread_verdict",
    "commit",
    "machine",
    "command",
]
UNKNOWN_COMMIT = "unknown: trained by an OrthoLab that did not record its commit"


def run_provenance(store: Store, run_id: int) -> dict[str, str]:
    """The commit that trained a run (its first start), the host with each start's machine and the command, as
    recorded."""
    detail = store.get_run(run_id)
    info = detail.info or {}
    codes = info.get("code") or [UNRECORDED]
    commit = describe(codes[0]) if (codes[0].get("commit") or codes[0].get("ortholab")) else UNKNOWN_COMMIT
    starts = [c.get("machine") or "a machine not recorded" for c in codes]  # each start's, in order
    hardware = [m for k, m in enumerate(starts) if k == 0 or m != starts[k - 1]]  # a resume on the same one: once
    recorded = any(c.get("machine") for c in codes)
    where = (detail.hostname or "-") + (f" ({'; resumed on '.join(hardware)})" if recorded else "")
    command = info.get("command") or "not recorded"
    for resume in info.get("resumes", []):  # a continuation with another setting is part of how the run trained
        if settings := changed_settings(resume):
            command += f"; continued from step {resume['step']} with {settings}: {resume.get('command', '')}"
    return {"commit": commit, "machine": where, "command": command}


def _number(value: float | None) -> str:
    return "" if value is None else repr(float(value))


def _aggregate(spread: Spread | None) -> dict:
    """The CSV columns of a seeds' aggregate: n, mean, sample std, min, max and the verdict."""
    if spread is None:
        return {}
    return {
        "seeds_n": spread.n,
        "mean": _number(spread.mean),
        "std": _number(spread.std),
        "min": _number(spread.low),
        "max": _number(spread.high),
        "spread_verdict": spread.verdict or "",
    }


def csv_lines(store: Store, tables: dict[str, PaperTable], found: dict[str, list[Reproduction]]) -> list[dict]:
    """Per row one `row` line (the report's columns and the seeds' aggregate), a `selected` line (the aggregate of
    the seeds' test values at the checkpoints chosen on validation) where two or more have them, and one `seed` line per
    seed (its run, value, the commit, machine and command that trained it)."""
    lines = []
    for table in tables.values():
        for item, columns in zip(found[table.id], comparison_rows(found[table.id])):
            lines.append(
                {
                    "table": table.id,
                    "kind": "row",
                    **columns,
                    **_aggregate(item.spread),
                    **(run_provenance(store, item.fit.id) if item.fit else {}),
                }
            )
            if item.selected_spread is not None and item.selected_spread.n > 1:  # as the report's seeds cell
                selected = _aggregate(item.selected_spread)
                lines.append({"table": table.id, "kind": "selected", "row": item.row.row, **selected})
            for seed in item.seeds:
                lines.append(
                    {
                        "table": table.id,
                        "kind": "seed",
                        "row": item.row.row,
                        "run": seed.fit.id,
                        "test_run": seed.evaluation.id if seed.evaluation else None,
                        "status": seed.fit.status,
                        "seed": "" if seed.seed is None else seed.seed,
                        "value": _number(seed.value),
                        "selected": _number(seed.selected),
                        **run_provenance(store, seed.fit.id),
                    }
                )
    return lines


def runs_behind(found: dict[str, list[Reproduction]]) -> set[int]:
    """Every run an export's numbers come from: each seed's fit and test run, the rows' chosen fits and tests."""
    ids = set()
    for items in found.values():
        for item in items:
            ids |= {r.id for r in (item.fit, item.evaluation) if r is not None}
            ids |= {r.id for seed in item.seeds for r in (seed.fit, seed.evaluation) if r is not None}
    return ids


def write_atomically(path: Path, write) -> Path:
    """write(temporary path), then the file renamed into place: an interrupted export leaves no file that looks
    whole (its temporary is removed)."""
    part = path.with_name(path.name + ".part")
    try:
        write(part)
        os.replace(part, path)
    finally:
        part.unlink(missing_ok=True)
    return path


def folder_error(folder: Path, err: OSError, what: str = "the report") -> ConfigError:
    """An OSError while an export is written as the one line that says why (a full disk, a file in the way)."""
    blocker = next((p for p in (folder, *folder.parents) if p.exists() and not p.is_dir()), None)
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        why = "no space left on the device; the files written before it are whole, the one being written was removed"
    elif blocker is not None:
        why = f"{blocker} is a file, not a folder"
    else:
        why = err.strerror or str(err)
    return ConfigError(f"--export {folder}: cannot write {what} there ({why}); give a writable folder")


def _shared_plotly(folder: Path) -> list[Path]:
    """plotly.min.js written into the export folder's parent unless the same bundle is already there; returns it
    if written. Exports side by side (docs/results/*) share one copy of its 4.8 MB instead of one each."""
    from plotly.offline import get_plotlyjs

    bundle = get_plotlyjs()
    target = folder.resolve().parent / PLOTLY_JS  # `--export .` too: the folder above, where ../ points
    if target.is_file() and target.read_text(encoding="utf-8") == bundle:
        return []
    return [write_atomically(target, lambda p: p.write_text(bundle, encoding="utf-8"))]


def _refuse_another_tables_export(folder: Path, tables: dict[str, PaperTable]) -> None:
    """A folder holding the export of another table is not written over: its runs.db and report would be replaced
    by this one's (exporting the same tables again is how an export is brought up to date)."""
    try:
        with open(folder / "report.csv", newline="", encoding="utf-8") as file:
            before = {line.get("table") for line in csv.DictReader(file)} - {None, ""}
    except (OSError, UnicodeDecodeError, csv.Error):
        return
    ids = {table.id for table in tables.values()}
    other = sorted(before - ids)
    if other:
        now = next(iter(ids)) if len(ids) == 1 else "these tables"
        raise ConfigError(
            f"--export {folder}: it holds the export of {', '.join(other)}; writing {now} there would replace it "
            f"(its runs.db and report); give another folder, or remove this one first"
        )


def check_export_folder(folder: str | Path, tables: dict[str, PaperTable]) -> Path:
    """The folder an export of `tables` may be written into, checked before anything is read or printed: refused
    when empty ('' would be the current folder), holding another table's export or an export of runs."""
    if not str(folder).strip():  # Path("") would be the current folder
        raise ConfigError("--export '': give the folder to write the report into")
    if (Path(folder) / RUNS_CSV).is_file():  # its runs.db and export.txt would no longer be those of its runs.csv
        raise ConfigError(
            f"--export {folder}: it holds an export of runs (`ortholab runs --export`, {RUNS_CSV}); writing the "
            "report there would replace its runs.db; give another folder"
        )
    _refuse_another_tables_export(Path(folder), tables)
    return Path(folder)


def check_export_target(store: Store, folder: str | Path, reader: str = "this report") -> None:
    """DIR/runs.db is written over by an export: refused where it is the store being read (by `reader`), or a store
    of its own (a copy of a store of runs, a restored one) rather than an earlier export's copy, whose runs would be
    lost."""
    target = Path(folder) / EXPORT_FILES[0]
    if not target.exists():
        return
    reading = sqlite_file(store.url)
    if reading and reading.exists() and os.path.samefile(reading, target):
        raise ConfigError(f"--export {folder}: {target} is the store {reader} reads (--db); export into another folder")
    try:
        existing = Store(f"sqlite:///{target.resolve()}", access="read")
        try:
            copy = existing.copied_from is not None and not existing.restored
            runs = len(existing.list_runs())
        finally:
            existing.close()
    except StoreError:
        copy, runs = False, None
    if not copy:
        held = f"a store of its own ({runs} runs)" if runs is not None else "not an OrthoLab export's runs.db"
        raise ConfigError(
            f"--export {folder}: {target} is {held}, not an earlier export's copy, and the export would replace it; "
            "give another folder"
        )


def export_report(
    store: Store,
    tables: dict[str, PaperTable],
    folder: str | Path,
    with_artifacts: bool = False,
    shared_plotly: bool = False,
    with_checkpoints: bool = False,
) -> list[Path]:
    """Write the report's files into `folder` (created), each complete or not at all; returns the paths written.
    runs.db holds the runs behind the numbers, so `ortholab report --db sqlite:///DIR/runs.db --export DIR2`
    writes the same report.md and report.csv again; export.txt says who wrote them, when, where and from what.
    The HTML loads plotly.min.js from beside it, or with `shared_plotly` from the folder's parent (one copy for
    many exports). With `with_checkpoints`, DIR/checkpoints holds the config and checkpoints of every run
    behind it that has not finished, in its run folder's layout, so that it can be resumed from a copy of runs.db
    on another machine (docs/checkpoints.md)."""
    for name, flag in (("shared_plotly", shared_plotly), ("with_checkpoints", with_checkpoints)):
        if not isinstance(flag, bool):
            raise TypeError(f"{name} must be True or False, not {flag!r}")
    folder = check_export_folder(folder, tables)
    check_earlier_checkpoints(folder, with_checkpoints)
    found = {table.id: reproductions(store, table, load_tables()) for table in tables.values()}  # read once here
    if not runs_behind(found):
        names = ", ".join(tables)
        raise ConfigError(
            f"--export {folder}: no row of {names} has a run in {store.display_url}, so there is nothing to export "
            f"(`ortholab reproduce {next(iter(tables)) if len(tables) == 1 else 'TABLE'}` trains its rows)"
        )
    try:
        folder.mkdir(parents=True, exist_ok=True)
        writer = export_writer()  # before any file is written: the export's own files are no "+changes"
        if not shared_plotly:
            return _export(store, tables, found, folder, with_artifacts, writer, "directory", with_checkpoints)
        shared = _shared_plotly(folder)
        return shared + _export(
            store, tables, found, folder, with_artifacts, writer, f"../{PLOTLY_JS}", with_checkpoints
        )
    except OSError as err:
        raise folder_error(folder, err) from None


def check_earlier_checkpoints(folder: Path, with_checkpoints: bool) -> None:
    """An export without --with-checkpoints into a folder that holds an earlier export's checkpoints/ is refused:
    left there, they would no longer match the new runs.db, and `ortholab restore` would continue its runs from them."""
    earlier = Path(folder) / "checkpoints"
    if with_checkpoints or not earlier.is_dir() or not any(p.is_file() for p in earlier.rglob("*")):
        return
    raise ConfigError(
        f"--export {folder}: {earlier} holds an earlier export's checkpoints, which this export's runs.db would not "
        f"match (`ortholab restore` continues runs from them); add --with-checkpoints to write them anew, or remove "
        f"{earlier} first"
    )


def export_checkpoints(store: Store, run_ids, folder: Path) -> list[Path]:
    """folder/checkpoints: what `ortholab restore` needs to continue the unfinished runs of `run_ids` elsewhere
    (db/extract.py's copy_resume_files), replacing an earlier export's only once whole; the files written."""
    staging = folder / "checkpoints.part"
    shutil.rmtree(staging, ignore_errors=True)
    copied = copy_resume_files(store, run_ids, staging, earlier=folder / "checkpoints")
    shutil.rmtree(folder / "checkpoints", ignore_errors=True)  # an earlier export's go once these are whole
    if staging.is_dir():
        staging.rename(folder / "checkpoints")
    return [folder / "checkpoints" / path.relative_to(staging) for path in copied]


def _export(
    store: Store,
    tables: dict[str, PaperTable],
    found: dict[str, list[Reproduction]],
    folder: Path,
    with_artifacts: bool,
    writer: str,
    plotly_js: str,
    with_checkpoints: bool,
) -> list[Path]:
    command = export_command("ortholab report --export" + (" --shared-plotly" if plotly_js != "directory" else ""))
    every = load_tables()  # where twin rows are looked up
    checkpoints = []
    if with_checkpoints:  # before the store is read for the rest: a run training meanwhile has exported points
        checkpoints = export_checkpoints(store, runs_behind(found), folder)  # at least as new as its checkpoint
        found = {table.id: reproductions(store, table, every) for table in tables.values()}  # read once from here
    behind = runs_behind(found)
    codes = [code for run_id in behind for code in (store.get_run(run_id).info or {}).get("code") or [UNRECORDED]]
    trained_by = sorted({describe(code) for code in codes})  # every start's (a resume by other code adds one)
    header = (
        f"<!-- the runs behind these numbers: runs.db beside this file (`ortholab report --db "
        f"sqlite:///runs.db`, `ortholab dashboard --db sqlite:///runs.db`), trained by "
        f"{', '.join(trained_by) or '-'}; who wrote this file, when and where: export.txt -->\n\n"
    )
    written = [
        write_atomically(folder / "report.md", lambda p: p.write_text(header + markdown_report(store, tables, found)))
    ]

    def write_csv(path: Path) -> None:
        with open(path, "w", newline="") as out:
            writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(csv_lines(store, tables, found))

    written.append(write_atomically(folder / "report.csv", write_csv))
    for table in tables.values():
        curves = _curves(store, found[table.id])
        if curves:
            written.append(write_atomically(folder / f"{table.id}.png", partial(_png, table=table, curves=curves)))
            html = partial(_html, table=table, curves=curves, plotly_js=plotly_js)
            written.append(write_atomically(folder / f"{table.id}.html", html))
    run_store, points = write_run_store_within(store, behind, folder / "runs.db", with_artifacts=with_artifacts)
    written.append(run_store)
    written += checkpoints
    written.append(write_export_txt(folder, store, command, writer, behind, points))
    return written


def export_command(fallback: str) -> str:
    """The command writing an export as it was typed (the console script's arguments), else `fallback` (a call from
    Python, a test)."""
    return "ortholab " + " ".join(sys.argv[1:]) if sys.argv and "ortholab" in Path(sys.argv[0]).name else fallback


def export_writer() -> str:
    """The commit of the OrthoLab writing an export, for its export.txt; read before any file of it is written."""
    code = code_version()
    return describe(code) if code.get("commit") else f"unknown ({describe(code)}, installed without a checkout)"


def earlier_export(folder: str | Path) -> str | None:
    """What an export about to be replaced in `folder` said of itself (its export.txt's first line), or None."""
    try:
        lines = (Path(folder) / EXPORT_FILES[1]).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    return lines[0] if lines else None


def write_export_txt(folder: Path, store: Store, command: str, writer: str, run_ids, points: int) -> Path:
    """folder/export.txt: the command, date, commit and machine that wrote the export, the store it read and the
    runs folder/runs.db holds (written with `points` per thinned series: write_run_store_within's answer)."""
    size = (folder / EXPORT_FILES[0]).stat().st_size
    over = (
        f"; runs.db has {size / 1e6:.2f} MB, more than the {MAX_BYTES / 1e6:.0f} MB a committed store should keep to"
        if size > MAX_BYTES
        else ""
    )
    provenance = (
        f"written by `{command}` on {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC\n"
        f"commit {writer}\nmachine {machine()}\nfrom the store {store.display_url}\n"
        f"runs: {', '.join(map(str, sorted(run_ids))) or '-'} (in runs.db; long training series thinned to "
        f"at most {points:,} points each, validation and test series whole, so that it stays under "
        f"{MAX_BYTES / 1e6:.0f} MB{over})\n"
    )
    return write_atomically(folder / EXPORT_FILES[1], lambda p: p.write_text(provenance))
