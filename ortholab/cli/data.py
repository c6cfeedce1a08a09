"""`ortholab data list [NAME]` and `ortholab data fetch NAME|all`: the data sets of the catalog in the data root."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

from ortholab.command_name import as_typed
from ortholab.errors import ConfigError

if TYPE_CHECKING:
    from ortholab.datamodules.catalog import DataSet, Problem

USAGE = "data list [NAME] [--json] | data fetch NAME|all [--mirror URL]"
HELP = "the data sets that can be fetched (license, size, present?) into $ORTHOLAB_DATA"


def _megabytes(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def _files(count: int) -> str:
    return f"{count} file{'s' if count != 1 else ''}"


def _state(dataset: DataSet, problems: list[Problem]) -> str:
    """present, missing, partial (present/total), damaged (a file of the wrong size) or gzipped (NAME.gz only)."""
    if not problems:
        return "present"
    for kind in ("damaged", "gzipped"):
        count = sum(p.kind == kind for p in problems)
        if count:
            return f"{kind} ({_files(count)})"
    total = len(dataset.files)
    return "missing" if len(problems) == total else f"partial ({total - len(problems)}/{total})"


def _notes(dataset: DataSet, problems: list[Problem]) -> list[str]:
    """What is wrong with the files that are there and the fix: one line per damaged file, one for the gzipped."""
    from ortholab.datamodules.catalog import gunzip_note

    fix = f"`ortholab data fetch {dataset.name}` replaces it"
    notes = [f"{p.describe()}; {fix}" for p in problems if p.kind == "damaged"]
    return notes + ([gunzip] if (gunzip := gunzip_note(dataset, problems)) else [])


def dataset_rows() -> list[dict]:
    from ortholab.datamodules.catalog import CATALOG, PATH_ONLY

    rows = []
    for d in CATALOG.values():
        problems = d.problems()
        rows.append(
            {
                "name": d.name,
                "license": d.license,
                "size": d.size,
                "files": len(d.files),
                "state": _state(d, problems),
                "path": str(d.path()),
                "title": d.title,
                "problems": _notes(d, problems),
            }
        )
    rows += [
        {
            "name": name,
            "license": "LDC licence",
            "size": None,
            "files": None,
            "state": "path only",
            "path": None,
            "title": why,
        }
        for name, why in PATH_ONLY.items()
    ]
    return rows


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)


def print_list(name: str | None, as_json: bool) -> None:
    from ortholab.datamodules.catalog import DATA_ENV, data_root, get

    if name is not None:  # one data set: every file with its checksum and where it comes from
        dataset = get(name)
        problems = dataset.problems()
        kinds = {p.file.name: p.kind for p in problems}
        files = [
            {
                "name": f.name,
                "sha256": f.sha256,
                "size": f.size,
                "urls": list(f.urls),
                "present": (dataset.path() / f.name).is_file(),
                "state": kinds.get(f.name, "present"),
            }
            for f in dataset.files
        ]
        if as_json:
            print(
                json.dumps(
                    {
                        "name": dataset.name,
                        "path": str(dataset.path()),
                        "license": dataset.license,
                        "homepage": dataset.homepage,
                        "files": files,
                    },
                    indent=2,
                )
            )
            return
        print(
            f"{dataset.title}\nlicense: {dataset.license}; {dataset.homepage}\nfolder: {dataset.path()}\n"
            f"SHA-256 of each stored file (check a copy made by hand with `sha256sum -c`):"
        )
        for f in dataset.files:
            print(f"{f.sha256}  {f.name}  ({f.size:,} bytes; {f.urls[0]})")
        _print_notes(dataset.name, _notes(dataset, problems))
        return
    rows = dataset_rows()
    if as_json:
        print(json.dumps({"data_root": str(data_root()), "datasets": rows}, indent=2))
        return
    source = f"${DATA_ENV}" if os.environ.get(DATA_ENV) else f"the per-user cache; set ${DATA_ENV} to change it"
    print(f"data root: {data_root()} ({source})")
    table = [["name", "license", "size", "files", "state", "description"]]
    table += [
        [
            r["name"],
            r["license"],
            _megabytes(r["size"]) if r["size"] else "-",
            str(r["files"] or "-"),
            r["state"],
            r["title"],
        ]
        for r in rows
    ]
    print(_table(table))
    for r in rows:
        if r.get("problems"):
            _print_notes(r["name"], r["problems"])
    print(
        as_typed(
            "fetch one with `ortholab data fetch NAME` (or all); `ortholab data list NAME` shows its files' checksums"
        )
    )


def _print_notes(name: str, notes: list[str], shown: int = 3) -> None:
    """The first `shown` notes on the damaged or gzipped files of data set `name`."""
    for note in notes[:shown]:
        print(f"{name}: {note}")
    if len(notes) > shown:
        print(as_typed(f"{name}: and {len(notes) - shown} more such file(s) (`ortholab data list {name} --json`)"))


def fetch_command(name: str, mirror: str | None) -> None:
    from ortholab.datamodules.catalog import CATALOG, get
    from ortholab.datamodules.download import check_mirror, fetch

    if mirror is not None:  # before anything is fetched: a path or gopher:// is no mirror
        check_mirror(mirror, "--mirror")
    chosen = list(CATALOG.values()) if name == "all" else [get(name)]
    failed: dict[str, str] = {}  # name -> why, in a few words
    for dataset in chosen:
        before = len(dataset.missing())
        try:
            folder = fetch(dataset, mirror=mirror)
        except ConfigError as err:
            if len(chosen) == 1:
                raise
            why = str(err).removeprefix(f"cannot fetch {dataset.name}: ")  # the line names the set once
            print(f"{dataset.name}: not fetched: {why}", flush=True)  # and on with the next set
            failed[dataset.name] = getattr(err, "reason", None) or str(err)
            continue
        state = "already present, verified" if before == 0 else f"fetched and verified ({_megabytes(dataset.size)})"
        print(f"{dataset.name}: {state} in {folder}", flush=True)
    if failed:
        by_reason: dict[str, list[str]] = {}
        for failed_name, why in failed.items():
            by_reason.setdefault(why, []).append(failed_name)
        reasons = "; ".join(f"{', '.join(names)} ({why})" for why, names in by_reason.items())
        fetched = len(chosen) - len(failed)
        raise ConfigError(
            f"could not fetch {len(failed)} of {len(chosen)} data sets: {reasons}"
            + (f"; the other {fetched} are in place" if fetched else "")
            + "; the lines above say how to get each (`ortholab data list` shows what is there)"
        )


def add_arguments(parser) -> None:
    from ortholab.datamodules.catalog import CATALOG, MIRROR_ENV

    sub = parser.add_subparsers(dest="action", required=True)
    lister = sub.add_parser("list", help="each data set: license, size, whether it is present")
    lister.add_argument("name", nargs="?", default=None, help="one data set: list its files and their SHA-256")
    lister.add_argument("--json", action="store_true", help="print the list as JSON")
    fetcher = sub.add_parser("fetch", help="download a data set (or all), verifying every file's SHA-256")
    fetcher.add_argument("name", help=f"one of {', '.join(CATALOG)}, or all")
    fetcher.add_argument(
        "--mirror",
        default=None,
        help=f"a URL holding a copy of a data root (file:// or http(s)://); default ${MIRROR_ENV}, "
        f"else each file's public location",
    )


def run(args, extra: list[str]) -> None:
    from ortholab.datamodules.catalog import CATALOG, get

    if args.action == "list":
        print_list(args.name, args.json)
    elif args.name != "all" and args.name not in CATALOG:
        get(args.name)  # ConfigError: path-only or unknown, with the choices
        raise ConfigError(f"no data set {args.name!r}")
    else:
        fetch_command(args.name, args.mirror)
