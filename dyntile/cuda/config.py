"""Block-size table for the CUDA kernels: one place, no literals inside kernels.

Two profiles share the kernel code:

* ``"gpu"``: the configuration compiled to PTX and launched on a real device
  (float32 GEMM: 128x128 block tile, BK=8, 8x8 outputs per thread, 256 threads);
* ``"simulator"``: tiny tiles for Numba's CUDA simulator, where every thread is a
  Python thread, so tests of edge tiles stay fast.

The active profile is chosen from ``NUMBA_ENABLE_CUDASIM`` when a kernel is first
built (:func:`active_profile`). This module imports nothing from numba.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass

__all__ = ["GemmBlocking", "GEMM_BLOCKING", "COPY_BLOCK", "active_profile", "gemm_blocking", "copy_block"]


@dataclass(frozen=True)
class GemmBlocking:
    """Blocking of the shared-memory GEMM kernel.

    A block computes a ``bm x bn`` tile of C, stepping through K ``bk`` at a time;
    each thread owns ``tm x tn`` outputs, strided by the thread-grid size (thread
    ``(ty, tx)`` owns rows ``ty + i * (bm // tm)`` and columns ``tx + j * (bn // tn)``,
    so shared-memory reads of a warp hit consecutive banks and C stores coalesce).
    ``pad`` extra elements per shared row keep the transposed A store conflict-free.

    >>> GemmBlocking(128, 128, 8, 8, 8, 4).threads
    (16, 16)
    """

    bm: int
    bn: int
    bk: int
    tm: int
    tn: int
    pad: int

    @property
    def threads(self) -> tuple[int, int]:
        """Thread block ``(x, y) = (bn // tn, bm // tm)``."""
        return self.bn // self.tn, self.bm // self.tm

    @property
    def nthreads(self) -> int:
        tx, ty = self.threads
        return tx * ty

    def check(self) -> "GemmBlocking":
        """Raise ``ValueError`` unless every block is a multiple of its register block
        and the tile loads divide evenly among the threads."""
        for name in ("bm", "bn", "bk", "tm", "tn"):
            if getattr(self, name) < 1:
                raise ValueError(f"GEMM blocking {name} should be positive, but got {self}")
        if self.pad < 0:
            raise ValueError(f"GEMM blocking pad should be non-negative, but got {self}")
        if self.bm % self.tm or self.bn % self.tn:
            raise ValueError(f"bm and bn should be multiples of tm and tn, but got {self}")
        nt = self.nthreads
        if nt > 1024:
            raise ValueError(f"GEMM blocking needs {nt} threads per block, over CUDA's 1024: {self}")
        if (self.bm * self.bk) % nt or (self.bk * self.bn) % nt:
            raise ValueError(
                f"the A tile ({self.bm}x{self.bk}) and B tile ({self.bk}x{self.bn}) should split evenly "
                f"over {nt} threads, but got {self}")
        return self


GEMM_BLOCKING: dict[str, dict[str, GemmBlocking]] = {
    "gpu": {
        "float32": GemmBlocking(bm=128, bn=128, bk=8, tm=8, tn=8, pad=4),
        "float64": GemmBlocking(bm=64, bn=64, bk=8, tm=4, tn=4, pad=2),
    },
    "simulator": {
        "float32": GemmBlocking(bm=8, bn=8, bk=4, tm=2, tn=2, pad=1),
        "float64": GemmBlocking(bm=8, bn=4, bk=2, tm=2, tn=2, pad=1),
    },
}

# (x, y) threads per block of the copy kernels (pad, tile, untile): x runs along
# the contiguous last axis so loads and stores coalesce.
COPY_BLOCK: dict[str, tuple[int, int]] = {
    "gpu": (128, 4),
    "simulator": (4, 2),
}


def active_profile() -> str:
    """``"simulator"`` when ``NUMBA_ENABLE_CUDASIM`` is on, else ``"gpu"``."""
    numba = sys.modules.get("numba")
    if numba is not None and "numba.cuda" in sys.modules:
        # numba decided at import time; the environment may have changed since
        on = bool(numba.config.ENABLE_CUDASIM)
    else:
        on = os.environ.get("NUMBA_ENABLE_CUDASIM", "0").strip() not in ("", "0")
    return "simulator" if on else "gpu"


def gemm_blocking(dtype_name: str, profile: str | None = None) -> GemmBlocking:
    """The GEMM blocking for ``"float32"`` or ``"float64"`` in ``profile`` (default: active)."""
    table = GEMM_BLOCKING[profile or active_profile()]
    try:
        return table[dtype_name]
    except KeyError:
        raise TypeError(f"the CUDA GEMM supports {sorted(table)}, but got {dtype_name}") from None


def copy_block(profile: str | None = None) -> tuple[int, int]:
    """Threads per block ``(x, y)`` of the copy kernels in ``profile`` (default: active)."""
    return COPY_BLOCK[profile or active_profile()]
