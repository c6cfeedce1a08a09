"""Curves page: the selected runs' metrics overlaid, with x-axis, smoothing, log scale, task baselines, runs
grouped by parameters (mean and band), and the full series as CSV."""

from dataclasses import dataclass

import streamlit as st

from ortholab.app import controls, data
from ortholab.app.charts import show
from ortholab.app.curves import (
    MAX_POINTS,
    SMOOTH_MIN_POINTS,
    X_AXES,
    baselines_caption,
    baselines_for,
    batch_size,
    build_curve,
    one_epoch_note,
    series_csv,
    steps_per_epoch,
)
from ortholab.app.figures import curves_figure
from ortholab.app.grouping import SPREADS, aggregate, decimated, group_runs
from ortholab.app.labels import run_label
from ortholab.app.metric_names import groups, split_per_clip
from ortholab.app.page import selected_runs_page
from ortholab.app.parallel import differing_fields
from ortholab.app.smoothing import MAX_WEIGHT
from ortholab.app.smoothing import NAME as SMOOTHING_NAME

REFRESH_S = 5
MAX_CHARTS = 24  # more chosen metrics: the first ones drawn, the rest named

reader, runs = selected_runs_page("Curves")

every_key = {key for run in runs for key in reader.metric_keys(run.id)}
if not every_key:
    if all(run.stage == "predict" for run in runs):  # they never will: predictions are a file, not curves
        st.info("The selected runs are predict runs: they record predictions (a file), no metric points.")
    else:
        st.info("The selected runs have no metric points yet.")
    st.stop()
main_keys, per_clip = split_per_clip(every_key)
if len(tasks := sorted({run.task for run in runs if run.task})) > 1:  # walk-through 9: one axis, two quantities
    st.info(
        f"The selected runs train {len(tasks)} tasks ({', '.join(tasks)}): a metric of one name (val/loss) may "
        "measure something else in each (a cross-entropy, an MSE): compare its values within a task.",
        icon=":material/compare_arrows:",
    )


@dataclass(frozen=True)
class Choices:
    """How the controls say to draw the charts and group the runs."""

    axis: str  # a key of X_AXES
    weight: float  # smoothing weight, 0 for none
    log_y: bool
    refresh: bool  # redraw every REFRESH_S seconds (a selected run is live)
    group_by: list[str]  # fields whose equal values make a group; empty: one line per run
    spread: str  # the groups' band, one of SPREADS
    show_runs: bool  # the runs' own lines behind their groups


def metric_controls() -> list[str]:
    """The metric pickers: groups of metric prefixes, per-clip keys folded or listed, then the metrics themselves
    (one chart each). Returns the chosen metrics."""
    default = next((run.main_metric for run in runs if run.main_metric in every_key), main_keys[0])
    by_prefix = groups(main_keys)
    group_col, clip_col = st.columns([4, 1])
    chosen_groups = controls.multiselect(
        group_col,
        "Metric groups",
        list(by_prefix),
        key="curve_groups",
        format_func=lambda p: f"{p} ({len(by_prefix[p])})",
        placeholder="all groups",
        help="Lists only the metrics of these prefixes in 'Metrics' below.",
    )
    show_clips = controls.toggle(
        clip_col,
        "Per-clip metrics",
        key="curve_clips",
        disabled=not per_clip,
        help="Per-utterance keys (e.g. test_audio/stoi/<utterance>) are folded under the mean they break down.",
    )
    listed = [k for p in (chosen_groups or by_prefix) for k in by_prefix.get(p, [])]
    if show_clips:
        listed += [k for parent in listed[:] for k in per_clip.get(parent, [])]
    metrics = controls.multiselect(
        st,
        "Metrics (one chart each)",
        sorted(listed),
        key="curve_metrics",
        default=[default],
        placeholder="choose metrics",
    )
    if per_clip and not show_clips:
        folded = sum(len(v) for v in per_clip.values())
        st.caption(
            f"{folded} per-clip keys are folded under the {len(per_clip)} metrics they break down "
            "(switch on 'Per-clip metrics' to list them)."
        )
    return metrics


