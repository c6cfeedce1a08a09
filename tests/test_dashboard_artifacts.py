"""The Artifacts page: what a callback of one's own records (tests/dashboard_store.py's add_own_artifacts), drawn by
what it holds, through Streamlit's AppTest on a real SQLite store."""

import json

import numpy as np
import pytest
from dashboard_store import OWN_STEPS, add_hand_written_runs, array, charts, notes, open_page, own_gram, rerun, traces

from ortholab.app.own_artifacts import DRAWN_ELSEWHERE, own_kinds, real_values, shown_as
from ortholab.db import ArtifactRecord, Store
from ortholab.db.artifacts import NPY_MEDIA_TYPE

OWN_KINDS = ["gram", "marker", "notes", "picture", "singular_values", "spectral_norm"]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    store = Store(f"sqlite:///{tmp_path_factory.mktemp('artifacts') / 'runs.db'}")
    ids = add_hand_written_runs(store)
    yield store, ids
    store.close()


pytestmark = pytest.mark.usefixtures("fresh_dashboard_caches")


def choose_kind(at, kind):
    at.selectbox(key="own_kind").set_value(kind)
    return rerun(at)


def test_the_kinds_offered_are_those_no_other_page_draws(lab, monkeypatch):
    store, ids = lab
    at = open_page(store, monkeypatch, "artifacts", [ids["scornn-snapshots"], ids["lstm-adding"]])
    assert at.selectbox(key="own_kind").options == OWN_KINDS  # not eigenvalues, grad_norms, hidden_trajectory
    assert "'gram' / 'recurrent' in 1 of the 2 selected runs." in notes(at)


def heatmap_values(spec) -> np.ndarray:
    z = spec["data"][0]["z"]  # plotly's typed array, or a list of rows
    return array(z) if isinstance(z, dict) else np.array([array(row) for row in z])


def test_a_matrix_is_a_heatmap_at_the_chosen_step(lab, monkeypatch):
    store, ids = lab
    at = open_page(store, monkeypatch, "artifacts", [ids["scornn-snapshots"]])
    (heatmap,) = charts(at)  # gram, recorded at steps 100 and 200: the last by default
    assert np.allclose(heatmap_values(heatmap), own_gram(200)) and heatmap["layout"]["title"]["text"].endswith("200")
    at.select_slider(key="own_step").set_value(100)
    (heatmap,) = charts(rerun(at))
    assert np.allclose(heatmap_values(heatmap), own_gram(100))


def test_an_array_per_step_is_one_line_per_step_with_no_step_to_choose(lab, monkeypatch):
    store, ids = lab
    at = choose_kind(open_page(store, monkeypatch, "artifacts", [ids["scornn-snapshots"]]), "singular_values")
    (profiles,) = charts(at)
    lines = traces(profiles)
    assert list(lines) == [f"step {s}" for s in OWN_STEPS] and not at.select_slider
    for k, step in enumerate(OWN_STEPS):
        assert np.allclose(array(lines[f"step {step}"]["y"]), np.linspace(1.0 + k, 0.5, 16))


def test_a_number_per_step_is_one_line_per_run_over_the_steps(lab, monkeypatch):
    store, ids = lab
    at = choose_kind(open_page(store, monkeypatch, "artifacts", [ids["scornn-snapshots"]]), "spectral_norm")
    (chart,) = charts(at)
    (line,) = chart["data"]
    assert line["name"] == f"#{ids['scornn-snapshots']} scornn-snapshots"
    assert np.allclose(array(line["x"]), OWN_STEPS) and np.allclose(array(line["y"]), [1.0, 2.0, 3.0])


def test_json_images_and_meta_only_artifacts_are_shown_as_what_they_hold(lab, monkeypatch):
    store, ids = lab
    at = choose_kind(open_page(store, monkeypatch, "artifacts", [ids["scornn-snapshots"]]), "notes")
    assert [json.loads(j.proto.body) for j in at.json] == [{"rank": 16, "condition": 3.0}]
    at = choose_kind(at, "marker")
    assert [json.loads(j.proto.body) for j in at.json] == [{"epoch": 1, "note": "learning rate halved"}]
    assert "recorded with neither data nor meta" not in " ".join(str(m.value) for m in at.markdown)
    at = choose_kind(at, "picture")
    images = at.get("image")
    assert len(images) == 1 and not charts(at)


def test_runs_without_artifacts_of_their_own_get_a_note(lab, monkeypatch):
    store, ids = lab
    at = open_page(store, monkeypatch, "artifacts", [ids["lstm-adding"]])
    (note,) = [n for n in notes(at) if n.startswith("No selected run records artifacts of a kind of its own")]
    assert all(kind in note for kind in DRAWN_ELSEWHERE)


def record(kind="k", media_type=None) -> ArtifactRecord:
    return ArtifactRecord(1, 1, kind, "n", 0, 0, None, None, media_type)


def test_each_artifact_is_shown_by_what_it_holds():
    npy = record(media_type=NPY_MEDIA_TYPE)
    assert shown_as(npy, np.float64(2.0)) == shown_as(npy, np.ones(1)) == "value"
    assert (shown_as(npy, np.ones(3)), shown_as(npy, np.ones((2, 3))), shown_as(npy, np.ones((2, 2, 2)))) == (
        "profile",
        "heatmap",
        "shape",
    )
    assert [shown_as(record(media_type=m)) for m in ("image/png", "audio/wav", "application/json", None)] == [
        "image",
        "audio",
        "json",
        "meta",
    ]
    assert own_kinds([record("eigenvalues"), record("mine"), record("audio"), record("a")]) == ["a", "mine"]
    values, modulus = real_values(np.array([3 + 4j, -1j]))
    assert modulus and np.allclose(values, [5.0, 1.0]) and real_values(np.arange(3))[1] is False
