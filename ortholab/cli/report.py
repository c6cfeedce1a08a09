"""`ortholab report [TABLE]`: published against reproduced, as Markdown tables; `--export DIR` also writes the CSV,
the figures, the runs behind the numbers (runs.db) and export.txt (ortholab/app/export.py)."""

from __future__ import annotations

import sys

from ortholab.cli.common import (
    DB_HELP,
    LINE_WIDTH,
    add_export_extras,
    line_width,
    refuse_export_extras_without_export,
)

USAGE = "report [TABLE] [--all] [--wide] [--export DIR [--shared-plotly] [--with-checkpoints]]"
HELP = "published vs reproduced, as Markdown tables (the rows run; --all: every row)"


def add_arguments(parser) -> None:
    parser.add_argument("table", nargs="?", default=None, help="one published table (default: all)")
    parser.add_argument(
        "--all",
        action="store_true",
        help="every row of the tables (default: only the rows with a recorded run; an --export's files always hold "
        "every row, so that what is not yet run shows)",
    )
    parser.add_argument(
        "--wide",
        action="store_true",
        help=f"every column and text in full (default: lines fit the terminal, or "
        f"{LINE_WIDTH} columns in a file or pipe: empty columns left out, long text "
        f"cut with …)",
    )
    parser.add_argument("--db", default=None, help=DB_HELP)
    parser.add_argument(
        "--export",
        default=None,
        metavar="DIR",
        help="also write report.md, report.csv, per table a curve plot (PNG and HTML), runs.db (the "
        "runs behind the numbers) and export.txt into DIR",
    )
    add_export_extras(
        parser,
        "with --export: DIR/checkpoints also holds the config and checkpoints of every unfinished run behind it, so "
        "that a copy of runs.db can resume it on another machine (docs/checkpoints.md)",
    )
    parser.add_argument(
        "--shared-plotly",
        action="store_true",
        help="with --export: plotly.min.js (4.8 MB) goes once into DIR's parent and the HTML loads it from "
        "../plotly.min.js, so exports side by side share one copy (default: a copy in DIR)",
    )


def run(args, extra: list[str]) -> None:
    from ortholab.cli.reproduce_listing import existing_store
    from ortholab.db import Store
    from ortholab.db.published import load_tables, markdown_report
    from ortholab.db.store import StoreMissing
    from ortholab.errors import ConfigError, did_you_mean

    refuse_export_extras_without_export(args, "--shared-plotly")
    tables = load_tables()
    if args.table is not None and args.table not in tables:
        raise ConfigError(
            f"no published table {args.table!r}; {did_you_mean(args.table, tables)}choose one of {sorted(tables)}"
        )
    chosen = {k: v for k, v in tables.items() if args.table in (None, k)}
    if args.export is not None:  # a folder it may not write is refused before the report is printed
        from ortholab.app.export import check_export_folder

        check_export_folder(args.export, chosen)
    try:  # --all lists the rows before any run; without it, no store is a refusal: nothing recorded to report
        store = existing_store(args.db) if args.all and args.export is None else Store(args.db, access="read")
    except StoreMissing as missing:
        hint = "`ortholab report --all` lists the papers' rows before any has run."
        raise StoreMissing(f"{missing} {hint}") from None
    if args.export is not None:  # its runs.db would be written over: never the store read, nor a store of runs
        from ortholab.app.export import check_export_target

        check_export_target(store, args.export)
    width = None if args.wide else line_width()
    report = markdown_report(store, chosen, recorded_only=not args.all, width=width)
    print(report)
    if width is not None and "…" in report:  # a cut cell is otherwise a dead end
        print(f"(cells ending in … are cut to fit {width} columns; --wide shows them whole)")
    if args.export is not None:  # `--export ""` too: refused by export_report, not silently ignored
        from ortholab.app.export import earlier_export, export_report

        earlier = earlier_export(args.export) if args.export else None
        for path in export_report(
            store,
            chosen,
            args.export,
            with_artifacts=args.with_artifacts,
            shared_plotly=args.shared_plotly,
            with_checkpoints=args.with_checkpoints,
        ):
            print(f"wrote {path}", file=sys.stderr)
        if earlier:
            print(f"(these replace the export {earlier.removeprefix('written ')})", file=sys.stderr)
