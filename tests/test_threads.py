"""ortholab/threads.py: numba's thread pool sized by OMP_NUM_THREADS, so that no masked pool thread spins on the
cores other trainings use."""

import os
import subprocess
import sys

import pytest

from ortholab.threads import busy_machine_note, cpu_times, size_numba_pool, threads_beside, threads_each


def test_the_pool_follows_omp_num_threads_unless_numba_num_threads_is_given():
    environ = {"OMP_NUM_THREADS": "1"}
    assert size_numba_pool(environ) == "1" and environ["NUMBA_NUM_THREADS"] == "1"
    given = {"OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "2"}
    assert size_numba_pool(given) is None and given["NUMBA_NUM_THREADS"] == "2"  # the user's own choice stays
    for threads in ("", "0", "two", "-1"):
        environ = {"OMP_NUM_THREADS": threads}
        assert size_numba_pool(environ) is None and "NUMBA_NUM_THREADS" not in environ
    assert size_numba_pool({}) is None


def _printed(code: str, env: dict) -> list[str]:
    """What `code` prints, run in a fresh Python with `env` (numba's pool is sized once per process)."""
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.split()


@pytest.mark.parametrize("omp, numba_threads, expected", [("1", None, 1), ("1", "2", 2)])
def test_importing_ortholab_sizes_the_pool_numba_launches(omp, numba_threads, expected):
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_NUM_THREADS"}
    env["OMP_NUM_THREADS"] = omp
    if numba_threads:
        env["NUMBA_NUM_THREADS"] = numba_threads
    code = (
        "import ortholab.models.urnn_kernels, numba, torch\n"
        "from ortholab.models.compiled import match_torch_threads\n"
        "match_torch_threads()\n"
        "print(numba.config.NUMBA_NUM_THREADS, numba.get_num_threads(), torch.get_num_threads())"
    )
    pool, used, torch_threads = map(int, _printed(code, env))
    assert pool == expected
    if numba_threads is None:  # a pool of one: the kernels and torch's ops on the one thread OMP_NUM_THREADS gives
        assert used == torch_threads == 1


@pytest.mark.parametrize("family, options", [("urnn", ""), ("eurnn", "recurrence='layers'")])
def test_a_ddp_rank_given_its_share_after_import_launches_numba_with_that_share(family, options):
    """Lightning's DDP launcher sets each rank's OMP_NUM_THREADS after the model registry is imported: numba must not
    be imported by then (it fixes its pool size at import), but at the first compiled forward (models/compiled.py)."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS")}
    code = (
        "import os, sys, torch\n"
        "from ortholab.models import FAMILIES\n"
        "import ortholab.datamodules, ortholab.training.module\n"
        f"layer = FAMILIES['{family}'](2, 4, {options})\n"
        "print('numba' in sys.modules)\n"
        "os.environ['OMP_NUM_THREADS'] = '1'; torch.set_num_threads(1)  # as lightning's _set_num_threads_if_needed\n"
        "layer(torch.randn(2, 5, 2)).sum().backward()  # on the CPU: the compiled kernels\n"
        "import numba\n"
        "print(numba.config.NUMBA_NUM_THREADS, numba.get_num_threads())"
    )
    imported_early, pool, used = _printed(code, env)
    assert imported_early == "False"
    assert (pool, used) == ("1", "1")


def test_each_pytest_worker_and_its_children_take_only_their_share_of_the_cores():
    """conftest.py: two xdist workers at a thread per core each spun against each other (a 95 s test past 600 s)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    share = threads_each(workers, {})
    if workers == 1 or os.environ["OMP_NUM_THREADS"] != str(share):
        pytest.skip("one pytest process, or OMP_NUM_THREADS given by the caller: nothing to share out")
    code = "import torch, ortholab, os; print(torch.get_num_threads(), os.environ['NUMBA_NUM_THREADS'])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == [str(share), str(share)]
    import torch

    assert torch.get_num_threads() == share


def test_threads_each_shares_the_cores_unless_the_user_chose(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert [threads_each(k, {}) for k in (1, 2, 3, 8, 16)] == [8, 4, 2, 1, 1]
    assert threads_each(2, {"OMP_NUM_THREADS": "3"}) is None
    monkeypatch.setattr(os, "cpu_count", lambda: None)  # unknown: one core
    assert threads_each(2, {}) == 1


def test_a_busy_machine_is_named_only_where_threads_would_wait_on_other_work():
    quiet, cores = {}, 2
    assert busy_machine_note(0.0, 2, cores, quiet) is None  # nothing else running: both cores are this process's
    assert busy_machine_note(0.4, 2, cores, quiet) is None  # a little other work: two threads still fit
    assert busy_machine_note(1.0, 2, cores, quiet)  # a core taken: two threads wait on it (ortholab/cli/estimate.py)
    note = busy_machine_note(3.5, 2, cores, quiet)  # the first-hour review's machine: two trainings beside a CI run
    assert "other work holds 3.5 of its 2 cores" in note and "OMP_NUM_THREADS=1 before the command" in note
    assert busy_machine_note(3.5, 1, cores, quiet) is None  # one thread: fewer is no remedy
    assert busy_machine_note(3.5, 2, cores, {"OMP_NUM_THREADS": "2"}) is None  # the user chose
    assert busy_machine_note(None, 2, cores, quiet) is None  # nothing known on this platform


def test_the_threads_taken_beside_other_work_are_the_free_cores():
    assert threads_beside(1.0, 2, 2, {}) == 1  # one of two cores busy: one thread
    assert threads_beside(3.5, 2, 2, {}) == 1  # never fewer than one
    assert threads_beside(4.0, 16, 16, {}) == 12 and threads_beside(0.3, 16, 16, {}) is None
    assert threads_beside(1.0, 2, 2, {"OMP_NUM_THREADS": "2"}) is None  # the user's choice stands


def test_other_work_is_the_busy_share_of_the_cores_while_this_process_waits(monkeypatch, tmp_path):
    import ortholab.threads as threads

    samples = iter([(100, 400), (150, 600)])  # 50 of 200 ticks busy: a quarter of the machine
    monkeypatch.setattr(threads, "cpu_times", lambda: next(samples))
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert threads.other_work(sample_s=0) == pytest.approx(2.0)
    stat = tmp_path / "stat"  # Linux's layout: user nice system idle iowait irq softirq steal guest guest_nice
    stat.write_text("cpu  10 20 30 400 50 6 7 8 9 10\ncpu0 1 2 3 4 5 6 7 8 9 10\n")
    assert cpu_times(str(stat)) == (10 + 20 + 30 + 6 + 7 + 8, 10 + 20 + 30 + 400 + 50 + 6 + 7 + 8)
    assert cpu_times(str(tmp_path / "absent")) is None
    stat.write_text("cpu  10 20\n")  # another layout: unread, never an IndexError in fit
    assert cpu_times(str(stat)) is None


def test_fit_beside_other_work_trains_with_the_free_cores_and_says_so_once(tmp_path):
    from test_cli import DEMO, TINY

    from db.store import Store

    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS")}
    busy = (
        "import os, sys; os.cpu_count = lambda: 2; import ortholab.threads as t; t.other_work = lambda: {};"
        "import torch; torch.set_num_threads(2); from ortholab.cli.main import main; main(sys.argv[1:])"
    )
    for others, threads in ((1.0, 1), (0.0, 2)):  # one core taken: one thread; a free machine: both
        db = f"sqlite:///{tmp_path / f'{threads}.db'}"
        done = subprocess.run(
            [sys.executable, "-c", busy.format(others), "fit", "--config", DEMO, *TINY, "--db", db],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        said = [line for line in done.stderr.splitlines() if "this machine is busy" in line]
        if threads == 1:
            assert said == [said[0]] and said[0].startswith(
                "ortholab: warning: this machine is busy (other work holds 1.0 of its 2 cores): training with 1 of "
            )
        else:
            assert said == []
        store = Store(db, access="read")
        (run,) = store.list_runs()
        machine = store.get_run(run.id).info["code"][0]["machine"]
        store.close()
        assert machine.endswith(f", {threads} torch thread{'s' if threads > 1 else ''}"), machine


def test_fit_called_in_a_longer_process_gives_its_threads_back(tmp_path, monkeypatch):
    import torch
    from test_cli import DEMO, TINY

    import ortholab.threads as threads
    from ortholab.cli.main import main

    monkeypatch.chdir(tmp_path)  # its run folders: under tmp_path/runs, not the checkout's
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("NUMBA_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "other_work", lambda: 1.0)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    db = f"sqlite:///{tmp_path / 'r.db'}"
    try:
        with pytest.warns(match="training with 1 of torch's 2 threads"):
            main(["fit", "--config", DEMO, *TINY, "--db", db])
        assert torch.get_num_threads() == 2  # a notebook's or a test's own setting outlives the fit
        assert "NUMBA_NUM_THREADS" not in os.environ  # nor is numba's pool size left to this process's children
        with pytest.warns(match="testing with 1 of torch's 2 threads"):  # an evaluation takes the free cores too
            main(["test", "--run", "1", "--db", db])
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
