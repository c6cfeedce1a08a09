"""Issue 25 through Streamlit's AppTest on hand-written runs (no training): controls that stay in step with the
charts, log axes with exact zeros, one look per run, grouping bands, metric groups, exports, the Runs table's
columns, sort, pages and filter expression, and headings without raw TeX."""

import re

import numpy as np
import pytest
import torch
from dashboard_store import (
    SEED_STEPS,
    SEED_STEPS_PER_EPOCH,
    add_hand_written_runs,
    add_seed_runs,
    array,
    charts,
    notes,
    open_page,
    rerun,
    seed_loss,
    traces,
)
from tolerances import roundoff

from ortholab.app.charts import EXPORT_WIDTH, PNG_SCALE
from ortholab.app.style import run_style
from ortholab.db import Store


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """(store, run ids by name, labels by name) shared by the module's tests (read only)."""
    store = Store(f"sqlite:///{tmp_path_factory.mktemp('compare') / 'runs.db'}")
    ids = {**add_hand_written_runs(store), **add_seed_runs(store)}
    yield store, ids, {name: f"#{i} {name}" for name, i in ids.items()}
    store.close()


pytestmark = pytest.mark.usefixtures("fresh_dashboard_caches")


def widgets_agree_with_charts(at):
    """The Curves controls as the widgets show them, and as the charts were drawn with them."""
    specs = charts(at)
    shown = (
        at.multiselect(key="curve_metrics").value,
        at.toggle(key="curve_log").value,
        at.slider(key="curve_smoothing").value,
    )
    drawn = (
        [s["layout"]["title"]["text"] for s in specs],
        {s["layout"]["meta"]["log_y"] for s in specs},
        {s["layout"]["meta"]["smoothing"] for s in specs},
    )
    assert drawn == (shown[0], {shown[1]}, {shown[2]}), (shown, drawn)
    return shown


# ---- controls and charts in step ---------------------------------------------------------------------------


def test_curves_controls_survive_an_empty_selection_and_match_the_charts(lab, monkeypatch):
    store, ids, labels = lab
    at = open_page(store, monkeypatch, "curves", [ids["lstm-adding"]])
    at.multiselect(key="curve_metrics").set_value(["val/loss", "train/loss"])
    at.toggle(key="curve_log").set_value(True)
    at.slider(key="curve_smoothing").set_value(0.0)
    chosen = widgets_agree_with_charts(rerun(at))
    assert chosen == (["val/loss", "train/loss"], True, 0.0)

    at.sidebar.multiselect[0].set_value([])  # every run removed: the page stops before its controls
    assert any("No runs selected" in n for n in notes(rerun(at)))
    at.sidebar.multiselect[0].set_value([ids["scornn-snapshots"]])  # another run, without train/loss
    assert widgets_agree_with_charts(rerun(at)) == chosen  # nothing reset behind the user's back
    assert f"{labels['scornn-snapshots']} has no `train/loss` points." in notes(at)
    at.sidebar.multiselect[0].set_value([ids["lstm-adding"]])
    assert widgets_agree_with_charts(rerun(at)) == chosen


# ---- log axes ----------------------------------------------------------------------------------------------


def test_a_run_at_exactly_zero_stays_on_the_log_axis(lab, monkeypatch):
    store, ids, labels = lab
    pair = [ids["srnn-zero-drift"], ids["scornn-snapshots"]]
    at = open_page(store, monkeypatch, "eigenvalues", pair)
    drift = next(s for s in charts(at) if "Figure 4" in (s["layout"].get("title") or {}).get("text", ""))
    assert drift["layout"]["yaxis"]["type"] == "log"  # the 1e-7 drifts are not flattened by the zeros
    drawn = traces(drift)
    floor = drift["layout"]["meta"]["floor"]
    assert floor == 1e-8 and array(drawn[labels["srnn-zero-drift"]]["y"]).tolist() == [floor] * 3
    assert np.allclose(array(drawn[labels["scornn-snapshots"]]["y"]), [1e-7, 2e-7, 4e-7])
    assert drift["layout"]["yaxis"]["ticktext"][0] == "0"
    assert any("exactly 0" in n and labels["srnn-zero-drift"] in n and "1e-08" in n for n in notes(at))

    at = open_page(store, monkeypatch, "curves", pair)
    at.multiselect(key="curve_metrics").set_value(["analysis/orthogonality"])
    at.toggle(key="curve_log").set_value(True)
    (spec,) = charts(rerun(at))
    assert array(traces(spec)[labels["srnn-zero-drift"]]["y"]).tolist() == [1e-8] * 3  # not silently gone
    assert any("3 values ≤ 0" in n and "drawn at the floor" in n for n in notes(at))
    for value, text in zip(
        spec["layout"]["yaxis"]["tickvals"][1:], spec["layout"]["yaxis"]["ticktext"][1:], strict=True
    ):
        assert float(text) == value  # full values, no bare mantissa digits


