"""Plotly figures for the dashboard, built by pure functions from arrays (testable without Streamlit)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative, sample_colorscale
from plotly.subplots import make_subplots

from ortholab.app.curves import Baseline, Curve

PALETTE = qualitative.Plotly
MARKERS_UP_TO = 60  # curves with this few points also show their points (validation every N steps)
BASELINE_DASHES = ("dash", "dot", "dashdot", "longdash")  # several tasks' baselines stay apart
RAW_OPACITY = 0.25  # the raw curve behind a smoothed one, faded as in TensorBoard / W&B


def color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def _layout(fig: go.Figure, **kwargs) -> go.Figure:
    fig.update_layout(margin=dict(l=10, r=10, t=40, b=10), legend=dict(orientation="h", y=-0.2), **kwargs)
    return fig


def curves_figure(
    curves: Sequence[Curve],
    *,
    x_title: str,
    y_title: str,
    log_y: bool = False,
    baselines: Sequence[Baseline] = (),
    title: str | None = None,
) -> go.Figure:
    """Overlaid runs of one metric: per run a trace named by its label (the smoothed line, with the raw
    curve faded behind it and named '<label> (raw)'), and each baseline as a dashed (dotted, ...) horizontal line
    across the plotted x range."""
    fig = go.Figure()
    for i, curve in enumerate(curves):
        smoothed = curve.smoothed is not None
        mode = "lines+markers" if len(curve.x) <= MARKERS_UP_TO else "lines"
        fig.add_trace(
            go.Scatter(
                x=curve.x,
                y=curve.y,
                mode=mode,
                name=f"{curve.label} (raw)" if smoothed else curve.label,
                legendgroup=curve.label,
                showlegend=not smoothed,
                opacity=RAW_OPACITY if smoothed else 1.0,
                line=dict(color=color(i), width=1 if smoothed else 2),
                marker=dict(size=4),
            )
        )
        if smoothed:
            fig.add_trace(
                go.Scatter(
                    x=curve.x, y=curve.smoothed, mode=mode, name=curve.label, legendgroup=curve.label,
                    line=dict(color=color(i), width=2), marker=dict(size=4),
                )
            )  # fmt: skip
    xs = [curve.x for curve in curves if len(curve.x)]
    if xs:
        low, high = float(min(x.min() for x in xs)), float(max(x.max() for x in xs))
        for i, baseline in enumerate(baselines):
            fig.add_trace(
                go.Scatter(
                    x=[low, high], y=[baseline.value, baseline.value], mode="lines", name=baseline.label,
                    line=dict(color="#555555", dash=BASELINE_DASHES[i % len(BASELINE_DASHES)], width=1.5),
                    hoverinfo="name+y",
                )
            )  # fmt: skip
    fig.update_xaxes(title_text=x_title)
    fig.update_yaxes(title_text=y_title, type="log" if log_y else "linear")
    return _layout(fig, title=title, hovermode="closest")


@dataclass(frozen=True)
class EigenPanel:
    """One run's eigenvalues at one snapshot."""

    title: str
    values: np.ndarray  # complex


def _unit_circle(points: int = 361) -> tuple[np.ndarray, np.ndarray]:
    theta = np.linspace(0.0, 2.0 * np.pi, points)
    return np.cos(theta), np.sin(theta)


