"""Every dashboard page through Streamlit's AppTest, on a store holding a real short training run and
hand-written runs (tests/dashboard_store.py): the tables' contents, the plotly figures' data, the notes
shown where a run has nothing to plot, and the filters."""

import json

import numpy as np
import pytest
import streamlit
from dashboard_store import (
    ADDING_BASELINE,
    APP_MAIN,
    COPYING_BASELINE,
    add_hand_written_runs,
    add_seed_runs,
    array,
    charts,
    notes,
    open_page,
    registered_pages,
    rerun,
    scurnn_phases,
    traces,
    train_real_run,
    unit_circle,
    wav_bytes,
)
from streamlit.testing.v1 import AppTest

from ortholab.app.figures import BASELINE_DASHES
from ortholab.app.smoothing import debiased_ema
from ortholab.db import Store
from ortholab.db.artifacts import AUDIO

REAL_BASELINE = 10 * np.log(8) / (5 + 20)  # the real run's copying task has T = 5
# Every registered page but Papers, which shows the published tables whatever the selection (its own tests below).
PAGES = [page for page in registered_pages() if page["name"] != "papers"]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """(store, run ids by name, labels by name) for one database shared by the module's tests (read only)."""
    root = tmp_path_factory.mktemp("dashboard")
    url = f"sqlite:///{root / 'runs.db'}"
    train_real_run(url, root)
    store = Store(url)
    ids = add_hand_written_runs(store)
    ids.update(add_seed_runs(store))
    ids["real-scornn"] = next(r.id for r in store.list_runs() if r.name == "real-scornn")
    yield store, ids, {name: f"#{i} {name}" for name, i in ids.items()}
    store.close()


pytestmark = pytest.mark.usefixtures("fresh_dashboard_caches")


def series(store, run_id, key):
    points = store.metric_series(run_id, key)
    return np.array([p.step for p in points], float), np.array([p.value for p in points]), points


# ---- Runs ------------------------------------------------------------------------------------------


def test_runs_table_shows_every_run_with_its_summary(lab, monkeypatch):
    store, ids, labels = lab
    at = open_page(store, monkeypatch, "runs")
    table = at.dataframe[0].value.set_index("name")
    assert set(table.index) == set(ids)

    real = next(r for r in store.list_runs() if r.id == ids["real-scornn"])
    row = table.loc["real-scornn"]
    assert (row["family"], row["task"], row["status"], row["steps"]) == ("scornn", "copying", "finished", real.steps)
    assert row["best"] == pytest.approx(real.best) and row["last"] == pytest.approx(real.last)
    assert row["baseline"] == pytest.approx(REAL_BASELINE)
    assert row["parameters"] == real.parameter_count > 0
    assert row["main metric"] == "val/loss"

    assert list(table.loc["lstm-adding", "tags"]) == ["baseline", "cpu"]
    assert table.loc["lstm-adding", "beats baseline"]  # 0.04 < 1/6
    assert table.loc["half-written", "status"] == "running" and table.loc["half-written", "steps"] == 0
    assert table.loc["half-written", "activity"].startswith("live")
    assert np.isnan(table.loc["half-written", "best"])
    assert (table.loc["crashed", "status"], table.loc["crashed", "reason"]) == ("failed", "non-finite loss at step 1")
    # a new session starts with the newest run selected, shared through session state
    assert at.session_state["run"] == [max(ids.values())]
    assert at.sidebar.multiselect[0].value == [max(ids.values())]


def test_runs_filters_by_family_task_status_and_text(lab, monkeypatch):
    store, ids, labels = lab
    at = open_page(store, monkeypatch, "runs")

    def names():
        return set(at.dataframe[0].value["name"])

    assert len(names()) == len(ids) == 13
    at.multiselect(key="filter_family").set_value(["lstm", "gru"])
    assert rerun(at) and names() == {"lstm-adding", "crashed", "lstm-seed1", "lstm-seed2"}
    at.text_input(key="filter_text").set_value("crash")
    assert rerun(at) and names() == {"crashed"}
    at.multiselect(key="filter_family").set_value([])
    at.text_input(key="filter_text").set_value("cpu")  # a tag
    assert rerun(at) and names() == {"lstm-adding"}
    at.text_input(key="filter_text").set_value("")
    at.multiselect(key="filter_status").set_value(["failed"])
    assert rerun(at) and names() == {"crashed"}
    at.multiselect(key="filter_status").set_value([])
    at.multiselect(key="filter_task").set_value(["timit"])
    assert rerun(at) and names() == {"speech"}
    assert any("1 of 13 runs match · rows 1–1 shown" in n for n in notes(at))


