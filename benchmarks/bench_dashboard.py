"""Dashboard timings as a user sees them: Chromium (headless, driven by Selenium) on the real Streamlit server,
over a generated store of 100 runs (`--runs`) with 10,000 metric points each (`--points`).

    python benchmarks/bench_dashboard.py [--runs 100] [--points 10000] [--selected 10] [--repeat 3]
                                         [--db sqlite:////tmp/bench.db] [--port 8599]

The store mixes five families on four tasks with three seeds each, as sweeps and reproductions do: dense
train/loss, sparse val/loss and val/acc, orthogonality drift (exactly 0 for SRNN), eigenvalue, phase and
gradient snapshots, and speech runs with ~130 per-utterance metric keys and audio clips. Runs are created
through db.Store; the metric points are bulk-inserted (one executemany instead of a million logger calls).

First the Curves page is opened by URL in the new browser profile, with as many other runs: the first chart a
browser profile draws waits for it to compile Streamlit's plotly.js bundle (4.7 MB), which later pages reuse, so
that time is printed on a line of its own. Then every page is opened by its URL with `--selected` runs (two of
them speech runs) while the store has not been read yet (cold caches); then, `--repeat` times, every page through
the sidebar's links as a user moves between them, and the interactions of the issue: ticking a row of the Runs
table, a filter expression, turning the Runs table's page, adding a metric, switching the log scale, grouping by
family (the median and the slowest printed). A time runs from the click (for a multiselect: the click on the option,
after its name was typed into the box; the typing is timed on a line of its own) until the page's script has finished
(Streamlit's running indicator gone) and its charts are drawn, so it includes the browser's drawing; Streamlit's own
start is excluded (the server is started and a first page loaded before timing).
Requires Debian's chromium and chromium-driver.

A script, not an `ortholab bench --suite`: it needs a browser and its driver (neither is a dependency of the
package) and starts a Streamlit server of its own; it prints times in seconds against the issue's targets (1 s an
interaction, 2 s a page), since there is no in-process reference to take a ratio against.
"""

from __future__ import annotations

import argparse
import io
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
import wave
from pathlib import Path

import numpy as np
from sqlalchemy import create_engine, insert

from ortholab.db import Store
from ortholab.db.artifacts import AUDIO, EIGENVALUES, GRAD_NORMS, NPY_MEDIA_TYPE, PHASES, array_to_bytes
from ortholab.db.schema import Metric

REPO = Path(__file__).resolve().parents[1]
FAMILIES = ("scornn", "scurnn", "lstm", "srnn", "exprnn")
TASKS = ("copying", "adding", "mnist", "timit")
SPEECH_METRICS = ("segsnr_voicebox", "snr_global_voicebox", "segsnr_clamped_30ms", "stoi", "pesq_nb_mos_lqo")
UTTERANCES = 12  # per speech run: 5 metrics x (model, baseline) x 12 = 120 per-utterance keys
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


