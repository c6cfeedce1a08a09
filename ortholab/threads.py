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


def busy_machine_note(load: float | None, threads: int, cores: int, environ: dict | None = None) -> str | None:
    """Why a CPU training may run many times slower than alone, or None: more threads than the cores that other
    work leaves free (`load`: the 1-minute load average, this starting process included), with OMP_NUM_THREADS
    unset. Each of torch's threads then waits on the others' cores: on 2 cores at load 5, the demo's first 50 steps
    (`ortholab fit --config configs/demo/copying_scornn.yaml --trainer.max_steps 50`) ran at 23.6 steps/s with two
    threads and 39.4 with one; a first-hour review saw 1.45 against 46.6 at load 4.5 (docs/troubleshooting.md)."""
    environ = os.environ if environ is None else environ
    if load is None or threads <= 1 or "OMP_NUM_THREADS" in environ:
        return None
    others = load - 1  # the load counts this process, starting up, as about one
    if not exceeds_free_cores(threads, cores, others):
        return None
    free = cores - others
    return (
        f"this machine is busy (load average {load:.1f} on {cores} cores) and torch trains with {threads} threads, "
        f"which then wait on one another: steps can be many times slower than alone; OMP_NUM_THREADS="
        f"{max(1, round(free))} before the command trains with fewer (docs/troubleshooting.md)"
    )


def warn_if_busy(threads: int) -> None:
    """busy_machine_note's warning for this machine now, as one `ortholab: warning:` line (raised here: Lightning
    formats a warning raised from a file whose path names it, such as training/lightning_cli.py, its own way)."""
    import warnings

    from ortholab.errors import OrthoLabWarning

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    note = busy_machine_note(load, threads, os.cpu_count() or 1)
    if note:
        warnings.warn(note, OrthoLabWarning, stacklevel=1)
