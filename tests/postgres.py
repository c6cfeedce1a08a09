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


class Server:
    """A throwaway server in its own folder, which a test may stop and start again (a restart, an outage)."""

    def __init__(self) -> None:
        self.bin_dir = _binaries()
        self.folder = tempfile.mkdtemp(prefix="ortholab-pg-")
        self.data, self.port = os.path.join(self.folder, "data"), _free_port()
        self.as_user: list[str] = []
        if os.geteuid() == 0:  # initdb refuses root: run the server as the package's postgres user
            shutil.chown(self.folder, "postgres")
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self.url = f"postgresql+psycopg://ortholab@127.0.0.1:{self.port}/runs"

    def _run(self, *cmd: str) -> subprocess.CompletedProcess:
        return subprocess.run([*self.as_user, *cmd], check=True, capture_output=True, text=True)

    def start(self) -> None:
        """Start the server and wait until it accepts connections (-l: its output must not hold our pipes)."""
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(
            f"{self.bin_dir}/pg_ctl",
            "-D",
            self.data,
            "-l",
            os.path.join(self.folder, "log"),
            "-w",
            "start",
            "-o",
            options,
        )

    def stop(self, mode: str = "fast") -> None:
        """Stop the server; 'fast' ends open connections as a restart or failover does."""
        subprocess.run(
            [*self.as_user, f"{self.bin_dir}/pg_ctl", "-D", self.data, "-m", mode, "-w", "stop"], capture_output=True
        )

    def create(self) -> None:
        self._run(f"{self.bin_dir}/initdb", "-D", self.data, "-U", "ortholab", "--auth=trust", "-E", "UTF8")
        self.start()
        self._run(f"{self.bin_dir}/createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "ortholab", "runs")


@contextmanager
def postgres_server_under_control():
    """Yield a Server holding a fresh database `runs`, started; stop and delete it after."""
    server = Server()
    try:
        server.create()
        yield server
    finally:
        server.stop("immediate")
        shutil.rmtree(server.folder, ignore_errors=True)


@contextmanager
def postgres_server():
    """Yield a SQLAlchemy URL of a fresh database on a new server listening on localhost; stop it after."""
    with postgres_server_under_control() as server:
        yield server.url


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