def test_run_details_show_config_parameter_groups_artifacts_and_metrics(lab, monkeypatch):
    store, ids, labels = lab
    at = open_page(store, monkeypatch, "runs", [ids["real-scornn"]])
    assert "family: scornn" in at.code[0].value
    code = store.get_run(ids["real-scornn"]).info["code"][0]
    assert f"Code: {code['commit'] or 'ortholab ' + code['ortholab']} (torch {code['torch']}" in " ".join(
        m.value for m in at.markdown
    )
    frames = [d.value for d in at.dataframe]
    groups = next(f for f in frames if "optimizer" in f.columns).set_index("group")
    info = store.get_run(ids["real-scornn"]).info
    assert set(groups.index) == set(info["parameter_counts"]) == {"recurrent", "other"}
    assert groups.loc["recurrent", "optimizer"] == "rmsprop_tf" and groups.loc["recurrent", "lr"] == pytest.approx(1e-4)
    assert groups.loc["other", "parameters"] == info["parameter_counts"]["other"]
    artifacts = next(f for f in frames if "kind" in f.columns)
    assert len(artifacts) == len(store.artifacts(ids["real-scornn"])) and "eigenvalues" in set(artifacts["kind"])
    metrics = next(f for f in frames if "metric" in f.columns).set_index("metric")
    assert metrics.loc["val/loss", "points"] == len(store.metric_series(ids["real-scornn"], "val/loss"))
    (shown,) = [d for d in at.dataframe if "metric" in d.value.columns]  # walk-through 9: 7.83e-13 read 0.0000000000007
    formats = {
        c: json.loads(shown.proto.columns).get(c, {}).get("type_config", {}).get("format") for c in ("min", "max")
    }
    assert formats == {"min": "%.4g", "max": "%.4g"}, shown.proto.columns

    at.selectbox(key="detail_run").set_value(ids["lstm-adding"])
    groups = next(d.value for d in rerun(at).dataframe if "optimizer" in d.value.columns)
    assert groups.to_dict("records")[0] | {"other options": ""} == {
        "group": "other",
        "parameters": 17_217,
        "optimizer": "adam",
        "lr": 0.001,
        "other options": "",
        "optimizer entry": "default",
    }

    at.selectbox(key="detail_run").set_value(ids["half-written"])
    shown = " ".join(notes(rerun(at)))
    for note in (
        "No config recorded",
        "No parameter groups recorded",
        "No artifacts recorded",
        "No metric points recorded",
    ):
        assert note in shown


# ---- Curves ----------------------------------------------------------------------------------------


def test_curves_overlay_each_selected_run_and_the_baselines(lab, monkeypatch):
    store, ids, labels = lab
    chosen = ["real-scornn", "lstm-adding", "scornn-snapshots"]
    at = open_page(store, monkeypatch, "curves", [ids[n] for n in chosen])
    at.slider(key="curve_smoothing").set_value(0.0)
    (spec,) = charts(rerun(at))
    drawn = traces(spec)
    for name in chosen:
        steps, values, _ = series(store, ids[name], "val/loss")
        assert np.array_equal(array(drawn[labels[name]]["x"]), steps)
        assert np.allclose(array(drawn[labels[name]]["y"]), values)
    baselines = {n: t for n, t in drawn.items() if n.startswith("baseline")}
    assert sorted(array(t["y"])[0] for t in baselines.values()) == pytest.approx(
        sorted([ADDING_BASELINE, REAL_BASELINE, COPYING_BASELINE])
    )
    for trace in baselines.values():
        assert trace["line"]["dash"] in BASELINE_DASHES and array(trace["y"])[0] == array(trace["y"])[1]
    assert len({t["line"]["dash"] for t in baselines.values()}) == 3  # told apart
    assert "baseline (adding) 0.1667" in baselines
    (mixed,) = [i.value for i in at.info if "tasks" in i.value]  # walk-through 9: a cross-entropy beside an MSE
    assert mixed.startswith("The selected runs train 2 tasks (adding, copying): a metric of one name"), mixed

    at.slider(key="curve_smoothing").set_value(0.6)
    at.multiselect(key="curve_metrics").set_value(["val/loss", "train/loss"])
    val, train = charts(rerun(at))
    _, values, _ = series(store, ids["lstm-adding"], "val/loss")
    assert np.allclose(array(traces(val)[labels["lstm-adding"]]["y"]), values)  # 5 points: drawn raw
    assert labels["lstm-adding"] + " (raw)" not in traces(val)
    assert any(
        n.startswith("Drawn unsmoothed (fewer than 100 points): ") and f"#{ids['lstm-adding']}," in n + ","
        for n in notes(at)
    )
    _, values, _ = series(store, ids["lstm-adding"], "train/loss")  # 125 points: smoothed, the raw curve faded
    drawn = traces(train)
    assert np.allclose(array(drawn[labels["lstm-adding"]]["y"]), debiased_ema(values, 0.6))
    assert np.allclose(array(drawn[labels["lstm-adding"] + " (raw)"]["y"]), values)
    assert drawn[labels["lstm-adding"] + " (raw)"]["opacity"] < 0.5
    last = drawn[labels["lstm-adding"] + ": last"]  # the last raw value, never hidden by the smoothed line
    assert array(last["y"]).tolist() == [values[-1]] and f"last raw value {values[-1]:.4g}" in last["hovertemplate"]
    assert any("debiased exponential moving average" in n for n in notes(at))
    at.multiselect(key="curve_metrics").set_value(["val/loss"])

    at.toggle(key="curve_log").set_value(True)
    assert charts(rerun(at))[0]["layout"]["yaxis"]["type"] == "log"


