"""The container's checks on the run store: a healthcheck that opens it, and a wait for it before starting.

    python -m ortholab.app.health                      # healthcheck: the store opens and the dashboard answers
    python -m ortholab.app.health --wait 120 -- CMD    # wait up to 120 s for the store to open, then exec CMD
    python -m ortholab.app.health --wait 120 --reader -- CMD   # the same, opening it as a reader (the dashboard)

docker-compose.yml runs the first as the dashboard's healthcheck, so a dashboard whose database is down
reports unhealthy (Streamlit's own /_stcore/health answers ok without the store), and the second as the
entrypoint of every OrthoLab service, so a trainer or a dashboard started before its PostgreSQL server
waits for it with one line a try instead of failing and being restarted. The trainer's wait opens the store as a
writer does (`db.Store`): in a container the volume is the store's home, and the first open creates it there. The
dashboard's wait (--reader) and the healthcheck, run every few seconds beside a dashboard that only reads, open it
as a reader: no write probe, no journal switch, no file made, so a store that does not exist yet is waited for (the
trainer's first open makes it), and an export's runs.db is read as it is.
Both print one line and exit 0 (ok) or 1 (healthcheck failed) / 2 (the store did not open in time).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import urllib.error
import urllib.request

DASHBOARD_PORT = 8501
HTTP_TIMEOUT_S = 5.0
RETRY_EVERY_S = 2.0


def store_problem(url: str | None = None, access: str = "create") -> str | None:
    """None when the run store at `url` (default: $ORTHOLAB_DB) opens for `access` (db.Store's: 'create' makes a
    missing one, 'read' writes nothing), else the reason it does not."""
    from ortholab.db import Store, StoreError

    try:
        Store(url, access=access).close()
    except StoreError as error:
        return str(error)
    return None


def dashboard_problem(port: int = DASHBOARD_PORT) -> str | None:
    """None when the Streamlit server on this host's `port` answers its health endpoint, else why not."""
    address = f"http://127.0.0.1:{port}/_stcore/health"
    try:
        with urllib.request.urlopen(address, timeout=HTTP_TIMEOUT_S) as answer:
            body = answer.read(100).decode(errors="replace").strip()
    except (urllib.error.URLError, OSError) as error:
        return f"the dashboard does not answer at {address} ({getattr(error, 'reason', error)})"
    return None if body == "ok" else f"the dashboard answered {body!r} at {address}, not 'ok'"


def wait_for_store(timeout_s: float, url: str | None = None, say=print, access: str = "create") -> str | None:
    """Try to open the store for `access` every RETRY_EVERY_S until it opens (None) or `timeout_s` has passed (the
    reason). 'create' makes a missing store; 'read' waits for one to be made."""
    deadline = time.monotonic() + timeout_s
    while (problem := store_problem(url, access=access)) is not None:
        left = deadline - time.monotonic()
        if left <= 0:
            return problem
        say(f"waiting for the run database ({left:.0f} s left): {problem}")
        time.sleep(min(RETRY_EVERY_S, left))
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command = argv[argv.index("--") + 1 :] if "--" in argv else []
    parser = argparse.ArgumentParser(prog="python -m ortholab.app.health", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--wait",
        type=float,
        default=None,
        metavar="SECONDS",
        help="wait up to SECONDS for the store ($ORTHOLAB_DB) to open, then exec the command "
        "after --, if any; without --wait: the dashboard's healthcheck",
    )
    parser.add_argument(
        "--reader",
        action="store_true",
        help="with --wait: open the store as a reader (the dashboard's wait): wait for it to exist, never create or "
        "change it",
    )
    parser.add_argument("--port", type=int, default=DASHBOARD_PORT, help="the dashboard's port in this container")
    args = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    if args.wait is None:
        problem = store_problem(access="read") or dashboard_problem(args.port)  # the dashboard's reader, every 10 s
        print(problem or "ok")
        return 1 if problem else 0
    access = "read" if args.reader else "create"
    problem = wait_for_store(args.wait, say=lambda line: print(line, file=sys.stderr, flush=True), access=access)
    if problem is not None:
        print(f"gave up after {args.wait:.0f} s: {problem}", file=sys.stderr)
        return 2
    if command:
        try:
            os.execvp(command[0], command)  # this process becomes the command: signals reach it, no child is left
        except OSError as error:
            print(f"cannot run {command[0]}: {error.strerror}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
