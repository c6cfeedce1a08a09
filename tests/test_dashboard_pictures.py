"""Issue 49, pictures a user can read, checked without a browser: log-axis tick labels that never touch (the
Gradients page), tables whose columns hold their text (the Papers page) and the browser's check of that run on a
stand-in grid (Node.js), and the paper figures' legends and axes (scoRNN Figure 1's keys, SRNN Table 4's zoom)."""

import json
import math
import shutil
import subprocess

import numpy as np
import pytest

from ortholab.app import export, table_fit
from ortholab.app.figures import Line, lines_figure
from ortholab.app.logaxis import AXIS_PX, LABEL_GAP_PX, PAD, log_ticks
from ortholab.db.published import PaperTable

# ---- the Gradients page's log axis -------------------------------------------------------------------------------

RANGES = [(3e-4, 3e-2), (6e-4, 2.5e-3), (1.1e-3, 9.5e-3), (2e-6, 9e-6), (1e-7, 4e-7), (1e-12, 1e12), (0.1234, 0.13)]
RANGES += [(1e-6, 3e-4), (3e-4, 0.5), (0.9, 1.1), (1e-8, 0.2), (0.02, 5.0), (1.0, 1.0001), (7e-5, 9.9e-5)]


def gaps_px(values, low, high, length_px):
    """Pixels between neighbouring ticks on a log axis over [low, high] (padded as log_axis_layout pads it)."""
    decades = max(math.log10(high) - math.log10(low), 1e-9) * (1 + 2 * PAD)
    return [math.log10(b / a) * length_px / decades for a, b in zip(values, values[1:])]


@pytest.mark.parametrize(("low", "high"), RANGES)
def test_log_tick_labels_stay_apart_and_read_their_values(low, high):
    values, texts = log_ticks(low, high)
    assert len(values) >= 2 or f"{low:.4g}" == f"{high:.4g}"  # two labels, unless they would read the same
    assert all(gap >= LABEL_GAP_PX for gap in gaps_px(values, low, high, AXIS_PX)), (values, texts)
    assert all(float(text) == value for value, text in zip(values, texts, strict=True))


def test_log_ticks_are_as_many_as_fit():
    # 0.0003 to 0.03 (a gradient-norm profile): 1, 2, 3 and 5 times each power of ten, not only the powers
    assert log_ticks(3e-4, 3e-2)[1] == ["0.0003", "0.0005", "0.001", "0.002", "0.003", "0.005", "0.01", "0.02", "0.03"]
    # a taller axis takes more of them, a shorter one fewer (axis ranges, not tolerances)
    one_decade, many_decades = (1.1e-3, 9.5e-3), (1e-8, 0.2)
    assert len(log_ticks(*one_decade, length_px=600)[0]) > len(log_ticks(*one_decade)[0])
    assert len(log_ticks(*many_decades, length_px=60)[0]) < len(log_ticks(*many_decades)[0])


def test_the_gradients_chart_labels_its_log_axis_without_overlap():
    """The page's chart (lines_figure, one line per snapshot step) as drawn: its plot area's height from the
    figure's own height and margins, every pair of tick labels at least LABEL_GAP_PX apart on it."""
    t = np.arange(120)
    lines = [
        Line("step 0", t, 0.02 * np.exp(-t / 400.0)),
        Line("step 300", t, np.r_[0.0012, np.full(118, 0.0009), 0.0003]),
    ]
    figure = lines_figure(lines, x_title="t", y_title="‖∂L/∂h‖", log_y=True, title="#1 scornn", sequential=True)
    axis = figure.layout.yaxis
    assert axis.type == "log" and axis.tickmode == "array" and axis.minor.ticks is None  # no unlabelled ladder
    height = (figure.layout.height or 450) - figure.layout.margin.t - figure.layout.margin.b
    assert height >= AXIS_PX
    per_decade = height / (axis.range[1] - axis.range[0])
    ticks = list(axis.tickvals)
    assert len(ticks) >= 3
    assert min(math.log10(b / a) * per_decade for a, b in zip(ticks, ticks[1:])) >= LABEL_GAP_PX
    assert list(axis.ticktext) == [f"{v:g}" for v in ticks]


# ---- tables that hold their text ---------------------------------------------------------------------------------

# Source Sans 3 at 14 px (Streamlit's dataframe font), as Chromium measures these strings
MEASURED_PX = {
    "nottingham-lstmcell_rtransformer_n160": 235.7,
    "cpu_checks.copying-T100_scornn_n190": 232.6,
    "beats baseline": 83.6,
    "ABCDEFGHIJKLMNOPQRSTUVWXYZ": 206.1,
    "0123456789": 69.6,
}


