"""One thread count for torch's ops and numba's compiled loops in a training process.

numba launches its thread pool once, at the first parallel kernel (the uRNN's and EURNN's CPU loops,
models/compiled.py), with NUMBA_NUM_THREADS threads (default: one per core). `numba.set_num_threads` only masks the
rest, and the masked threads wait in OpenMP's spin loop, on the cores that the process's own torch ops and other
processes need: on the 2-core Intel VM beside two 1-thread trainings, a uRNN n = 470's forward and backward over
copying T = 1000 (batch 20) took 6.10 s with pools of two and 1.72 s with pools of one (`ortholab bench --suite
numba-pool`, docs/benchmarks.md).
`size_numba_pool` sizes the pool by OMP_NUM_THREADS, which sets torch's threads (and which `reproduce --workers`
gives each row), unless NUMBA_NUM_THREADS is given. It must run before numba is first imported: `import ortholab`
does it.
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