def axis_controls() -> tuple[str, float, bool, bool]:
    """The x-axis, smoothing, log-scale and auto-refresh controls: (axis, weight, log_y, refresh)."""
    # the x-axis options and the toggles' labels whole (a 1/9 column cut 'Log scale' to 'Log sc…'): two rows
    axis_col, smooth_col = st.columns(2)
    axis = controls.segmented(axis_col, "x-axis", list(X_AXES), key="curve_axis", default="step")
    weight = controls.slider(
        smooth_col,
        "Smoothing",
        0.0,
        MAX_WEIGHT,
        key="curve_smoothing",
        default=0.6,
        step=0.001,
        format="%.3f",
        help=f"{SMOOTHING_NAME} (as TensorBoard's slider), applied to curves of {SMOOTH_MIN_POINTS} points or more; "
        "0 turns it off. The raw curve stays visible, faded, and its last point is marked.",
    )
    log_col, live_col = st.columns(2)
    log_y = controls.toggle(log_col, "Log scale", key="curve_log")
    live = any(run.status == "running" for run in runs)
    auto = live_col.toggle(
        f"Auto-refresh every {REFRESH_S} s",
        value=live,
        disabled=not live,
        key="curve_refresh",
        help="Redraws the charts while a selected run is still running.",
    )
    return axis, weight, log_y, auto and live


def group_controls(options: list[str]) -> tuple[list[str], str, bool]:
    """Grouping runs by parameters: (fields to group by, the band, whether the runs show behind their groups)."""
    group_col, spread_col, behind_col = st.columns([4, 2, 2])
    group_by = controls.multiselect(
        group_col,
        "Group runs by",
        options,
        key="curve_group_by",
        placeholder="no grouping (one line per run)",
        help="Runs equal in these fields form a group, drawn as its mean with a band; fields not chosen (e.g. the "
        "seed) are ignored.",
    )
    spread = controls.segmented(
        spread_col, "Band", SPREADS, key="curve_spread", default=SPREADS[0], disabled=not group_by
    )
    show_runs = controls.toggle(
        behind_col, "Runs behind groups", key="curve_runs_behind", default=False, disabled=not group_by
    )
    return group_by, spread, show_runs


def scale_notes(choices: Choices) -> None:
    """Captions explaining the log scale, the smoothing and the epoch axis, when chosen."""
    notes = []
    if choices.log_y:
        notes.append("Log scale: values ≤ 0 are drawn at the axis floor (its tick reads 0), marked ▽.")
    if choices.weight > 0:
        notes.append(
            f"Smoothing: {SMOOTHING_NAME}, weight {choices.weight:.3f}, on curves of {SMOOTH_MIN_POINTS} "
            "points or more (faded lines are the raw points; a group's mean and band are over its runs' smoothed "
            "curves); "
            "the large marker is each run's last raw value."
        )
    if choices.axis == "epoch":
        notes.append("Epoch = step ÷ steps per epoch for runs that recorded their plan, else the epoch logged.")
    for note in notes:
        st.caption(note)


def curve_of(run, metric: str, fresh: data.Reader, choices: Choices):
    """One run's curve of `metric` on the chosen axis, smoothed; None when the axis cannot be computed."""
    detail = fresh.detail(run.id)
    return build_curve(
        run_label(run),
        fresh.metric(run.id, metric),
        choices.axis,
        start=run.created_at.timestamp(),
        batch=batch_size(detail.params) if choices.axis == "examples seen" else None,
        per_epoch=steps_per_epoch(detail.info),
        weight=choices.weight,
        run_id=run.id,
    )


def run_curves(metric: str, shown: list, fresh: data.Reader, choices: Choices) -> tuple[list, list[str]]:
    """Every shown run's curve of `metric`, with captions for the runs left out, thinned or drawn unsmoothed."""
    curves, messages, unsmoothed = [], [], []
    for run in shown:
        if metric not in fresh.metric_keys(run.id):
            messages.append(f"{run_label(run)} has no `{metric}` points.")
            continue
        curve = curve_of(run, metric, fresh, choices)
        if curve is None:
            why = (
                "no batch size (data.init_args.batch_size) recorded"
                if choices.axis == "examples seen"
                else "no epochs recorded"
            )
            messages.append(f"{run_label(run)} is left out: {why}.")
            continue
        curves.append(curve)
        if choices.axis == "epoch" and steps_per_epoch(fresh.detail(run.id).info) is None:
            messages += [n for n in [one_epoch_note(run_label(run), fresh.metric(run.id, metric))] if n]
        if len(curve.x) < curve.total_points:
            messages.append(
                f"{run_label(run)}: drawing {len(curve.x):,} of {curve.total_points:,} points "
                "(each stretch's smallest and largest kept; the CSV below has every point)."
            )
        if choices.weight > 0 and curve.smoothing == 0:
            unsmoothed.append(f"#{run.id}")
    if unsmoothed:
        messages.append(f"Drawn unsmoothed (fewer than {SMOOTH_MIN_POINTS} points): {', '.join(unsmoothed)}.")
    return curves, messages