def test_text_widths_are_never_underestimated():
    for text, px in MEASURED_PX.items():
        assert px <= table_fit.text_px(text) <= 1.1 * px


PAPERS = {
    "row": ["copying-T100_scornn_n190", "nottingham-srnncell_rtransformer_n160", "adding-T200_lstm_n60"],
    "published": [
        "scoRNN/scuRNN figures at T=1000, 2000: the LSTM stays at the baseline; checked here at T=100 in 400 steps",
        "not reported: the S4D paper (NeurIPS 2022) has no adding-problem result, its tasks are sCIFAR, Speech "
        "Commands, Path-X and other long-range benchmarks",
        "2.27",
    ],
    "reproduced": ["at baseline (val/loss 0.644) ✗ (paper: below baseline)", "2.332", "not yet run"],
    "verdict": ["—", "above", "—"],
    "seeds": ["1/2 seeds end beyond the baseline (first beyond at steps 1200, 3400)", "1 seed", "—"],
    "status": ["finished", "running (silent 10.3 h: killed?)", "not yet run"],
    "run": ["7", "12", "—"],
}
WRAPPED = ("published", "reproduced", "seeds", "status")


def test_a_papers_table_fits_the_page_with_every_text_whole():
    fit = table_fit.fit_columns(PAPERS, 900, wrap=WRAPPED)
    assert fit.total <= 900 and fit.lines > 1
    for name, cells in PAPERS.items():
        inner = fit.widths[name] - 2 * table_fit.PADDING_PX
        assert table_fit.text_px(name) <= inner  # the header, on one line
        for text in cells:
            if name in WRAPPED:
                assert table_fit.wrapped_lines(text, inner) <= fit.lines, (name, text)
            else:
                assert table_fit.text_px(text) <= inner, (name, text)
    # the rows hold that many lines, and are tall enough for the grid to wrap at all
    needed = table_fit.FONT_PX + table_fit.LINE_PX * (fit.lines - 1) + table_fit.VERTICAL_PADDING_PX
    assert fit.row_height >= max(needed, table_fit.WRAPPING_ROW_PX)


def test_a_table_with_room_keeps_one_line_rows():
    fit = table_fit.fit_columns({"row": ["a", "bb"], "published": ["0.98"]}, 900, wrap=("published",))
    assert fit.lines == 1 and fit.row_height is None and fit.widths["row"] == table_fit.MIN_WIDTH_PX


def test_natural_widths_hold_formatted_numbers_and_headers():
    import pandas as pd

    frame = pd.DataFrame({"name": ["cpu_checks.copying-T100_scornn_n190", "x"], "best": [0.00129876, None]})
    widths = table_fit.natural_widths(frame, {"best": "%.4g"})
    assert widths["name"] >= MEASURED_PX["cpu_checks.copying-T100_scornn_n190"] + 16
    assert widths["best"] >= table_fit.text_px("0.001299") + 16
    config = table_fit.with_widths({"best": {"label": "best", "type_config": {}}}, widths)
    assert config["best"]["width"] == widths["best"] and config["name"] == {"width": widths["name"]}


# The browser's check, run by Node.js on a stand-in of Streamlit's grid: the React fiber of its canvas leading
# to the grid's props (columns with widths, cells, theme) and a canvas that measures 7 px a character.
STAND_IN = """
const [columns, rows, rowHeight, width, fiber, shrink, sideways] = JSON.parse(process.argv[1]);
const props = {columns: columns.map(([title, w]) => ({title, width: w})), rows: rows.length, rowHeight, width,
  theme: {cellHorizontalPadding: 8, cellVerticalPadding: 3, lineHeight: 1.4, baseFontFull: '14px Source Sans',
          headerFontFull: '14px Source Sans'},
  getCellContent: ([c, r]) => ({kind: 'text', displayData: rows[r][c], allowWrapping: rowHeight > 64})};
const canvas = fiber ? {'__reactFiber$x1': {memoizedProps: {}, return: {memoizedProps: props, return: null}}} : {};
const frame = {getBoundingClientRect: () => ({width, height: 300}), querySelector: () => canvas};
global.document = {
  querySelectorAll: () => [frame],
  createElement: () => ({getContext: () => ({font: '', measureText: text => ({width: 7 * text.length})})}),
};
console.log(JSON.stringify(new Function(process.argv[2])(shrink, sideways)));
"""


