"""The dashboard served for real (`ortholab dashboard`, which execs into the Streamlit server) and driven by
Debian's headless Chromium through Selenium: every page renders without a Streamlit exception, the Runs
table shows the runs, chart pages draw plotly charts, the sidebar navigation carries the selection, and a
screenshot of each page is saved (under $ORTHOLAB_TEST_ARTIFACTS/dashboard when set, else tmp_path).

Issue 25's pictures, checked on what the browser drew (plotly's own data and the SVG): controls and charts in
step through any sequence of selections, every scuRNN phase in the histogram, one colour per run on two charts
and two pages, exact zeros on a log axis, grouping bands, and the Runs page's filter expression and columns in
the URL. Issue 49's: no table in a screenshot cuts a header or a cell, or a column at its right edge (the Runs and
Compare tables, wider than the page by design, scroll sideways), and no label is cut (app/table_fit.py's check,
shown to see a cut column)."""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from dashboard_store import REPO, add_hand_written_runs, add_seed_runs, registered_pages

from ortholab.app.table_fit import cut_cells, cut_labels
from ortholab.db import Store

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    not (CHROMIUM and CHROMEDRIVER),
    reason="Debian's chromium and chromium-driver are not installed (apt-get install -y chromium chromium-driver)",
)
# the flags this machine's closed network needs (no background connections, no sandbox as root)
CHROMIUM_FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1600,1000",
]
CHARTS = {  # whether each page registered in app/main.py draws a plotly chart for the chosen runs
    "runs": False,
    "curves": True,
    "eigenvalues": True,
    "gradients": True,
    "audio": True,
    "compare": False,  # parallel coordinates need numeric params in every selected run
    "papers": False,
    "artifacts": True,  # scornn-snapshots' own kinds: the first, a matrix, as a heatmap
}
SIDEWAYS = {"", "compare"}  # pages whose tables are wider than the page by design: one column per field / per run


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The dashboard on a free local port over a store of hand-written runs; yields (base url, run ids)."""
    root = tmp_path_factory.mktemp("browser")
    url = f"sqlite:///{root / 'runs.db'}"
    store = Store(url)
    seeds = add_seed_runs(store)  # first: the hand-written runs are the newest, the Runs table's first rows
    ids = {**seeds, **add_hand_written_runs(store)}
    port = free_port()
    log = open(root / "server.log", "w")
    process = subprocess.Popen(  # the command execs into the streamlit server: this pid is the server
        [
            sys.executable,
            "-c",
            "from ortholab.cli.main import main; main()",
            "dashboard",
            "--db",
            url,
            "--port",
            str(port),
        ],
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{base}/_stcore/health", timeout=2) as response:
                    if response.read() == b"ok":
                        break
            except OSError:
                pass
            assert process.poll() is None, (root / "server.log").read_text()
            assert time.monotonic() < deadline, "no dashboard after 60 s: " + (root / "server.log").read_text()
            time.sleep(0.3)
        yield base, ids, set(ids) - set(seeds)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)  # the server's own process group (start_new_session)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        log.close()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in [*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


@pytest.fixture
def shots(tmp_path):
    folder = (
        Path(os.environ["ORTHOLAB_TEST_ARTIFACTS"]) / "dashboard"
        if os.environ.get("ORTHOLAB_TEST_ARTIFACTS")
        else tmp_path
    )
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def wait_rendered(driver, title, *, charts=False, timeout=60.0):
    """Wait until the page's title is up, the script has finished (see `settle`) and, when asked, a plotly
    chart has been drawn; then let the last elements paint before a screenshot."""
    settle(driver, title, charts=1 if charts else 0, timeout=timeout)
    time.sleep(0.5)


def table_cells(driver, timeout=20.0):
    """The texts of the Runs table's cells (the grid is a canvas; its accessible cells carry the text)."""
    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + timeout
    while True:
        cells = driver.find_elements(By.CSS_SELECTOR, '[data-testid="stDataFrame"] [role="gridcell"]')
        if cells or time.monotonic() > deadline:
            return {cell.get_attribute("textContent") for cell in cells}
        time.sleep(0.25)