def group_aggregates(curves: list, grouped: dict, spread: str) -> list:
    """Each group's mean and band over its members' every point, each member smoothed first exactly as its own
    curve is (so a group's mean is the mean of the curves drawn, whatever the axis), thinned for drawing."""
    aggregates = []
    by_id = {c.run_id: c for c in curves}
    for label, members in grouped.items():
        series = {i: (by_id[i].every_x, by_id[i].every_drawn) for i in members if i in by_id}  # every point
        if series:
            aggregates.append(decimated(aggregate(label, series, spread), MAX_POINTS))
    return aggregates


def metric_chart(metric: str, shown: list, fresh: data.Reader, choices: Choices, grouped: dict) -> None:
    """One metric's chart (runs, or groups with their bands, and the task's baseline) and its captions."""
    curves, messages = run_curves(metric, shown, fresh, choices)
    aggregates = group_aggregates(curves, grouped, choices.spread) if grouped else []
    baselines = baselines_for(shown, metric)
    figure = curves_figure(
        curves if not grouped or choices.show_runs else [],
        x_title=X_AXES[choices.axis],
        y_title=metric,
        log_y=choices.log_y,
        baselines=baselines,
        title=metric,
        aggregates=aggregates,
        smoothing=choices.weight,
        spread=choices.spread if grouped else None,
    )
    show(figure, f"curve_{metric}")
    at_floor = (figure.layout.meta or {}).get("at_floor", 0)
    if at_floor:
        messages.append(
            f"{at_floor} values ≤ 0 (e.g. exactly 0) drawn at the floor "
            f"{figure.layout.meta['floor']:.0e}, where the axis reads 0."
        )
    if baselines:
        messages.append(baselines_caption(shown, metric))
    for message in messages:
        st.caption(message)


def live_charts(metrics: list[str], choices: Choices, grouped: dict) -> None:
    """The charts, in a fragment of their own that reruns every REFRESH_S seconds when auto-refresh is on."""

    @st.fragment(run_every=REFRESH_S if choices.refresh else None)
    def charts() -> None:
        fresh = data.reader()  # re-reads the runs list when its cache expires, so live runs grow
        shown = fresh.summaries([run.id for run in runs])
        for metric in metrics:
            metric_chart(metric, shown, fresh, choices, grouped)

    charts()


def download_series(metrics: list[str]) -> None:
    """The download button for every point of the drawn metrics of the selected runs."""

    def full_series() -> bytes:
        """Every point of the drawn metrics of the selected runs (read when the button is clicked)."""
        return series_csv(
            (run.id, run.name, metric, reader.metric(run.id, metric))
            for run in runs
            for metric in metrics
            if metric in reader.metric_keys(run.id)
        )

    st.download_button(
        "Download these curves (CSV, every point)",
        full_series,
        file_name="ortholab-curves.csv",
        mime="text/csv",
        on_click="ignore",
        help="Long format: run, name, metric, step, epoch, wall_time (unix s), value; every point "
        "logged, neither smoothed nor thinned.",
    )


@st.fragment
def curves_view() -> None:
    """The controls and their charts. A fragment: changing a control reruns only this part of the page, not the
    navigation, the sidebar's run selection (every run an option) and the runs list (see docs/dashboard.md)."""
    metrics = metric_controls()
    axis, weight, log_y, refresh = axis_controls()
    fields = {run.id: reader.fields(run.id) for run in runs}
    group_by, spread, show_runs = group_controls(differing_fields(fields))
    choices = Choices(axis, weight, log_y, refresh, group_by, spread, show_runs)
    if not metrics:
        st.info("Choose at least one metric.")
        return
    if len(metrics) > MAX_CHARTS:
        st.warning(
            f"{len(metrics)} metrics chosen: the first {MAX_CHARTS} are drawn "
            f"({', '.join(metrics[MAX_CHARTS:])} left out)."
        )
    drawn_metrics = metrics[:MAX_CHARTS]
    grouped = group_runs({run.id: fields[run.id] for run in runs}, group_by) if group_by else {}
    scale_notes(choices)
    live_charts(drawn_metrics, choices, grouped)
    download_series(drawn_metrics)
    if grouped:
        sizes = ", ".join(f"{label}: {len(members)}" for label, members in grouped.items())
        st.caption(
            f"Groups (runs): {sizes}. Band: {spread} over the runs covering each x (interpolated linearly onto "
            "the union of their x values, inside each run's own range)."
        )


curves_view()
