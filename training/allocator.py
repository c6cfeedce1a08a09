"""Keep freed memory in the process for reuse, as PyTorch's CUDA caching allocator does on a GPU.

On CPU, tensors come from glibc's malloc, which hands blocks over 32 MB (a recurrence's (T, B, n) buffers) and
the free top of its heap back to the kernel at once. A training step allocates the same buffers every time, so
each step then faults every page of them in again: on the 2-core VM of docs/benchmarks.md about a million page
faults (~2 s) per forward+backward of the uRNN/EURNN at T = 784, batch 128. `reuse_freed_memory()` asks glibc
to serve every block from its heap and never trim it: freed buffers are reused by the next step without faults,
and the process's resident memory stays at its peak (as on a GPU). Set ORTHOLAB_MALLOC=system to keep glibc's
defaults. No effect where the C library is not glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # mallopt parameters, <malloc.h>
NEVER_TRIM = -1  # mallopt(3): -1 disables trimming; any finite int (< 2 GB) still trims a larger free top


def reuse_freed_memory() -> bool:
    """Tell glibc's malloc to keep and reuse freed memory; True when the setting took effect."""
    if os.environ.get("ORTHOLAB_MALLOC") == "system" or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (e.g. musl has no mallopt)
        return False
    return bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, NEVER_TRIM))