def test_curves_x_axes_epoch_wall_time_and_examples_seen(lab, monkeypatch):
    store, ids, labels = lab
    at = open_page(store, monkeypatch, "curves", [ids["lstm-adding"], ids["real-scornn"], ids["scornn-snapshots"]])
    at.slider(key="curve_smoothing").set_value(0.0)
    steps, _, points = series(store, ids["lstm-adding"], "val/loss")

    at.segmented_control(key="curve_axis").set_value("examples seen")
    drawn = traces(charts(rerun(at))[0])
    assert np.array_equal(array(drawn[labels["lstm-adding"]]["x"]), steps * 50)
    real_steps, _, _ = series(store, ids["real-scornn"], "val/loss")
    assert np.array_equal(array(drawn[labels["real-scornn"]]["x"]), real_steps * 10)
    assert labels["scornn-snapshots"] not in drawn  # it recorded no batch size
    assert any(labels["scornn-snapshots"] in n and "no batch size" in n for n in notes(at))

    at.segmented_control(key="curve_axis").set_value("epoch")
    drawn = traces(charts(rerun(at))[0])
    assert np.array_equal(array(drawn[labels["lstm-adding"]]["x"]), [p.epoch for p in points])

    at.segmented_control(key="curve_axis").set_value("wall time")
    drawn = traces(charts(rerun(at))[0])
    start = store.get_run(ids["lstm-adding"]).created_at.timestamp()
    assert np.allclose(array(drawn[labels["lstm-adding"]]["x"]), [p.wall_time - start for p in points])
    assert charts(at)[0]["layout"]["xaxis"]["title"]["text"] == "wall time since run start (s)"


def test_curves_notes_for_missing_metrics_and_empty_selections(lab, monkeypatch):
    store, ids, labels = lab
    at = open_page(store, monkeypatch, "curves", [ids["lstm-adding"], ids["scornn-snapshots"]])
    at.multiselect(key="curve_metrics").set_value(["analysis/orthogonality", "train/loss"])
    specs = charts(rerun(at))
    assert [s["layout"]["title"]["text"] for s in specs] == ["analysis/orthogonality", "train/loss"]
    assert labels["scornn-snapshots"] in traces(specs[0])
    assert f"{labels['lstm-adding']} has no `analysis/orthogonality` points." in notes(at)
    # the adding baseline applies to train/loss too (same quantity as the main metric val/loss)
    assert "baseline (adding) 0.1667" in traces(specs[1])

    assert "The selected runs have no metric points yet." in notes(
        open_page(store, monkeypatch, "curves", [ids["half-written"]])
    )
    assert any("No runs selected" in n for n in notes(open_page(store, monkeypatch, "curves", [])))


def test_an_address_naming_runs_this_store_lacks_says_so_and_a_first_visit_skips_predict_runs(tmp_path, monkeypatch):
    """Walk-through 5: `/curves?run=99` dropped run 99 and said only "No runs selected"; a first visit after `predict`
    selected the predict run, which has no curves."""
    store = Store(f"sqlite:///{tmp_path / 'runs.db'}")
    trained = store.create_run(name="trained")
    store.log_metrics(trained, {"train/loss": 1.0}, step=0)
    store.create_run(name="scored", stage="validate")  # the first-hour review: a newer validate run was selected
    store.create_run(name="predictions", stage="predict")
    monkeypatch.setenv("ORTHOLAB_DB", store.url)
    at = AppTest.from_file(APP_MAIN, default_timeout=60)
    at.query_params["run"] = [str(trained), "99"]
    rerun(at)
    assert at.session_state["run"] == [trained]
    (warning,) = [w.value for w in at.sidebar.warning]
    assert warning.startswith("The address names run 99, which this store does not hold"), warning
    assert warning.endswith("the others are shown."), warning
    alone = AppTest.from_file(APP_MAIN, default_timeout=60)
    alone.query_params["run"] = ["99"]
    rerun(alone)  # only an unknown run: the newest trained one instead of nothing
    assert alone.session_state["run"] == [trained] and alone.sidebar.warning[0].value.endswith("shown instead.")
    word = AppTest.from_file(APP_MAIN, default_timeout=60)
    word.query_params["run"] = ["abc", "99"]  # walk-through 9: 'abc' was called a run another store holds
    rerun(word)
    (warning,) = [w.value for w in word.sidebar.warning]
    assert "names run 99, which this store does not hold" in warning and "abc, which" not in warning, warning
    assert "The address's run=abc names no run: a run is named by its number" in warning, warning
    first = AppTest.from_file(APP_MAIN, default_timeout=60)
    rerun(first)
    assert first.session_state["run"] == [trained] and not first.sidebar.warning  # not the newer validate or predict
    assert "The selected runs are predict runs: they record predictions (a file), no metric points." in notes(
        open_page(store, monkeypatch, "curves", [trained + 2])
    )


def test_curves_of_a_live_run_pick_up_new_points(tmp_path, monkeypatch):
    from ortholab.app import data

    store = Store(f"sqlite:///{tmp_path / 'live.db'}")
    run = store.create_run(
        name="live", family="scornn", task="copying", main_metric="val/loss", baseline=COPYING_BASELINE
    )
    for step in (9, 19):
        store.log_metrics(run, {"val/loss": 1.0 / step}, step=step)
    at = open_page(store, monkeypatch, "curves", [run])
    refresh = at.toggle(key="curve_refresh")
    assert refresh.value and not refresh.disabled  # a running run: auto-refresh on
    assert len(array(traces(charts(at)[0])[f"#{run} live"]["x"])) == 2

    store.log_metrics(run, {"val/loss": 0.01}, step=29)
    data._runs.clear()  # what the runs list's TTL does after RUNS_TTL_S seconds
    drawn = traces(charts(rerun(at))[0])
    assert array(drawn[f"#{run} live"]["x"]).tolist() == [9, 19, 29]  # the run's newer heartbeat re-reads its points

    store.set_status(run, "finished")
    data._runs.clear()
    assert rerun(at).toggle(key="curve_refresh").disabled  # nothing running: nothing to refresh


