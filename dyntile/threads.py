"""Thread counts for dyntile's OpenMP copy kernels.

Copies are memory-bound: a second thread only pays off for large outputs, and on a
two-core machine more threads than cores just fight. ``DYNTILE_NUM_THREADS`` caps it.
Never call these kernels from inside a BLAS or torch parallel region.
"""
from __future__ import annotations

import os

__all__ = ["copy_threads", "max_threads"]

#: below this many output bytes a copy kernel runs single-threaded (one core nearly saturates
#: memory bandwidth; a second thread only helps for large copies on an idle machine)
PARALLEL_COPY_BYTES = 32 << 20


def max_threads() -> int:
    """Cores available to this process, capped by ``DYNTILE_NUM_THREADS``."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    cap = os.environ.get("DYNTILE_NUM_THREADS")
    if cap:
        try:
            n = max(1, min(n, int(cap)))
        except ValueError:
            raise ValueError(f"DYNTILE_NUM_THREADS should be a positive integer, but got {cap!r}") from None
    return n


def copy_threads(nbytes: int) -> int:
    """Threads for a copy kernel writing ``nbytes``: 1 for small outputs."""
    return 1 if nbytes < PARALLEL_COPY_BYTES else min(4, max_threads())
