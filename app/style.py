"""One look per run on every page and chart: a colour, a dash and a marker derived from the run's id alone, so
a run keeps them whatever else is selected and in whatever order. Pure, no Streamlit.

Colours cycle through plotly's Dark24 (24 colours readable on white); the marker cycles through 10 symbols
(10 and 24 share only the factor 2, so 120 consecutive ids differ in colour or marker), and the dash changes
with each pass through the colours (ids 0-23 solid, 24-47 dashed, ...): runs up to 144 apart never look alike.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from plotly.colors import hex_to_rgb, qualitative

PALETTE = tuple(qualitative.Dark24)
DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
SYMBOLS = ("circle", "square", "diamond", "triangle-up", "x", "cross", "star", "triangle-down", "pentagon", "hexagon")
MARKERS_SHOWN = 12  # markers drawn along a dense line (plotly's marker.maxdisplayed): enough to tell the symbol


@dataclass(frozen=True)
class RunStyle:
    color: str
    dash: str
    symbol: str

    def line(self, width: float = 2.0) -> dict:
        return dict(color=self.color, dash=self.dash, width=width)

    def marker(self, size: float = 6.0, every_point: bool = False) -> dict:
        extra = {} if every_point else dict(maxdisplayed=MARKERS_SHOWN)
        return dict(color=self.color, symbol=self.symbol, size=size, **extra)


def run_style(run_id: int) -> RunStyle:
    """The run's colour, dash and marker: the same on every page and chart."""
    return RunStyle(
        PALETTE[run_id % len(PALETTE)], DASHES[(run_id // len(PALETTE)) % len(DASHES)], SYMBOLS[run_id % len(SYMBOLS)]
    )


def group_style(label: str) -> RunStyle:
    """A group's look (a group of runs is no run): from a checksum of its label, stable across sessions."""
    return run_style(zlib.crc32(label.encode()))


def translucent(color: str, alpha: float) -> str:
    """'#2E91E5' -> 'rgba(46, 145, 229, alpha)', for bands behind a line of that colour."""
    r, g, b = hex_to_rgb(color)
    return f"rgba({r}, {g}, {b}, {alpha})"
