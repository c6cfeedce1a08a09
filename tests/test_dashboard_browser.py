"""The dashboard served for real (`ortholab dashboard`, which execs into the Streamlit server) and driven by
Debian's headless Chromium through Selenium: every page renders without a Streamlit exception, the Runs
table shows the runs, chart pages draw plotly charts, the sidebar navigation carries the selection, and a
screenshot of each page is saved (under $ORTHOLAB_TEST_ARTIFACTS/dashboard when set, else tmp_path)."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from dashboard_store import REPO, add_hand_written_runs

from ortholab.db import Store

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    not (CHROMIUM and CHROMEDRIVER),
    reason="Debian's chromium and chromium-driver are not installed (apt-get install -y chromium chromium-driver)",
)
# the flags this machine's closed network needs (no background connections, no sandbox as root)
CHROMIUM_FLAGS = [
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync", "--window-size=1400,1100",
]  # fmt: skip
PAGES = {  # url path -> (title, plotly charts expected)
    "": ("Runs", False),
    "curves": ("Curves", True),
    "eigenvalues": ("Eigenvalues", True),
    "gradients": ("Gradients and states", True),
    "audio": ("Audio", True),
    "compare": ("Compare", False),  # parallel coordinates need numeric params in every selected run
    "papers": ("Papers", False),
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The dashboard on a free local port over a store of hand-written runs; yields (base url, run ids)."""
    root = tmp_path_factory.mktemp("browser")
    url = f"sqlite:///{root / 'runs.db'}"
    ids = add_hand_written_runs(Store(url))
    port = free_port()
    log = open(root / "server.log", "w")
    process = subprocess.Popen(  # the command execs into the streamlit server: this pid is the server
        [sys.executable, "-c", "from ortholab.training.cli import main; main()", "dashboard", "--db", url,
         "--port", str(port)],
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
        yield base, ids
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


def wait_rendered(driver, title, *, charts=False, timeout=45.0):
    """Wait until the page's title is up, the script has finished (no 'running' status widget) and, when
    asked, a plotly chart has been drawn; fail on a Streamlit exception box."""
    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        exceptions = driver.find_elements(By.CSS_SELECTOR, '[data-testid="stException"]')
        assert not exceptions, exceptions[0].text
        titles = [h.text for h in driver.find_elements(By.CSS_SELECTOR, "h1")]
        running = driver.find_elements(By.CSS_SELECTOR, '[data-testid="stStatusWidget"]')
        drawn = driver.find_elements(By.CSS_SELECTOR, ".js-plotly-plot .main-svg")
        if title in titles and not running and (drawn or not charts):
            time.sleep(0.5)  # let the last elements paint before the screenshot
            assert not driver.find_elements(By.CSS_SELECTOR, '[data-testid="stException"]')
            return
        time.sleep(0.25)
    pytest.fail(
        f"page {title!r} did not finish rendering; headings: {titles}, running: {bool(running)}, charts: {len(drawn)}"
    )


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

    base, ids = server
    chosen = "&".join(f"run={ids[n]}" for n in ("scornn-snapshots", "speech", "lstm-adding", "half-written", "crashed"))
    for path, (title, charts) in PAGES.items():
        browser.get(f"{base}/{path}?{chosen}")
        wait_rendered(browser, title, charts=charts)
        main = browser.find_element(By.CSS_SELECTOR, '[data-testid="stMain"]').text
        assert len(main.strip()) > len(title) + 20, f"page {title!r} is empty"
        if path == "":
            assert set(ids) <= table_cells(browser), (
                f"run names missing from the table: {set(ids) - table_cells(browser)}"
            )
        screenshot(browser, shots, title.lower().replace(" ", "-"))


ROW_PX = 35  # Streamlit's data grid: header and rows 35 px each


def sidebar_selection(driver):
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, '[data-testid="stSidebar"] [data-testid="stMultiSelect"]').text


def test_ticking_a_table_row_selects_the_run_for_the_other_pages(server, browser, shots):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    base, ids = server
    browser.get(f"{base}/?run={ids['lstm-adding']}")
    wait_rendered(browser, "Runs")
    assert table_cells(browser) and "scurnn-phases" not in sidebar_selection(browser)
    # tick the checkbox of the scurnn-phases row (rows are newest first)
    row = sorted(ids.values(), reverse=True).index(ids["scurnn-phases"])
    canvas = browser.find_element(By.CSS_SELECTOR, '[data-testid="stDataFrame"] canvas')
    width, height = canvas.rect["width"], canvas.rect["height"]
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