# ---- one look per run ----------------------------------------------------------------------------------------


def test_a_run_keeps_its_colour_across_charts_pages_and_selection_orders(lab, monkeypatch):
    store, ids, labels = lab
    a, b = ids["scornn-snapshots"], ids["srnn-zero-drift"]
    seen = {}
    for order in ([a, b], [b, a]):
        at = open_page(store, monkeypatch, "curves", order)
        at.multiselect(key="curve_metrics").set_value(["val/loss", "analysis/orthogonality"])
        for spec in charts(rerun(at)):
            for run in (a, b):
                trace = next(t for t in spec["data"] if t.get("name") == f"#{run} {store.get_run(run).name}")
                seen.setdefault(run, set()).add(
                    (trace["line"]["color"], trace["line"]["dash"], trace["marker"]["symbol"])
                )
        eigen = open_page(store, monkeypatch, "eigenvalues", order)
        for spec in charts(eigen):
            for trace in spec["data"]:
                for run in (a, b):
                    name = trace.get("name", "")  # its lines and panels ('<label>: ...' are marks on them)
                    if name.startswith(f"#{run} ") and ": " not in name and trace.get("type") != "histogram":
                        seen[run].add(
                            (
                                trace.get("line", {}).get("color") or trace["marker"]["color"],
                                trace.get("line", {}).get("dash", "solid"),
                                trace["marker"]["symbol"],
                            )
                        )
    for run in (a, b):
        style = run_style(run)
        assert seen[run] == {(style.color, style.dash, style.symbol)}
    assert run_style(a).color != run_style(b).color


# ---- grouping ------------------------------------------------------------------------------------------------


def test_smoothing_acts_on_a_groups_mean_and_band_as_on_a_runs_curve(tmp_path, monkeypatch):
    """Grouped seeds of 150 validations each: with Smoothing at 0.6 the group's mean and band are those of the
    runs' smoothed curves, each the debiased EMA of its raw points as the run's own curve is (the slider moved
    nothing and its caption said the curves were smoothed); at 0 they are the raw ones."""
    from ortholab.app.smoothing import debiased_ema

    store = Store(f"sqlite:///{tmp_path / 'runs.db'}")
    steps = np.arange(150) * 10
    noise = np.random.default_rng(0).normal(0, 0.02, (3, steps.size))
    losses = [0.2 / (1 + steps / 300) + 0.01 * seed + noise[seed] for seed in range(3)]
    runs = []
    for seed, loss in enumerate(losses):
        run = store.create_run(name=f"s{seed}", family="scornn", task="adding", main_metric="val/loss")
        store.log_params(run, {"seed_everything": seed})
        for step, value in zip(steps, loss, strict=True):
            store.log_metrics(run, {"val/loss": float(value)}, step=int(step), epoch=0, wall_time=float(step))
        store.set_status(run, "finished")
        runs.append(run)
    at = open_page(store, monkeypatch, "curves", runs)
    at.multiselect(key="curve_group_by").set_value(["family"])
    name = "family=scornn (mean of 3 runs)"
    for weight in (0.6, 0.0):
        at.slider(key="curve_smoothing").set_value(weight)
        (spec,) = charts(rerun(at))
        drawn = traces(spec)
        runs_drawn = np.array([debiased_ema(loss, weight) if weight else loss for loss in losses])
        # the same float64 EMAs and means computed again (plotly's JSON keeps every digit): each value a weighted
        # sum of at most 150 terms of size ~0.2
        bound = roundoff(torch.float64, n=150, scale=float(np.abs(runs_drawn).max()))
        for trace, expected in (
            ("", runs_drawn.mean(axis=0)),
            (" min–max", runs_drawn.min(axis=0)),
            (" upper", runs_drawn.max(axis=0)),
        ):
            assert np.allclose(array(drawn[name + trace]["y"]), expected, rtol=0, atol=bound), (weight, trace)
    store.close()


