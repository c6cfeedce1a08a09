"""One thread count for torch's ops and numba's compiled loops in a training process.

numba launches its thread pool once, at the first parallel kernel (the uRNN's and EURNN's CPU loops,
models/compiled.py), with NUMBA_NUM_THREADS threads (default: one per core). `numba.set_num_threads` only masks the
rest, and the masked threads wait in OpenMP's spin loop, on the cores that the process's own torch ops and other
processes need: on the 2-core Intel VM beside two 1-thread trainings, a uRNN n = 470's forward and backward over
copying T = 1000 (batch 20) took 6.10 s with pools of two and 1.72 s with pools of one (`ortholab bench --suite
numba-pool`, docs/benchmarks.md).
`size_numba_pool` sizes the pool by OMP_NUM_THREADS, which sets torch's threads (and which `reproduce --workers`
gives each row), unless NUMBA_NUM_THREADS is given. It must run before numba is first imported: `import ortholab`
does it, and again models/compiled.py's `kernel`, which imports numba only at the first compiled forward, after
Lightning has given a CPU DDP rank its share of the cores.
"""

from __future__ import annotations

import os


def size_numba_pool(environ: dict | None = None) -> str | None:
    """Set NUMBA_NUM_THREADS to OMP_NUM_THREADS (a positive integer) where it is not set; returns the value set."""
    environ = os.environ if environ is None else environ
    threads = environ.get("OMP_NUM_THREADS", "").strip()
    if "NUMBA_NUM_THREADS" in environ or not threads.isdigit() or int(threads) < 1:
        return None
    environ["NUMBA_NUM_THREADS"] = threads
    return threads


def threads_each(workers: int, environ: dict | None = None) -> int | None:
    """Threads for each of `workers` training processes sharing this machine: cpu_count // workers, at least 1; None
    where OMP_NUM_THREADS is set (the user's choice stands). At a thread per core each, the processes spin against
    each other in OpenMP's wait loop: a 95 s training took over 600 s beside another on 2 cores (docs/testing.md)."""
    environ = os.environ if environ is None else environ
    return None if "OMP_NUM_THREADS" in environ else max(1, (os.cpu_count() or 1) // workers)


def exceeds_free_cores(threads: int, cores: int, busy: float) -> bool:
    """Whether `threads` exceed, by more than half a core, the cores that other work (`busy`: its load) leaves free:
    then each thread waits on the others (ortholab/cli/estimate.py `oversubscribed`, `busy_machine_note` below)."""
    return threads > cores - busy + 0.5


def cpu_times(stat: str = "/proc/stat") -> tuple[int, int] | None:
    """(busy, total) clock ticks of all cores since boot from Linux's /proc/stat, or None where there is none."""
    try:
        with open(stat) as f:
            ticks = [int(t) for t in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    if len(ticks) < 4:  # not Linux's layout (user nice system idle ...): nothing to read
        return None
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle and iowait
    return sum(ticks[:8]) - idle, sum(ticks[:8])  # guest time is counted in user time already


def other_work(sample_s: float = 0.2) -> float | None:
    """Cores' worth of work other processes are doing now: the machine's busy share over `sample_s` while this
    process waits (Linux's /proc/stat), else the 1-minute load average less this starting process's one; None where
    neither is known. The load average lags by a minute: a training started beside another just begun looks free."""
    import time

    before = cpu_times()
    if before is not None:
        time.sleep(sample_s)
        after = cpu_times()
        if after is not None and after[1] > before[1]:
            return (os.cpu_count() or 1) * (after[0] - before[0]) / (after[1] - before[1])
    if hasattr(os, "getloadavg"):
        return max(0.0, os.getloadavg()[0] - 1)
    return None


def busy_machine_note(others: float | None, threads: int, cores: int, environ: dict | None = None) -> str | None:
    """Why a CPU training may run many times slower than alone, or None: more threads than the cores that other
    work (`others`: its cores' worth, `other_work`) leaves free, with OMP_NUM_THREADS unset. Each of torch's threads
    then waits on the others' cores: on 2 cores at load 5, the demo's first 50 steps (`ortholab fit --config
    configs/demo/copying_scornn.yaml --trainer.max_steps 50`) ran at 23.6 steps/s with two threads and 39.4 with one;
    a first-hour review saw 1.45 against 46.6 at load 4.5 (docs/troubleshooting.md)."""
    environ = os.environ if environ is None else environ
    if others is None or threads <= 1 or "OMP_NUM_THREADS" in environ:
        return None
    if not exceeds_free_cores(threads, cores, others):
        return None
    return (
        f"this machine is busy (other work holds {others:.1f} of its {cores} cores) and torch trains with {threads} "
        f"threads, which then wait on one another: steps can be many times slower than alone; OMP_NUM_THREADS="
        f"{free_cores(others, cores)} before the command trains with fewer (docs/troubleshooting.md)"
    )


def free_cores(others: float, cores: int) -> int:
    """The whole cores that other work (`others`: its cores' worth) leaves free, at least 1."""
    return max(1, round(cores - others))


def threads_beside(others: float | None, threads: int, cores: int, environ: dict | None = None) -> int | None:
    """The thread count a CPU training should take instead of `threads` beside other work (busy_machine_note's
    case): the free cores, at least 1; None where `threads` fit or the user set OMP_NUM_THREADS."""
    if busy_machine_note(others, threads, cores, environ) is None:
        return None
    fewer = free_cores(others, cores)
    return fewer if fewer < threads else None


def train_beside_other_work(threads: int, adapt: bool = True, doing: str = "training") -> int:
    """The thread count to train with now, said in one `ortholab: warning:` line where other work leaves fewer free
    cores than `threads` (raised here: Lightning formats a warning raised from a file whose path names it, such as
    training/lightning_cli.py, its own way). `adapt`: take it (torch.set_num_threads, and numba's pool where numba
    has not started), else only warn (a CPU DDP rank, whose share of the cores Lightning sets). OMP_NUM_THREADS,
    where set, always stands. `doing`: the command's work as the line names it (training, testing...)."""
    import sys
    import warnings

    import torch

    from ortholab.errors import OrthoLabWarning

    if threads <= 1 or "OMP_NUM_THREADS" in os.environ:
        return threads  # nothing to measure: fewer is no remedy, or the user chose
    others, cores = other_work(), os.cpu_count() or 1
    fewer = threads_beside(others, threads, cores) if adapt else None
    if fewer is None:
        note = busy_machine_note(others, threads, cores)
        if note:
            warnings.warn(note, OrthoLabWarning, stacklevel=1)
        return threads
    torch.set_num_threads(fewer)
    if "numba" not in sys.modules:  # its pool is sized once, at its first parallel kernel (models/compiled.py)
        os.environ.setdefault("NUMBA_NUM_THREADS", str(fewer))
    warnings.warn(
        f"this machine is busy (other work holds {others:.1f} of its {cores} cores): {doing} with {fewer} of "
        f"torch's {threads} threads, which would wait on one another beside it (steps many times slower); "
        f"OMP_NUM_THREADS before the command chooses (docs/troubleshooting.md)",
        OrthoLabWarning,
        stacklevel=1,
    )
    return fewer
