"""Optional parts (pyproject's extras): with a package missing, the command fails in one line naming the extra to
install, exit code 2, no traceback. A missing package is simulated with sys.modules[name] = None, which makes
`import name` raise ModuleNotFoundError as if it were not installed."""

import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

from ortholab.cli.main import main
from ortholab.db import Store
from ortholab.errors import ConfigError
from ortholab.extras import EXTRAS, MissingExtra, require_extra

REPO = Path(__file__).resolve().parents[1]


def run_cli(capsys, args: list[str]) -> tuple[int, str]:
    capsys.readouterr()
    with pytest.raises(SystemExit) as done:
        main(args)
    return done.value.code, capsys.readouterr().err


def one_error_line(err: str) -> str:
    assert "Traceback" not in err, err
    (line,) = [line for line in err.splitlines() if line.startswith("ortholab: error:")]
    return line


def test_the_extras_in_pyproject_are_the_ones_the_code_names_and_dev_installs_them_all():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    optional = project["optional-dependencies"]
    assert set(EXTRAS) <= set(optional)
    for extra, (_, modules) in EXTRAS.items():  # each module is installed by its extra, and not unconditionally
        declared = " ".join(optional[extra]).lower()
        assert all(module.replace("_", "-") in declared for module in modules), extra
        assert not any(dep.lower().startswith(modules) for dep in project["dependencies"]), extra
    assert f"ortholab[{','.join(EXTRAS)}]" in optional["all"]
    dev_extras = [dep.split("[")[1].rstrip("]").split(",") for dep in optional["dev"] if dep.startswith("ortholab[")]
    assert any("all" in extras for extras in dev_extras)  # `make install` (the dev extra) installs every part


def test_a_postgres_store_without_the_driver_names_the_extra(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg", None)
    code, err = run_cli(capsys, ["runs", "--db", "postgresql+psycopg://user@127.0.0.1:1/runs"])
    line = one_error_line(err)
    assert code == 2 and "pip install 'ortholab[postgres]'" in line and "'psycopg'" in line
    assert f"{sys.executable} -m pip install" in line  # this Python's pip, not whichever `pip` is on PATH


def test_a_sweep_without_optuna_names_the_extra(capsys, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "optuna", None)
    code, err = run_cli(
        capsys,
        [
            "sweep",
            "--config",
            "configs/demo/copying_scornn.yaml",
            "--space",
            str(tmp_path / "space.yaml"),
            "--trials",
            "2",
            "--db",
            f"sqlite:///{tmp_path}/s.db",
        ],
    )
    assert code == 2 and "pip install 'ortholab[sweeps]'" in one_error_line(err)
    assert not (tmp_path / "s.db").exists()  # refused before anything was recorded


@pytest.mark.parametrize("module", ["pesq", "pystoi"])
def test_speech_metrics_without_their_packages_name_the_extra(module, capsys, monkeypatch, tmp_path):
    from ortholab.evaluation.speech_quality import score_utterance

    monkeypatch.setitem(sys.modules, module, None)
    signal = np.sin(np.arange(8000) / 5.0)
    with pytest.raises(MissingExtra, match=rf"'{module}'.*pip install 'ortholab\[speech\]'"):
        score_utterance(signal, signal, 8000)  # never a per-utterance 'reason' that hides the missing package
    # a speech config with the audio evaluation is refused at start, before any training
    code, err = run_cli(
        capsys,
        [
            "fit",
            "--config",
            str(REPO / "configs/demo/speech_fsdd_scornn.yaml"),
            "--db",
            f"sqlite:///{tmp_path}/s.db",
            "--runs_dir",
            str(tmp_path / "runs"),
        ],
    )
    assert code == 2 and "pip install 'ortholab[speech]'" in one_error_line(err)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").rglob("*.ckpt"))
    assert not (tmp_path / "s.db").exists() or Store(f"sqlite:///{tmp_path}/s.db").list_runs() == []  # no run row


def test_a_bare_install_without_the_speech_packages_trains_a_copying_run(capsys, monkeypatch, tmp_path):
    """`pip install ortholab` with no extras: the audio evaluation (a default callback) waits for a speech task."""
    from test_cli import DEMO, TINY

    for module in ("pesq", "pystoi"):
        monkeypatch.setitem(sys.modules, module, None)
    db = f"sqlite:///{tmp_path}/s.db"
    main(["fit", "--config", DEMO, *TINY, "--db", db, "--runs_dir", str(tmp_path / "runs")])
    (run,) = Store(db).list_runs()
    assert (run.task, run.status, run.steps) == ("copying", "finished", 6)


def test_the_dashboard_without_streamlit_names_the_extra_in_a_fresh_process(tmp_path):
    """In a new interpreter, so that nothing imported streamlit before the check."""
    script = (
        "import sys; sys.modules['streamlit'] = None\n"
        "from ortholab.cli.main import main\n"
        f"main(['dashboard', '--db', 'sqlite:///{tmp_path}/runs.db', '--port', '8599'])\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    line = one_error_line(done.stderr)
    assert done.returncode == 2 and "pip install 'ortholab[dashboard]'" in line and "'streamlit'" in line
    assert "dashboard on http" not in done.stdout  # the server was never started


def test_report_export_without_plotly_names_the_extra(monkeypatch):
    from ortholab.user_errors import user_error as _user_error

    monkeypatch.setitem(sys.modules, "plotly", None)
    monkeypatch.delitem(sys.modules, "plotly.graph_objects", raising=False)
    with pytest.raises(ModuleNotFoundError) as raised:
        import plotly.graph_objects  # noqa: F401 - what app/export.py does for the HTML figures
    explained = _user_error(raised.value)
    assert isinstance(explained, ConfigError) and "pip install 'ortholab[dashboard]'" in str(explained)


def test_an_installed_extra_passes_and_a_broken_dependency_is_not_renamed(monkeypatch):
    require_extra("speech")  # installed here by `make install`
    monkeypatch.setitem(sys.modules, "numpy.fft", None)  # not an optional package: the real error stands
    monkeypatch.setitem(EXTRAS, "probe", ("a probe", ("numpy.fft",)))
    with pytest.raises(ModuleNotFoundError):
        require_extra("probe")


def test_the_missing_extra_line_quotes_a_python_whose_path_has_a_space(monkeypatch):
    from ortholab.extras import missing_extra_message

    monkeypatch.setattr(sys, "executable", "/home/me/my envs/bin/python3")  # pasted into a shell as given
    assert "'/home/me/my envs/bin/python3' -m pip install 'ortholab[sweeps]'" in missing_extra_message(
        "sweeps", "optuna"
    )
