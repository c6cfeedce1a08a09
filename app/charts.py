"""Drawing a figure on a page, downloadable at publication size, and the controls that stay in step with it.

Every chart goes through `show`: plotly's camera button then saves the chart as PNG or SVG (the sidebar's
'Chart downloads' choice, remembered in the URL) at 7 × 4.2 inches: a 700 px wide layout, so 12 px text
prints at about 8.5 pt; PNGs at 3× (2100 px wide, 300 dpi at 7 in), SVGs as vectors.
"""

from __future__ import annotations

import re

import plotly.graph_objects as go
import streamlit as st

IMAGE_FORMAT = "image_format"  # session-state key and URL query parameter of the sidebar's choice
IMAGE_FORMATS = ("PNG", "SVG")
EXPORT_WIDTH = 700  # px of layout: 7 in at 100 px per inch
EXPORT_HEIGHT = 420
PNG_SCALE = 3  # 2100 px wide: 300 dpi at 7 in


def image_format_control() -> str:
    """The sidebar's download format (PNG or SVG), remembered in the URL and for the session."""
    chosen = st.sidebar.segmented_control(
        "Chart downloads",
        IMAGE_FORMATS,
        default=IMAGE_FORMATS[0],
        key=IMAGE_FORMAT,
        bind="query-params",
        persist_state="session",
        help="The format of every chart's camera button (in its toolbar), saved at "
        f"publication size: {EXPORT_WIDTH / 100:g} in wide; PNG at {PNG_SCALE * 100} dpi, SVG as vectors.",
    )
    return chosen or IMAGE_FORMATS[0]


def export_config(key: str, height: int | None = None) -> dict:
    """plotly's config: the camera button saves `<key>.png` or `.svg` at publication size."""
    fmt = (st.session_state.get(IMAGE_FORMAT) or IMAGE_FORMATS[0]).lower()
    options = dict(
        format=fmt,
        filename=re.sub(r"[^\w.-]+", "_", key),
        width=EXPORT_WIDTH,
        height=height or EXPORT_HEIGHT,
        scale=PNG_SCALE if fmt == "png" else 1,
    )
    return dict(toImageButtonOptions=options, displaylogo=False)


def show(figure: go.Figure, key: str, *, export_height: int | None = None) -> None:
    """Draw `figure` full width under the unique `key`, downloadable as described above."""
    st.plotly_chart(figure, key=key, config=export_config(key, export_height))