# ---- Eigenvalues -----------------------------------------------------------------------------------


def test_eigenvalues_plane_slider_counts_and_drift(lab, monkeypatch):
    store, ids, labels = lab
    at = open_page(
        store, monkeypatch, "eigenvalues", [ids["scornn-snapshots"], ids["lstm-adding"], ids["half-written"]]
    )
    plane, near, drift = charts(at)
    drawn = traces(plane)
    title = f"{labels['scornn-snapshots']} · step 200 · 2 near −1"
    assert np.allclose(array(drawn[title]["x"]), unit_circle(16, 0.2).real)
    assert np.allclose(array(drawn[title]["y"]), unit_circle(16, 0.2).imag)
    circle = drawn["unit circle"]
    assert np.allclose(np.hypot(array(circle["x"]), array(circle["y"])), 1.0)
    assert np.allclose(array(traces(near)[labels["scornn-snapshots"]]["y"]), [4, 3, 2])
    assert np.allclose(array(traces(drift)[labels["scornn-snapshots"]]["y"]), [1e-7, 2e-7, 4e-7])
    assert drift["layout"]["yaxis"]["type"] == "log"
    shown = notes(at)
    assert f"{labels['lstm-adding']}: the lstm family has no single recurrent matrix, so no eigenvalues." in shown
    assert f"{labels['half-written']}: no eigenvalue snapshots recorded for this run." in shown
    assert any("No selected run records phases" in n for n in shown)

    at.select_slider(key="eig_step").set_value(100)
    drawn = traces(charts(rerun(at))[0])
    assert np.allclose(
        array(drawn[f"{labels['scornn-snapshots']} · step 100 · 3 near −1"]["x"]), unit_circle(16, 0.1).real
    )


def test_eigenvalues_side_by_side_and_scurnn_phases(lab, monkeypatch):
    store, ids, labels = lab
    at = open_page(store, monkeypatch, "eigenvalues", [ids["scornn-snapshots"], ids["scurnn-phases"]])
    specs = charts(at)
    plane = specs[0]
    panels = [t["name"] for t in plane["data"] if t["name"] != "unit circle"]
    assert panels == [
        f"{labels['scornn-snapshots']} · step 200 · 2 near −1",
        f"{labels['scurnn-phases']} · step 0 · 0 near −1",
    ]
    assert {t.get("xaxis") for t in plane["data"]} == {"x", "x2"}  # two subplots side by side
    phases = next(s for s in specs if s["data"][0]["type"] == "histogram")
    theta = array(phases["data"][0]["x"])
    assert np.allclose(theta, scurnn_phases(100))  # the latest snapshot, step 100
    bins = phases["data"][0]["xbins"]
    assert (bins["start"], bins["end"]) == (0.0, 2 * np.pi) and phases["layout"]["xaxis"]["range"] == [0, 2 * np.pi]
    assert np.count_nonzero(theta > np.pi) == 58 and np.all((theta >= bins["start"]) & (theta < bins["end"]))


# ---- Gradients and states --------------------------------------------------------------------------


def test_gradient_profiles_overlay_and_hidden_states(lab, monkeypatch):
    store, ids, labels = lab
    at = open_page(store, monkeypatch, "gradients", [ids["scornn-snapshots"], ids["real-scornn"], ids["lstm-adding"]])
    specs = charts(at)
    profiles = traces(specs[0])
    assert list(profiles) == ["step 0", "step 100", "step 200"]
    assert np.allclose(array(profiles["step 100"]["y"]), np.exp(-np.arange(30) / 15.0))
    assert specs[0]["layout"]["yaxis"]["type"] == "log"
    real_profiles = store.artifacts(ids["real-scornn"], "grad_norms")
    assert len(specs[1]["data"]) == len(real_profiles) > 0
    overlay = next(s for s in specs if "Figure 5" in (s["layout"].get("title") or {}).get("text", ""))
    assert [t["name"].split(" · ")[0] for t in overlay["data"]] == [labels["scornn-snapshots"], labels["real-scornn"]]
    heatmap = next(s for s in specs if s["data"][0]["type"] == "heatmap")
    assert array(heatmap["data"][0]["z"]).shape == (16, 30)  # units × t
    assert f"{labels['lstm-adding']}: no gradient-norm profiles recorded for this run." in notes(at)

    at = open_page(store, monkeypatch, "gradients", [ids["lstm-adding"]])
    assert not charts(at)
    assert any("No selected run records hidden-state trajectories" in n for n in notes(at))


# ---- Audio -----------------------------------------------------------------------------------------