def screenshot(driver, folder, name):
    path = folder / f"{name}.png"
    assert driver.save_screenshot(str(path))
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 10_000  # a real rendered page, not an empty image
    return path


def test_every_page_renders_in_chromium(server, browser, shots):
    from selenium.webdriver.common.by import By

    base, ids, hand_written = server
    chosen = "&".join(f"run={ids[n]}" for n in ("scornn-snapshots", "speech", "lstm-adding", "half-written", "crashed"))
    pages = registered_pages()
    assert {p["name"] for p in pages} == set(CHARTS), "a page app/main.py registers needs its line in CHARTS here"
    for path, title, charts in ((p["url"], p["title"], CHARTS[p["name"]]) for p in pages):
        browser.get(f"{base}/{path}?{chosen}")
        wait_rendered(browser, title, charts=charts)
        main = browser.find_element(By.CSS_SELECTOR, '[data-testid="stMain"]').text
        assert len(main.strip()) > len(title) + 20, f"page {title!r} is empty"
        if path == "":  # the grid draws the rows in view: the newest ten
            assert hand_written <= table_cells(browser), (
                f"run names missing from the table: {hand_written - table_cells(browser)}"
            )
        cells = cut_cells(browser, sideways=path in SIDEWAYS)
        assert not cells["found"], f"{title}: text cut in a table: {cells['found']}"
        if path in ("", "papers"):  # the check read the page's table
            assert cells["tables"] >= 1 and cells["measured"] > 20, cells
        assert not cut_labels(browser), f"{title}: labels cut: {cut_labels(browser)}"
        assert not toolbar_overlaps(browser), f"{title}: plotly's toolbar covers {toolbar_overlaps(browser)}"
        assert not grown_margins(browser), f"{title}: plotly widened these charts' margins: {grown_margins(browser)}"
        screenshot(browser, shots, title.lower().replace(" ", "-"))


def test_the_table_check_sees_cut_columns(server, browser):
    """The check above, on tables that do cut: the Papers table's real cells measured as if each column were 40 %
    narrower, and the Runs table (20 columns) run past the page's edge when it is not allowed to scroll."""
    base, ids, _ = server
    browser.get(f"{base}/papers")
    wait_rendered(browser, "Papers")
    assert cut_cells(browser)["found"] == []
    narrowed = cut_cells(browser, shrink=0.6)["found"]
    assert narrowed and all(" is cut" in found for found in narrowed), narrowed
    browser.get(f"{base}/?run={ids['lstm-adding']}")
    wait_rendered(browser, "Runs")
    assert cut_cells(browser, sideways=True)["found"] == []
    past = cut_cells(browser)["found"]
    assert past and all("past the table's right edge" in found for found in past), past


GROWN_JS = """
return [...document.querySelectorAll('.js-plotly-plot')].filter(gd => gd._fullLayout).map(gd => {
  const m = gd._fullLayout.margin, s = gd._fullLayout._size;
  const grown = ['l', 'r', 't', 'b'].filter(k => s[k] > m[k] + 0.5).map(k => `${k} ${m[k]} -> ${Math.round(s[k])}`);
  return grown.length ? `${(gd._fullLayout.title || {}).text || ''}: ${grown.join(', ')}` : null;
}).filter(x => x);
"""


def grown_margins(driver):
    """Charts whose margins plotly's automargin had to widen (tick labels, titles, legend or colour bar did not
    fit), which makes plotly draw the chart a second time: app/figures.py sets margins that hold them."""
    return driver.execute_script(GROWN_JS)


OVERLAPS_JS = """
const hit = (a, b) => a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
const out = [];
document.querySelectorAll('.js-plotly-plot').forEach(gd => {
  const bar = gd.querySelector('.modebar');
  if (!bar) return;
  const box = bar.getBoundingClientRect();
  gd.querySelectorAll('.gtitle, .annotation-text').forEach(t => {
    if (hit(box, t.getBoundingClientRect())) out.push(t.textContent);
  });
});
return out;
"""


def toolbar_overlaps(driver):
    """Chart and panel titles that plotly's toolbar (its modebar, at the top right) lies over."""
    return driver.execute_script(OVERLAPS_JS)


ROW_PX = 35  # Streamlit's data grid: header and rows 35 px each


