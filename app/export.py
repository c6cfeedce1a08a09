"""`ortholab report --export DIR`: the published-vs-reproduced tables and one curve plot per paper table/figure.

Writes report.md and report.csv (every row of the chosen tables, the columns of `ortholab report`), and for
each table with a recorded run `<table>.png` (matplotlib, for documents) and `<table>.html` (plotly,
interactive): per row its run's curve of the row's metric over training steps, the task's baseline dotted
and the published value dash-dotted, one panel per setting and metric (scoRNN Figure 1: T = 1000 left,
T = 2000 right). report.md opens with the command, the commit and the machine that made it.
"""
from __future__ import annotations

import csv
import datetime as dt
import os
import platform
import sys
from pathlib import Path

from ortholab.app.style import run_style
from ortholab.db import Store
from ortholab.db.published import (
    REPORT_COLUMNS,
    PaperTable,
    Reproduction,
    comparison_rows,
    load_tables,
    markdown_report,
    reproductions,
)
from ortholab.provenance import UNRECORDED, code_version, describe


# plotly's marker symbols (app/style.py) as matplotlib draws them
MATPLOTLIB_MARKERS = {"circle": "o", "square": "s", "diamond": "D", "triangle-up": "^", "x": "x", "cross": "P",
                      "star": "*", "triangle-down": "v", "pentagon": "p", "hexagon": "h"}


def machine() -> str:
    """'AMD EPYC, 2 cores, Linux x86_64': the CPU model as /proc/cpuinfo names it, else platform's guess."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            model = next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{model}, {os.cpu_count()} cores, {platform.system()} {platform.machine()}"


def _curves(store: Store, items: list[Reproduction]) -> list[dict]:
    """Per row with a run: its label, steps and values of the row's metric (the val/ twin if the test/ one is
    missing), the run's baseline and the published value."""
    out = []
    for item in items:
        if item.fit is None:
            continue
        metric = item.row.metric
        points = store.metric_series(item.fit.id, metric)
        if not points and metric.startswith("test/"):
            metric = metric.replace("test/", "val/", 1)
            points = store.metric_series(item.fit.id, metric)
        if not points:
            continue
        out.append({"label": f"{item.row.row} (run {item.fit.id}, {metric})", "metric": metric, "run": item.fit.id,
                    "steps": [p.step for p in points], "values": [p.value * item.row.scale for p in points],
                    "baseline": item.fit.baseline, "published": item.row.value, "mode": item.row.mode,
                    "scale": item.row.scale, "panel": " · ".join(filter(None, [item.row.setting, metric]))})
    return out


def _panels(curves: list[dict]) -> dict[str, list[dict]]:
    """The curves by panel: one per setting and metric (the papers' T = 1000 left, T = 2000 right), in row order."""
    panels: dict[str, list[dict]] = {}
    for curve in curves:
        panels.setdefault(curve["panel"], []).append(curve)
    return panels


def _log_axis(curves: list[dict]) -> bool:
    """Losses that fall by orders of magnitude (copying) read on a log axis; accuracies on a linear one."""
    values = [v for c in curves for v in c["values"] if v > 0]
    return all(c["mode"] == "min" for c in curves) and bool(values) and max(values) / min(values) > 100