def test_audio_plays_the_stored_wav_bytes_side_by_side(lab, monkeypatch):
    store, ids, labels = lab
    played = []
    real_audio = streamlit.audio

    def recording_audio(data, *args, **kwargs):
        played.append((data, kwargs.get("format")))
        return real_audio(data, *args, **kwargs)

    monkeypatch.setattr(streamlit, "audio", recording_audio)
    at = open_page(store, monkeypatch, "audio", [ids["speech"], ids["lstm-adding"]])
    records = store.artifacts(ids["speech"], AUDIO)
    first = {store.artifact_data(a.id) for a in records if a.meta["utterance"] == "u1"}
    assert [e.label for e in at.get("expander")] == ["u1 · step 50", "u2 · step 50"]
    assert len(played) == len(at.get("audio")) == 3  # the open clip only: the second loads when opened
    assert {data for data, _ in played} == first  # the bytes themselves: no re-encoding, no peak normalisation
    assert {fmt for _, fmt in played} == {"audio/wav"}
    assert len([s for s in charts(at) if s["data"][0]["type"] == "heatmap"]) == 3  # a spectrogram per role

    at.session_state[f"clip_{ids['speech']}_50_u2"] = True  # open the second clip's panel
    played.clear()
    rerun(at)
    assert {data for data, _ in played} == {store.artifact_data(a.id) for a in records}
    per_clip = [d.value for d in at.dataframe if "reconstruction" in d.value.columns and "run" not in d.value.columns]
    assert len(per_clip) == 2 and per_clip[0].set_index("metric").loc["STOI"].tolist() == [0.8, 0.5]
    assert per_clip[0]["metric"].tolist()[0] == "SegSNR (dB; VOICEBOX v_snrseg 'Vq', 10 ms frames)"
    clip_tables = [d for d in at.dataframe if "reconstruction" in d.value.columns and "run" not in d.value.columns]
    shown_as = json.loads(clip_tables[0].proto.columns)  # walk-through 6: -157.37114637924535 was shown whole
    assert shown_as["reconstruction"]["type_config"]["format"] == "%.4g"

    table = next(d.value for d in at.dataframe if "run" in d.value.columns).set_index("metric")
    assert list(table.columns) == ["run", "family", "split", "reconstruction", "baseline"]  # long: no column off-screen
    assert set(table["run"]) == {labels["speech"]} and set(table["split"]) == {"test"}
    assert table.loc["SegSNR (dB; VOICEBOX v_snrseg 'Vq', 10 ms frames)", ["reconstruction", "baseline"]].tolist() == [
        6.5,
        1.5,
    ]
    assert table.loc["SegSNR (dB; 30 ms Hann frames, clamped to [−10, 35])", "reconstruction"] == 4.0
    assert table.loc["STOI", ["reconstruction", "baseline"]].tolist() == [0.81, 0.6]
    assert np.isnan(table.loc["PESQ narrow band (MOS-LQO)", "baseline"])
    assert any(labels["lstm-adding"] in n and "no audio clips recorded" in n for n in notes(at))

    at = open_page(store, monkeypatch, "audio", [ids["lstm-adding"]])
    assert not at.get("audio")
    assert any("No selected run has recorded SegSNR, STOI or PESQ yet" in n for n in notes(at))


def test_audio_says_which_scores_failed_and_why_rather_than_none(tmp_path, monkeypatch):
    """A score the evaluation could not compute (PESQ on a reconstruction of noise: 'No utterances detected') is
    named with its reason under the clip's table and counted under the runs' table, as the command line's summary
    says 'pesq_nb_mos_lqo n/a (12 failed)', not shown as a bare None."""
    store = Store(f"sqlite:///{tmp_path / 'runs.db'}")
    run = store.create_run(name="noisy", family="scornn", task="speech", main_metric="val/mse_valid_frames")
    reason = "NoUtterancesError: No utterances detected"
    points = {"val_audio/stoi": 0.02, "val_audio_baseline/stoi": 0.72, "val_audio_baseline/pesq_nb_mos_lqo": 4.2}
    points |= {"val_audio/n_failed_pesq_nb_mos_lqo_utterances": 12.0, "val_audio/n_failed_stoi_utterances": 0.0}
    store.log_metrics(run, points, step=20, epoch=0, wall_time=0.0)
    tone = 0.5 * np.sin(np.arange(4000) * 0.3)
    scored = {
        "reconstruction": {"scores": {"stoi": 0.02, "pesq_nb_mos_lqo": None}, "failures": {"pesq_nb_mos_lqo": reason}},
        "baseline": {"scores": {"stoi": 0.72, "pesq_nb_mos_lqo": 4.1}, "failures": {}},
    }
    for role in ("reference", "reconstruction", "baseline"):
        meta = {"utterance": "ann-val-000", "role": role, "sample_rate": 8000, **scored.get(role, {})}
        store.add_artifact(run, AUDIO, f"val/ann-val-000/{role}", step=20, data=wav_bytes(tone), meta=meta)
    store.set_status(run, "finished")

    at = open_page(store, monkeypatch, "audio", [run])
    assert f"Not scored: PESQ narrow band (MOS-LQO) of the reconstruction ({reason})." in notes(at)
    assert any("PESQ narrow band (MOS-LQO) of the reconstruction not scored on 12 utterances" in n for n in notes(at))
    assert not any("STOI of the reconstruction not scored" in n for n in notes(at))  # 0 failed: nothing to say
    tables = [d for d in at.dataframe if "reconstruction" in d.value.columns]
    assert len(tables) == 2 and all(t.proto.placeholder == "—" for t in tables)  # an empty cell reads —, not None
    store.close()