def sidebar_selection(driver):
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, '[data-testid="stSidebar"] [data-testid="stMultiSelect"]').text


def test_ticking_a_table_row_selects_the_run_for_the_other_pages(server, browser, shots):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    base, ids, _ = server
    browser.get(f"{base}/?run={ids['lstm-adding']}")
    wait_rendered(browser, "Runs")
    assert table_cells(browser) and "scurnn-phases" not in sidebar_selection(browser)
    # tick the checkbox of the scurnn-phases row (rows are newest first)
    row = sorted(ids.values(), reverse=True).index(ids["scurnn-phases"])
    canvas = browser.find_element(By.CSS_SELECTOR, '[data-testid="stDataFrame"] canvas')
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", canvas)  # offsets count from the
    width, height = canvas.rect["width"], canvas.rect["height"]  # centre of the part in view: all of it
    ActionChains(browser).move_to_element_with_offset(
        canvas, -width / 2 + ROW_PX / 2, -height / 2 + ROW_PX * (row + 1) + ROW_PX / 2
    ).click().perform()
    deadline = time.monotonic() + 20
    while "scurnn-phases" not in sidebar_selection(browser):
        assert time.monotonic() < deadline, f"ticking the row did not select the run: {sidebar_selection(browser)!r}"
        time.sleep(0.25)
    assert f"run={ids['scurnn-phases']}" in browser.current_url and f"run={ids['lstm-adding']}" in browser.current_url
    screenshot(browser, shots, "runs-after-tick")

    # the sidebar navigation keeps the session's selection: both runs' eigenvalue notes and panels show
    browser.find_element(By.CSS_SELECTOR, '[data-testid="stSidebarNav"] a[href$="/eigenvalues"]').click()
    wait_rendered(browser, "Eigenvalues", charts=True)
    titles = {e.text for e in browser.find_elements(By.CSS_SELECTOR, ".js-plotly-plot .annotation-text")}
    assert f"#{ids['scurnn-phases']} scurnn-phases · step 0 · 0 near −1" in titles
    assert (
        "the lstm family has no single recurrent matrix"
        in browser.find_element(By.CSS_SELECTOR, '[data-testid="stMain"]').text
    )

    browser.find_element(By.CSS_SELECTOR, '[data-testid="stSidebarNav"] a[href$="/curves"]').click()
    wait_rendered(browser, "Curves", charts=True)
    legend = {e.text for e in browser.find_elements(By.CSS_SELECTOR, ".js-plotly-plot .legendtext")}
    assert {f"#{ids['lstm-adding']} lstm-adding", f"#{ids['scurnn-phases']} scurnn-phases"} <= legend
    assert {"baseline (adding) 0.1667", "baseline (copying) 0.1733"} <= legend
    screenshot(browser, shots, "curves-after-navigation")


# ---- issue 25: what the browser draws ------------------------------------------------------------------------


def settle(driver, title, *, charts=0, timeout=60.0):
    """Wait until the page titled `title` has finished its run (no running indicator, nothing stale) with at
    least `charts` plotly charts drawn, quiet for a second (Streamlit shows its running indicator only after a
    moment, so a shorter quiet can fall before the run shows); fail on a Streamlit exception."""
    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + timeout
    quiet = None
    while time.monotonic() < deadline:
        exceptions = driver.find_elements(By.CSS_SELECTOR, '[data-testid="stException"]')
        assert not exceptions, exceptions[0].text
        state = driver.execute_script(
            "return [document.querySelector('[data-testid=\"stStatusWidget\"]') !== null"
            " || document.querySelector('[data-stale=\"true\"]') !== null,"
            " document.querySelectorAll('.js-plotly-plot .main-svg').length,"
            " [...document.querySelectorAll('h1')].map(h => h.textContent)]"
        )
        busy, drawn, titles = state
        if not busy and drawn >= charts and any(title in t for t in titles):
            quiet = quiet or time.monotonic()
            if time.monotonic() - quiet > 1.0:
                return
        else:
            quiet = None
        time.sleep(0.1)
    pytest.fail(f"page {title!r} did not settle: busy {busy}, charts {drawn} (wanted {charts}), headings {titles}")


