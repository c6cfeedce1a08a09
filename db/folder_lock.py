"""One process writes a run folder at a time: an advisory lock (flock) on the folder's `.writer.lock`, held while a
run trains. The store's lease keeps two processes of one store off a run; the lock also keeps off a process of another
store that names the same folder: a copy of the store, or an export's runs.db, whose runs were recorded there.

The lock ends with the process (the kernel releases it), so a killed run leaves nothing to clean up. Where the
filesystem takes no locks (some network mounts), the folder is written unlocked, as before the lock existed.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows: no flock; the lease alone guards a run
    fcntl = None

from ortholab.db.store import RunBusy

LOCK_NAME = ".writer.lock"
_HELD: dict[str, list[int]] = {}  # the folders this process holds (real path): [the lock file's descriptor, holds]


def store_place(url: str) -> str:
    """Where a store lives, as the lock file names it: a SQLite file's real path, or a server's URL without its
    password. A byte copy of a SQLite store has the same store id but another place."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        return f"sqlite:{os.path.realpath(parsed.database)}"
    return parsed.render_as_string(hide_password=True)


def written_by(folder: str | Path) -> dict:
    """The facts the folder's lock file holds about the run that last wrote it ({} where it has none): pid, host,
    store_id, run_id and, since 2026-12-04, store (`store_place`). Read only: nothing is created or locked."""
    try:
        facts = json.loads((Path(folder) / LOCK_NAME).read_text() or "{}")
    except (OSError, ValueError):
        return {}
    return facts if isinstance(facts, dict) else {}


def other_store(folder: str | Path, store_id: str, store_url: str) -> str | None:
    """Where another store last wrote `folder` (`store_place`): one with another id, or the original of a byte copy
    of a SQLite store (or such a copy), which shares the id and is still there. None where this store wrote it,
    where the folder names no store (written before 2026-12-04), where a server of this id is named by another URL,
    or where the SQLite file it names is gone or is this one (moved since, the old place perhaps linked to it)."""
    facts = written_by(folder)
    place, here = facts.get("store"), store_place(store_url)
    if not place or place == here:
        return None
    if facts.get("store_id") != store_id:
        return place  # another store altogether (an export's runs.db, say)
    if not (place.startswith("sqlite:") and here.startswith("sqlite:")):
        return None  # a server reached by another name (localhost, a compose service): its id makes it this store
    named = place.removeprefix("sqlite:")
    if not os.path.exists(named) or os.path.samefile(named, here.removeprefix("sqlite:")):
        return None  # moved since, or the old place now links to this file
    return place


def adopt(folder: str | Path, store_id: str, run_id: int, store_url: str) -> None:
    """Name store `store_id` at `store_url` as the folder's writer (`restore` gives it the store it restored)."""
    facts = {**written_by(folder), "store_id": store_id, "run_id": run_id, "store": store_place(store_url)}
    (Path(folder) / LOCK_NAME).write_text(json.dumps(facts))


def hold(folder: str, store_id: str, run_id: int, store_url: str | None = None) -> str | None:
    """Lock `folder` for this process as run `run_id` of store `store_id` (at `store_url`): a key to `release` it by
    (the process's end frees it too), None where locks are not available. RunBusy naming the holder when another
    process holds the folder; a folder this process holds already (a run resumed in the same process) is held once
    more."""
    if fcntl is None:
        return None
    key = os.path.realpath(folder)
    if key in _HELD:
        _HELD[key][1] += 1
        return key
    try:
        os.makedirs(folder, exist_ok=True)
        fd = os.open(os.path.join(folder, LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:  # a folder it cannot write: the run's own first write says so, in its words
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(fd)
        os.close(fd)
        raise RunBusy(_busy(folder, holder, store_id, run_id)) from None
    except OSError:  # ENOLCK and the like: a filesystem without locks
        os.close(fd)
        return None
    facts = {"pid": os.getpid(), "host": socket.gethostname(), "store_id": store_id, "run_id": run_id}
    if store_url is not None:
        facts["store"] = store_place(store_url)
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(facts).encode(), 0)
    _HELD[key] = [fd, 1]
    return key


def release(key: str | None) -> None:
    """Give the folder up once; the last release closes the lock file, which frees the lock."""
    held = _HELD.get(key) if key is not None else None
    if held is None:
        return
    held[1] -= 1
    if held[1] == 0:
        del _HELD[key]
        try:
            os.close(held[0])
        except OSError:
            pass


def _holder(fd: int) -> dict:
    try:
        return json.loads(os.pread(fd, 4096, 0).decode() or "{}")
    except (OSError, ValueError):
        return {}


def _busy(folder: str, holder: dict, store_id: str, run_id: int) -> str:
    who = f"process {holder['pid']} on {holder.get('host', '?')}" if holder.get("pid") else "another process"
    theirs = str(holder.get("store_id", ""))
    whose = (
        f"run {holder.get('run_id')} of another store (store id {theirs[:8]}, this one is {store_id[:8]}: one "
        f"is a copy of the other)"
        if theirs and theirs != store_id
        else f"run {holder.get('run_id', run_id)} of this store"
    )
    return (
        f"Run {run_id}'s folder {Path(folder)} is being written by {who}, as {whose}; both would write the same "
        f"checkpoints. Stop that process first (`kill -TERM` saves a checkpoint), or continue the run from the store "
        f"that process writes."
    )
