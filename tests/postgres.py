"""A throwaway PostgreSQL server for the store's tests (Debian's package; `.ci/run` installs it)."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from contextlib import contextmanager


def _binaries() -> str | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return os.path.dirname(found[-1]) if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def unavailable_reason() -> str | None:
    if _binaries() is None:
        return "PostgreSQL server binaries not installed (apt-get install postgresql)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root without a 'postgres' user to run the server as"
    return None


@contextmanager
def postgres_server():
    """Yield a SQLAlchemy URL of a fresh database on a new server listening on localhost; stop it after."""
    bin_dir = _binaries()
    folder = tempfile.mkdtemp(prefix="ortholab-pg-")
    data, port = os.path.join(folder, "data"), _free_port()
    as_user: list[str] = []
    if os.geteuid() == 0:  # initdb refuses root: run the server as the package's postgres user
        shutil.chown(folder, "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]

    def run(*cmd: str) -> subprocess.CompletedProcess:
        return subprocess.run([*as_user, *cmd], check=True, capture_output=True, text=True)

    run(f"{bin_dir}/initdb", "-D", data, "-U", "ortholab", "--auth=trust", "-E", "UTF8")
    run(
        f"{bin_dir}/pg_ctl",
        "-D",
        data,
        "-l",
        os.path.join(folder, "log"),
        "-w",
        "start",
        "-o",
        f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off",
    )
    try:
        run(f"{bin_dir}/createdb", "-h", "127.0.0.1", "-p", str(port), "-U", "ortholab", "runs")
        yield f"postgresql+psycopg://ortholab@127.0.0.1:{port}/runs"
    finally:
        subprocess.run([*as_user, f"{bin_dir}/pg_ctl", "-D", data, "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)


def wait_until_ready(url: str, timeout: float = 10.0) -> None:
    from sqlalchemy import create_engine, text

    deadline = time.monotonic() + timeout
    while True:
        try:
            with create_engine(url).connect() as conn:
                conn.execute(text("select 1"))
            return
        except Exception:  # retry until the server accepts connections
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