def widget(driver, testid, label):
    from selenium.webdriver.common.by import By

    for element in driver.find_elements(By.CSS_SELECTOR, f'[data-testid="{testid}"]'):
        labels = element.find_elements(By.CSS_SELECTOR, '[data-testid="stWidgetLabel"]')
        if labels and labels[0].text.strip() == label:
            return element
    pytest.fail(f"no {testid} labelled {label!r}")


def chips(driver, label):
    from selenium.webdriver.common.by import By

    return [
        s.get_attribute("title")
        for s in widget(driver, "stMultiSelect", label).find_elements(By.CSS_SELECTOR, "[data-tag] span[title]")
    ]


def remove_chip(driver, label, value):
    from selenium.webdriver.common.by import By

    widget(driver, "stMultiSelect", label).find_element(By.CSS_SELECTOR, f'button[aria-label="Remove {value}"]').click()


def add_chip(driver, label, value):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    field = widget(driver, "stMultiSelect", label).find_element(By.CSS_SELECTOR, 'input[role="combobox"]')
    field.click()
    field.send_keys(value)
    click_option(driver, label, value)
    field.send_keys(Keys.ESCAPE)


def click_option(driver, label, value):
    """Click the open list's option `value` of the widget `label` once it shows (10 s at most)."""
    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        options = [o for o in driver.find_elements(By.CSS_SELECTOR, '[role="option"]') if o.text.strip() == value]
        if options:
            options[0].click()
            return
        time.sleep(0.1)
    pytest.fail(f"{label!r} offers no option {value!r}")


def toggle_state(driver, label):
    from selenium.webdriver.common.by import By

    return widget(driver, "stCheckbox", label).find_element(By.CSS_SELECTOR, "input").is_selected()


def click_toggle(driver, label):
    from selenium.webdriver.common.by import By

    widget(driver, "stCheckbox", label).find_element(By.CSS_SELECTOR, "label").click()


def slider_field(driver, label):
    from selenium.webdriver.common.by import By

    return widget(driver, "stSlider", label).find_element(By.CSS_SELECTOR, 'input[type="range"]')


PLOTS_JS = """
return [...document.querySelectorAll('.js-plotly-plot')].map(gd => ({
  title: ((gd._fullLayout.title || {}).text || '').replace(/<[^>]+>/g, ''),
  meta: gd._fullLayout.meta || {}, ytype: gd._fullLayout.yaxis.type, xrange: gd._fullLayout.xaxis.range,
  height: gd._fullLayout.yaxis._length,
  fills: [...gd.querySelectorAll('path.js-fill')].filter(p => (p.getAttribute('d') || '').length > 2).length,
  traces: gd._fullData.map((t, i) => {
    const g = gd.querySelector('.trace' + t.uid);
    const line = g && g.querySelector('path.js-line'), point = g && g.querySelector('path.point');
    return {name: t.name, type: t.type, y: t.y ? Array.from(t.y) : null, x: t.x ? Array.from(t.x) : null,
            stroke: line ? getComputedStyle(line).stroke : null, d: line ? line.getAttribute('d') : null,
            fill: point ? getComputedStyle(point).fill : null, points: g ? g.querySelectorAll('path.point').length : 0,
            bins: t.type === 'histogram' ? gd.calcdata[i].map(c => [c.p, c.s]) : null};
  })}));
"""


def plots(driver):
    return driver.execute_script(PLOTS_JS)


def rgb(color):
    from plotly.colors import hex_to_rgb

    return "rgb({}, {}, {})".format(*hex_to_rgb(color))


def curves_controls(driver):
    """(metrics, log scale, smoothing on) as the Curves widgets show them, and as the charts are drawn: their
    titles, whether their y axes are logarithmic, whether a smoothed line hides a faded raw one (the chosen
    runs' train/loss has 125 points, enough to be smoothed)."""
    shown = (
        chips(driver, "Metrics (one chart each)"),
        toggle_state(driver, "Log scale"),
        float(slider_field(driver, "Smoothing").get_attribute("value")) > 0,
    )
    drawn = plots(driver)
    return shown, (
        [p["title"] for p in drawn],
        {p["ytype"] == "log" for p in drawn},
        any(t["name"].endswith(" (raw)") for p in drawn for t in p["traces"]),
    )