def run_check(columns, rows, *, row_height=35, width=600, fiber=True, shrink=1.0, sideways=False):
    node = shutil.which("node")
    if node is None:
        pytest.skip("needs Node.js to run the browser's check outside a browser")
    # the check reads its arguments as `arguments[0]`, `arguments[1]`: a function's body, called with them
    body = table_fit.CUT_CELLS_JS
    done = subprocess.run(
        [node, "-e", STAND_IN, json.dumps([columns, rows, row_height, width, fiber, shrink, sideways]), body],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)


def test_the_browser_check_finds_a_cut_column_and_only_then():
    rows = [["copying-T100_scornn_n190", "at baseline"], ["adding", "not yet run"]]  # 24 and 11 characters
    fitting = [["row", 24 * 7 + 16], ["got", 11 * 7 + 16]]
    assert run_check(fitting, rows) == {"tables": 1, "measured": 6, "found": [], "undrawn": 0}
    narrowed = [["row", 24 * 7 + 16], ["got", 5 * 7 + 16]]  # 'at ba' shows
    (found,) = run_check(narrowed, rows)["found"]
    assert "column 'got'" in found and "row 1 'at baseline' is cut" in found
    assert run_check(fitting, rows, shrink=0.5)["found"]  # the same table, every column half as wide
    # past the table's right edge: cut in the picture, unless the table is one meant to scroll sideways
    (found,) = run_check(fitting, rows, width=200)["found"]
    assert "column 'got': past the table's right edge" in found
    assert run_check(fitting, rows, width=200, sideways=True)["found"] == []
    assert "could not be read" in run_check(fitting, rows, fiber=False)["found"][0]


def test_the_browser_check_counts_wrapped_lines_against_the_row_height():
    text = "scoRNN Figure 1 (T=1000, 2000): drops below the baseline"  # 56 characters, 392 px
    columns = [["published", 150]]  # 134 px inside: 4 lines, 75.8 px with the padding
    assert run_check(columns, [[text]], row_height=80)["found"] == []
    (found,) = run_check(columns, [[text]], row_height=65)["found"]
    assert "row 1" in found


# ---- the paper figures (report --export) -------------------------------------------------------------------------


def curve(run, values, *, published=None, baseline=None, mode="min", panel="p", metric="val/loss", task="copying"):
    steps = list(range(100, 100 * (len(values) + 1), 100))
    return dict(
        label=f"row (run {run}, {metric})",
        metric=metric,
        run=run,
        steps=steps,
        values=list(values),
        baseline=baseline,
        published=published,
        mode=mode,
        scale=1.0,
        panel=panel,
        task=task,
    )


def table(name):
    return PaperTable(id=name, paper="p", table=name, title=name, metric="val/loss", mode="min", scale=1.0)


def legend_keys(ax):
    title = ax.get_legend().get_title().get_text()
    return [k for k in title.split("; ") if k]


def drawn_in_view(ax, style):
    """The horizontal lines of this matplotlib line style inside the panel's y range."""
    low, high = ax.get_ylim()
    return [
        line
        for line in ax.get_lines()
        if line.get_linestyle() == style and len(set(line.get_ydata())) == 1 and low <= line.get_ydata()[0] <= high
    ]


def test_figure_1_legend_names_only_the_lines_it_draws():
    import matplotlib.pyplot as plt

    losses = np.geomspace(0.2, 1e-4, 40)
    curves = [  # copying: outcomes, no published number; the baseline dotted
        curve(1, losses, baseline=0.0204, panel="T=1000 · val/loss"),
        curve(3, np.full(40, 0.0204), baseline=0.0204, panel="T=1000 · val/loss"),
        curve(4, losses, baseline=0.0103, panel="T=2000 · val/loss"),
    ]
    fig = export._matplotlib_figure(table("Figure 1"), curves)
    try:
        for ax in [a for a in fig.axes if a.get_visible()]:
            keys = legend_keys(ax)
            assert keys == ["dotted: task baseline"]  # no dash-dot published line is drawn, none is named
            assert drawn_in_view(ax, ":") and not drawn_in_view(ax, "-.")
    finally:
        plt.close(fig)


