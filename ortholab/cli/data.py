"""`ortholab data list [NAME]` and `ortholab data fetch NAME|all`: the data sets of the catalog in the data root."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

from ortholab.errors import ConfigError

if TYPE_CHECKING:
    from ortholab.datamodules.catalog import DataSet

USAGE = "data list [NAME] [--json] | data fetch NAME|all [--mirror URL]"
HELP = "the data sets that can be fetched (license, size, present?) into $ORTHOLAB_DATA"


def _megabytes(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def _state(dataset: DataSet) -> str:
    missing = len(dataset.missing())
    if not missing:
        return "present"
    total = len(dataset.files)
    return "missing" if missing == total else f"partial ({total - missing}/{total})"


def dataset_rows() -> list[dict]:
    from ortholab.datamodules.catalog import CATALOG, PATH_ONLY

    rows = [
        {
            "name": d.name,
            "license": d.license,
            "size": d.size,
            "files": len(d.files),
            "state": _state(d),
            "path": str(d.path()),
            "title": d.title,
        }
        for d in CATALOG.values()
    ]
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
        files = [
            {
                "name": f.name,
                "sha256": f.sha256,
                "size": f.size,
                "urls": list(f.urls),
                "present": (dataset.path() / f.name).is_file(),
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
    print("fetch one with `ortholab data fetch NAME` (or all); `ortholab data list NAME` shows its files' checksums")


def fetch_command(name: str, mirror: str | None) -> None:
    from ortholab.datamodules.catalog import CATALOG, get
    from ortholab.datamodules.download import check_mirror, fetch

    if mirror is not None:  # before anything is fetched: a path or gopher:// is no mirror
        check_mirror(mirror, "--mirror")
    chosen = list(CATALOG.values()) if name == "all" else [get(name)]
    for dataset in chosen:
        before = len(dataset.missing())
        folder = fetch(dataset, mirror=mirror)
        state = "already present, verified" if before == 0 else f"fetched and verified ({_megabytes(dataset.size)})"
        print(f"{dataset.name}: {state} in {folder}")


def add_arguments(parser) -> None:
    from ortholab.datamodules.catalog import CATALOG, MIRROR_ENV

    sub = parser.add_subparsers(dest="action", required=True)
    lister = sub.add_parser("list", help="each data set: license, size, whether it is present")
    lister.add_argument("name", nargs="?", default=None, help="one data set: list its files and their SHA-256")
    lister.add_argument("--json", action="store_true")
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