def test_curves_controls_and_charts_agree_through_any_selection(server, browser):
    from selenium.webdriver.common.keys import Keys

    base, ids, _ = server
    lstm, other = f"#{ids['lstm-adding']} lstm-adding", f"#{ids['scornn-snapshots']} scornn-snapshots"
    browser.get(f"{base}/curves?run={ids['lstm-adding']}")
    settle(browser, "Curves", charts=1)
    add_chip(browser, "Metrics (one chart each)", "train/loss")
    settle(browser, "Curves", charts=2)
    click_toggle(browser, "Log scale")
    settle(browser, "Curves", charts=2)
    field = slider_field(browser, "Smoothing")
    browser.execute_script("arguments[0].focus()", field)
    field.send_keys(Keys.HOME)
    settle(browser, "Curves", charts=2)
    chosen = (["val/loss", "train/loss"], True, False)

    def agree():
        shown, drawn = curves_controls(browser)
        assert shown == chosen and drawn == (chosen[0], {chosen[1]}, chosen[2]), (shown, drawn)

    agree()
    remove_chip(browser, "Selected runs", lstm)  # no run: the page stops before drawing its controls
    settle(browser, "Curves")
    assert "No runs selected" in browser.find_element(By_MAIN[0], By_MAIN[1]).text
    add_chip(browser, "Selected runs", other)  # another run, without train/loss
    settle(browser, "Curves", charts=2)
    agree()
    add_chip(browser, "Selected runs", lstm)
    settle(browser, "Curves", charts=2)
    remove_chip(browser, "Selected runs", other)
    settle(browser, "Curves", charts=2)
    agree()


By_MAIN = ("css selector", '[data-testid="stMain"]')


def test_the_phase_histogram_shows_every_scurnn_phase(server, browser):
    base, ids, _ = server
    browser.get(f"{base}/eigenvalues?run={ids['scurnn-phases']}")
    settle(browser, "Eigenvalues", charts=3)
    (histogram,) = [t for p in plots(browser) for t in p["traces"] if t["type"] == "histogram"]
    plot = next(p for p in plots(browser) if any(t["type"] == "histogram" for t in p["traces"]))
    low, high = plot["xrange"]
    shown = sum(count for centre, count in histogram["bins"] if low <= centre <= high)
    assert len(histogram["x"]) == 116 and shown == 116  # the 58 phases above pi included
    assert sum(1 for theta in histogram["x"] if theta > 3.14159) == 58


def test_a_run_keeps_one_colour_on_two_charts_and_two_pages(server, browser):
    from ortholab.app.style import run_style

    base, ids, _ = server
    a, b = ids["scornn-snapshots"], ids["srnn-zero-drift"]
    names = {a: f"#{a} scornn-snapshots", b: f"#{b} srnn-zero-drift"}
    browser.get(f"{base}/curves?run={a}&run={b}")
    settle(browser, "Curves", charts=1)
    add_chip(browser, "Metrics (one chart each)", "analysis/orthogonality")
    settle(browser, "Curves", charts=2)
    colours = {a: set(), b: set()}
    for plot in plots(browser):
        for trace in plot["traces"]:
            for run, name in names.items():
                if trace["name"] == name:
                    colours[run].add(trace["stroke"])
    browser.get(f"{base}/eigenvalues?run={b}&run={a}")  # the other order, another page
    settle(browser, "Eigenvalues", charts=3)
    for plot in plots(browser):
        for trace in plot["traces"]:
            for run, name in names.items():
                if trace["name"] == name or trace["name"].startswith(name + " · "):
                    colours[run].add(trace["stroke"] or trace["fill"])
    assert colours == {a: {rgb(run_style(a).color)}, b: {rgb(run_style(b).color)}}
    assert colours[a] != colours[b]


def line_points(d):
    """The (x, y) vertices of an SVG path drawn by plotly ('M1,2L3,4...')."""
    numbers = [float(v) for v in re.findall(r"-?\d+(?:\.\d+)?", d or "")]
    return list(zip(numbers[::2], numbers[1::2], strict=True))


