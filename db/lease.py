"""Who is writing a run: the lease a training process holds on its run row, and whether its holder is alive.

A process writing a run holds a lease on its row (`runs.lease_owner`, `runs.lease_expires_at`), renewed by every
write and by a heartbeat. Another process may take the run over (`ortholab fit --resume`) only when the lease has
expired, or when its holder ran on this machine and is gone (a crash is recovered at once, not after the lease).
The owner token names the holder: host, boot, PID namespace, PID and the process's start time (so a reused PID is
not mistaken for the holder).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

LEASE_S = 60.0  # a lease lasts this long after the holder's last write or heartbeat
HEARTBEAT_S = LEASE_S / 4  # how often a live holder renews it
SEPARATOR = "|"
CLAIM_PREFIX = "claim:"  # store_info keys of the claims `reproduce` holds on the rows it starts (Store.claim)
SILENT_AFTER_S = 300.0  # a 'running' run without a write or heartbeat this long was probably killed outright


def silence(heartbeat_at, now) -> str | None:
    """How long a running run has been silent, as 'silent 31 min: killed?', or None while it is live."""
    age = max(0.0, (now - heartbeat_at).total_seconds())
    if age < SILENT_AFTER_S:
        return None
    return f"silent {age / 60:.0f} min: killed?" if age < 3600 else f"silent {age / 3600:.1f} h: killed?"


@dataclass(frozen=True)
class Owner:
    """The parts of an owner token."""

    host: str
    boot: str
    pid_namespace: str
    pid: int
    started: str

    @property
    def token(self) -> str:
        return SEPARATOR.join((self.host, self.boot, self.pid_namespace, str(self.pid), self.started))

    def describe(self) -> str:
        return f"process {self.pid} on {self.host}"


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def _stat(pid: int) -> list[str]:
    """/proc/PID/stat's fields after the command name (which may hold spaces): [state, ppid, ...]; [] if unknown."""
    stat = _read(f"/proc/{pid}/stat")
    return stat.rsplit(")", 1)[-1].split() if stat else []


def _start_time(pid: int) -> str:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22); '' where unknown."""
    fields = _stat(pid)
    return fields[19] if len(fields) > 19 else ""


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def current_owner() -> Owner:
    """This process as a lease holder."""
    host = socket.gethostname().replace(SEPARATOR, "_")
    return Owner(
        host, _read("/proc/sys/kernel/random/boot_id"), _pid_namespace(), os.getpid(), _start_time(os.getpid())
    )


def parse(token: str | None) -> Owner | None:
    """The owner a token names; None for no token or one this OrthoLab cannot read."""
    parts = (token or "").split(SEPARATOR)
    if len(parts) != 5 or not parts[3].isdigit():
        return None
    return Owner(parts[0], parts[1], parts[2], int(parts[3]), parts[4])


def is_gone(owner: Owner) -> bool:
    """True only when the holder provably ended: it ran on this machine (same host, boot and PID namespace) and
    its process no longer exists (or its PID now belongs to a process started at another time)."""
    here = current_owner()
    if (owner.host, owner.boot, owner.pid_namespace) != (here.host, here.boot, here.pid_namespace) or not here.boot:
        return False  # another machine or container: only the lease's expiry tells
    try:
        os.kill(owner.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # exists, owned by another user
        pass
    fields = _stat(owner.pid)
    if fields[:1] == ["Z"]:  # exited, not yet reaped by its parent
        return True
    return bool(owner.started) and _start_time(owner.pid) not in ("", owner.started)
