"""Screenshots of every dashboard page for the documentation, from a store of small REAL runs.

    python tools/screenshots.py [--out docs/images] [--work DIR [--reuse]] [--keep] [--only NAME ...]
                                                                                          (`make screenshots`)

1. Trains a few small runs with `ortholab fit` into a fresh SQLite store (scoRNN and LSTM on copying and on adding,
   scuRNN on copying, scoRNN with docs/configs.md's callback of one's own, a tiny speech run with audio clips when
   the FSDD recordings are at ../shared/data) and runs one paper row at `cpu-smoke` scale, so every page has real
   data to show.
2. Serves the dashboard on that store (`ortholab dashboard`, a free local port) and drives Debian's headless
   Chromium through Selenium over every page that app/main.py registers (read from its `st.Page(...)` calls, so a
   new page gets its picture), waiting until each has rendered.
3. Writes one PNG per page into --out, named after the page's URL path (`runs.png` for the default page), plus
   `curves-adding.png` (the adding task's curves against their baseline).
4. Checks each page as tests/test_dashboard_browser.py does (app/table_fit.py): no table cuts a header or a cell,
   or a column at its right edge (the Runs and Compare tables scroll sideways by design), no label is cut; it
   writes every picture, then fails naming what was cut.

It needs the `chromium` and `chromium-driver` packages. Every picture is a real rendering of real runs; nothing
is drawn by hand. tests/test_docs.py checks that one non-blank PNG per page exists.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
APP_MAIN = REPO / "app" / "main.py"
FSDD = REPO.parent / "shared" / "data" / "fsdd" / "recordings"
CHROMIUM_FLAGS = [  # as tests/test_dashboard_browser.py: no background connections, no sandbox as root
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]
SIDEWAYS = {"", "compare"}  # pages whose tables are wider than the page by design (tests/test_dashboard_browser.py)
CHART_PAGES = {
    "curves",
    "eigenvalues",
    "gradients",
    "artifacts",
}  # pages that draw a plotly chart once their runs are selected
WINDOW = (1400, 1700)  # tall enough that a chart page shows its first chart whole
QUIET = ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]


def dashboard_pages(main: Path = APP_MAIN) -> list[dict]:
    """The pages app/main.py registers: [{name, url, title}], name = the URL path ('runs' for the default page)."""
    pages = []
    for node in ast.walk(ast.parse(main.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "Page" and node.args:
            script = ast.literal_eval(node.args[0])
            kwargs = {
                k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg in ("title", "url_path", "default")
            }
            path = kwargs.get("url_path") or Path(script).stem
            pages.append(
                {
                    "name": path,
                    "url": "" if kwargs.get("default") else path,
                    "title": kwargs.get("title", Path(script).stem.replace("_", " ").title()),
                }
            )
    if not pages:
        raise SystemExit(f"no st.Page(...) found in {main}")
    return pages


def ortholab(*args: str, cwd: Path, env: dict | None = None) -> None:
    command = [sys.executable, "-c", "from ortholab.cli.main import main; main()", *args]
    print("$ ortholab " + " ".join(args), flush=True)
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, env={**os.environ, **(env or {})})
    if done.returncode != 0:
        raise SystemExit(f"ortholab {args[0]} failed:\n{done.stderr[-3000:]}")


def write_config(folder: Path, name: str, config: dict) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


STEPS = 400  # per run; `--steps` lowers it for a quick check of the pipeline (the tests)


def copying_config(family: str, hidden: int, family_args: dict, optimizers: dict) -> dict:
    """Copying at T = 100 (baseline 10 ln 8 / 120): 2,000 training sequences, so an epoch is 100 steps and the
    eigenvalue snapshots (every epoch) and gradient profiles (steps 0 and 300) both land inside 400 steps."""
    return {
        "seed_everything": 5544,
        "model": {"family": family, "hidden_size": hidden, "family_args": family_args, "optimizers": optimizers},
        "data": {
            "class_path": "datamodules.CopyingTask",
            "init_args": {"seq_len": 100, "batch_size": 20, "train_size": 2000, "val_size": 200, "test_size": 200},
        },
        "trainer": {
            "accelerator": "cpu",
            "max_steps": STEPS,
            "val_check_interval": max(STEPS // 8, 1),
            "check_val_every_n_epoch": None,
            "log_every_n_steps": 10,
        },
    }


def adding_config(family: str, hidden: int, family_args: dict, optimizers: dict) -> dict:
    """Adding at T = 50 (baseline 1/6), 400 steps of batch 50."""
    return {
        "seed_everything": 5544,
        "model": {"family": family, "hidden_size": hidden, "family_args": family_args, "optimizers": optimizers},
        "data": {
            "class_path": "datamodules.AddingTask",
            "init_args": {"seq_len": 50, "batch_size": 50, "train_size": 20000, "val_size": 1000, "test_size": 1000},
        },
        "trainer": {
            "accelerator": "cpu",
            "max_steps": STEPS,
            "val_check_interval": max(STEPS // 8, 1),
            "check_val_every_n_epoch": None,
            "log_every_n_steps": 10,
        },
    }


RMSPROP_TF = {"recurrent": {"name": "rmsprop_tf", "lr": 1.0e-4}, "other": {"name": "rmsprop_tf", "lr": 1.0e-3}}


SELECTIONS = {  # the runs each picture selects, by name
    "copying": ["scornn-copying", "lstm-copying"],
    "eigen": ["scornn-copying", "scurnn-copying"],
    "adding": ["scornn-adding", "lstm-adding"],
    "own": ["scornn-own-callback"],
    "speech": ["scornn-speech"],
}


def train_with_own_callback(work: Path, configs: Path, config: dict, common: list[str]) -> None:
    """scoRNN on copying with docs/configs.md's SingularValues callback, as a user writes it: the Artifacts page's
    run (singular values of W every 25 steps)."""
    text = (REPO / "docs" / "configs.md").read_text()
    module = re.search(r"```python\n(# mylab/callbacks\.py\n.*?)```", text, re.DOTALL).group(1)
    (work / "mylab").mkdir(exist_ok=True)
    (work / "mylab" / "__init__.py").write_text("")
    (work / "mylab" / "callbacks.py").write_text(module)
    name, every = "scornn-own-callback", str(max(STEPS // 16, 1))
    callback = ["--trainer.callbacks+=mylab.callbacks.SingularValues", "--trainer.callbacks.every_n_steps", every]
    path = str(write_config(configs, name, config))
    env = {"ORTHOLAB_CONFIG_MODULES": "mylab.callbacks", "PYTHONPATH": str(work)}
    ortholab("fit", "--config", path, "--name", name, *callback, *common, cwd=work, env=env)


def build_store(work: Path) -> tuple[str, dict[str, list[str]]]:
    """Train the runs; returns the store's URL and, per selection name, the run names to select."""
    url = f"sqlite:///{work / 'store.db'}"
    configs, runs_dir = work / "configs", work / "runs"
    configs.mkdir(parents=True, exist_ok=True)
    common = ["--db", url, "--runs_dir", str(runs_dir), *QUIET]
    plan = {
        "scornn-copying": copying_config("scornn", 190, {"rho": 95, "init": "henaff"}, RMSPROP_TF),
        "lstm-copying": copying_config("lstm", 68, {}, {"other": {"name": "rmsprop_tf", "lr": 1.0e-3}}),
        "scurnn-copying": copying_config(
            "scurnn",
            64,
            {"init": "henaff"},
            {
                "recurrent": {"name": "rmsprop_tf", "lr": 1.0e-4},
                "scaling": {"name": "rmsprop_tf", "lr": 1.0e-4},
                "other": {"name": "rmsprop_tf", "lr": 1.0e-3},
            },
        ),
        "scornn-adding": adding_config("scornn", 170, {"rho": 85, "init": "henaff"}, RMSPROP_TF),
        "lstm-adding": adding_config("lstm", 60, {}, {"other": {"name": "adam", "lr": 1.0e-2}}),
    }
    for name, config in plan.items():
        ortholab("fit", "--config", str(write_config(configs, name, config)), "--name", name, *common, cwd=work)
    train_with_own_callback(work, configs, plan["scornn-copying"], common)
    selections = {**SELECTIONS, "speech": []}
    if FSDD.is_dir():  # a tiny speech run: a few steps, then SegSNR/STOI/PESQ and clips of its reconstructions
        ortholab(
            "fit",
            "--config",
            str(REPO / "configs" / "demo" / "speech_fsdd_scornn.yaml"),
            "--name",
            "scornn-speech",
            "--data.path",
            str(FSDD),
            "--data.max_utterances",
            "14",
            "--data.cache_dir",
            str(work / "cache"),
            "--trainer.max_steps",
            "10",
            "--trainer.check_val_every_n_epoch",
            "1",
            *common,
            cwd=work,
        )
        selections["speech"] = ["scornn-speech"]
    else:
        print(f"note: no FSDD recordings at {FSDD}; the Audio page will show its empty-store note", flush=True)
    ortholab(
        "reproduce",
        "cpu_checks",
        "--rows",
        "copying-T100_scornn_n190",
        "--scale",
        "cpu-smoke",
        "--db",
        url,
        "--runs_dir",
        str(runs_dir),
        cwd=work,
    )
    return url, selections


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(url: str, work: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    log = open(work / "dashboard.log", "w")
    server = subprocess.Popen(
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
        cwd=work,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        try:
            with urllib.request.urlopen(f"{base}/_stcore/health", timeout=2) as response:
                if response.read() == b"ok":
                    return server, base
        except OSError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("the dashboard did not start:\n" + (work / "dashboard.log").read_text()[-3000:])
        time.sleep(0.3)


def stop(server: subprocess.Popen) -> None:
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGTERM)  # its own process group (start_new_session)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


def browser(profile: Path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver):
        raise SystemExit(
            "screenshots need Debian's chromium and chromium-driver: apt-get install -y chromium chromium-driver"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in [*CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--window-size={WINDOW[0]},{WINDOW[1]}"]:
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(driver), options=options)


def wait_rendered(driver, page: dict, charts: bool, timeout: float = 90.0) -> None:
    """Until the page's heading is up, its script has finished and (when expected) a plotly chart is drawn;
    a Streamlit exception on the page is an error, not a picture."""
    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        errors = driver.find_elements(By.CSS_SELECTOR, '[data-testid="stException"]')
        if errors:
            raise SystemExit(f"the {page['title']} page raised: {errors[0].text[:2000]}")
        headings = [h.text for h in driver.find_elements(By.CSS_SELECTOR, "h1")]
        running = driver.find_elements(By.CSS_SELECTOR, '[data-testid="stStatusWidget"]')
        drawn = driver.find_elements(By.CSS_SELECTOR, ".js-plotly-plot .main-svg")
        if headings and not running and (drawn or not charts):
            time.sleep(1.5)  # the last elements paint (plotly's transitions, the data grid's canvas)
            return
        time.sleep(0.25)
    raise SystemExit(f"the {page['title']} page did not finish rendering in {timeout:.0f} s")


def selection_for(name: str, selections: dict[str, list[str]]) -> list[str]:
    return {
        "eigenvalues": selections["eigen"],
        "audio": selections["speech"] or selections["copying"],
        "artifacts": selections["own"],
        "runs": [],
        "curves-adding": selections["adding"],
    }.get(name, selections["copying"])


def run_ids(url: str) -> dict[str, int]:
    from ortholab.db import Store

    return {run.name: run.id for run in Store(url).list_runs()}


def existing_store(work: Path) -> tuple[str, dict[str, list[str]]]:
    """The store a previous run of this script left in `work` (--reuse): its URL and the same selections."""
    url = f"sqlite:///{work / 'store.db'}"
    names = set(run_ids(url))
    selections = {**SELECTIONS, "speech": SELECTIONS["speech"] if "scornn-speech" in names else []}
    missing = {n for s in selections.values() for n in s} - names
    if missing:
        raise SystemExit(f"--reuse: {work / 'store.db'} lacks the runs {sorted(missing)}; run without --reuse")
    return url, selections


def cut_text(driver, page: dict) -> list[str]:
    """What the page cuts: table headers and cells (and columns past a table's edge), labels."""
    from ortholab.app.table_fit import cut_cells, cut_labels

    found = cut_cells(driver, sideways=page["url"] in SIDEWAYS)["found"] + cut_labels(driver)
    return [f"{page['name']}: {what}" for what in found]


def take(out: Path, work: Path, reuse: bool = False, only: list[str] | None = None) -> list[Path]:
    pages = dashboard_pages()
    shots = [*pages, {"name": "curves-adding", "url": "curves", "title": "Curves"}]
    unknown = set(only or []) - {shot["name"] for shot in shots}
    if unknown:
        raise SystemExit(f"--only {sorted(unknown)}: no such picture; choose among {[s['name'] for s in shots]}")
    shots = [shot for shot in shots if not only or shot["name"] in only]
    url, selections = existing_store(work) if reuse else build_store(work)
    ids = run_ids(url)
    server, base = serve(url, work)
    driver = browser(work / "chromium-profile")
    written, cut = [], []
    try:
        out.mkdir(parents=True, exist_ok=True)
        for page in shots:
            chosen = "&".join(f"run={ids[name]}" for name in selection_for(page["name"], selections))
            driver.get(f"{base}/{page['url']}" + (f"?{chosen}" if chosen else ""))
            wait_rendered(driver, page, charts=page["url"] in CHART_PAGES)
            cut += cut_text(driver, page)
            path = out / f"{page['name']}.png"
            if not driver.save_screenshot(str(path)):
                raise SystemExit(f"Chromium wrote no screenshot of {page['title']}")
            written.append(path)
            print(f"wrote {path}", flush=True)
    finally:
        driver.quit()
        stop(server)
    if cut:
        raise SystemExit("pictures with text cut (written all the same):\n  " + "\n  ".join(cut))
    return written


def main(argv: list[str] | None = None) -> None:
    global STEPS  # the run configs read it
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "images", help="where the PNGs go")
    parser.add_argument("--steps", type=int, default=STEPS, help=f"training steps per run (default {STEPS})")
    parser.add_argument(
        "--work", type=Path, default=None, help="folder for the store and runs (default: a temporary one)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary store and runs")
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="with --work: take the pictures from the store a previous run left there instead of training again",
    )
    parser.add_argument(
        "--only", nargs="+", metavar="NAME", help="write only these pictures (e.g. artifacts curves-adding)"
    )
    args = parser.parse_args(argv)
    STEPS = args.steps
    if args.reuse and args.work is None:
        parser.error("--reuse needs --work DIR (the folder of a previous run)")
    work = args.work or Path(tempfile.mkdtemp(prefix="ortholab-screenshots-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        take(args.out.resolve(), work.resolve(), reuse=args.reuse, only=args.only)
    finally:
        if args.work is None and not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        elif args.keep or args.work:
            print(f"store and runs kept in {work}")


if __name__ == "__main__":
    main()
