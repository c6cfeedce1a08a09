"""`ortholab db upgrade|version`: migrate a store written by an older OrthoLab (Alembic), or show the revisions."""

from __future__ import annotations

from ortholab.cli.common import DB_HELP

USAGE = "db upgrade|version [--db URL]"
HELP = "migrate a store written by an older OrthoLab / show schema revisions"


def add_arguments(parser) -> None:
    parser.add_argument(
        "action",
        choices=["upgrade", "version"],
        help="upgrade: migrate the store to this OrthoLab's schema; version: show revisions",
    )
    parser.add_argument("--db", default=None, help=DB_HELP)
    parser.add_argument(
        "--allow-foreign",
        action="store_true",
        help="upgrade: add OrthoLab's tables to a database that holds other applications' tables (refused without it)",
    )


def run(args, extra: list[str]) -> None:
    from ortholab.db import Store, default_db_url
    from ortholab.db.masking import mask_url
    from ortholab.db.schema_version import head_revision

    shown = mask_url(args.db or default_db_url())  # never the password
    if args.action == "upgrade":
        done = Store.upgrade(args.db, allow_foreign=args.allow_foreign)
        removed = (
            (f"; {done.duplicate_points_removed} duplicate metric point(s) removed (the last logged of each kept)")
            if done.duplicate_points_removed
            else ""
        )
        print(f"{shown}: schema revision {done.before or 'none'} -> {done.after}{removed}")
    else:
        print(f"this OrthoLab's schema revision: {head_revision()}")
        Store(args.db, access="read")  # raises, saying what to do, unless the store is at that revision
        print(f"{shown}: at {head_revision()}")
