"""Plotly figures for the dashboard, built by pure functions from arrays (testable without Streamlit).

Every trace of a run takes the run's colour, dash and marker from app/style.py, so a run looks the same on
every chart and page. Log axes come from app/logaxis.py: values <= 0 drawn at a floor, full-value ticks.
Titles sit on the left and the top margin leaves room above panel titles for plotly's toolbar.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
from plotly.colors import sample_colorscale

from ortholab.app.curves import Baseline, Curve
from ortholab.app.grouping import Aggregate
from ortholab.app.logaxis import LogScale, lift, log_axis_layout, log_scale
from ortholab.app.style import group_style, run_style, translucent

MARKERS_UP_TO = 60  # curves with this few points show every point (validation every N steps)
BASELINE_DASHES = ("dash", "dot", "dashdot", "longdash")  # several tasks' baselines stay apart
RAW_OPACITY = 0.25  # the raw curve behind a smoothed one, faded as in TensorBoard / W&B
BAND_OPACITY = 0.2
TOP_MARGIN = 40  # plotly's toolbar is ~30 px tall at the top right
TITLED_TOP_MARGIN = 72  # a title or panel titles sit below the toolbar
FLOOR_SYMBOL = "triangle-down-open"  # a value <= 0 drawn at a log axis' floor
TWO_PI = 2.0 * np.pi


# Margins set up front to what plotly's automargin grows them to (tick labels, axis titles, the legend below, a
# colour bar): automargin only ever widens a margin, and each widening redraws the whole chart a second time
# (half of a chart's drawing time in the browser: 0.60 -> 0.27 s for the 8-panel eigenvalue chart, load ~5).
LEFT_MARGIN = 90  # y tick labels ("0.0001", "2e-6" on a log axis) and the y title
BOTTOM_MARGIN = 76  # x tick labels and the x title
RIGHT_MARGIN = 20  # the last x tick label's overhang ("2π")
COLORBAR_MARGIN = 110  # a heatmap's colour bar and its labels ("-0.5", "-100") on the right
LEFT_MARGIN_HEATMAP = 88  # "4000" Hz ticks and the frequency title
LEGEND_Y = -0.2  # the legend's top, as a fraction of the plot area's height below it
LEGEND_ROW = 24  # px per row of legend entries
LEGEND_WIDTH = 1100  # px a row of legend entries is assumed to fill (the wide layout's chart width)
DEFAULT_HEIGHT = 450  # plotly's, when a figure sets none


def _legend_rows(fig: go.Figure, shown: bool | None) -> int:
    """About how many rows the horizontal legend takes: ~40 px of symbol and gap plus ~7 px a character per entry."""
    names = [t.name or "" for t in fig.data if t.showlegend is not False and t.name]
    if shown is False or (shown is None and len(names) < 2):
        return 0
    widths = [40 + 7 * len(name) for name in names]
    rows, used = 1, 0
    for width in widths:
        if used and used + width > LEGEND_WIDTH:
            rows, used = rows + 1, 0
        used += width
    return rows


def _margins(fig: go.Figure, top: int, height: int, legend: bool | None) -> dict:
    """Margins that already hold what automargin would push them to, so plotly draws the chart once."""
    heatmap = any(t.type == "heatmap" and t.showscale is not False for t in fig.data)
    bottom = BOTTOM_MARGIN
    rows = _legend_rows(fig, legend)
    if rows:  # the legend's top sits LEGEND_Y of the plot area's height below it: b >= 0.2 (h - t - b) + legend
        bottom = max(bottom, math.ceil((-LEGEND_Y * (height - top) + rows * LEGEND_ROW + 16) / (1 - LEGEND_Y)))
    return dict(
        l=LEFT_MARGIN_HEATMAP if heatmap else LEFT_MARGIN,
        r=COLORBAR_MARGIN if heatmap else RIGHT_MARGIN,
        t=top,
        b=bottom,
    )


def _layout(fig: go.Figure, *, title: str | None = None, titled: bool = False, **kwargs) -> go.Figure:
    top = TITLED_TOP_MARGIN if title or titled else TOP_MARGIN
    margin = _margins(fig, top, kwargs.get("height") or DEFAULT_HEIGHT, kwargs.get("showlegend"))
    fig.update_layout(
        margin=margin,
        legend=dict(orientation="h", y=LEGEND_Y, traceorder="normal"),  # grouped: a row per group
        title=dict(
            text=title, x=0.0, xanchor="left", xref="paper", y=1.0, yref="paper", yanchor="bottom", pad=dict(b=12)
        )
        if title
        else None,
        **kwargs,
    )
    return fig


def _y_axis(fig: go.Figure, title: str, log_y: bool, arrays: Sequence[np.ndarray]) -> LogScale | None:
    """Set the y axis; on a log axis return the scale (floor, count of values drawn there). Axes are set through
    fig.layout directly: plotly's update_yaxes walks every subplot and costs ~20 ms a call."""
    if not log_y:
        fig.layout.yaxis = dict(title=dict(text=title), type="linear")
        return None
    scale = log_scale(arrays)
    fig.layout.yaxis = dict(title=dict(text=title), **log_axis_layout(scale))
    return scale


