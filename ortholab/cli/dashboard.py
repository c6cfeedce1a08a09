"""`ortholab dashboard`: the Streamlit dashboard (ortholab/app) on a run store, which it only reads."""

from __future__ import annotations

from ortholab.cli.common import DB_HELP

USAGE = "dashboard [--db URL] [--port 8501] [--host 127.0.0.1]"
HELP = "the Streamlit dashboard (localhost only unless --host says otherwise)"


def add_arguments(parser) -> None:
    parser.add_argument("--db", default=None, help=DB_HELP)
    parser.add_argument("--port", type=int, default=8501, help="port to serve on (default: 8501)")
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on; 0.0.0.0 exposes the dashboard to the network (put authentication in front of it)",
    )


def run(args, extra: list[str]) -> None:
    from ortholab.app.launch import run_dashboard
    from ortholab.db import Store
    from ortholab.extras import require_extra

    require_extra("dashboard")  # before the store: a missing part is named first
    Store(args.db, access="read").close()  # a reader: a mistyped --db is reported, not made into a new store
    run_dashboard(args.db, port=args.port, host=args.host)  # replaces this process with the server