# ---- Compare ---------------------------------------------------------------------------------------


def test_compare_highlights_differing_params_and_exports(lab, monkeypatch):
    store, ids, labels = lab
    pair = [ids["lstm-adding"], ids["scornn-snapshots"]]
    at = open_page(store, monkeypatch, "compare", pair)
    summary = at.dataframe[0].value
    assert list(summary.columns) == [labels["lstm-adding"], labels["scornn-snapshots"]]
    assert summary.loc["family"].tolist() == ["lstm", "scornn"]
    assert summary.loc["best", labels["lstm-adding"]] == "0.04"
    assert summary.loc["last analysis/orthogonality", labels["scornn-snapshots"]] == "4e-07"
    params = at.dataframe[1].value
    assert set(params.index) == {"model.family", "model.hidden_size", "data.init_args.batch_size"}  # 'seed' is equal
    assert params.loc["data.init_args.batch_size"].tolist() == ["50", "(absent)"]
    assert len(at.get("download_button")) == 1

    best = [store.metric_series(i, "val/loss")[-1].value for i in pair]
    axes = ["family", "task", "data.init_args.batch_size", "model.hidden_size"]
    # by default plain SVG lines (fast in a browser without a GPU): one per run, scaled to each axis' range
    lines = charts(at)[0]
    assert lines["layout"]["meta"]["axes"] == axes
    runs_drawn = {t["meta"]["run_id"]: t for t in lines["data"] if "run_id" in (t.get("meta") or {})}
    assert sorted(runs_drawn) == sorted(pair)
    assert np.allclose([runs_drawn[i]["meta"]["colour"] for i in pair], best)  # coloured by the last val/loss
    # lstm-adding: family lstm (first category), adding (first task), batch 50 (top), hidden 64 (the larger)
    assert np.allclose(array(runs_drawn[ids["lstm-adding"]]["y"]), [0, 0, 1, 1])
    assert np.allclose(array(runs_drawn[ids["scornn-snapshots"]]["y"]), [1, 1, 0, 0])  # batch size (missing)
    assert "(missing)" in {a["text"] for a in lines["layout"]["annotations"]}
    assert (
        f"{labels['lstm-adding']}<br>family: lstm<br>task: adding<br>data.init_args.batch_size: 50"
        in runs_drawn[ids["lstm-adding"]]["hovertemplate"]
    )

    at.toggle(key="parallel_webgl").set_value(True)  # plotly's parcoords, with brushing
    parallel = charts(rerun(at))[0]["data"][0]
    assert parallel["type"] == "parcoords"
    dimensions = {d["label"]: d for d in parallel["dimensions"]}
    assert list(dimensions) == axes
    assert dimensions["family"]["ticktext"] == ["lstm", "scornn"]  # categorical
    assert dimensions["data.init_args.batch_size"]["ticktext"][0] == "(missing)"  # scornn-snapshots records none
    assert np.allclose(array(dimensions["model.hidden_size"]["values"]), [64, 16])
    assert np.allclose(array(parallel["line"]["color"]), best)  # coloured by the chosen metric's last value

    at.toggle(key="compare_only_diff").set_value(False)
    params = rerun(at).dataframe[1].value
    assert "seed" in params.index and params.loc["seed"].tolist() == ["1", "1"]

    at = open_page(store, monkeypatch, "compare", [ids["lstm-adding"]])
    assert any("Only one run selected" in n for n in notes(at))


# ---- Empty and unfinished stores -------------------------------------------------------------------


def test_empty_store_renders_every_page_with_a_note(tmp_path, monkeypatch):
    store = Store(f"sqlite:///{tmp_path / 'empty.db'}")
    at = open_page(store, monkeypatch, "runs")
    assert any("No runs recorded" in n for n in notes(at)) and not at.dataframe
    for page in PAGES[1:]:
        at = open_page(store, monkeypatch, page["name"])
        assert any("No runs selected" in n for n in notes(at)), page["name"]


@pytest.mark.parametrize("page", PAGES, ids=[page["name"] for page in PAGES])
def test_half_written_and_crashed_runs_render_on_every_page(lab, monkeypatch, page):
    store, ids, labels = lab
    at = open_page(store, monkeypatch, page["name"], [ids["half-written"], ids["crashed"]])
    assert at.title[0].value == page["title"]
    assert notes(at)  # every page says something about these runs


# ---- Papers ----------------------------------------------------------------------------------------


