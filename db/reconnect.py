"""Writes that wait out a restart of a server database instead of ending the run that makes them.

A shared PostgreSQL server restarts (an upgrade, a failover, a crash) while runs train for hours. Its pooled
connections die with it, and for a few seconds it refuses new ones. A writing Store retries a write that met such
an error for up to RECONNECT_S, waiting longer each time; training pauses meanwhile, and says so once on stderr
(the `ortholab.db` logger) when the wait begins and once when it ends. Only writes that give the same result when
made twice are retried, so a write whose first attempt reached the server before the connection died does no harm
(an artifact without a step is the exception: that one case could record it twice). SQLite files are never retried:
their errors (a full disk, a read-only file) do not pass by themselves.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy.exc import DBAPIError, OperationalError

RECONNECT_S = 300.0  # how long a write waits for an unreachable server before the run stops
FIRST_WAIT_S = 1.0  # the first wait; each next one doubles, up to LONGEST_WAIT_S
LONGEST_WAIT_S = 15.0

log = logging.getLogger("ortholab.db")
Method = TypeVar("Method", bound=Callable[..., Any])


LOST_CONNECTION_STATES = ("08", "57P01", "57P02", "57P03", "53300")  # SQLSTATE: connection exceptions, a server
# shutting down or restarting, too many connections; not a full disk (53100) or a cancelled statement (57014)


def is_unreachable(error: BaseException | None) -> bool:
    """Whether a database error means the server went away or does not take connections now (a restart, a
    failover, a network cut), as opposed to a statement it refused."""
    if not isinstance(error, DBAPIError):
        return False
    if error.connection_invalidated:
        return True
    state = getattr(error.orig, "sqlstate", None)  # None: no answer from a server at all (a refused connection)
    return isinstance(error, OperationalError) and (state is None or state.startswith(LOST_CONNECTION_STATES))


def waits_for_the_server(method: Method) -> Method:
    """Retry `method` of a writing Store while its server database is unreachable (see the module's docstring).
    The Store turns driver errors into StoreError `from` the driver error; that cause tells a lost server apart.
    One outage has one deadline per Store (`store.unreachable_since`): a write after the wait gave up (the run's
    final status, as it stops) fails at once instead of waiting again."""

    @functools.wraps(method)
    def retried(store: Any, *args: Any, **kwargs: Any) -> Any:
        if not store.waits_for_restarts:
            return method(store, *args, **kwargs)
        wait = FIRST_WAIT_S
        while True:
            try:
                result = method(store, *args, **kwargs)
            except Exception as error:
                if not is_unreachable(error.__cause__):
                    raise
                now = time.monotonic()
                if store.unreachable_since is None:
                    store.unreachable_since = now
                    log.warning(
                        "ortholab: the run database %s is unreachable (%s); retrying for up to %.0f s.",
                        store.display_url,
                        _first_line(error.__cause__),
                        RECONNECT_S,
                    )
                waited = now - store.unreachable_since  # attempts included: a connection may hang before failing
                if waited >= RECONNECT_S:  # the Store's own fix (--db, $ORTHOLAB_DB) is not the fix here
                    raise type(error)(
                        f"The run database {store.display_url} has been unreachable for {waited:.0f} s "
                        f"({_first_line(error.__cause__)}); what it recorded before stays, and once the server "
                        f"is back `ortholab fit --resume RUN_ID` continues the run from its last checkpoint."
                    ) from error.__cause__
                time.sleep(min(wait, RECONNECT_S - waited))
                wait = min(2 * wait, LONGEST_WAIT_S)
                continue
            if store.unreachable_since is not None:
                waited = time.monotonic() - store.unreachable_since
                store.unreachable_since = None
                log.warning("ortholab: the run database %s is back after %.0f s.", store.display_url, waited)
            return result

    return retried  # type: ignore[return-value]


def _first_line(error: BaseException | None) -> str:
    original = getattr(error, "orig", None) or error
    return str(original).strip().splitlines()[0] if str(original).strip() else type(original).__name__
