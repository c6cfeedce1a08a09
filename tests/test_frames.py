"""The run store as DataFrames (db/frames.py) against a store written by a real run and `ortholab runs --json`."""

import json

import pytest
from test_cli import DEMO, TINY, ortholab

from ortholab.db import Store, frames


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("frames")
    db = f"sqlite:///{folder / 'store.db'}"
    for hidden in ("8", "6"):
        done = ortholab("fit", "--config", DEMO, *TINY, "--model.hidden_size", hidden, "--db", db, cwd=folder)
        assert done.returncode == 0, done.stderr
    return db, folder


def test_runs_frame_has_the_listing_and_the_parameters(recorded):
    db, folder = recorded
    listed = json.loads(ortholab("runs", "--json", "--db", db, cwd=folder).stdout)
    frame = frames.runs(db)
    assert frame["id"].tolist() == [row["id"] for row in listed]
    for row in listed:
        got = frame.loc[row["id"]]
        assert (got["status"], got["steps"], got["family"]) == (row["status"], row["steps"], row["family"])
        assert got["best"] == pytest.approx(row["best"])
    assert sorted(frame["param.model.hidden_size"].tolist()) == [6, 8]
    assert set(frame["param.data.class_path"]) == {"datamodules.CopyingTask"}


def test_metrics_frame_is_every_point_in_long_format(recorded):
    db, _ = recorded
    store = Store(db)
    ids = [run.id for run in store.list_runs()]
    long = frames.metrics(ids, ["val/loss", "train/loss"], db=db)
    assert list(long.columns) == ["run", "key", "step", "epoch", "value", "wall_time"]
    for run_id in ids:
        for key in ("val/loss", "train/loss"):
            expected = store.metric_series(run_id, key)
            got = long[(long["run"] == run_id) & (long["key"] == key)]
            assert got["step"].tolist() == [p.step for p in expected]
            assert got["value"].tolist() == [p.value for p in expected]
    every = frames.metrics(ids[0], db=db)
    assert set(every["key"]) == set(store.metric_keys(ids[0]))


def test_artifacts_frame_lists_what_the_run_stored(recorded):
    db, _ = recorded
    store = Store(db)
    run_id = store.list_runs()[0].id
    table = frames.artifacts(run_id, db=db)
    assert table["id"].tolist() == [a.id for a in store.artifacts(run_id)] and len(table) > 0
    assert set(table["kind"]) == {a.kind for a in store.artifacts(run_id)}


def test_a_mistyped_key_or_kind_is_named_and_a_path_object_names_the_store(recorded):
    """`frames.metrics(1, ["val/los"])` and `frames.artifacts(1, kind="eigen")` returned empty frames in silence
    (`ortholab runs --columns val/los` names val/loss); a pathlib.Path as db raised a TypeError from re."""
    from pathlib import Path

    db, folder = recorded
    run_id = Store(db).list_runs()[0].id
    with pytest.raises(ValueError, match=r"keys: no run of \[\d+\] recorded 'val/los'; did you mean 'val/loss'\?"):
        frames.metrics(run_id, ["val/los"], db=db)
    kinds = sorted({a.kind for a in Store(db).artifacts(run_id)})
    with pytest.raises(ValueError, match=rf"kind: run {run_id} holds no 'eigen' artifact; .*its kinds are"):
        frames.artifacts(run_id, kind="eigen", db=db)
    assert len(frames.artifacts(run_id, kind=kinds[0], db=db)) > 0
    path = Path(folder / "store.db")
    assert frames.runs(path)["id"].tolist() == frames.runs(db)["id"].tolist()
    assert len(frames.metrics(run_id, "val/loss", db=path)) > 0
    with pytest.raises(TypeError, match="db must be a database URL or a SQLite file's path, got 7"):
        frames.runs(7)


def test_a_run_id_the_store_does_not_hold_is_a_value_error_naming_the_argument(tmp_path):
    """frames.metrics(99) and frames.artifacts(99) raised the store's RuntimeError, not naming the argument, where
    load_run(99) raises a ValueError naming run_id."""
    from ortholab.db.store_errors import StoreError

    db = f"sqlite:///{tmp_path / 'store.db'}"
    Store(db)  # an empty store
    with pytest.raises(ValueError, match=r"run_ids: No run with id 99 in .*`ortholab runs.*` lists its runs") as raised:
        frames.metrics(99, db=db)
    assert isinstance(raised.value, StoreError)  # as the docstring said before: still a StoreError too
    with pytest.raises(ValueError, match=r"run_ids: No run with id 99"):
        frames.metrics([99], ["val/loss"], db=db)
    with pytest.raises(ValueError, match=r"run_id: No run with id 99"):
        frames.artifacts(99, db=db)


def test_the_documented_way_to_read_an_artifacts_bytes_creates_no_store_at_a_mistyped_path(tmp_path):
    """docs/configs.md and frames.artifacts said `Store(db).artifact_data(id)`: Store's default access creates a
    store, so a mistyped path left an empty SQLite file behind and answered "No artifact with id 1"."""
    import re
    from pathlib import Path

    from ortholab.db.store_errors import StoreMissing

    docs = (Path(__file__).parents[1] / "docs" / "configs.md").read_text()
    for text in (" ".join(docs.split()), " ".join(frames.artifacts.__doc__.split())):
        (call,) = re.findall(r"`(Store\([^`]*\))\.artifact_data\(id\)`", text)
        db = tmp_path / "mistyped.db"
        with pytest.raises(StoreMissing):
            eval(call, {"Store": Store, "db": str(db)}).artifact_data(1)
        assert not db.exists()