def test_papers_page_shows_published_beside_reproduced_with_a_link_to_the_run(tmp_path, monkeypatch):
    import yaml

    import ortholab.db.published as published

    tables_dir = tmp_path / "published"
    tables_dir.mkdir()
    (tables_dir / "toy_table1.yaml").write_text(
        yaml.safe_dump(
            {
                "paper": "scornn-icml2018",
                "table": "Table 1",
                "title": "toy adding",
                "metric": "val/loss",
                "mode": "min",
                "rows": [
                    {"row": "adding_scornn", "task": "adding", "family": "scornn", "hidden_size": 8, "value": 0.002},
                    {"row": "adding_lstm", "task": "adding", "family": "lstm", "value": 0.01},
                ],
            }
        )
    )
    monkeypatch.setattr(published, "PUBLISHED_DIR", tables_dir)
    monkeypatch.setattr(published, "CHECKS_DIR", tmp_path / "no-checks")
    store = Store(f"sqlite:///{tmp_path / 'papers.db'}")
    run = store.create_run(
        name="toy", family="scornn", task="adding", tags=["paper:toy_table1/adding_scornn", "scale:cpu-smoke"]
    )
    store.log_metrics(run, {"val/loss": 0.05}, step=10)
    store.log_metrics(run, {"val/loss": 0.03}, step=20)
    store.set_status(run, "finished")

    at = open_page(store, monkeypatch, "papers")
    assert at.title[0].value == "Papers"
    frame = at.dataframe[0].value
    assert list(frame["row"]) == ["adding_scornn", "adding_lstm"]
    assert list(frame["published"]) == ["0.002", "0.01"]
    assert list(frame["reproduced"]) == ["0.03", "not yet run"]
    assert frame["seeds"][0] is not None and "seed" in frame["seeds"][0]  # the seeds' aggregate, as the report
    assert frame["run"][0] == f"curves?run={run}" and frame["scale"][0] == "cpu-smoke"
    assert any("1 of 2 rows not yet run" in n for n in notes(at))
    caption = " ".join(c.value for c in at.caption)  # a table measured on val/loss has no test value to fall back from
    assert "Metric `val/loss`" in caption and "read from validation because" not in caption
    (smoke,) = [w.value for w in at.warning]  # walk-through 9: the scale was only in the expander below
    assert smoke.startswith("adding_scornn: trained at --scale cpu-smoke, a check that the row runs, not a repro"), (
        smoke
    )
    assert any("beyond the baseline at a validation 10% or more better than it" in n for n in notes(at))


def test_a_row_with_several_seeds_links_every_seeds_curves(tmp_path, monkeypatch):
    """Walk-through (dashboard): a row trained with three seeds linked only its chosen run's curves, so its seeds'
    spread was not one click away; the link now names every seed's run, the chosen one first."""
    import yaml

    import ortholab.db.published as published

    tables_dir = tmp_path / "published"
    tables_dir.mkdir()
    row = {"row": "adding_lstm", "task": "adding", "family": "lstm", "value": None, "expect": "below_baseline"}
    table = {"paper": "toy", "table": "Figure 2", "metric": "val/loss", "mode": "min", "rows": [row]}
    (tables_dir / "toy_figure2.yaml").write_text(yaml.safe_dump(table))
    monkeypatch.setattr(published, "PUBLISHED_DIR", tables_dir)
    monkeypatch.setattr(published, "CHECKS_DIR", tmp_path / "no-checks")
    store = Store(f"sqlite:///{tmp_path / 'seeds.db'}")
    ids = []
    for seed in (2, 1, 3):  # trained out of seed order: the link lists the chosen (latest) run, then seed order
        tags = ["paper:toy_figure2/adding_lstm", f"seed:{seed}"]
        run = store.create_run(
            name=f"s{seed}", family="lstm", task="adding", tags=tags, main_metric="val/loss", baseline=1 / 6
        )
        store.log_metrics(run, {"val/loss": 0.1 * seed}, step=10)
        store.set_status(run, "finished")
        ids.append(run)
    frame = open_page(store, monkeypatch, "papers").dataframe[0].value
    assert frame["run"][0] == f"curves?run={ids[2]}&run={ids[1]}&run={ids[0]}"
    # the seeds' aggregate as the report writes it: seed 1 alone ends beyond the baseline 1/6 (0.1 < 0.15)
    item = published.reproductions(store, published.load_table(tables_dir / "toy_figure2.yaml"))[0]
    assert frame["seeds"][0] == published.seeds_text(item), frame["seeds"][0]
    assert frame["seeds"][0].startswith("1/3 seeds end beyond the baseline (first beyond at steps 10, -, -)")


def test_an_unreachable_store_is_one_error_on_the_page(monkeypatch):
    url = "postgresql+psycopg://nobody@127.0.0.1:1/none"
    monkeypatch.setenv("ORTHOLAB_DB", url)
    at = AppTest.from_file(APP_MAIN, default_timeout=60)
    at.run()
    assert not at.exception and url in at.error[0].value and "--db" in at.error[0].value


