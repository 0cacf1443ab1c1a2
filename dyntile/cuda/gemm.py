"""Shared-memory, register-blocked GEMM kernel: ``C[z] = A[a_index[z]] @ B[b_index[z]]``.

Each block computes a ``BM x BN`` tile of C (grid x over N, y over M, z over the
batch); each thread accumulates ``TM x TN`` outputs in registers. K is walked
``BK`` at a time through two shared-memory buffers (double buffering): while the
block multiplies the tile in one buffer, each thread's loads of the next tile are
in flight into registers, then stored into the other buffer; one ``syncthreads``
per K step separates the two. A is stored transposed (``As[k, m]``) and padded by
``PAD`` so its store is conflict-free; every thread reads its fragments
``As[k, ty + i*NTY]`` and ``Bs[k, tx + j*NTX]`` (consecutive banks within a warp),
and writes C at ``(ty + i*NTY, tx + j*NTX)`` so stores coalesce. Loads are
guarded (zero outside A and B), so any M, N, K works, including edge tiles.

The kernel is built by :func:`make_gemm_pyfunc` from a :class:`GemmBlocking`
(the block sizes are closure constants, so Numba unrolls the register loops);
:func:`gemm_kernel` returns the jitted kernel of the active profile.
"""

from __future__ import annotations

import functools

import numpy as np

from .config import GemmBlocking, gemm_blocking
from .runtime import cuda

__all__ = ["make_gemm_pyfunc", "gemm_kernel"]


def make_gemm_pyfunc(blocking: GemmBlocking, dtype_name: str):
    """The plain Python kernel function for ``blocking`` and ``dtype_name``
    (``"float32"``/``"float64"``), ready for ``cuda.jit`` or ``cuda.compile_ptx``."""
    blocking.check()
    from numba import types

    dtype = getattr(types, dtype_name)
    u64 = types.uint64  # unsigned indices: Numba emits no negative-index wraparound code
    ZERO = np.dtype(dtype_name).type(0)  # typed zero: the loads stay in dtype
    BM, BN, BK, TM, TN = blocking.bm, blocking.bn, blocking.bk, blocking.tm, blocking.tn
    NTX, NTY = blocking.threads  # thread block: x over N, y over M
    A_LOADS, B_LOADS = BM * BK // (NTX * NTY), BK * BN // (NTX * NTY)  # tile elements per thread
    A_ROW, B_ROW = BM + blocking.pad, BN + blocking.pad  # padded shared row lengths
    load_tile, store_tile, multiply_tile = _tile_steps(blocking, dtype_name)

    def gemm_kernel(a, b, c, a_index, b_index, z0):
        n0 = cuda.blockIdx.x * BN
        m0 = cuda.blockIdx.y * BM
        z = z0 + cuda.blockIdx.z
        ia = u64(a_index[z])
        ib = u64(b_index[z])
        acc = cuda.local.array((TM, TN), dtype)
        for i in range(TM):
            for j in range(TN):
                acc[i, j] = ZERO
        a_tile = cuda.shared.array((2, BK, A_ROW), dtype)  # transposed: a_tile[s, k, m]
        b_tile = cuda.shared.array((2, BK, B_ROW), dtype)  # b_tile[s, k, n]
        ntiles = (a.shape[2] + BK - 1) // BK
        a_next = cuda.local.array(A_LOADS, dtype)
        b_next = cuda.local.array(B_LOADS, dtype)
        load_tile(a, b, c, ia, ib, m0, n0, 0, a_next, b_next)  # K-tile 0 into buffer 0
        store_tile(a_tile, b_tile, 0, a_next, b_next)
        cuda.syncthreads()
        for t in range(ntiles):
            cur = t & 1
            # invariant: buffer `cur` holds K-tile t; nobody reads buffer 1 - cur
            if t + 1 < ntiles:  # the next tile's loads are in flight during the products
                load_tile(a, b, c, ia, ib, m0, n0, (t + 1) * BK, a_next, b_next)
            multiply_tile(a_tile, b_tile, u64(cur), acc)
            if t + 1 < ntiles:
                store_tile(a_tile, b_tile, 1 - cur, a_next, b_next)
            cuda.syncthreads()
        for i in range(TM):
            m = m0 + cuda.threadIdx.y + i * NTY
            if m < c.shape[1]:
                for j in range(TN):
                    n = n0 + cuda.threadIdx.x + j * NTX
                    if n < c.shape[2]:
                        c[u64(z), u64(m), u64(n)] = acc[i, j]

    gemm_kernel.__name__ = f"gemm_{dtype_name}_{BM}x{BN}x{BK}_{TM}x{TN}"
    gemm_kernel.__qualname__ = gemm_kernel.__name__
    return gemm_kernel