def _wav(samples: np.ndarray, rate: int = 8000) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as writer:
        writer.setnchannels(1)
        writer.setsampwidth(2)
        writer.setframerate(rate)
        writer.writeframes(np.round(np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes())
    return buffer.getvalue()


def generate(url: str, runs: int = 100, points: int = 10_000, seed: int = 0) -> list[int]:
    """Write `runs` runs into the store at `url`; returns their ids in creation order."""
    store = Store(url)
    rng = np.random.default_rng(seed)
    rows, ids = [], []
    t0 = time.time() - 3600.0
    for i in range(runs):
        family, task, run_seed = FAMILIES[i % 5], TASKS[(i // 5) % 4], i // 20
        hidden = (64, 128)[(i // 40) % 2]
        speech, classifier = task == "timit", task == "mnist"
        run = store.create_run(
            name=f"{task}_{family}_n{hidden}_s{run_seed}",
            family=family,
            task=task,
            main_metric="val/acc" if classifier else "val/loss",
            baseline=0.1 if classifier else 0.17,
            config={"model": {"family": family, "hidden_size": hidden}},
            tags=["bench", f"seed:{run_seed}"],
        )
        params = {
            "seed_everything": run_seed,
            "model": {"family": family, "hidden_size": hidden},
            "model.optimizers.recurrent.lr": 1e-4 * (1 + i % 3),
            "data": {"init_args": {"batch_size": 20}},
            "trainer": {"max_steps": points},
        }
        if family == "scornn":
            params["model"]["family_args"] = {"rho": round(0.1 * (1 + (i // 5) % 5), 1)}
        store.log_params(run, params)
        store.update_run(run, parameter_count=1000 + 10 * i, info={"plan": {"steps_per_epoch": max(1, points // 4)}})

        dense = max(1, int(points * 0.8))
        sparse = max(1, (points - dense) // 3)
        rate = 1.0 + rng.uniform(0, 1)
        steps = np.arange(dense)
        curve = np.exp(-rate * 5 * steps / dense) * (1 + 0.1 * rng.standard_normal(dense)) + 1e-4
        series = {"train/loss": (steps, curve)}
        val_steps = np.linspace(0, dense - 1, sparse).astype(int)
        series["val/loss"] = (val_steps, np.exp(-rate * 5 * val_steps / dense) + 1e-4)
        if classifier:
            series["val/acc"] = (val_steps, 1 - 0.9 * np.exp(-rate * 5 * val_steps / dense))
        if family not in ("lstm",):
            drift = np.zeros(sparse) if family == "srnn" else 1e-6 * (1 + rng.uniform(0, 1, sparse))
            series["analysis/orthogonality"] = (val_steps, drift)
        for key, (xs, ys) in series.items():
            rows += [
                {
                    "run_id": run,
                    "key": key,
                    "step": int(s),
                    "epoch": int(s) // max(1, points // 4),
                    "value": float(v),
                    "wall_time": t0 + 0.01 * int(s),
                }
                for s, v in zip(xs, ys, strict=True)
            ]
        last = int(val_steps[-1])
        if speech:
            for who in ("test_audio", "test_audio_baseline"):
                for metric in SPEECH_METRICS:
                    values = rng.uniform(0.5, 5.0, UTTERANCES)
                    rows.append(
                        {
                            "run_id": run,
                            "key": f"{who}/{metric}",
                            "step": last,
                            "epoch": 0,
                            "value": float(values.mean()),
                            "wall_time": t0,
                        }
                    )
                    rows += [
                        {
                            "run_id": run,
                            "key": f"{who}/{metric}/utt{u:02d}",
                            "step": last,
                            "epoch": 0,
                            "value": float(v),
                            "wall_time": t0,
                        }
                        for u, v in enumerate(values)
                    ]
            for u in range(3):
                tone = 0.3 * np.sin(2 * np.pi * (200 + 50 * u) * np.arange(8000) / 8000)
                for role, gain in (("reference", 1.0), ("reconstruction", 0.8), ("baseline", 0.5)):
                    meta = {"utterance": f"utt{u:02d}", "role": role, "sample_rate": 8000}
                    if role != "reference":
                        meta.update({"segsnr_voicebox": 3.0 * gain, "stoi": 0.7 * gain, "pesq_nb_mos_lqo": 2 * gain})
                    store.add_artifact(
                        run,
                        AUDIO,
                        f"test/utt{u:02d}/{role}",
                        step=last,
                        data=_wav(gain * tone),
                        meta=meta,
                        media_type="audio/wav",
                    )
        if family not in ("lstm",):
            for k, step in enumerate((0, last // 2, last)):
                eig = np.exp(1j * rng.uniform(0, 2 * np.pi, hidden))
                store.add_artifact(
                    run,
                    EIGENVALUES,
                    "W",
                    step=step,
                    data=array_to_bytes(eig),
                    meta={"near_minus_one": k, "tolerance": 0.01, "n": hidden},
                    media_type=NPY_MEDIA_TYPE,
                )
                store.add_artifact(
                    run,
                    GRAD_NORMS,
                    "dL/dh_t",
                    step=step,
                    data=array_to_bytes(rng.uniform(0.1, 1, 120)),
                    media_type=NPY_MEDIA_TYPE,
                )
                if family == "scurnn":  # theta in [0, 2 pi), as scuRNN stores it
                    store.add_artifact(
                        run,
                        PHASES,
                        "phases",
                        step=step,
                        data=array_to_bytes(rng.uniform(0, 2 * np.pi, 116)),
                        media_type=NPY_MEDIA_TYPE,
                    )
        store.set_status(run, "finished")
        ids.append(run)
    engine = create_engine(url)
    with engine.begin() as connection:
        for first in range(0, len(rows), 200_000):
            connection.execute(insert(Metric), rows[first : first + 200_000])
    engine.dispose()
    store.close()
    return ids


# ---- the browser -------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(url: str, port: int, log: Path) -> subprocess.Popen:
    env = {**os.environ, "ORTHOLAB_DB": url, "STREAMLIT_BROWSER_GATHER_USAGE_STATS": "false"}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streamlit",
            "run",
            str(REPO / "app" / "main.py"),
            "--server.port",
            str(port),
            "--server.address",
            "127.0.0.1",
            "--server.headless",
            "true",
            "--server.fileWatcherType",
            "none",
        ],
        env=env,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as response:
                if response.read() == b"ok":
                    return process
        except OSError:
            time.sleep(0.3)
    process.kill()
    raise SystemExit(f"the dashboard did not start in 90 s; see {log}")


def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for flag in [*CHROMIUM_FLAGS, f"--user-data-dir={tempfile.mkdtemp(prefix='bench-chromium-')}"]:
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)


def settled(driver, title: str, charts: bool, timeout: float = 120.0) -> float:
    """Wait until the page titled `title` has finished running (and drawn a chart when `charts`); the time."""
    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + timeout
    quiet_since = None
    while time.monotonic() < deadline:
        busy = driver.execute_script(
            "return document.querySelector('[data-testid=\"stStatusWidget\"]') !== null"
            " || document.querySelector('[data-stale=\"true\"]') !== null"
        )
        titles = [h.text for h in driver.find_elements(By.CSS_SELECTOR, "h1")]
        drawn = not charts or driver.execute_script(
            "return document.querySelectorAll('.js-plotly-plot .main-svg').length > 0"
        )
        errors = driver.find_elements(By.CSS_SELECTOR, '[data-testid="stException"]')
        if errors:
            raise SystemExit(f"page {title!r} raised: {errors[0].text[:500]}")
        if title in titles and drawn and not busy:
            quiet_since = quiet_since or time.monotonic()
            if time.monotonic() - quiet_since >= 0.3:  # still quiet: the run is over, not between two messages
                return quiet_since
        else:
            quiet_since = None
        time.sleep(0.05)
    raise SystemExit(f"page {title!r} did not settle in {timeout:.0f} s")


def timed(driver, action, title: str, charts: bool) -> float:
    start = time.monotonic()
    action()
    time.sleep(0.05)  # let the click reach the server before watching for the run's end
    return settled(driver, title, charts) - start


def navigate(driver, path: str) -> None:
    """Click the sidebar's link to the page at `path` ('' for the Runs page)."""
    from selenium.webdriver.common.by import By

    for link in driver.find_elements(By.CSS_SELECTOR, '[data-testid="stSidebarNav"] a'):
        if urllib.parse.urlparse(link.get_attribute("href")).path.rstrip("/") == f"/{path}".rstrip("/"):
            link.click()
            return
    raise SystemExit(f"no sidebar link to /{path}")


def widget(driver, testid: str, label: str):
    from selenium.webdriver.common.by import By

    for element in driver.find_elements(By.CSS_SELECTOR, f'[data-testid="{testid}"]'):
        labels = element.find_elements(By.CSS_SELECTOR, '[data-testid="stWidgetLabel"]')
        if labels and labels[0].text.strip() == label:
            return element
    raise SystemExit(f"no {testid} labelled {label!r} on the page")


def type_option(driver, label: str, option: str):
    """Type `option` into the multiselect labelled `label` until the dropdown offers it (the browser filters the
    options as the user types; the server is not involved); return the click that chooses it and closes the list."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    field = widget(driver, "stMultiSelect", label).find_element(By.CSS_SELECTOR, 'input[role="combobox"]')
    field.click()
    field.send_keys(option)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        options = [o for o in driver.find_elements(By.CSS_SELECTOR, '[role="option"]') if o.text.strip() == option]
        if options:

            def choose(first=options[0]):
                first.click()
                field.send_keys(Keys.ESCAPE)

            return choose
        time.sleep(0.05)
    raise SystemExit(f"{label!r} offers no option {option!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--points", type=int, default=10_000, help="metric points per run")
    parser.add_argument("--selected", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--db",
        default=None,
        help="SQLAlchemy URL to generate into (default: a temporary file); a "
        "store that already holds runs (from an earlier run) is timed as it is",
    )
    parser.add_argument("--port", type=int, default=None)
    args = parser.parse_args()
    if not (shutil.which("chromium") and shutil.which("chromedriver")):
        raise SystemExit("needs Debian's chromium and chromium-driver (apt-get install -y chromium chromium-driver)")
    folder = Path(tempfile.mkdtemp(prefix="bench-dashboard-"))
    url = args.db or f"sqlite:///{folder / 'bench.db'}"
    start = time.perf_counter()
    existing = sorted(run.id for run in Store(url).list_runs())
    if existing:  # a store generated by an earlier run of this script: timed as it is
        ids = existing
        print(f"reusing the {len(ids)} runs in {url}")
    else:
        ids = generate(url, args.runs, args.points)
        print(f"generated {args.runs} runs x {args.points:,} points in {time.perf_counter() - start:.1f} s into {url}")
    load = os.getloadavg()[0]
    print(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load average {load:.2f} at start; "
        f"{args.selected} runs selected; median of {args.repeat}"
    )

    speech = [i for k, i in enumerate(ids) if TASKS[(k // 5) % 4] == "timit"]
    others = [i for i in ids if i not in speech]
    chosen = others[-(args.selected - 2) :] + speech[-2:]  # a mix of families and tasks, two of them speech runs
    selected = "&".join(f"run={i}" for i in chosen)
    first_use = [i for i in others[: args.selected - 2] + speech[:2] if i not in chosen]  # as many, not selected
    port = args.port or free_port()
    server = start_server(url, port, folder / "server.log")
    driver = browser()
    base = f"http://127.0.0.1:{port}"
    pages = [
        ("runs", "", "Runs", False),
        ("curves", "curves", "Curves", True),
        ("eigenvalues", "eigenvalues", "Eigenvalues", True),
        ("gradients", "gradients", "Gradients and states", True),
        ("audio", "audio", "Audio", True),
        ("compare", "compare", "Compare", True),
        ("papers", "papers", "Papers", False),
    ]
    try:
        driver.get(f"{base}/papers")  # Streamlit's own start and imports, out of the measurement
        settled(driver, "Papers", False)
        # the first chart this browser profile ever draws waits for Streamlit's plotly.js bundle (4.7 MB) to be
        # compiled; later documents reuse the compiled code. Timed on other runs than the selection (cold caches)
        # and printed on its own line: a user's browser pays it once, like Streamlit's own start.
        other = "&".join(f"run={i}" for i in first_use or chosen[:1])  # a tiny store: one selected run
        first_chart = timed(driver, lambda: driver.get(f"{base}/curves?{other}"), "Curves", True)
        results: dict[str, list[float]] = {}
        cold: dict[str, float] = {}
        for name, path, title, charts in pages:  # the store read for the first time (cold caches), by URL
            cold[name] = timed(driver, lambda p=path: driver.get(f"{base}/{p}?{selected}"), title, charts)
        for _ in range(args.repeat):
            for name, path, title, charts in pages:  # as a user moves between pages: the sidebar's links
                results.setdefault(f"open {name} (sidebar link)", []).append(
                    timed(driver, lambda p=path: navigate(driver, p), title, charts)
                )
            interactions(driver, base, selected, results)
        print(f"{'what':<44} {'median (s)':>10} {'max (s)':>8}")
        print(
            f"{'open curves by URL, new browser profile':<44} {first_chart:>10.2f} {first_chart:>8.2f}  "
            f"(other {len(first_use)} runs, cold caches; includes compiling Streamlit's plotly.js, once per "
            "browser profile)"
        )
        for name, seconds in cold.items():
            print(f"{'open ' + name + ' by URL (first: cold caches)':<44} {seconds:>10.2f} {seconds:>8.2f}")
        for name, times in results.items():
            print(f"{name:<44} {statistics.median(times):>10.2f} {max(times):>8.2f}")
        print(
            f"load average {os.getloadavg()[0]:.2f} at the end (2 cores: above 2, other processes share the CPU "
            "and every time above is inflated)"
        )
    finally:
        driver.quit()
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def interactions(driver, base: str, selected: str, results: dict[str, list[float]]) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    def record(name, action, title, charts):
        results.setdefault(name, []).append(timed(driver, action, title, charts))

    driver.get(f"{base}/?{selected}")
    settled(driver, "Runs", False)
    canvas = driver.find_element(By.CSS_SELECTOR, '[data-testid="stDataFrame"] canvas')
    height = canvas.rect["height"]
    record(
        "tick a row of the Runs table",
        lambda: (
            ActionChains(driver)
            .move_to_element_with_offset(canvas, -canvas.rect["width"] / 2 + 17, -height / 2 + 35 * 3 + 17)
            .click()
            .perform()
        ),
        "Runs",
        False,
    )
    expression = widget(driver, "stTextInput", "Filter expression").find_element(By.CSS_SELECTOR, "input")

    def type_filter():
        expression.clear()
        expression.send_keys('family = "scornn" and rho > 0.2 and val/loss < 0.5', Keys.ENTER)

    record("filter expression", type_filter, "Runs", False)
    expression.clear()
    expression.send_keys(Keys.ENTER)
    settled(driver, "Runs", False)
    next_page = driver.find_elements(By.CSS_SELECTOR, '[data-testid="stPagination"] button')
    if next_page:
        record("next page of the Runs table", lambda: next_page[-1].click(), "Runs", False)

    driver.get(f"{base}/curves?{selected}")
    settled(driver, "Curves", True)
    # a multiselect's option is timed from its click, when the user has made the choice; typing its name before
    # (the browser filtering the dropdown, no rerun) is timed on its own line
    start = time.monotonic()
    choose = type_option(driver, "Metrics (one chart each)", "train/loss")
    results.setdefault("(typing 'train/loss' into Metrics; no rerun)", []).append(time.monotonic() - start)
    record("add a metric (Curves), from its click", choose, "Curves", True)
    record(
        "log scale on (Curves)",
        lambda: widget(driver, "stCheckbox", "Log scale").find_element(By.CSS_SELECTOR, "label").click(),
        "Curves",
        True,
    )
    choose = type_option(driver, "Group runs by", "family")
    record("group by family (Curves), from its click", choose, "Curves", True)


if __name__ == "__main__":
    main()
