"""Thread counts for dyntile's OpenMP copy kernels.

Copies are memory-bound: a second thread only pays off for large outputs, and on a
two-core machine more threads than cores just fight. ``DYNTILE_NUM_THREADS`` caps it.
Never call these kernels from inside a BLAS or torch parallel region.
"""

from __future__ import annotations

import os

__all__ = ["copy_threads", "max_threads", "in_forked_child", "PARALLEL_COPY_BYTES"]

#: below this many output bytes a copy kernel runs single-threaded (one core nearly saturates
#: memory bandwidth; a second thread only helps for large copies on an idle machine)
PARALLEL_COPY_BYTES = 32 << 20


#: True in a process forked from the one that imported dyntile. GNU OpenMP's thread
#: pool does not survive fork: a parallel region in the child waits forever for the
#: parent's threads. Forked children (DataLoader workers) run every kernel on one thread.
_FORKED = False


def _mark_forked() -> None:
    global _FORKED
    _FORKED = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_mark_forked)


def in_forked_child() -> bool:
    """True in a process forked after dyntile was imported (OpenMP must stay off there)."""
    return _FORKED


def max_threads() -> int:
    """Cores available to this process, capped by ``DYNTILE_NUM_THREADS``; 1 in a
    forked child (see :func:`in_forked_child`)."""
    if _FORKED:
        return 1
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
    """Threads for a copy kernel writing ``nbytes``: 1 for small outputs (and in a forked child)."""
    return 1 if nbytes < PARALLEL_COPY_BYTES else min(4, max_threads())
