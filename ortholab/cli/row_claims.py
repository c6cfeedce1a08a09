"""A `reproduce` command's claim on each row and seed it trains, held in the store while it trains them.

Two commands given the same row at once (two terminals, two machines on one PostgreSQL store) each read the store
before its row and found no run: the fit's own run and lease appear only once that fit has started, seconds later,
so both trained the row. The claim is taken before that read and held, renewed, until the row is trained and
evaluated; a claim whose command died is taken over once it expires, at once where it died on this machine.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from ortholab.db import Store, lease
from ortholab.db.store import StoreError, StoreMissing

CLAIM_S = 120.0  # a claim lasts this long after its last renewal (its command killed with its machine: this late)
RENEW_S = CLAIM_S / 4


def claim_key(tag: str, seed: int | None, scale: str | None, flags: str | None) -> str:
    """What two commands must not train twice: the row, its seed, its scale and the flags that change it."""
    return f"{tag} seed:{seed} scale:{scale} flags:{flags or ''}"


@contextmanager
def claimed(db: str | None, key: str, seconds: float = CLAIM_S) -> Iterator[str | None]:
    """Hold the claim on `key` for the block, renewed in the background: yields None, or who holds it instead
    (the block should then leave the row alone). The store is connected only to claim, renew and release: an open
    SQLite connection is not held while the row trains. Where no store exists yet there is nothing to claim in: two
    commands started together on a new store can still both train its first row."""
    try:
        store = Store(db, access="write")
    except StoreMissing:  # nothing recorded yet: the fit makes the store (a config it refuses leaves none behind)
        yield None
        return
    owner = lease.current_owner().token
    try:
        holder = store.claim(key, owner, seconds)
    finally:
        store.close()
    if holder is not None:
        yield holder
        return
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(seconds / 4):
            try:
                store.claim(key, owner, seconds)
            except StoreError:  # the server away for a while: the next renewal tries again
                pass
            finally:
                store.close()

    renewing = threading.Thread(target=renew, name=f"claim {key}", daemon=True)
    renewing.start()
    try:
        yield None
    finally:
        stop.set()
        renewing.join()
        try:
            store.release_claim(key, owner)
        except StoreError:  # unreachable now: the claim expires on its own
            pass
        finally:
            store.close()