def drawn_inside(plot, trace) -> bool:
    """The trace's three points are drawn as markers and its line lies inside the plot area."""
    vertices = line_points(trace["d"])
    return trace["points"] == 3 and len(vertices) >= 2 and all(0 <= y <= plot["height"] for _, y in vertices)


def test_exact_zeros_are_drawn_on_a_log_axis(server, browser):
    base, ids, _ = server
    zero, drift = f"#{ids['srnn-zero-drift']} srnn-zero-drift", f"#{ids['scornn-snapshots']} scornn-snapshots"
    browser.get(f"{base}/eigenvalues?run={ids['srnn-zero-drift']}&run={ids['scornn-snapshots']}")
    settle(browser, "Eigenvalues", charts=3)
    plot = next(p for p in plots(browser) if "Figure 4" in p["title"])
    traces = {t["name"]: t for t in plot["traces"]}
    assert plot["ytype"] == "log"  # not flattened to a linear axis by the zero run
    assert drawn_inside(plot, traces[zero]) and drawn_inside(plot, traces[drift])
    assert "drawn at the floor" in browser.find_element(*By_MAIN).text

    browser.get(f"{base}/curves?run={ids['srnn-zero-drift']}&run={ids['scornn-snapshots']}")
    settle(browser, "Curves", charts=1)
    add_chip(browser, "Metrics (one chart each)", "analysis/orthogonality")
    settle(browser, "Curves", charts=2)
    click_toggle(browser, "Log scale")
    settle(browser, "Curves", charts=2)
    plot = next(p for p in plots(browser) if p["title"] == "analysis/orthogonality")
    traces = {t["name"]: t for t in plot["traces"]}
    assert plot["ytype"] == "log" and drawn_inside(plot, traces[zero])  # not silently gone
    assert "3 values ≤ 0" in browser.find_element(*By_MAIN).text


def test_grouped_seeds_are_drawn_as_mean_lines_with_bands(server, browser):
    from dashboard_store import SEED_STEPS, seed_loss

    base, ids, _ = server
    seeds = "&".join(
        f"run={ids[n]}" for n in ("scornn-seed1", "scornn-seed2", "scornn-seed3", "lstm-seed1", "lstm-seed2")
    )
    browser.get(f"{base}/curves?{seeds}")
    settle(browser, "Curves", charts=1)
    add_chip(browser, "Group runs by", "family")
    deadline = time.monotonic() + 30
    while not plots(browser) or plots(browser)[0]["fills"] < 2:
        assert time.monotonic() < deadline, plots(browser)
        time.sleep(0.2)
    settle(browser, "Curves", charts=1)
    (plot,) = plots(browser)
    assert plot["fills"] == 2  # one band per group, drawn
    traces = {t["name"]: t for t in plot["traces"]}
    mean = traces["family=lstm (mean of 2 runs)"]
    assert mean["y"] == pytest.approx([(seed_loss("lstm", 1, s) + seed_loss("lstm", 2, s)) / 2 for s in SEED_STEPS])
    assert len(line_points(mean["d"])) >= 2 and all(0 <= y <= plot["height"] for _, y in line_points(mean["d"]))
    assert "family=scornn (mean of 3 runs)" in traces and not any("seed" in name for name in traces)