def _grid(count: int) -> tuple[int, int]:
    """Rows and columns for `count` panels, two side by side at most."""
    columns = min(count, 2)
    return -(-count // columns), columns


def _png(path: Path, table: PaperTable, curves: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")  # no display: files only
    import matplotlib.pyplot as plt

    panels = _panels(curves)
    rows, columns = _grid(len(panels))
    fig, axes = plt.subplots(rows, columns, figsize=(7.0 * columns, 4.2 * rows), dpi=150 if columns == 1 else 110,
                             squeeze=False)  # fmt: skip
    for ax, (name, group) in zip(axes.flat, panels.items()):
        for curve in group:
            style = run_style(curve["run"])  # the run's colour and marker on the dashboard too
            sparse = len(curve["steps"]) <= 60  # a point per validation: show each one
            ax.plot(curve["steps"], curve["values"], color=style.color, linewidth=1.4, label=curve["label"],
                    marker=MATPLOTLIB_MARKERS[style.symbol], markersize=3, markevery=None if sparse else 0.1)
            if curve["baseline"] is not None and curve["mode"] == "min":
                ax.axhline(curve["baseline"] * curve["scale"], color=style.color, linestyle=":", linewidth=1.0)
            if curve["published"] is not None:
                ax.axhline(curve["published"], color=style.color, linestyle="-.", linewidth=1.0)
        if _log_axis(group):
            ax.set_yscale("log")
        ax.set_xlabel("training step")
        metric = group[0]["metric"]
        ax.set_ylabel(f"{metric} (x{group[0]['scale']:g})" if group[0]["scale"] != 1 else metric)
        ax.set_title(name, fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, title="dotted: task baseline; dash-dot: published", title_fontsize=7)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.suptitle(f"{table.paper} {table.table}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _html(path: Path, table: PaperTable, curves: list[dict]) -> None:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    panels = _panels(curves)
    rows, columns = _grid(len(panels))
    fig = make_subplots(rows=rows, cols=columns, subplot_titles=list(panels))
    for index, group in enumerate(panels.values()):
        at = dict(row=index // columns + 1, col=index % columns + 1)
        for curve in group:
            mode = "lines+markers" if len(curve["steps"]) <= 60 else "lines"
            style = run_style(curve["run"])
            fig.add_trace(go.Scatter(x=curve["steps"], y=curve["values"], mode=mode, name=curve["label"],
                                     line=dict(color=style.color), marker=dict(symbol=style.symbol)), **at)
            if curve["baseline"] is not None and curve["mode"] == "min":
                fig.add_hline(y=curve["baseline"] * curve["scale"], line_dash="dot",
                              annotation_text=f"baseline {curve['baseline']:.4g}", **at)
            if curve["published"] is not None:
                fig.add_hline(y=curve["published"], line_dash="dashdot", annotation_text=f"published "
                              f"{curve['published']}", **at)  # fmt: skip
        fig.update_xaxes(title_text="training step", **at)
        fig.update_yaxes(title_text=group[0]["metric"], type="log" if _log_axis(group) else "linear", **at)
    fig.update_layout(title=f"{table.paper} {table.table}: {table.title}", height=450 * rows)
    fig.write_html(path, include_plotlyjs="cdn")


def export_report(store: Store, tables: dict[str, PaperTable], folder: str | Path) -> list[Path]:
    """Write the report's files into `folder` (created); returns the paths written."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    command = "ortholab " + " ".join(sys.argv[1:]) if sys.argv and "ortholab" in Path(sys.argv[0]).name else \
        "ortholab report --export"
    every = load_tables()  # where twin rows are looked up
    found = {table.id: reproductions(store, table, every) for table in tables.values()}  # read once, used 4 times
    fits = {item.fit.id for items in found.values() for item in items if item.fit}
    codes = [code for run_id in fits for code in (store.get_run(run_id).info or {}).get("code") or [UNRECORDED]]
    trained_by = sorted({describe(code) for code in codes})  # every start's (a resume by other code adds one)
    header = (f"<!-- written by `{command}` on {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, commit "
              f"{describe(code_version())}, machine {machine()}, store {store.display_url}; runs trained by "
              f"{', '.join(trained_by) or '-'} -->\n\n")
    (folder / "report.md").write_text(header + markdown_report(store, tables, found))
    written.append(folder / "report.md")
    with open(folder / "report.csv", "w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=["table", *REPORT_COLUMNS], extrasaction="ignore")
        writer.writeheader()
        for table in tables.values():
            for row in comparison_rows(found[table.id]):
                writer.writerow({"table": table.id, **row})
    written.append(folder / "report.csv")
    for table in tables.values():
        curves = _curves(store, found[table.id])
        if curves:
            _png(folder / f"{table.id}.png", table, curves)
            _html(folder / f"{table.id}.html", table, curves)
            written += [folder / f"{table.id}.png", folder / f"{table.id}.html"]
    return written
