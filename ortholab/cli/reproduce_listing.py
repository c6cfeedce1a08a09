"""The published tables' rows: chosen by table and row id, and listed with their runs (`reproduce --list`)."""

from __future__ import annotations

import sys

from ortholab.db import Store
from ortholab.db.published import PaperRow, PaperTable, at_paper_settings, load_tables, reproductions, run_scale
from ortholab.db.store import StoreMissing
from ortholab.errors import ConfigError, did_you_mean


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
