"""What the dashboard's caches (app/data.py) must never get wrong: a running run's new points, and a rewritten
point, show on the next rerun once the runs list is re-read; a finished run's series are read from the store
once, however often the page reruns. Through Streamlit's AppTest on a small store written with db.Store."""

import time

import numpy as np
import pytest
from dashboard_store import array, charts, open_page, rerun, traces

from ortholab.app import data
from ortholab.db import Store

pytestmark = pytest.mark.usefixtures("fresh_dashboard_caches")


@pytest.fixture
def lab(tmp_path):
    """(store, the id of a finished run, the id of a running run), both with val/loss at steps 0..9."""
    store = Store(f"sqlite:///{tmp_path / 'runs.db'}")
    finished = store.create_run(name="done", family="scornn", task="copying", main_metric="val/loss")
    running = store.create_run(name="live", family="lstm", task="copying", main_metric="val/loss")
    for run_id in (finished, running):
        for step in range(10):
            store.log_metrics(run_id, {"val/loss": 1.0 / (step + 1)}, step=step, epoch=0)
    store.set_status(finished, "finished")
    yield store, finished, running
    store.close()


def drawn(at, label):
    """(x, y) of the run's curve on the page's first chart (drawn raw: fewer than 100 points, no smoothing)."""
    trace = traces(charts(at)[0])[label]
    return array(trace["x"]), array(trace["y"])


def next_runs_list():
    """Wait until the runs list (cached RUNS_TTL_S seconds, as every live dashboard) is read again."""
    time.sleep(data.RUNS_TTL_S + 0.2)


def test_a_running_run_shows_its_new_and_rewritten_points_on_the_next_rerun(lab, monkeypatch):
    store, _, running = lab
    at = open_page(store, monkeypatch, "curves", [running])
    x, _ = drawn(at, f"#{running} live")
    assert x[-1] == 9

    for step in range(10, 15):
        store.log_metrics(running, {"val/loss": 0.01}, step=step, epoch=1)
    next_runs_list()
    x, y = drawn(rerun(at), f"#{running} live")
    assert x[-1] == 14 and y[-1] == 0.01  # the new points, read because the run's last step moved

    store.log_metrics(running, {"val/loss": 0.5}, step=14, epoch=1)  # a resumed run rewrites its last step
    next_runs_list()
    x, y = drawn(rerun(at), f"#{running} live")
    assert x[-1] == 14 and y[-1] == 0.5  # same last step, new value: the heartbeat keys the cache too


def test_a_finished_run_is_read_from_the_store_once(lab, monkeypatch):
    store, finished, running = lab
    reads = []
    original = Store.metric_columns

    def counted(self, run_id, key):
        reads.append(run_id)
        return original(self, run_id, key)

    monkeypatch.setattr(Store, "metric_columns", counted)
    at = open_page(store, monkeypatch, "curves", [finished, running])
    assert sorted(reads) == sorted([finished, running])
    next_runs_list()
    rerun(rerun(at))
    assert sorted(reads) == sorted([finished, running])  # nothing changed: no read at all

    store.log_metrics(running, {"val/loss": 0.02}, step=10, epoch=1)
    next_runs_list()
    x, _ = drawn(rerun(at), f"#{running} live")
    assert x[-1] == 10
    assert reads.count(finished) == 1 and reads.count(running) == 2  # only the run that wrote is read again
    assert np.array_equal(drawn(at, f"#{finished} done")[0], np.arange(10))