def test_runs_filter_by_sweep_and_show_its_best_trial(tmp_path, monkeypatch):
    store = Store(f"sqlite:///{tmp_path / 'sweep.db'}")
    for name, best, tags in (
        ("t0", 0.30, ["sweep:rho", "trial:0"]),
        ("t1", 0.05, ["sweep:rho", "trial:1"]),
        ("t2", 0.20, ["sweep:rho", "trial:2", "pruned"]),
        ("other", 0.01, ["sweep:lr", "trial:0"]),
        ("alone", 0.001, []),
    ):
        run = store.create_run(name=name, family="scornn", task="adding", main_metric="val/loss", tags=tags)
        store.log_params(run, {"model": {"family_args": {"rho": 10 * run}, "hidden_size": 8}, "name": name})
        store.log_metrics(run, {"val/loss": best}, step=1)
        store.set_status(run, "finished")
    at = open_page(store, monkeypatch, "runs")
    at.selectbox(key="filter_sweep").set_value("rho")
    at = rerun(at)
    table = at.dataframe[0].value
    assert sorted(table["name"]) == ["t0", "t1", "t2"]
    assert any(
        "Best of sweep 'rho': #2 t1, val/loss = 0.05 (3 trials, 1 pruned: stopped early" in s.value for s in at.success
    )
    # the setting the sweep varies is a column without asking; the one all its trials share is not
    assert list(table["model.family_args.rho"]) == [30, 20, 10] and "model.hidden_size" not in table.columns
    # a filter hiding the best trial does not make another the sweep's best (the banner named the shown ones' best)
    at.text_input(key="where").set_value("rho = 10")
    at = rerun(at)
    assert list(at.dataframe[0].value["name"]) == ["t0"]
    assert any(
        "Best of sweep 'rho': #2 t1, val/loss = 0.05 (3 trials, 1 pruned: stopped early, tagged 'pruned'; the filters "
        "show 1 of them)" in s.value
        for s in at.success
    )
    at.text_input(key="where").set_value("val/loss < 0.01")  # no trial: not "none has recorded its metric yet"
    at = rerun(at)
    assert not any("has recorded its main metric yet" in s.value for s in at.info)
    assert any(
        "(3 trials, 1 pruned: stopped early, tagged 'pruned'; the filters show 0 of them)" in s.value
        for s in at.success
    )


def test_a_sweeps_stopped_trial_is_not_counted_beside_its_copy_nor_its_best(tmp_path, monkeypatch):
    """A trial Ctrl-C stopped and the copy the sweep trained again with its values were "2 trials", and the stopped
    run, a failed trial to Optuna, could be named the sweep's best."""
    store = Store(f"sqlite:///{tmp_path / 'sweep.db'}")
    for name, best, tags in (
        ("s-t0", 0.01, ["sweep:s", "trial:0", "stopped"]),  # stopped early on a lucky point
        ("s-t1", 0.20, ["sweep:s", "trial:1"]),  # its copy, trained to the end
    ):
        run = store.create_run(name=name, family="scornn", task="adding", main_metric="val/loss", tags=tags)
        store.log_metrics(run, {"val/loss": best}, step=1)
        store.set_status(run, "interrupted" if "stopped" in tags else "finished")
    at = open_page(store, monkeypatch, "runs")
    at.selectbox(key="filter_sweep").set_value("s")
    at = rerun(at)
    assert any(
        "Best of sweep 's': #2 s-t1, val/loss = 0.2 (1 trial; 1 more stopped by Ctrl-C or SIGTERM, tagged 'stopped'"
        in s.value
        for s in at.success
    ), [s.value for s in at.success]


def test_runs_table_shows_a_running_runs_progress_of_its_plan_and_an_eta(tmp_path, monkeypatch):
    """Issue 24: a long run's progress without the terminal, as `ortholab runs` shows it (steps of the plan, the
    epoch of max_epochs, the time left at the median of its last five step times); finished runs leave them blank."""
    store = Store(f"sqlite:///{tmp_path / 'long.db'}")
    running = store.create_run(
        name="long", family="scornn", task="mnist", main_metric="val/acc", main_metric_mode="max"
    )
    store.update_run(running, info={"plan": {"total_steps": 77_000, "steps_per_epoch": 1_100, "max_epochs": 70}})
    for step, seconds in ((1_000, 0.9), (2_000, 0.5), (3_000, 0.5), (3_300, 0.6)):  # median 0.6 s
        store.log_metrics(running, {"time/step_s": seconds}, step=step)
    done = store.create_run(name="short", family="lstm", task="copying", main_metric="val/loss")
    store.log_metrics(done, {"val/loss": 0.1}, step=9)
    store.set_status(done, "finished")
    table = open_page(store, monkeypatch, "runs").dataframe[0].value.set_index("name")
    assert (table.loc["long", "of plan"], table.loc["long", "epoch"]) == ("3300/77000", "3/70")
    assert table.loc["long", "ETA"] == "12h17m"  # 73,700 steps x 0.6 s
    assert (table.loc["short", "of plan"], table.loc["short", "epoch"], table.loc["short", "ETA"]) == ("", "", "")


def test_columns_in_the_address_may_be_comma_separated_and_an_unknown_one_is_named(lab, monkeypatch):
    """Walk-through 9: `/?cols=model.hidden_size,val/acc` (the form `runs --columns` takes) added no column and said
    nothing, while `cols=a&cols=b` worked."""
    store, ids, labels = lab
    monkeypatch.setenv("ORTHOLAB_DB", store.url)
    at = AppTest.from_file(APP_MAIN, default_timeout=60)
    at.query_params["cols"] = ["model.hidden_size,val/loss,val/los"]
    rerun(at)
    table = at.dataframe[0].value
    assert "model.hidden_size" in table.columns and "val/loss" in table.columns, list(table.columns)
    (warning,) = [w.value for w in at.warning if "cols=" in w.value]
    assert "cols= names val/los, which no listed run records as a param or metric (did you mean val/loss?)" in warning