def test_filter_expression_and_columns_on_the_runs_page(server, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    base, ids, _ = server
    browser.get(f"{base}/")
    settle(browser, "Runs")
    field = widget(browser, "stTextInput", "Filter expression").find_element(By.CSS_SELECTOR, "input")
    field.send_keys('family = "scornn" and hidden_size > 16 and val/loss < 0.075', Keys.ENTER)
    settle(browser, "Runs")
    deadline = time.monotonic() + 20
    while "2 of 12 runs match" not in browser.find_element(*By_MAIN).text:
        assert time.monotonic() < deadline, browser.find_element(*By_MAIN).text[:600]
        time.sleep(0.2)
    names = table_cells(browser)
    assert {"scornn-seed1", "scornn-seed2"} <= names and not names & {"scornn-seed3", "scornn-snapshots"}
    assert "where=" in browser.current_url  # the expression is part of the view's address

    add_chip(browser, "Columns", "val/loss")
    settle(browser, "Runs")
    assert re.search(r"cols=val(%2F|/)loss(&|$)", browser.current_url), browser.current_url

    browser.get(f"{base}/?cols=val/loss&sort=val/loss&desc=false&where=steps%20%3E%3D%20300")  # a shared view
    settle(browser, "Runs")
    assert chips(browser, "Columns") == ["val/loss"] and "where=" in browser.current_url
    assert {"scornn-seed1", "lstm-seed1"} <= table_cells(browser)
    browser.get(f"{base}/?cols=model.hidden_size,val/loss")  # as `runs --columns` takes them (walk-through 9)
    settle(browser, "Runs")
    assert chips(browser, "Columns") == ["model.hidden_size", "val/loss"], chips(browser, "Columns")

    field = widget(browser, "stTextInput", "Filter expression").find_element(By.CSS_SELECTOR, "input")
    field.send_keys(Keys.CONTROL, "a")
    field.send_keys("family = scornn", Keys.ENTER)
    settle(browser, "Runs")
    alerts = [a.text for a in browser.find_elements(By.CSS_SELECTOR, '[data-testid="stAlert"]')]
    assert any(
        "Filter expression not applied: no run field, param or metric is called 'scornn'" in a for a in alerts
    ), alerts


def selectbox_field(driver, label):
    from selenium.webdriver.common.by import By

    return widget(driver, "stSelectbox", label).find_element(By.CSS_SELECTOR, 'input[role="combobox"]')


def choose(driver, label, value):
    """Pick `value` in the selectbox `label`, typed into its field as a user would."""
    from selenium.webdriver.common.keys import Keys

    field = selectbox_field(driver, label)
    field.click()
    field.send_keys(Keys.CONTROL, "a")
    field.send_keys(value)
    click_option(driver, label, value)


def test_the_papers_table_is_part_of_the_address(server, browser):
    """docs/dashboard.md's bookmark /papers?paper_table=<file stem> opens that table, not the default one, and
    keeps it (and the selection) in the address; choosing another table writes its stem there, and the session
    keeps it across pages; an unknown stem falls back to the default and says so."""
    from selenium.webdriver.common.by import By

    from ortholab.app.tables import default_table
    from ortholab.db import published

    base, ids, _ = server
    tables = published.load_tables()
    labels = {key: f"{t.paper} · {t.table}: {t.title}" for key, t in tables.items()}
    default = default_table(tables, [])  # no run in this store reproduces a paper row
    assert default != "srnn_table4"
    run = ids["lstm-adding"]
    browser.get(f"{base}/papers?paper_table=srnn_table4&run={run}")  # a bookmarked view
    settle(browser, "Papers")
    assert selectbox_field(browser, "Table").get_attribute("value") == labels["srnn_table4"]
    assert "ortholab reproduce srnn_table4" in browser.find_element(*By_MAIN).text
    assert "paper_table=srnn_table4" in browser.current_url and f"run={run}" in browser.current_url

    choose(browser, "Table", labels["scurnn_table1"])
    settle(browser, "Papers")
    assert selectbox_field(browser, "Table").get_attribute("value") == labels["scurnn_table1"]
    assert re.search(r"paper_table=scurnn_table1(&|$)", browser.current_url), browser.current_url
    browser.find_element(By.CSS_SELECTOR, '[data-testid="stSidebarNav"] a[href$="/compare"]').click()
    settle(browser, "Compare")
    assert "paper_table" not in browser.current_url and f"run={run}" in browser.current_url
    browser.find_element(By.CSS_SELECTOR, '[data-testid="stSidebarNav"] a[href$="/papers"]').click()
    settle(browser, "Papers")
    assert selectbox_field(browser, "Table").get_attribute("value") == labels["scurnn_table1"]  # the session's
    assert "paper_table=scurnn_table1" in browser.current_url

    browser.get(f"{base}/papers?paper_table=no_such_table")
    settle(browser, "Papers")
    assert selectbox_field(browser, "Table").get_attribute("value") == labels[default]
    assert f"paper_table={default}" in browser.current_url
    alerts = [a.text for a in browser.find_elements(By.CSS_SELECTOR, '[data-testid="stAlert"]')]
    assert any("no published table is called 'no_such_table'" in a for a in alerts), alerts
