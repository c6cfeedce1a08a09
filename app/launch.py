"""Start the dashboard: `ortholab dashboard [--db URL] [--port 8501] [--host 127.0.0.1]` calls `run_dashboard`.

This process becomes `streamlit run app/main.py` (exec, so Ctrl-C and SIGTERM stop the server itself):
headless (no browser opened), no usage statistics, bound to `host` (localhost unless told otherwise),
reading the database named by $ORTHOLAB_DB. `python -m ortholab.app.launch --db URL --port N` does the same.
"""

from __future__ import annotations

import argparse
import errno
import ipaddress
import os
import socket
import sys
from pathlib import Path
from typing import NoReturn

from ortholab.db import Store, StoreError, default_db_url
from ortholab.db.masking import mask_url
from ortholab.errors import ConfigError
from ortholab.extras import require_extra

APP = Path(__file__).resolve().parent / "main.py"
DEFAULT_PORT = 8501
DEFAULT_HOST = "127.0.0.1"


def streamlit_command(port: int = DEFAULT_PORT, host: str = DEFAULT_HOST) -> list[str]:
    """The `streamlit run` command line for the dashboard with its server settings."""
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(APP),
        "--server.port",
        str(port),
        "--server.address",
        host,
        "--server.headless",
        "true",  # never try to open a browser
        "--browser.gatherUsageStats",
        "false",  # no telemetry
        "--server.fileWatcherType",
        "none",  # an installed app does not reload on source changes
        "--server.runOnSave",
        "false",
        "--client.toolbarMode",
        "viewer",  # no developer menu or Deploy button
        "--global.developmentMode",
        "false",  # Streamlit guesses it on where it is installed: outside a site-packages, --server.port is refused
    ]


def is_loopback(host: str) -> bool:
    """Whether `host` is reachable from this machine only (127.0.0.0/8, ::1, localhost)."""
    if host.lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name or an address of an interface: others can reach it


def dashboard_env(db_url: str) -> dict[str, str]:
    """The child's environment: the database URL, and Streamlit's telemetry off."""
    return {**os.environ, "ORTHOLAB_DB": db_url, "STREAMLIT_BROWSER_GATHER_USAGE_STATS": "false"}


def check_port_free(host: str, port: int) -> None:
    """ConfigError naming --port when another server holds host:port on any address `host` resolves to (or the port
    needs root), or --host when it cannot be bound; Streamlit would print "Port N is not available" after our start
    line and exit 1. Each address is probed as Tornado binds it (IPv6 only on IPv6; ::1 skipped where absent)."""
    try:
        infos = sorted(set(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)))
    except (socket.gaierror, UnicodeError) as error:
        raise ConfigError(f"--host {host}: not an address of this machine ({error})") from None
    for family, kind, proto, _, address in infos:
        try:
            with socket.socket(family, kind, proto) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server: a closed one's port
                if family == socket.AF_INET6:
                    probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                probe.bind(address)
        except OSError as error:
            if error.errno == errno.EAFNOSUPPORT or (error.errno == errno.EADDRNOTAVAIL and address[0] == "::1"):
                continue  # no IPv6 here (a container): the server skips that address too
            if error.errno == errno.EADDRINUSE:
                raise ConfigError(
                    f"--port {port}: {host}:{port} is in use (another dashboard?); give another, e.g. --port {port + 1}"
                ) from None
            if error.errno == errno.EACCES:
                raise ConfigError(
                    f"--port {port}: a port below 1024 needs root; give another, e.g. --port 8501"
                ) from None
            raise ConfigError(f"--host {host}: cannot serve there ({error.strerror})") from None


def run_dashboard(db_url: str | None = None, port: int = DEFAULT_PORT, host: str = DEFAULT_HOST) -> NoReturn:
    """Serve the dashboard on http://host:port until stopped (Ctrl-C or SIGTERM); does not return.

    The database is checked first (StoreError with the reason and the fix if it cannot be opened), so a
    bad --db fails here rather than as an error page. Then this process becomes the Streamlit server
    (exec), so signals reach the server itself and no child is left behind when it is stopped.
    """
    require_extra("dashboard")  # streamlit and plotly: one line naming the extra, not a server that cannot start
    if not 0 < port < 65536:
        raise ConfigError(f"--port {port}: a TCP port is a number from 1 to 65535 (default {DEFAULT_PORT})")
    store = Store(db_url or default_db_url(), access="read")  # a reader: never creates a store, nor its WAL journal
    store.close()
    check_port_free(host, port)
    url = store.url  # a file's path as its absolute URL: the server's working folder may differ
    if not is_loopback(host):
        print(
            f"warning: --host {host} opens the dashboard to the network, and it has no authentication: anyone who "
            f"can reach this machine on port {port} can read every run in {mask_url(url)}; put authentication "
            f"(e.g. a reverse proxy) in front of it, or use --host {DEFAULT_HOST} for this machine only",
            file=sys.stderr,
            flush=True,
        )
    print(f"OrthoLab dashboard on http://{host}:{port} for {mask_url(url)}; Ctrl-C stops it.", flush=True)
    os.execve(sys.executable, streamlit_command(port, host), dashboard_env(url))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ortholab.app.launch", description="Serve the OrthoLab dashboard.")
    parser.add_argument(
        "--db",
        default=None,
        help="the run store: a SQLite file's path or an SQLAlchemy URL (default: $ORTHOLAB_DB, else ortholab.db "
        "in $ORTHOLAB_RUNS, else in ./runs)",
    )
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port to serve on (default: {DEFAULT_PORT})")
    parser.add_argument("--host", default=DEFAULT_HOST, help="address to bind (default: localhost only)")
    args = parser.parse_args(argv)
    try:
        run_dashboard(args.db, args.port, args.host)
    except (StoreError, ConfigError) as error:
        print(f"ortholab dashboard: error: {mask_url(str(error))}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
