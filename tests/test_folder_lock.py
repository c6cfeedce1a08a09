"""db/folder_lock.py: one process writes a run folder at a time, whichever store names the folder."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ortholab.db import folder_lock
from ortholab.db.store import RunBusy

REPO = Path(__file__).resolve().parents[1]
HOLDER = """
import sys
from ortholab.db import folder_lock
folder_lock.hold(sys.argv[1], "a" * 32, 7)
print("held", flush=True)
sys.stdin.read()
"""


def test_a_folder_another_process_holds_is_refused_naming_it_and_free_once_it_ends(tmp_path):
    folder = tmp_path / "store-aaaaaaaa" / "run" / "7"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(folder)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RunBusy) as busy:
            folder_lock.hold(str(folder), "b" * 32, 7)
        said = str(busy.value)
        assert f"Run 7's folder {folder} is being written by process {holder.pid} on " in said
        assert "as run 7 of another store (store id aaaaaaaa, this one is bbbbbbbb: one is a copy of the other)" in said
        with pytest.raises(RunBusy, match="as run 7 of this store"):
            folder_lock.hold(str(folder), "a" * 32, 7)
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    key = folder_lock.hold(str(folder), "b" * 32, 7)  # the lock ended with its process: nothing to clean up
    assert key is not None
    folder_lock.release(key)


def test_a_folder_this_process_holds_is_held_again_and_freed_by_the_last_release(tmp_path):
    """A run resumed in the process that wrote it (the library's fit, a test) is not refused by its own lock."""
    first = folder_lock.hold(str(tmp_path), "a" * 32, 1)
    second = folder_lock.hold(str(tmp_path / "."), "a" * 32, 1)  # the same folder, spelt otherwise
    assert first == second and folder_lock._HELD[first][1] == 2
    folder_lock.release(first)
    assert first in folder_lock._HELD  # still held once
    folder_lock.release(second)
    assert first not in folder_lock._HELD
    folder_lock.release(first)  # a release too many changes nothing


def test_other_store_tells_a_copy_from_the_same_store_by_another_name(tmp_path):
    """`fit --resume` refuses a folder another store wrote: a byte copy of a SQLite store (same id, other file, still
    there) or another store's id; not the same store moved, linked, or a server reached by another host name."""
    original, copy = tmp_path / "a" / "ortholab.db", tmp_path / "b" / "ortholab.db"
    for path in (original, copy):
        path.parent.mkdir()
        path.write_bytes(b"")
    folder = tmp_path / "run"
    folder.mkdir()
    folder_lock.adopt(folder, "id1", 3, f"sqlite:///{original}")
    assert folder_lock.other_store(folder, "id1", f"sqlite:///{original}") is None
    assert folder_lock.other_store(folder, "id1", f"sqlite:///{copy}") == f"sqlite:{original}"  # the byte copy
    assert folder_lock.other_store(folder, "id2", f"sqlite:///{copy}") == f"sqlite:{original}"  # another store
    (tmp_path / "c").symlink_to(tmp_path / "a")
    assert folder_lock.other_store(folder, "id1", f"sqlite:///{tmp_path / 'c' / 'ortholab.db'}") is None  # linked
    original.unlink()  # moved: the file it names is gone
    assert folder_lock.other_store(folder, "id1", f"sqlite:///{copy}") is None
    folder_lock.adopt(folder, "id1", 3, "postgresql+psycopg://me:pw@localhost/runs")
    assert folder_lock.other_store(folder, "id1", "postgresql+psycopg://me:pw@127.0.0.1/runs") is None
    assert folder_lock.other_store(folder, "id2", "postgresql+psycopg://me:pw@127.0.0.1/runs") is not None
