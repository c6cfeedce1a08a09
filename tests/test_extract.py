"""db/extract.py: the runs behind an export as a store of their own, thinned where long, readable read-only."""

import math
import os
import stat
from pathlib import Path

import pytest

from ortholab.db import Store
from ortholab.db.extract import MAX_BYTES, MAX_POINTS, MIN_POINTS, thinned, write_run_store, write_run_store_within


def _store(tmp_path) -> tuple[Store, list[int]]:
    store = Store(f"sqlite:///{tmp_path / 'source.db'}")
    ids = []
    for k in range(3):  # runs 1, 2 and 3
        run = store.create_run(
            name=f"run-{k}",
            family="scornn",
            task="copy",
            config={"seed": k},
            tags=["a", f"s{k}"],
            main_metric="val/loss",
        )
        store.log_params(run, {"model": {"hidden_size": 8 + k}, "seed_everything": k})
        for step in range(1_500):
            store.log_metrics(run, {"train/loss": 1.0 / (step + 1)}, step)
        for step in range(0, 1_500, 100):
            store.log_metrics(run, {"val/loss": float("nan") if step == 200 else step / 1e4}, step, epoch=step // 1000)
        store.add_artifact(run, "eigenvalues", "eig", data=b"\x00\x01", step=0)
        store.set_status(run, "finished")
        ids.append(run)
    return store, ids


def test_thinning_keeps_first_last_and_validation_whole():
    assert thinned("train/loss", 10, 20) == list(range(10))
    kept = thinned("train/loss", 5_000, 2_000)
    assert len(kept) == 2_000 and kept[0] == 0 and kept[-1] == 4_999 and kept == sorted(set(kept))
    assert thinned("val/loss", 5_000, 2_000) == list(range(5_000))
    assert thinned("test/acc", 3_000, 100) == list(range(3_000))


def test_the_chosen_runs_copied_under_their_ids_thinned_and_readable_read_only(tmp_path):
    source, ids = _store(tmp_path)
    path = write_run_store(source, ids[1:], tmp_path / "runs.db", max_points=500)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("runs.db")) == ["runs.db"]  # no WAL, no part
    folder = tmp_path / "ro"
    folder.mkdir()
    os.replace(path, folder / "runs.db")
    before = (folder / "runs.db").read_bytes()
    folder.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        copy = Store(f"sqlite:///{folder / 'runs.db'}", access="read")
        runs = copy.list_runs()
        assert sorted(r.id for r in runs) == ids[1:] and all(r.status == "finished" for r in runs)
        for run_id in ids[1:]:
            assert copy.params_of([run_id]) == source.params_of([run_id])
            assert copy.get_run(run_id).config == source.get_run(run_id).config
            assert copy.get_run(run_id).tags == source.get_run(run_id).tags
            val = [(p.step, p.epoch, p.value) for p in copy.metric_series(run_id, "val/loss")]
            expected = [(p.step, p.epoch, p.value) for p in source.metric_series(run_id, "val/loss")]
            assert len(val) == len(expected) and math.isnan(val[2][2])  # whole, NaN kept
            assert [v for v in val if not math.isnan(v[2])] == [v for v in expected if not math.isnan(v[2])]
            train = copy.metric_series(run_id, "train/loss")
            assert len(train) == 500 and train[0].step == 0 and train[-1].step == 1_499
            assert copy.artifacts(run_id) == []  # artifacts only when asked for
        copy.close()
    finally:
        folder.chmod(stat.S_IRWXU)
    assert (folder / "runs.db").read_bytes() == before  # reading changed nothing


def test_artifacts_on_request_and_a_missing_run_named(tmp_path):
    source, ids = _store(tmp_path)
    path = write_run_store(source, ids[:1], tmp_path / "with.db", with_artifacts=True)
    copy = Store(f"sqlite:///{path}", access="read")
    (artifact,) = copy.artifacts(ids[0])
    assert copy.artifact_data(artifact.id) == b"\x00\x01"
    with pytest.raises(Exception, match="No run with id 99"):
        write_run_store(source, [99], tmp_path / "none.db")
    assert not (tmp_path / "none.db").exists()
    with pytest.raises(ValueError, match="max_points"):
        write_run_store(source, ids, tmp_path / "x.db", max_points=1)


def test_a_store_over_its_byte_budget_is_thinned_until_it_fits(tmp_path):
    source, ids = _store(tmp_path)  # 1,500 training points per run: MAX_POINTS (2,000) keeps them all
    whole, points = write_run_store_within(source, ids, tmp_path / "whole.db", max_bytes=10**9)
    assert points == MAX_POINTS
    assert len(Store(f"sqlite:///{whole}", access="read").metric_series(1, "train/loss")) == 1_500
    budget = whole.stat().st_size // 3
    path, points = write_run_store_within(source, ids, tmp_path / "runs.db", max_bytes=budget)
    assert path.stat().st_size <= budget and MIN_POINTS <= points < 1_500
    copy = Store(f"sqlite:///{path}", access="read")
    assert len(copy.metric_series(1, "train/loss")) == points  # thinned to the cap it reports
    assert len(copy.metric_series(1, "val/loss")) == 15  # validation whole
    copy.close()
    tiny, points = write_run_store_within(source, ids, tmp_path / "tiny.db", max_bytes=1)
    assert points == MIN_POINTS and tiny.stat().st_size > 1  # no thinner than MIN_POINTS: the caller says it is over
    with pytest.raises(ValueError, match="max_bytes"):
        write_run_store_within(source, ids, tmp_path / "x.db", max_bytes=0)


def test_every_committed_export_store_is_under_the_limit():
    stores = sorted((Path(__file__).resolve().parents[1] / "docs" / "results").glob("*/runs.db"))
    assert stores, "docs/results holds no runs.db: the exports moved?"
    over = [f"{p.parent.name}: {p.stat().st_size / 1e6:.2f} MB" for p in stores if p.stat().st_size > MAX_BYTES]
    assert not over, f"committed runs.db over {MAX_BYTES / 1e6:.0f} MB (re-export it: export thins to fit): {over}"