def _tile_steps(blocking: GemmBlocking, dtype_name: str):
    """The kernel's three steps on one K-tile, as device functions inlined into it:
    ``load_tile`` (this thread's guarded loads of the tile at ``k0`` into registers),
    ``store_tile`` (those registers into shared buffer ``s``) and ``multiply_tile``
    (``acc += `` the products of shared buffer ``s``)."""
    from numba import types

    u64 = types.uint64
    dtype = getattr(types, dtype_name)
    ZERO = np.dtype(dtype_name).type(0)
    BM, BN, BK, TM, TN = blocking.bm, blocking.bn, blocking.bk, blocking.tm, blocking.tn
    NTX, NTY = blocking.threads
    NT = NTX * NTY
    A_LOADS, B_LOADS = BM * BK // NT, BK * BN // NT
    # Numba-level inlining: a separately compiled device function would ask the current
    # device for its compute capability, which compile_ptx on a machine without one lacks
    jit = cuda.jit(device=True) if cuda.config.ENABLE_CUDASIM else cuda.jit(device=True, inline="always")

    @jit
    def load_tile(a, b, c, ia, ib, m0, n0, k0, a_next, b_next):
        tid = cuda.threadIdx.y * NTX + cuda.threadIdx.x
        M, N, K = c.shape[1], c.shape[2], a.shape[2]
        for r in range(A_LOADS):
            row = (tid + r * NT) // BK
            col = (tid + r * NT) % BK
            a_next[r] = a[ia, u64(m0 + row), u64(k0 + col)] if m0 + row < M and k0 + col < K else ZERO
        for r in range(B_LOADS):
            row = (tid + r * NT) // BN
            col = (tid + r * NT) % BN
            b_next[r] = b[ib, u64(k0 + row), u64(n0 + col)] if k0 + row < K and n0 + col < N else ZERO

    @jit
    def store_tile(a_tile, b_tile, s, a_next, b_next):
        tid = cuda.threadIdx.y * NTX + cuda.threadIdx.x
        for r in range(A_LOADS):
            a_tile[s, (tid + r * NT) % BK, (tid + r * NT) // BK] = a_next[r]
        for r in range(B_LOADS):
            b_tile[s, (tid + r * NT) // BN, (tid + r * NT) % BN] = b_next[r]

    @jit
    def multiply_tile(a_tile, b_tile, s, acc):
        tx_u, ty_u = u64(cuda.threadIdx.x), u64(cuda.threadIdx.y)
        a_frag = cuda.local.array(TM, dtype)
        b_frag = cuda.local.array(TN, dtype)
        for kk in range(BK):
            kk_u = u64(kk)
            for i in range(TM):
                a_frag[i] = a_tile[s, kk_u, ty_u + u64(i * NTY)]
            for j in range(TN):
                b_frag[j] = b_tile[s, kk_u, tx_u + u64(j * NTX)]
            for i in range(TM):
                for j in range(TN):
                    acc[i, j] += a_frag[i] * b_frag[j]

    return load_tile, store_tile, multiply_tile


@functools.cache
def gemm_kernel(dtype_name: str, max_registers: int | None = None):
    """The jitted GEMM kernel for ``dtype_name`` in the active profile (built once).

    ``max_registers`` caps registers per thread (ptxas ``-maxrregcount``): the float32
    kernel needs about 145 without a cap (1 block of 256 threads per SM); 128 allows
    2 blocks per SM at the price of a small spill. ``gpu_check.py`` times both.
    """
    pyfunc = make_gemm_pyfunc(gemm_blocking(dtype_name), dtype_name)
    if max_registers is None or cuda.config.ENABLE_CUDASIM:
        return cuda.jit(pyfunc)
    return cuda.jit(pyfunc, max_registers=max_registers)
