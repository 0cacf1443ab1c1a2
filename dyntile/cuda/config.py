"""Block-size table for the CUDA kernels: one place, no literals inside kernels.

Two profiles share the kernel code:

* ``"gpu"``: the configuration compiled to PTX and launched on a real device
  (float32 GEMM: 128x128 block tile, BK=8, 8x8 outputs per thread, 256 threads);
* ``"simulator"``: tiny tiles for Numba's CUDA simulator, where every thread is a
  Python thread, so tests of edge tiles stay fast.

The attention kernels (:mod:`.attention`) have their own table,
:data:`ATTENTION_BLOCKING`, per profile, pass (forward, backward) and dtype.

The active profile is chosen from ``NUMBA_ENABLE_CUDASIM`` when a kernel is first
built (:func:`active_profile`). This module imports nothing from numba.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

__all__ = [
    "GemmBlocking",
    "GEMM_BLOCKING",
    "COPY_BLOCK",
    "AttentionBlocking",
    "ATTENTION_BLOCKING",
    "SHARED_MEMORY_LIMIT",
    "active_profile",
    "gemm_blocking",
    "copy_block",
    "attention_blocking",
]

SHARED_MEMORY_LIMIT = 48 * 1024  # bytes of static shared memory a block may declare


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

    def check(self) -> GemmBlocking:
        """Raise ``ValueError`` unless every block is a multiple of its register block
        and the tile loads divide evenly among the threads."""
        _check_sizes(self, "GEMM", ("bm", "bn", "bk", "tm", "tn"))
        if self.bm % self.tm or self.bn % self.tn:
            raise ValueError(f"bm and bn should be multiples of tm and tn, but got {self}")
        tiles = f"the A tile ({self.bm}x{self.bk}) and B tile ({self.bk}x{self.bn})"
        _check_threads(self, "GEMM", tiles, (self.bm * self.bk, self.bk * self.bn))
        return self


def _check_sizes(blocking, kind: str, names: tuple[str, ...]) -> None:
    """``ValueError`` unless the block sizes ``names`` are positive and the pad is not negative."""
    for name in names:
        if getattr(blocking, name) < 1:
            raise ValueError(f"{kind} blocking {name} should be positive, but got {blocking}")
    if blocking.pad < 0:
        raise ValueError(f"{kind} blocking pad should be non-negative, but got {blocking}")


def _check_threads(blocking, kind: str, tiles: str, sizes: tuple[int, ...]) -> None:
    """``ValueError`` unless the block has at most CUDA's 1024 threads and each tile of
    ``sizes`` elements splits evenly over them."""
    nt = blocking.nthreads
    if nt > 1024:
        raise ValueError(f"{kind} blocking needs {nt} threads per block, over CUDA's 1024: {blocking}")
    if any(size % nt for size in sizes):
        raise ValueError(f"{tiles} should split evenly over {nt} threads, but got {blocking}")


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


@dataclass(frozen=True)
class AttentionBlocking:
    """Blocking of the attention kernels (flash-attention-2 tiles).

    A block owns ``bm`` rows (queries in the forward and dQ kernels, keys in the dK/dV
    kernel) of one segment and head, and walks the other side ``bn`` tokens at a
    step; head dimensions are loaded ``dc`` at a time (one chunk when ``D <= dc``, and
    the row tile then stays in shared memory for the whole walk). Thread ``(tx, ty)``
    of the ``ntx x nty`` block owns score rows ``ty + i * nty`` (``i < tm``) and
    columns ``tx + j * ntx`` (``j < tn``), and output columns ``tx + j * ntx`` of each
    chunk (``j < dj``). Every tile is stored transposed, ``[dc, tokens + pad]``.

    >>> AttentionBlocking(64, 32, 64, 16, 16, 1).tm, AttentionBlocking(64, 32, 64, 16, 16, 1).dj
    (4, 4)
    """

    bm: int
    bn: int
    dc: int
    ntx: int
    nty: int
    pad: int

    @property
    def threads(self) -> tuple[int, int]:
        return self.ntx, self.nty

    @property
    def nthreads(self) -> int:
        return self.ntx * self.nty

    @property
    def tm(self) -> int:
        return self.bm // self.nty

    @property
    def tn(self) -> int:
        return self.bn // self.ntx

    @property
    def dj(self) -> int:
        return self.dc // self.ntx

    def shared_bytes(self, itemsize: int, backward: bool) -> int:
        """Static shared memory of the forward kernel, or of the larger backward one (dK/dV)."""
        row, col = self.dc * (self.bm + self.pad), self.dc * (self.bn + self.pad)
        scores = self.bm * (self.bn + self.pad)
        if backward:  # K, V rows; Q, dO columns; P and dS
            return itemsize * (2 * row + 2 * col + 2 * scores)
        return itemsize * (row + col + scores + self.bm * self.ntx)  # Q rows, K/V columns, P, row partials

    def check(self, itemsize: int = 4, backward: bool = False, limit: int | None = None) -> AttentionBlocking:
        """Raise ``ValueError`` unless the tiles split evenly over the threads (scores,
        output columns and tile loads) and fit ``limit`` bytes of shared memory."""
        _check_sizes(self, "attention", ("bm", "bn", "dc", "ntx", "nty"))
        if self.bm % self.nty or self.bn % self.ntx or self.dc % self.ntx:
            raise ValueError(f"bm should be a multiple of nty, bn and dc multiples of ntx, but got {self}")
        tiles = f"the row ({self.bm}x{self.dc}) and column ({self.bn}x{self.dc}) tiles"
        _check_threads(self, "attention", tiles, (self.bm * self.dc, self.bn * self.dc))
        nbytes = self.shared_bytes(itemsize, backward)
        if limit is not None and nbytes > limit:
            raise ValueError(
                f"attention blocking needs {nbytes} bytes of shared memory, over {limit}: {self}"
            )
        return self


# profile -> pass -> dtype. The backward pass holds six tiles, so its tiles are smaller.
ATTENTION_BLOCKING: dict[str, dict[str, dict[str, AttentionBlocking]]] = {
    "gpu": {
        "forward": {
            "float32": AttentionBlocking(bm=64, bn=32, dc=64, ntx=16, nty=16, pad=1),
            "float64": AttentionBlocking(bm=32, bn=32, dc=32, ntx=16, nty=8, pad=1),
        },
        "backward": {
            "float32": AttentionBlocking(bm=32, bn=32, dc=64, ntx=16, nty=8, pad=1),
            "float64": AttentionBlocking(bm=32, bn=16, dc=32, ntx=8, nty=16, pad=1),
        },
    },
    "simulator": {  # rows and columns of unequal tiles, so no geometry slip hides
        "forward": {
            "float32": AttentionBlocking(bm=4, bn=2, dc=8, ntx=2, nty=2, pad=1),
            "float64": AttentionBlocking(bm=4, bn=2, dc=8, ntx=2, nty=2, pad=1),
        },
        "backward": {
            "float32": AttentionBlocking(bm=2, bn=4, dc=8, ntx=2, nty=2, pad=1),
            "float64": AttentionBlocking(bm=2, bn=4, dc=8, ntx=2, nty=2, pad=1),
        },
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


def attention_blocking(dtype_name: str, backward: bool, profile: str | None = None) -> AttentionBlocking:
    """The attention blocking of the forward or backward pass for ``"float32"`` or
    ``"float64"`` in ``profile`` (default: active)."""
    table = ATTENTION_BLOCKING[profile or active_profile()]["backward" if backward else "forward"]
    try:
        return table[dtype_name]
    except KeyError:
        raise TypeError(f"the CUDA attention kernels support {sorted(table)}, but got {dtype_name}") from None
