"""A run writing to a PostgreSQL server that restarts or goes away for a while (db/reconnect.py), on a real server."""

import logging
import os
import subprocess
import sys
import threading
import time

import pytest
from postgres import postgres_server_under_control, unavailable_reason
from sqlalchemy.exc import IntegrityError, OperationalError
from test_cli import DEMO, TINY

from ortholab.db import Store, reconnect
from ortholab.db.store import StoreError

pytestmark = pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))


@pytest.fixture
def server():
    with postgres_server_under_control() as server:
        yield server


@pytest.fixture
def short_waits(monkeypatch):
    monkeypatch.setattr(reconnect, "FIRST_WAIT_S", 0.25)
    monkeypatch.setattr(reconnect, "LONGEST_WAIT_S", 0.5)


def points(store, run_id, key="a"):
    return [(p.step, p.value) for p in store.metric_series(run_id, key)]


def test_a_write_after_a_restart_reaches_the_restarted_server_without_waiting(server, caplog):
    store = Store(server.url)
    run_id = store.create_run(name="restart")
    store.log_metrics(run_id, {"a": 1.0}, step=0)
    server.stop()  # 'fast': ends the pooled connection, as a restart does
    server.start()
    with caplog.at_level(logging.WARNING, logger="ortholab.db"):
        store.log_metrics(run_id, {"a": 2.0}, step=1)
    assert points(store, run_id) == [(0, 1.0), (1, 2.0)]
    assert not caplog.records  # the pool tested its connection and made a new one: nothing to wait for


def test_a_writer_waits_out_an_outage_and_loses_no_point(server, short_waits, caplog):
    store = Store(server.url)
    run_id = store.create_run(name="outage")
    store.log_metrics(run_id, {"a": 1.0}, step=0)
    server.stop()
    back = threading.Timer(1.5, server.start)
    back.start()
    started = time.monotonic()
    try:
        with caplog.at_level(logging.WARNING, logger="ortholab.db"):
            store.log_metrics(run_id, {"a": 2.0}, step=1)
            store.set_status(run_id, "finished")
    finally:
        back.join()
    assert time.monotonic() - started >= 1.0  # it did wait for the server
    assert points(store, run_id) == [(0, 1.0), (1, 2.0)] and store.get_run(run_id).status == "finished"
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2 and "is unreachable" in said[0] and "is back after" in said[1], said
    assert "Connection refused" in said[0] and server.url in said[0]  # why, and which database


def test_a_writer_gives_up_after_the_wait_in_one_line_naming_the_resume(server, short_waits, monkeypatch):
    monkeypatch.setattr(reconnect, "RECONNECT_S", 1.0)
    store = Store(server.url)
    run_id = store.create_run(name="gone")
    server.stop()
    started = time.monotonic()
    with pytest.raises(StoreError) as error:
        store.log_metrics(run_id, {"a": 1.0}, step=0)
    assert 1.0 <= time.monotonic() - started < 5
    message = str(error.value)
    assert "\n" not in message and "unreachable for 1 s" in message and "fit --resume" in message, message
    assert "--db URL" not in message  # the Store's usual fix names another database: not the fix here
    started = time.monotonic()
    with pytest.raises(StoreError, match="unreachable for"):  # the run's final status as it stops: the same
        store.set_status(run_id, "failed")  # outage, whose wait is over, so no second wait
    assert time.monotonic() - started < 1.0


def test_a_reader_and_a_refused_statement_do_not_wait(server, short_waits, monkeypatch):
    monkeypatch.setattr(reconnect, "RECONNECT_S", 30.0)
    writer = Store(server.url)
    run_id = writer.create_run(name="reader")
    started = time.monotonic()
    with pytest.raises(StoreError, match="No run with id 999"):
        writer.log_metrics(999, {"a": 1.0}, step=0)  # the server answered: nothing to wait for
    reader = Store(server.url, access="read")
    reader.get_run(run_id)
    server.stop()
    with pytest.raises(StoreError):
        reader.get_run(run_id)  # a dashboard or `runs` says at once that the server is gone
    assert time.monotonic() - started < 5
    assert not reader.waits_for_restarts and writer.waits_for_restarts


def test_sqlite_stores_never_wait_and_only_lost_connections_count(tmp_path):
    assert not Store(str(tmp_path / "runs.db")).waits_for_restarts  # a full disk does not pass by itself
    lost = OperationalError("select 1", {}, Exception("server closed the connection unexpectedly"))
    refused = IntegrityError("insert", {}, Exception("duplicate key value violates unique constraint"))
    assert reconnect.is_unreachable(lost) and not reconnect.is_unreachable(refused)
    assert not reconnect.is_unreachable(ValueError("not a database error")) and not reconnect.is_unreachable(None)

    class ServerSaid(Exception):
        def __init__(self, sqlstate):
            super().__init__(sqlstate)
            self.sqlstate = sqlstate

    for state, waits in (("57P01", True), ("08006", True), ("53300", True), ("53100", False), ("57014", False)):
        error = OperationalError("insert", {}, ServerSaid(state))  # shutting down, lost, too many; disk full, cancelled
        assert reconnect.is_unreachable(error) is waits, state


def test_a_release_retried_after_its_reply_was_lost_is_not_a_takeover(tmp_path):
    """The review: a release (the run's final status) whose commit reached the database but whose reply was lost is
    retried; the lease is already given up then, which the retry must not read as another process taking it."""
    store = Store(str(tmp_path / "runs.db"))
    run_id = store.create_run(name="released", owner="me|boot|ns|1|2")
    store.set_status(run_id, "finished", release=True)
    store._owners[run_id] = "me|boot|ns|1|2"  # as before the first attempt, which the retry repeats
    store.set_status(run_id, "finished", release=True)  # no LeaseLost
    assert store.get_run(run_id).status == "finished"


def test_a_fit_goes_on_through_a_server_restart_and_records_every_step(server, tmp_path):
    """The whole path: `ortholab fit` in its own process while its PostgreSQL server is down for 3 s."""
    steps = 60
    Store(server.url)  # the tables, so that a reader can watch the run from its start
    fit = subprocess.Popen(
        [sys.executable, "-c", "from ortholab.cli.main import main; main()", "fit", "--config", DEMO, *TINY]
        + ["--db", server.url, "--name", "through-restart", "--trainer.max_steps", str(steps)]
        + ["--trainer.log_every_n_steps", "1", "--trainer.val_check_interval", "20"],
        cwd=tmp_path,
        env={**os.environ, "ORTHOLAB_RUNS": str(tmp_path)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    store = Store(server.url, access="read")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and fit.poll() is None:  # wait until training records its first steps
        run = next((r for r in store.list_runs() if r.name == "through-restart"), None)
        if run is not None and run.steps is not None and run.steps >= 3:
            break
        time.sleep(0.05)
    assert fit.poll() is None, "training ended before the server could be stopped; give it more steps"
    server.stop()
    time.sleep(3)
    server.start()
    out, err = fit.communicate(timeout=300)
    assert fit.returncode == 0, err[-3000:]
    assert "is unreachable" in err and "is back after" in err, err[-3000:]  # the outage fell inside training
    store = Store(server.url, access="read")
    run = next(r for r in store.list_runs() if r.name == "through-restart")
    assert run.status == "finished"
    assert [p.step for p in store.metric_series(run.id, "train/loss")] == list(range(steps))
