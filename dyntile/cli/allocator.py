"""Keep freed memory in the process while the demo trains.

A training step allocates and frees the same large activations every step (logits
of ``B * T * vocab`` floats: 32 MiB at 2048 tokens and a 4096-word vocabulary). glibc
serves a block of 32 MiB or more with a fresh ``mmap`` and unmaps it when freed, so
every step pays page faults for zeroed pages again, and only the batches that reach
that size do: the timing would then depend on the shape, not on the work. Under glibc
the demo turns that off (``mallopt``: no ``mmap`` blocks, no trimming), which is what
PyTorch users get on the CPU from jemalloc or tcmalloc; elsewhere it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

__all__ = ["keep_freed_memory"]

_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4


def keep_freed_memory() -> bool:
    """Serve large blocks from the heap and keep freed ones; True if glibc took it."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))