def test_grouping_seeds_draws_each_groups_mean_and_band(lab, monkeypatch):
    store, ids, labels = lab
    seeds = [ids[n] for n in ("scornn-seed1", "scornn-seed2", "scornn-seed3", "lstm-seed1", "lstm-seed2")]
    at = open_page(store, monkeypatch, "curves", seeds)
    assert "seed_everything" in at.multiselect(key="curve_group_by").options
    at.multiselect(key="curve_group_by").set_value(["family"])  # the seed is ignored
    (spec,) = charts(rerun(at))
    drawn = traces(spec)
    lstm = drawn["family=lstm (mean of 2 runs)"]
    expected = [np.mean([seed_loss("lstm", s, step) for s in (1, 2)]) for step in SEED_STEPS]
    assert np.allclose(array(lstm["y"]), expected) and np.allclose(array(lstm["x"]), SEED_STEPS)
    band = drawn["family=lstm (mean of 2 runs) min–max"]
    assert band["fill"] == "tonexty" and np.allclose(array(band["y"]), [seed_loss("lstm", 1, s) for s in SEED_STEPS])
    assert np.allclose(
        array(drawn["family=lstm (mean of 2 runs) upper"]["y"]), [seed_loss("lstm", 2, s) for s in SEED_STEPS]
    )
    scornn = drawn["family=scornn (mean of 3 runs)"]  # seed 3 logged at other steps: the union of x values
    assert set(array(scornn["x"])) == set(SEED_STEPS) | {s + 50 for s in SEED_STEPS[:-1]}
    assert labels["lstm-seed1"] not in drawn  # the runs themselves only on request
    assert any("Groups (runs): family=scornn: 3, family=lstm: 2" in n for n in notes(at))

    at.segmented_control(key="curve_spread").set_value("±1 std")
    at.toggle(key="curve_runs_behind").set_value(True)
    drawn = traces(charts(rerun(at))[0])
    upper = array(drawn["family=lstm (mean of 2 runs) upper"]["y"])
    std = [np.std([seed_loss("lstm", s, step) for s in (1, 2)], ddof=1) for step in SEED_STEPS]
    assert np.allclose(upper - np.array(expected), std)
    assert drawn[labels["lstm-seed1"]]["opacity"] < 0.5  # context behind the groups


# ---- the epoch axis ------------------------------------------------------------------------------------------


def test_epochs_come_from_the_plan_or_are_explained(lab, monkeypatch):
    store, ids, labels = lab
    at = open_page(store, monkeypatch, "curves", [ids["scornn-seed1"], ids["lstm-seed1"]])
    at.segmented_control(key="curve_axis").set_value("epoch")
    drawn = traces(charts(rerun(at))[0])
    assert np.allclose(array(drawn[labels["scornn-seed1"]]["x"]), np.array(SEED_STEPS) / SEED_STEPS_PER_EPOCH)
    assert any(n.startswith(f"{labels['lstm-seed1']}: all 4 points were logged in epoch 0") for n in notes(at))


# ---- metric names --------------------------------------------------------------------------------------------


def test_per_clip_keys_are_folded_and_metrics_grouped_by_prefix(lab, monkeypatch):
    store, ids, labels = lab
    at = open_page(store, monkeypatch, "curves", [ids["speech"]])
    options = at.multiselect(key="curve_metrics").options
    assert "test_audio/stoi" in options and not any(o.startswith("test_audio/stoi/") for o in options)
    assert any("4 per-clip keys are folded under the 2 metrics" in n for n in notes(at))
    groups = at.multiselect(key="curve_groups")
    assert groups.options == ["val (1)", "test_audio (5)", "test_audio_baseline (2)"]
    groups.set_value(["test_audio_baseline"])
    assert set(rerun(at).multiselect(key="curve_metrics").options) == {
        "test_audio_baseline/segsnr_voicebox",
        "test_audio_baseline/stoi",
        "val/loss",
    }
    at.toggle(key="curve_clips").set_value(True)
    assert "test_audio_baseline/stoi/u2" in rerun(at).multiselect(key="curve_metrics").options


# ---- exports ---------------------------------------------------------------------------------------------------


def test_every_chart_downloads_at_publication_size_in_the_chosen_format(lab, monkeypatch):
    import json

    store, ids, labels = lab
    chosen = [ids["scornn-snapshots"], ids["scurnn-phases"], ids["srnn-zero-drift"]]
    for image_format in ("PNG", "SVG"):
        for page in ("curves", "eigenvalues", "gradients", "compare"):
            at = open_page(store, monkeypatch, page, chosen)
            at.sidebar.segmented_control(key="image_format").set_value(image_format)
            rerun(at)
            configs = [json.loads(chart.proto.config) for chart in at.get("plotly_chart")]
            assert configs, page
            for config in configs:
                options = config["toImageButtonOptions"]
                assert options["format"] == image_format.lower() and options["width"] == EXPORT_WIDTH
                assert options["scale"] == (PNG_SCALE if image_format == "PNG" else 1) and options["height"] > 0
    at = open_page(store, monkeypatch, "curves", chosen)
    (button,) = [b for b in at.get("download_button") if "CSV" in b.proto.label]
    assert button.proto.label == "Download these curves (CSV, every point)"


