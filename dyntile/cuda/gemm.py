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
    BM, BN, BK, TM, TN, PAD = blocking.bm, blocking.bn, blocking.bk, blocking.tm, blocking.tn, blocking.pad
    NTX, NTY = blocking.threads  # thread block: x over N, y over M
    NT = NTX * NTY
    A_LOADS = BM * BK // NT  # A-tile elements loaded per thread
    B_LOADS = BK * BN // NT  # B-tile elements loaded per thread
    A_ROW = BM + PAD  # padded shared row lengths
    B_ROW = BN + PAD

    def gemm_kernel(a, b, c, a_index, b_index, z0):
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        tid = ty * NTX + tx
        n0 = cuda.blockIdx.x * BN
        m0 = cuda.blockIdx.y * BM
        z = z0 + cuda.blockIdx.z
        ia = u64(a_index[z])
        ib = u64(b_index[z])
        M = c.shape[1]
        N = c.shape[2]
        K = a.shape[2]

        a_tile = cuda.shared.array((2, BK, A_ROW), dtype)  # transposed: a_tile[s, k, m]
        b_tile = cuda.shared.array((2, BK, B_ROW), dtype)  # b_tile[s, k, n]
        acc = cuda.local.array((TM, TN), dtype)
        a_frag = cuda.local.array(TM, dtype)
        b_frag = cuda.local.array(TN, dtype)
        a_next = cuda.local.array(A_LOADS, dtype)
        b_next = cuda.local.array(B_LOADS, dtype)
        for i in range(TM):
            for j in range(TN):
                acc[i, j] = ZERO

        ntiles = (K + BK - 1) // BK
        # guarded loads of K-tile 0 into registers, then into buffer 0
        for r in range(A_LOADS):
            row = (tid + r * NT) // BK
            col = (tid + r * NT) % BK
            a_next[r] = a[ia, u64(m0 + row), u64(col)] if m0 + row < M and col < K else ZERO
        for r in range(B_LOADS):
            row = (tid + r * NT) // BN
            col = (tid + r * NT) % BN
            b_next[r] = b[ib, u64(row), u64(n0 + col)] if row < K and n0 + col < N else ZERO
        for r in range(A_LOADS):
            a_tile[0, (tid + r * NT) % BK, (tid + r * NT) // BK] = a_next[r]
        for r in range(B_LOADS):
            b_tile[0, (tid + r * NT) // BN, (tid + r * NT) % BN] = b_next[r]
        cuda.syncthreads()

        tx_u = u64(tx)
        ty_u = u64(ty)
        for t in range(ntiles):
            cur = t & 1
            # invariant: buffer `cur` holds K-tile t; nobody reads buffer 1 - cur
            k1 = (t + 1) * BK
            if t + 1 < ntiles:
                for r in range(A_LOADS):
                    row = (tid + r * NT) // BK
                    col = (tid + r * NT) % BK
                    a_next[r] = a[ia, u64(m0 + row), u64(k1 + col)] if m0 + row < M and k1 + col < K else ZERO
                for r in range(B_LOADS):
                    row = (tid + r * NT) // BN
                    col = (tid + r * NT) % BN
                    b_next[r] = b[ib, u64(k1 + row), u64(n0 + col)] if k1 + row < K and n0 + col < N else ZERO
            cur_u = u64(cur)
            for kk in range(BK):
                kk_u = u64(kk)
                for i in range(TM):
                    a_frag[i] = a_tile[cur_u, kk_u, ty_u + u64(i * NTY)]
                for j in range(TN):
                    b_frag[j] = b_tile[cur_u, kk_u, tx_u + u64(j * NTX)]
                for i in range(TM):
                    for j in range(TN):
                        acc[i, j] += a_frag[i] * b_frag[j]
            if t + 1 < ntiles:
                nxt = 1 - cur
                for r in range(A_LOADS):
                    a_tile[nxt, (tid + r * NT) % BK, (tid + r * NT) // BK] = a_next[r]
                for r in range(B_LOADS):
                    b_tile[nxt, (tid + r * NT) // BN, (tid + r * NT) % BN] = b_next[r]
            cuda.syncthreads()

        for i in range(TM):
            m = m0 + ty + i * NTY
            if m < M:
                for j in range(TN):
                    n = n0 + tx + j * NTX
                    if n < N:
                        c[u64(z), u64(m), u64(n)] = acc[i, j]

    gemm_kernel.__name__ = f"gemm_{dtype_name}_{BM}x{BN}x{BK}_{TM}x{TN}"
    gemm_kernel.__qualname__ = gemm_kernel.__name__
    return gemm_kernel


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
