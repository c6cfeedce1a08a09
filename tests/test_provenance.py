"""A run records the code that trained it (and each other code that resumed it); the report export names them
(tests/test_reproduce.py)."""

import os
import subprocess
from pathlib import Path

import pytest
import torch
from test_cli import DEMO, TINY

import ortholab.threads as threads_module
from ortholab.cli.main import main
from ortholab.db import SQLLogger, Store, provenance

REPO = Path(__file__).resolve().parents[1]


def _git(folder: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, check=True).stdout.strip()


def test_the_commit_is_this_checkouts_and_none_elsewhere(tmp_path, monkeypatch):
    found = provenance.commit()
    if (REPO / ".git").exists():  # a checkout (CI's clean clone too); from an installed wheel there is none
        assert found.removesuffix("+changes") == _git(REPO, "rev-parse", "--short", "HEAD")
    monkeypatch.setattr(provenance, "CHECKOUT", tmp_path)  # not a repository
    monkeypatch.setattr(provenance, "BUILT_FROM", tmp_path / "BUILT_FROM")  # nor a wheel that recorded its commit
    assert provenance.commit() is None
    _git(tmp_path, "init", "-q")
    monkeypatch.setattr(provenance, "CHECKOUT", tmp_path / "venv" / "site-packages")  # inside another project's
    (tmp_path / "venv" / "site-packages").mkdir(parents=True)
    assert provenance.commit() is None
    (tmp_path / "BUILT_FROM").write_text("abc1234\n")  # an installed wheel's, written by setup.py
    assert provenance.commit() == "abc1234"


def test_a_fit_records_the_code_that_trained_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(threads_module, "other_work", lambda: 0.0)  # a free machine: fit keeps torch's threads
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    main(["fit", "--config", DEMO, *TINY, "--db", db])
    store = Store(db)
    (run,) = store.list_runs()
    (code,) = store.get_run(run.id).info["code"]
    threads = torch.get_num_threads()  # a CPU run's machine names the threads it trained with (ortholab/threads.py)
    machine = f"{provenance.machine()}, {threads} torch thread{'s' if threads != 1 else ''}"
    assert code == {**provenance.code_version(), "machine": machine} and code["torch"] == torch.__version__
    assert code["ortholab"] and f"{os.cpu_count()} cores" in code["machine"]
    assert provenance.details(code).endswith(f") on {machine}")  # the run's details page


def test_the_export_names_the_host_and_each_starts_machine(tmp_path):
    """A report.csv line said only 'vm' (the host name), which told two VMs of other CPUs apart in nothing."""
    from ortholab.app.export import run_provenance

    store = Store(f"sqlite:///{tmp_path / 'runs.db'}")
    run = store.create_run(name="r")
    first, second = {"commit": "aaaaaaa", "machine": "AMD EPYC, 2 cores"}, {"commit": "bbbbbbb", "machine": "Xeon, 2"}
    store.update_run(run, info={"code": [first, {**first, "commit": "ccccccc"}, second]})
    found = run_provenance(store, run)
    assert found["machine"].endswith("(AMD EPYC, 2 cores; resumed on Xeon, 2)") and found["commit"] == "aaaaaaa"
    store.update_run(run, info={"code": [{"commit": "ddddddd"}]})  # recorded before machines were
    assert "(" not in run_provenance(store, run)["machine"]
    store.update_run(run, info={"code": [{"commit": "ddddddd"}, second]})  # begun before, resumed after
    assert run_provenance(store, run)["machine"].endswith("(a machine not recorded; resumed on Xeon, 2)")


def test_a_run_resumed_by_other_code_lists_both_in_order(tmp_path, monkeypatch):
    logger = SQLLogger(db_url=f"sqlite:///{tmp_path / 'runs.db'}", name="r", root_dir=str(tmp_path / "runs"))
    first, second = {"commit": "aaaaaaa", "ortholab": "0.1.0"}, {"commit": "bbbbbbb", "ortholab": "0.1.0"}
    logger.describe_run(info={"plan": 1, "code": [first]})
    logger.describe_run(info={"plan": 2, "code": [first]})  # the same start describing the run again
    assert logger.store.get_run(logger.run_id).info == {"plan": 2, "code": [first]}
    logger.describe_run(info={"plan": 2, "code": [second]})  # resumed by other code
    logger.describe_run(info={"plan": 3, "code": [second]})
    assert logger.store.get_run(logger.run_id).info["code"] == [first, second]


def test_a_run_resumed_by_recording_code_keeps_the_unrecorded_start(tmp_path):
    """A run trained by an OrthoLab that recorded no code, resumed by one that does: its code list starts with
    the unrecorded part, so the resuming commit is not taken for the whole run's."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    store = Store(url)
    old = store.create_run(name="old")
    store.update_run(old, info={"plan": 1})  # as written by the earlier OrthoLab
    resumed = SQLLogger(db_url=url, run_id=old, root_dir=str(tmp_path / "runs"))
    later = {"commit": "ccccccc", "ortholab": "0.1.0", "torch": "2.13.0"}
    resumed.describe_run(info={"plan": 1, "code": [later]})
    codes = store.get_run(old).info["code"]
    assert codes == [provenance.UNRECORDED, later]
    assert [provenance.describe(c) for c in codes] == ["an OrthoLab that did not record its code", "ccccccc"]
    assert provenance.details(codes[1]).startswith("ccccccc (torch 2.13.0")


def test_a_build_without_git_takes_the_commit_it_is_given_and_refuses_what_is_not_one():
    """setup.py asks ORTHOLAB_COMMIT where there is no .git (the Docker build context, an sdist)."""
    assert provenance.given_commit(None) is None and provenance.given_commit(" ") is None
    assert provenance.given_commit("4e7683a\n") == "4e7683a"
    assert provenance.given_commit("4e7683a+changes") == "4e7683a+changes"
    full = "4e7683a" + "0" * 33
    assert provenance.given_commit(full) == full
    for wrong in ("main", "4e768", "$(git rev-parse --short HEAD)", "4E7683A", "4e7683a+dirty", full + "0"):
        with pytest.raises(ValueError, match=r"ORTHOLAB_COMMIT=.*git rev-parse --short HEAD"):
            provenance.given_commit(wrong)