# ---- headings ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("page", ["eigenvalues", "gradients"])
def test_headings_and_axis_titles_show_no_raw_subscripts(lab, monkeypatch, page):
    store, ids, labels = lab
    at = open_page(store, monkeypatch, page, [ids["scornn-snapshots"], ids["srnn-zero-drift"]])
    texts = [e.value for e in [*at.title, *at.header, *at.subheader, *at.caption]]
    for spec in charts(at):
        texts += [spec["layout"].get(axis, {}).get("title", {}).get("text") or "" for axis in ("xaxis", "yaxis")]
    outside_math = [re.sub(r"\$[^$]*\$|`[^`]*`", "", t) for t in texts]
    raw = [t for t in outside_math if re.search(r"_F\b|h_t\b|_\{", t)]
    assert not raw and any("$" in t for t in texts)


# ---- the Runs table ----------------------------------------------------------------------------------------------


def test_runs_table_columns_of_params_and_metrics_sorted(lab, monkeypatch):
    store, ids, labels = lab
    at = open_page(store, monkeypatch, "runs")
    options = at.multiselect(key="cols").options  # params, and metrics (a metric column holds its last value)
    assert {"model.hidden_size", "val/loss", "analysis/orthogonality"} <= set(options)
    assert "test_audio/stoi" in options and "test_audio/stoi/u1" not in options  # per-clip keys folded
    at.multiselect(key="cols").set_value(["model.hidden_size", "val/loss"])
    rerun(at).selectbox(key="sort").set_value("val/loss")  # a chosen column can be sorted by
    at.toggle(key="desc").set_value(False)
    table = rerun(at).dataframe[0].value
    assert list(table.columns[:6]) == ["id", "name", "family", "task", "model.hidden_size", "val/loss"]
    last = {
        name: store.metric_series(i, "val/loss")[-1].value
        for name, i in ids.items()
        if store.metric_series(i, "val/loss")
    }
    ordered = sorted(last, key=lambda n: (last[n], ids[n]))
    assert table["name"].tolist()[: len(ordered)] == ordered  # by the last val/loss, runs without one after
    assert table.set_index("name").loc["lstm-adding", "model.hidden_size"] == 64


def test_runs_filter_expression_and_its_message(lab, monkeypatch):
    store, ids, labels = lab
    at = open_page(store, monkeypatch, "runs")
    at.text_input(key="where").set_value('family = "scornn" and hidden_size > 16 and val/loss < 0.075')
    table = rerun(at).dataframe[0].value
    last = {
        n: store.metric_series(ids[n], "val/loss")[-1].value for n in ("scornn-seed1", "scornn-seed2", "scornn-seed3")
    }
    assert last["scornn-seed1"] < last["scornn-seed2"] < 0.075 < last["scornn-seed3"]
    assert set(table["name"]) == {"scornn-seed1", "scornn-seed2"}  # scornn-snapshots has hidden_size 16
    at.text_input(key="where").set_value("family = scornn and rho > 0.3")
    rerun(at)
    assert [e.value for e in at.error] == [
        "Filter expression not applied: no run field, param or metric is called "
        "'scornn'; text values need quotes (family = \"scornn\")."
    ]
    assert len(at.dataframe[0].value) == len(ids)  # the table stays, unfiltered by the bad expression


def test_runs_table_pages_through_hundreds_of_runs(tmp_path, monkeypatch):
    store = Store(f"sqlite:///{tmp_path / 'many.db'}")
    for i in range(130):
        store.create_run(name=f"r{i:03d}", family="scornn", task="copying")
    at = open_page(store, monkeypatch, "runs")
    assert len(at.dataframe[0].value) == 50 and at.pagination[0].proto.num_pages == 3
    at.pagination[0].set_value(3)
    table = rerun(at).dataframe[0].value
    assert table["name"].tolist() == [f"r{i:03d}" for i in range(29, -1, -1)]  # newest first: the oldest 30 last
    assert any("rows 101–130 shown" in n for n in notes(at))
    at.text_input(key="where").set_value('name ~ "r12"')  # fewer pages: back on the last one there is
    table = rerun(at).dataframe[0].value
    assert sorted(table["name"]) == [f"r{i}" for i in range(120, 130)] and not at.pagination