def eigenvalue_figure(panels: Sequence[EigenPanel], *, columns: int = 3) -> go.Figure:
    """The complex plane per run, side by side: the unit circle and the eigenvalues, equal axes."""
    cols = max(1, min(columns, len(panels)))
    rows = max(1, -(-len(panels) // cols))
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[p.title for p in panels] or None)
    cx, cy = _unit_circle()
    for i, panel in enumerate(panels):
        row, col = divmod(i, cols)
        values = np.asarray(panel.values, dtype=complex)
        reach = max(1.15, 1.05 * float(np.abs(values).max(initial=0.0)))
        fig.add_trace(
            go.Scatter(
                x=cx, y=cy, mode="lines", name="unit circle", legendgroup="unit circle", showlegend=i == 0,
                line=dict(color="#999999", width=1), hoverinfo="skip",
            ),
            row=row + 1, col=col + 1,
        )  # fmt: skip
        fig.add_trace(
            go.Scatter(
                x=values.real, y=values.imag, mode="markers", name=panel.title, marker=dict(color=color(i), size=6),
                customdata=np.abs(values), hovertemplate="λ = %{x:.4f} %{y:+.4f}i<br>|λ| = %{customdata:.6f}",
            ),
            row=row + 1, col=col + 1,
        )  # fmt: skip
        axis = "" if i == 0 else str(i + 1)
        fig.update_xaxes(range=[-reach, reach], title_text="Re λ", constrain="domain", row=row + 1, col=col + 1)
        fig.update_yaxes(
            range=[-reach, reach], title_text="Im λ", scaleanchor=f"x{axis}", scaleratio=1, row=row + 1, col=col + 1
        )
    return _layout(fig, height=380 * rows, showlegend=False)


def lines_figure(
    series: Sequence[tuple[str, np.ndarray, np.ndarray]],
    *,
    x_title: str,
    y_title: str,
    log_y: bool = False,
    title: str | None = None,
    sequential: bool = False,
) -> go.Figure:
    """Plain overlaid lines (label, x, y). `sequential` colours them along a scale (e.g. snapshot steps,
    early = dark, late = bright) instead of one distinct colour per line."""
    fig = go.Figure()
    shades = sample_colorscale("Viridis", np.linspace(0, 0.9, len(series)).tolist()) if sequential and series else []
    for i, (label, x, y) in enumerate(series):
        mode = "lines+markers" if len(x) <= MARKERS_UP_TO else "lines"
        line_color = shades[i] if sequential else color(i)
        fig.add_trace(go.Scatter(x=x, y=y, mode=mode, name=label, line=dict(color=line_color), marker=dict(size=4)))
    fig.update_xaxes(title_text=x_title)
    fig.update_yaxes(title_text=y_title, type="log" if log_y else "linear")
    return _layout(fig, title=title)


def phases_figure(panels: Sequence[tuple[str, np.ndarray]], *, bins: int = 36) -> go.Figure:
    """Histograms of scuRNN's diagonal phases θ in [−π, π], overlaid per run."""
    fig = go.Figure()
    for i, (label, theta) in enumerate(panels):
        fig.add_trace(
            go.Histogram(
                x=np.asarray(theta, dtype=float), name=label, opacity=0.6, marker_color=color(i),
                xbins=dict(start=-np.pi, end=np.pi, size=2 * np.pi / bins),
            )
        )  # fmt: skip
    fig.update_xaxes(title_text="phase θ (rad)", range=[-np.pi, np.pi])
    fig.update_yaxes(title_text="count")
    return _layout(fig, barmode="overlay")


def heatmap_figure(
    z: np.ndarray, *, x_title: str, y_title: str, title: str | None = None, diverging: bool = True
) -> go.Figure:
    """A matrix as a heatmap, z[y, x]; diverging colours centred on 0 for signed data."""
    z = np.asarray(z, dtype=float)
    trace = go.Heatmap(
        z=z, x=np.arange(z.shape[1]), y=np.arange(z.shape[0]),
        colorscale="RdBu_r" if diverging else "Viridis", zmid=0.0 if diverging else None,
    )  # fmt: skip
    fig = go.Figure(trace)
    fig.update_xaxes(title_text=x_title)
    fig.update_yaxes(title_text=y_title)
    return _layout(fig, title=title)


def spectrogram_figure(times: np.ndarray, freqs: np.ndarray, power_db: np.ndarray, *, title: str) -> go.Figure:
    """A power spectrogram (dB) over time and frequency."""
    fig = go.Figure(go.Heatmap(x=times, y=freqs, z=power_db, colorscale="Magma", colorbar=dict(title="dB")))
    fig.update_xaxes(title_text="time (s)")
    fig.update_yaxes(title_text="frequency (Hz)")
    return _layout(fig, title=title, height=260)


def parallel_figure(frame: pd.DataFrame, *, color_column: str = "best") -> go.Figure:
    """Parallel coordinates over the numeric columns of `frame`, lines coloured by `color_column`."""
    dimensions = [dict(label=column, values=frame[column].to_numpy(dtype=float)) for column in frame.columns]
    colors = frame[color_column].to_numpy(dtype=float) if color_column in frame else None
    line = dict(color=colors, colorscale="Viridis", showscale=True) if colors is not None else {}
    return _layout(go.Figure(go.Parcoords(dimensions=dimensions, line=line)))