def _x_axis(fig: go.Figure, title: str, **settings) -> None:
    fig.layout.xaxis = dict(title=dict(text=title), **settings)


def _floor_marks(x: np.ndarray, low: np.ndarray, floor: float, color: str, label: str) -> go.Scatter:
    """Markers at the floor for the points whose value is <= 0 (they are on the line too); along a long stretch
    of them a few markers (plotly's maxdisplayed) say so: one SVG marker per point costs ~0.4 ms to draw."""
    count = int(low.sum())
    few = {} if count <= MARKERS_UP_TO else dict(maxdisplayed=MARKERS_UP_TO)
    return go.Scatter(
        x=x[low],
        y=np.full(count, floor),
        mode="markers",
        name=f"{label}: ≤ 0 at the floor",
        legendgroup=label,
        showlegend=False,
        marker=dict(symbol=FLOOR_SYMBOL, size=9, color=color, **few),
        hovertemplate=f"{label}<br>%{{x}}: value ≤ 0, drawn at the axis floor<extra></extra>",
    )


def curves_figure(
    curves: Sequence[Curve],
    *,
    x_title: str,
    y_title: str,
    log_y: bool = False,
    baselines: Sequence[Baseline] = (),
    title: str | None = None,
    aggregates: Sequence[Aggregate] = (),
    smoothing: float = 0.0,
    spread: str | None = None,
) -> go.Figure:
    """Overlaid runs of one metric: per run a trace named by its label in the run's style (a smoothed line with
    the raw curve faded behind it and named '<label> (raw)'), its last raw point marked (hover: its value);
    per group of runs its mean with a translucent band (`spread`); each baseline as a dashed (dotted, ...)
    horizontal line across the plotted x range. layout.meta records the controls the figure was drawn with."""
    fig = go.Figure()
    scale = _y_axis(
        fig,
        y_title,
        log_y,
        [c.y for c in curves] + [a for g in aggregates for a in (g.low, g.mean, g.high)],
    )
    floor = scale.floor if scale else None

    def drawn(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return lift(y, floor) if floor is not None else (np.asarray(y, float), np.zeros(len(y), bool))

    for group in aggregates:
        _add_aggregate(fig, group, drawn, spread)
    faded = bool(aggregates)  # with groups drawn, the runs behind them are context
    for curve in curves:
        _add_run(fig, curve, drawn, faded, floor)
    _add_baselines(fig, baselines, [c.x for c in curves] + [g.x for g in aggregates], floor)
    _x_axis(fig, x_title)
    meta = dict(
        log_y=log_y,
        smoothing=smoothing,
        at_floor=scale.at_floor if scale else 0,
        floor=floor,
        groups=len(aggregates),
        spread=spread,
    )
    return _layout(fig, title=title, hovermode="closest", meta=meta)


def _add_aggregate(fig: go.Figure, group: Aggregate, drawn, spread: str | None) -> None:
    """A group's mean line over a translucent band between its low and high curves."""
    style = group_style(group.label)
    low, _ = drawn(group.low)
    high, _ = drawn(group.high)
    mean, _ = drawn(group.mean)
    name = f"{group.label} (mean of {len(group.runs)} runs)"
    fig.add_trace(
        go.Scatter(
            x=group.x,
            y=high,
            mode="lines",
            line=dict(width=0),
            legendgroup=name,
            showlegend=False,
            hoverinfo="skip",
            name=f"{name} upper",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=group.x,
            y=low,
            mode="lines",
            line=dict(width=0),
            fill="tonexty",
            legendgroup=name,
            fillcolor=translucent(style.color, BAND_OPACITY),
            showlegend=False,
            hoverinfo="skip",
            name=f"{name} {spread or 'band'}",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=group.x,
            y=mean,
            mode="lines",
            name=name,
            legendgroup=name,
            line=style.line(2.5),
            customdata=np.column_stack([group.low, group.high, group.n]),
            hovertemplate=(
                f"{group.label}<br>%{{x}}: mean %{{y:.4g}}, {spread or 'band'} "
                "[%{customdata[0]:.4g}, %{customdata[1]:.4g}] over %{customdata[2]} runs<extra></extra>"
            ),
        )
    )


def _add_run(fig: go.Figure, curve: Curve, drawn, faded: bool, floor) -> None:
    """One run: its raw curve (faded behind its smoothed one, if smoothed), the points a log floor moved, and its
    last raw point marked."""
    style = run_style(curve.run_id)
    smoothed = curve.smoothed is not None
    sparse = len(curve.x) <= MARKERS_UP_TO
    y, low = drawn(curve.y)
    value = "customdata" if low.any() else "y"  # the recorded value, where the floor moved the point
    fig.add_trace(
        go.Scatter(
            x=curve.x,
            y=y,
            mode="lines" if smoothed else "lines+markers",  # faded behind: no markers
            name=f"{curve.label} (raw)" if smoothed else curve.label,
            legendgroup=curve.label,
            showlegend=not smoothed,
            opacity=RAW_OPACITY if smoothed or faded else 1.0,
            line=style.line(1 if smoothed else 2),
            marker=style.marker(5, every_point=sparse),
            customdata=curve.y if low.any() else None,
            hovertemplate=f"{curve.label}<br>%{{x}}: %{{{value}:.4g}}<extra></extra>",
        )
    )
    if smoothed:
        smooth_y, _ = drawn(curve.smoothed)
        fig.add_trace(
            go.Scatter(
                x=curve.x,
                y=smooth_y,
                mode="lines+markers",
                name=curve.label,
                legendgroup=curve.label,
                line=style.line(2),
                marker=style.marker(5, every_point=sparse),
                hovertemplate=f"{curve.label} smoothed<br>%{{x}}: %{{y:.4g}}<extra></extra>",
            )
        )
    if low.any():
        fig.add_trace(_floor_marks(curve.x, low, floor, style.color, curve.label))
    last_x, last_y = curve.last
    fig.add_trace(
        go.Scatter(
            x=[last_x],
            y=[drawn(np.array([last_y]))[0][0]],
            mode="markers",
            name=f"{curve.label}: last",
            legendgroup=curve.label,
            showlegend=False,
            marker=dict(symbol=style.symbol, size=11, color=style.color, line=dict(color="white", width=1.5)),
            hovertemplate=f"{curve.label}<br>last raw value {last_y:.4g} at %{{x}}<extra></extra>",
        )
    )


def _add_baselines(fig: go.Figure, baselines: Sequence[Baseline], xs: list[np.ndarray], floor) -> None:
    """Each baseline as a dashed (dotted, ...) horizontal line across the plotted x range."""
    xs = [x for x in xs if len(x)]
    if not xs:
        return
    left, right = float(min(x.min() for x in xs)), float(max(x.max() for x in xs))
    for i, baseline in enumerate(baselines):
        if floor is not None and baseline.value <= 0:
            continue  # a baseline of 0 has no place on a log axis (never happens for the papers' tasks)
        fig.add_trace(
            go.Scatter(
                x=[left, right],
                y=[baseline.value, baseline.value],
                mode="lines",
                name=baseline.label,
                line=dict(color="#555555", dash=BASELINE_DASHES[i % len(BASELINE_DASHES)], width=1.5),
                hoverinfo="name+y",
            )
        )


@dataclass(frozen=True)
class EigenPanel:
    """One run's eigenvalues at one snapshot."""

    title: str
    values: np.ndarray  # complex
    run_id: int = 0


def _unit_circle(points: int = 361) -> tuple[np.ndarray, np.ndarray]:
    theta = np.linspace(0.0, TWO_PI, points)
    return np.cos(theta), np.sin(theta)


def wrap_phase(theta: np.ndarray) -> np.ndarray:
    """Angles in [0, 2π), the convention scuRNN stores θ in; every phase on the dashboard is shown so."""
    return np.mod(np.asarray(theta, dtype=float), TWO_PI)


def _span(low: float, high: float) -> list[float]:
    """A domain inside [0, 1] (the sums above round to -1e-17 and 1 + 1e-16)."""
    return [min(1.0, max(0.0, round(low, 9))), min(1.0, max(0.0, round(high, 9)))]


def _grid(count: int, columns: int, titles: Sequence[str]) -> dict:
    """Layout for `count` panels in rows of `columns` (what plotly's make_subplots builds, which takes ~0.5 s for
    a dozen panels): axes x/y, x2/y2, ... with their domains, and each panel's title above it."""
    rows = max(1, -(-count // columns))
    gap_x, gap_y = 0.08, (0.12 if rows > 1 else 0.0)
    width, height = (1 - gap_x * (columns - 1)) / columns, (1 - gap_y * (rows - 1)) / rows
    layout, annotations = {}, []
    for i in range(count):
        row, col = divmod(i, columns)
        left, top = col * (width + gap_x), 1 - row * (height + gap_y)
        n = "" if i == 0 else str(i + 1)
        layout[f"xaxis{n}"] = dict(domain=_span(left, left + width), anchor=f"y{n}")
        layout[f"yaxis{n}"] = dict(domain=_span(top - height, top), anchor=f"x{n}")
        annotations.append(
            dict(
                text=titles[i],
                x=left + width / 2,
                y=top,
                xref="paper",
                yref="paper",
                xanchor="center",
                yanchor="bottom",
                showarrow=False,
                font=dict(size=14),
            )
        )
    return dict(layout, annotations=annotations)


def eigenvalue_figure(panels: Sequence[EigenPanel], *, columns: int = 3) -> go.Figure:
    """The complex plane per run, side by side: the unit circle and the eigenvalues (in the run's colour),
    equal axes; hover gives λ, |λ| and arg λ in [0, 2π)."""
    cols = max(1, min(columns, len(panels)))
    rows = max(1, -(-len(panels) // cols))
    layout = _grid(len(panels), cols, [p.title for p in panels])
    cx, cy = _unit_circle()
    traces = []
    for i, panel in enumerate(panels):
        n = "" if i == 0 else str(i + 1)
        values = np.asarray(panel.values, dtype=complex)
        reach = max(1.15, 1.05 * float(np.abs(values).max(initial=0.0)))
        style = run_style(panel.run_id)
        traces.append(
            dict(
                type="scatter",
                x=cx,
                y=cy,
                mode="lines",
                name="unit circle",
                legendgroup="unit circle",
                showlegend=i == 0,
                line=dict(color="#999999", width=1),
                hoverinfo="skip",
                xaxis=f"x{n}",
                yaxis=f"y{n}",
            )
        )
        traces.append(
            dict(
                type="scatter",
                x=values.real,
                y=values.imag,
                mode="markers",
                name=panel.title,
                xaxis=f"x{n}",
                yaxis=f"y{n}",
                marker=dict(color=style.color, symbol=style.symbol, size=6),
                customdata=np.column_stack([np.abs(values), wrap_phase(np.angle(values))]),
                hovertemplate="λ = %{x:.4f} %{y:+.4f}i<br>|λ| = %{customdata[0]:.6f}<br>"
                "arg λ = %{customdata[1]:.4f} rad<extra></extra>",
            )
        )
        layout[f"xaxis{n}"].update(range=[-reach, reach], title=dict(text="Re λ"), constrain="domain")
        layout[f"yaxis{n}"].update(range=[-reach, reach], title=dict(text="Im λ"), scaleanchor=f"x{n}", scaleratio=1)
    fig = go.Figure(data=traces, layout=layout)
    return _layout(fig, titled=True, height=400 * rows, showlegend=False)


@dataclass(frozen=True)
class Line:
    """One line of a plain line chart; `run_id` gives it the run's style."""

    label: str
    x: np.ndarray
    y: np.ndarray
    run_id: int | None = None


def lines_figure(
    series: Sequence[Line],
    *,
    x_title: str,
    y_title: str,
    log_y: bool = False,
    title: str | None = None,
    sequential: bool = False,
) -> go.Figure:
    """Plain overlaid lines. Lines of a run take its style; `sequential` colours them along a scale instead
    (e.g. snapshot steps, early = dark, late = bright). On a log axis values <= 0 sit at the floor, marked."""
    fig = go.Figure()
    scale = _y_axis(fig, y_title, log_y, [np.asarray(line.y, float) for line in series])
    shades = sample_colorscale("Viridis", np.linspace(0, 0.9, len(series)).tolist()) if sequential and series else []
    for i, line in enumerate(series):
        x = np.asarray(line.x, dtype=float)
        sparse = len(x) <= MARKERS_UP_TO
        if sequential or line.run_id is None:
            color = shades[i] if sequential else "#444444"
            line_style, marker = dict(color=color), dict(color=color, size=4)
        else:
            style = run_style(line.run_id)
            color, line_style, marker = style.color, style.line(2), style.marker(5, every_point=sparse)
        y, low = lift(line.y, scale.floor) if scale else (np.asarray(line.y, float), np.zeros(len(x), bool))
        value = "customdata" if low.any() else "y"  # the recorded value, where the floor moved the point
        fig.add_trace(
            go.Scatter(
                x=x,
                y=y,
                mode="lines+markers" if sparse or not sequential else "lines",
                name=line.label,
                legendgroup=line.label,
                line=line_style,
                marker=marker,
                customdata=np.asarray(line.y, float) if low.any() else None,
                hovertemplate=f"{line.label}<br>%{{x}}: %{{{value}:.4g}}<extra></extra>",
            )
        )
        if low.any():
            fig.add_trace(_floor_marks(x, low, scale.floor, color, line.label))
    _x_axis(fig, x_title)
    return _layout(
        fig,
        title=title,
        meta=dict(log_y=log_y, at_floor=scale.at_floor if scale else 0, floor=scale.floor if scale else None),
    )


PI_TICKS = ([0, np.pi / 2, np.pi, 3 * np.pi / 2, TWO_PI], ["0", "π/2", "π", "3π/2", "2π"])


def phases_figure(panels: Sequence[tuple[str, np.ndarray, int]], *, bins: int = 36) -> go.Figure:
    """Histograms of scuRNN's diagonal phases θ, wrapped to [0, 2π) (the convention scuRNN stores them in),
    overlaid per run in the run's colour; every phase falls in a bin of [0, 2π]."""
    fig = go.Figure()
    for label, theta, run_id in panels:
        style = run_style(run_id)
        fig.add_trace(
            go.Histogram(
                x=wrap_phase(theta),
                name=label,
                opacity=0.6,
                marker=dict(color=style.color),
                xbins=dict(start=0.0, end=TWO_PI, size=TWO_PI / bins),
            )
        )
    _x_axis(
        fig,
        "phase θ (rad), wrapped to [0, 2π)",
        range=[0.0, TWO_PI],
        tickmode="array",
        tickvals=PI_TICKS[0],
        ticktext=PI_TICKS[1],
    )
    fig.layout.yaxis = dict(title=dict(text="count"))
    return _layout(fig, barmode="overlay")


def heatmap_figure(
    z: np.ndarray, *, x_title: str, y_title: str, title: str | None = None, diverging: bool = True
) -> go.Figure:
    """A matrix as a heatmap, z[y, x]; diverging colours centred on 0 for signed data."""
    z = np.asarray(z, dtype=float)
    trace = go.Heatmap(
        z=z,
        x=np.arange(z.shape[1]),
        y=np.arange(z.shape[0]),
        colorscale="RdBu_r" if diverging else "Viridis",
        zmid=0.0 if diverging else None,
    )
    fig = go.Figure(trace)
    _x_axis(fig, x_title)
    fig.layout.yaxis = dict(title=dict(text=y_title))
    fig.update_xaxes(tick0=0, dtick=index_tick_step(z.shape[1]))  # whole rows and columns, never 0.5
    fig.update_yaxes(tick0=0, dtick=index_tick_step(z.shape[0]))
    return _layout(fig, title=title)


def index_tick_step(size: int, most: int = 10) -> int:
    """The step between index ticks: the smallest of 1, 2, 5, 10, 20, 50, ... that puts at most `most` ticks on an
    axis of `size` whole indices."""
    magnitude = 1
    while True:
        for unit in (1, 2, 5):
            if size / (unit * magnitude) <= most:
                return unit * magnitude
        magnitude *= 10


def spectrogram_figure(times: np.ndarray, freqs: np.ndarray, power_db: np.ndarray, *, title: str) -> go.Figure:
    """A power spectrogram (dB) over time and frequency."""
    fig = go.Figure(go.Heatmap(x=times, y=freqs, z=power_db, colorscale="Magma", colorbar=dict(title="dB")))
    _x_axis(fig, "time (s)")
    fig.layout.yaxis = dict(title=dict(text="frequency (Hz)"))
    return _layout(fig, title=title, height=320)


@dataclass(frozen=True)
class Axis:
    """One axis of parallel coordinates: numbers, or categories (text shown at integer positions)."""

    label: str
    values: np.ndarray  # float positions; NaN never (missing values have their own position)
    tickvals: list[float] | None = None
    ticktext: list[str] | None = None
    range: tuple[float, float] | None = None


PARALLEL_COLORSCALE = "Viridis"


def parallel_lines_figure(
    axes: Sequence[Axis], colour: np.ndarray, colour_title: str, labels: Sequence[str], run_ids: Sequence[int]
) -> go.Figure:
    """Parallel coordinates drawn as plain lines (SVG): one line per run across `axes` (each axis scaled to its
    range), coloured by `colour` along Viridis with a colour bar titled `colour_title`; hover names the run and
    its value on every axis. parallel_figure's WebGL parcoords adds brushing but takes ~1.5 s to draw in a browser
    rendering WebGL without a GPU; these lines take ~0.2 s."""
    colour = np.asarray(colour, dtype=float)
    low, high = float(np.nanmin(colour)), float(np.nanmax(colour))
    shades = sample_colorscale(
        PARALLEL_COLORSCALE, ((colour - low) / (high - low) if high > low else np.full(colour.size, 0.5)).tolist()
    )
    count = len(axes)
    xs = np.arange(count, dtype=float)

    traces = [
        dict(
            type="scatter",
            x=np.repeat(xs, 3),
            y=np.tile([0.0, 1.0, np.nan], count),
            mode="lines",
            line=dict(color="#888888", width=1),
            hoverinfo="skip",
            showlegend=False,
            name="axes",
        )
    ]
    for row, (label, run_id) in enumerate(zip(labels, run_ids, strict=True)):
        values = [float(axis.values[row]) for axis in axes]
        text = "<br>".join(f"{axis.label}: {_shown_on_axis(axis, v)}" for axis, v in zip(axes, values, strict=True))
        traces.append(
            dict(
                type="scatter",
                x=xs,
                y=[float(_scaled_to_axis(a, v)) for a, v in zip(axes, values, strict=True)],
                mode="lines+markers",
                name=label,
                showlegend=False,
                line=dict(color=shades[row], width=2),
                marker=dict(color=shades[row], size=6),
                meta=dict(run_id=int(run_id), colour=float(colour[row])),
                hovertemplate=f"{label}<br>{text}<br>{colour_title}: {colour[row]:.4g}<extra></extra>",
            )
        )
    traces.append(
        dict(  # the colour bar: one invisible marker carrying the scale
            type="scatter",
            x=[None],
            y=[None],
            mode="markers",
            showlegend=False,
            hoverinfo="skip",
            name=colour_title,
            marker=dict(
                color=[low],
                cmin=low,
                cmax=high if high > low else low + 1,
                colorscale=PARALLEL_COLORSCALE,
                showscale=True,
                colorbar=dict(title=dict(text=colour_title, side="right")),
            ),
        )
    )
    annotations = _parallel_axis_annotations(axes)
    longest = max((len(a.label) for a in axes), default=0)
    top = 60 + min(120, int(5.5 * longest * math.sin(math.radians(30))))
    layout = dict(
        annotations=annotations,
        height=460 + top,
        margin=dict(l=80, r=140, t=top, b=30),
        hovermode="closest",
        xaxis=dict(visible=False, range=[-0.6, count - 0.6]),
        yaxis=dict(visible=False, range=[-0.05, 1.05]),
        meta=dict(kind="parallel lines", axes=[a.label for a in axes]),
    )
    return go.Figure(data=traces, layout=layout)


def _scaled_to_axis(axis: Axis, values) -> np.ndarray:
    """Values on a parallel-coordinates axis as fractions of its range (0 at the bottom, 1 at the top)."""
    lo, hi = axis.range if axis.range is not None else (float(np.min(axis.values)), float(np.max(axis.values)))
    return (np.asarray(values, dtype=float) - lo) / ((hi - lo) or 1.0)


def _shown_on_axis(axis: Axis, value: float) -> str:
    """A value as its axis labels it: the tick's text where it is a tick, else 4 significant digits."""
    if axis.tickvals is not None and axis.ticktext is not None and value in axis.tickvals:
        return str(axis.ticktext[axis.tickvals.index(value)])
    return f"{value:.4g}"


def _parallel_axis_annotations(axes: Sequence[Axis]) -> list[dict]:
    """Each axis's title (slanted, above it) and its tick labels (left of it)."""
    annotations = []
    for i, axis in enumerate(axes):
        annotations.append(
            dict(
                x=i,
                y=1.04,
                xref="x",
                yref="y",
                text=axis.label,
                showarrow=False,
                textangle=-30,
                xanchor="left",
                yanchor="bottom",
                font=dict(size=12),
            )
        )
        ticks = axis.tickvals if axis.tickvals is not None else [float(v) for v in _nice_ends(axis)]
        texts = axis.ticktext if axis.ticktext is not None else [f"{v:.3g}" for v in ticks]
        for tick, text in zip(_scaled_to_axis(axis, ticks), texts, strict=True):
            annotations.append(
                dict(
                    x=i,
                    y=float(tick),
                    xref="x",
                    yref="y",
                    text=str(text),
                    showarrow=False,
                    xanchor="right",
                    xshift=-4,
                    font=dict(size=10, color="#444444"),
                    bgcolor="rgba(255, 255, 255, 0.85)",
                )
            )
    return annotations


def _nice_ends(axis: Axis) -> list[float]:
    values = np.asarray(axis.values, dtype=float)
    return [float(values.min()), float(values.max())] if values.size else []


def parallel_figure(axes: Sequence[Axis], colour: np.ndarray, colour_title: str) -> go.Figure:
    """Parallel coordinates: one line per run across `axes`, coloured by `colour` (one value per run, with a
    colour bar titled `colour_title`). Labels are tilted and the margins wide so none is clipped."""
    dimensions = []
    for axis in axes:
        dimension = dict(label=axis.label, values=axis.values)
        if axis.tickvals is not None:
            dimension.update(tickvals=axis.tickvals, ticktext=axis.ticktext)
        if axis.range is not None:
            dimension["range"] = list(axis.range)
        dimensions.append(dimension)
    line = dict(
        color=np.asarray(colour, dtype=float),
        colorscale="Viridis",
        showscale=True,
        colorbar=dict(title=dict(text=colour_title, side="right")),
    )
    longest = max((len(a.label) for a in axes), default=0)
    top = 60 + min(120, int(5.5 * longest * math.sin(math.radians(30))))
    fig = go.Figure(go.Parcoords(dimensions=dimensions, line=line, labelangle=-30, labelside="top"))
    fig.update_layout(margin=dict(l=80, r=90, t=top, b=30), height=460 + top)
    return fig