def test_rows_of_two_tasks_at_one_setting_get_a_panel_each_named_by_its_task(tmp_path):
    """Walk-through 9: cpu_checks' copying (cross-entropy near 1.7) and adding (MSE near 0.16) rows at T = 200 shared
    one 'T=200 · val/loss' axis with both baselines; each task now has its panel, in both figures."""
    import matplotlib.pyplot as plt

    curves = [
        curve(1, np.linspace(1.9, 1.7, 40), baseline=0.0935, panel="T=200 · val/loss"),
        curve(2, np.linspace(0.2, 0.16, 40), baseline=0.1667, panel="T=200 · val/loss", task="adding"),
        curve(3, np.linspace(1.9, 1.2, 40), baseline=0.0935, panel="T=200 · val/loss"),
    ]
    assert {name: [c["run"] for c in group] for name, group in export._panels(curves).items()} == {
        "copying · T=200 · val/loss": [1, 3],
        "adding · T=200 · val/loss": [2],
    }
    fig = export._matplotlib_figure(table("CPU checks"), curves)
    try:
        titles = [ax.get_title() for ax in fig.axes if ax.get_visible()]
        assert titles == ["copying · T=200 · val/loss", "adding · T=200 · val/loss"]
    finally:
        plt.close(fig)
    export._html(tmp_path / "f.html", table("CPU checks"), curves, plotly_js="cdn")
    html = (tmp_path / "f.html").read_text().replace("\\u00b7", "·").replace("\\u002f", "/")  # JSON escapes
    assert "copying · T=200 · val/loss" in html and "adding · T=200 · val/loss" in html
    one_task = [c for c in curves if c["task"] == "copying"]  # a table of one task keeps its titles
    assert list(export._panels(one_task)) == ["T=200 · val/loss"]


def test_two_runs_sharing_a_colour_in_one_panel_differ_in_dash_in_both_figures(tmp_path):
    """Runs 5 and 29 share a colour (24 apart, app/style.py); the dashboard tells them apart by the dash, and so
    must the exported PNG and HTML (comparison_2026 drew S4D's run 5 and the EURNN's run 29 alike)."""
    import matplotlib.pyplot as plt

    from ortholab.app.style import run_style

    assert run_style(5).color == run_style(29).color
    losses = np.geomspace(0.2, 1e-4, 40)
    curves = [curve(5, losses, panel="T=1000 · val/loss"), curve(29, losses * 2, panel="T=1000 · val/loss")]
    fig = export._matplotlib_figure(table("Figure 1"), curves)
    try:
        ax = fig.axes[0]
        styles = {line.get_label(): line.get_linestyle() for line in ax.get_lines() if len(line.get_xdata()) == 40}
        assert styles == {curves[0]["label"]: "-", curves[1]["label"]: "--"}
    finally:
        plt.close(fig)
    export._html(tmp_path / "f.html", table("Figure 1"), curves, plotly_js="cdn")
    html = (tmp_path / "f.html").read_text()
    assert '"dash":"solid"' in html and '"dash":"dash"' in html


def srnn_table_4():
    nll = lambda end: list(np.r_[np.linspace(5.0, end + 0.4, 50), np.linspace(end + 0.1, end, 50)])  # noqa: E731
    return [
        curve(3, nll(2.262), published=2.27, baseline=10.01, panel="SRNN cells · val/nll", metric="val/nll"),
        curve(5, nll(2.59), published=2.46, baseline=10.01, panel="LSTM cells · val/nll", metric="val/nll"),
    ]


def test_srnn_table_4_zooms_in_on_the_gaps_to_the_published_values():
    curves = srnn_table_4()
    for c in curves:
        low, high = export._zoom([c])
        gap = abs(c["values"][-1] - c["published"])
        assert low < min(c["published"], c["values"][-1]) and max(c["published"], c["values"][-1]) < high
        assert gap / (high - low) >= 0.05  # 0.008 of 7.8 on the full axis: 0.1 %
        assert high < 10.01  # the baseline is off the zoomed axis
    # accuracies near their published value (scoRNN Table 1) and log-axis losses keep their full range
    accuracy = curve(2, np.linspace(0.86, 0.94, 50), published=0.943, mode="max", metric="test/acc")
    assert export._zoom([accuracy]) is None
    assert export._zoom([curve(1, np.geomspace(0.2, 1e-4, 40), baseline=0.0204)]) is None


def test_srnn_table_4_legend_says_where_the_baseline_went():
    import matplotlib.pyplot as plt

    fig = export._matplotlib_figure(table("Table 4"), srnn_table_4())
    try:
        for ax in fig.axes:
            keys = legend_keys(ax)
            assert keys == ["task baseline 10 off the zoomed axis", "dash-dot: published"]
            assert drawn_in_view(ax, "-.") and not drawn_in_view(ax, ":")
            low, high = ax.get_ylim()
            assert high - low < 1.0  # not 2-10
    finally:
        plt.close(fig)
