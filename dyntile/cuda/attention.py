"""Varlen (segment-masked) softmax attention on the GPU, flash-attention-2 style.

Tokens ``[N, H, D]`` are packed segments: segment ``s`` is tokens ``starts[s] ..
starts[s] + lengths[s] - 1``, and a token attends to the tokens of its own segment
(with ``causal``, those at or before it). Tokens in no segment are padding: zeros out,
zero gradients.

* forward: one block per (query tile, head) walks its segment's keys a tile at a
  time: ``S = scale * Q K^T`` in registers, an online softmax (running row max ``m``
  and sum ``l``; earlier output rescaled by ``exp(m_old - m_new)``), ``O += P V``; it
  writes ``O / l`` and the log-sum-exp ``lse = m + log l``. No score matrix is kept
  beyond one ``bm x bn`` tile.
* backward: ``delta = rowsum(dO * O)`` first; then one block per (key tile, head)
  recomputes ``P = exp(scale * K Q^T - lse)`` for each query tile and accumulates
  ``dV += P^T dO`` and ``dK += scale * dS^T Q`` (``dS = P * (dO V^T - delta)``), and
  one block per (query tile, head) accumulates ``dQ += scale * dS K``. Each output
  row has one writer: no atomics, and the result is deterministic.

Non-finite inputs give what ``softmax(scale * q K^T) V`` over the keys a query sees
gives in IEEE arithmetic (NaN or inf for the queries that see the value, and their
gradients): a pair a row does not see is 0 exactly, and when a tile's right operand
holds inf or NaN (``0 * inf`` is NaN) the accumulation skips the pairs each row does
not see instead of adding their zeros.

Blocking comes from :data:`dyntile.cuda.config.ATTENTION_BLOCKING`. A kernel is built
per dtype and number of head-dimension chunks (``ceil(D / dc)``); with one chunk the
row tile stays in shared memory for the whole walk. Entry points:
:func:`varlen_attention_forward`, :func:`varlen_attention_backward`.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numpy as np

from dyntile.attention import check_heads

from .config import AttentionBlocking, attention_blocking, copy_block
from .launch import MAX_GRID_X, MAX_GRID_YZ, attention_items, copy_launch
from .runtime import as_device, bounds_meet, cuda, numpy_dtype, output

__all__ = [
    "varlen_attention_forward",
    "varlen_attention_backward",
    "make_forward_pyfunc",
    "make_dq_pyfunc",
    "make_dkdv_pyfunc",
    "make_delta_pyfunc",
    "zero_rows3_pyfunc",
    "zero_rows2_pyfunc",
]

_DTYPES = ("float32", "float64")


class TileOps(NamedTuple):
    """The device functions the three kernels share (see :func:`_tile_ops`)."""

    load_rows: object
    load_cols: object
    dot_acc: object
    pv_acc: object
    pv_acc_seen: object
    probs_grads: object
    fill: object
    store_rows: object
    pv_step: object


def _device_jit():
    """``cuda.jit`` for device functions, inlined at the Numba level: a separately compiled
    device function would ask the current device for its compute capability, which
    compile_ptx on a machine without one lacks."""
    return cuda.jit(device=True) if cuda.config.ENABLE_CUDASIM else cuda.jit(device=True, inline="always")


def _tile_ops(blk: AttentionBlocking, dtype_name: str) -> TileOps:
    """Device functions shared by the three kernels (block sizes are closure constants).

    * ``load_rows(x, h, base, r0, L, d0, buf)`` / ``load_cols``: ``buf[dd, r] =
      x[base + r0 + r, h, d0 + dd]`` for a tile of ``bm`` / ``bn`` tokens, zero past the
      segment's ``L`` tokens or past ``D``; consecutive threads read consecutive ``d``
      (coalesced) and store down a padded column (no bank conflicts); returns 1 when
      this thread loaded an inf or NaN, else 0;
    * ``dot_acc(a, b, acc)``: ``acc[i, j] += sum_dd a[dd, row i] * b[dd, col j]``
      (a score tile from two transposed tiles);
    * ``pv_acc(p, b, acc, c)``: ``acc[i, c * dj + j] += sum_k p[row i, k] * b[col j, k]``
      (chunk ``c`` of an output tile from a score tile and a transposed value tile);
    * ``pv_acc_seen(p, b, acc, c, diag, keys_are_rows)``: the same over the pairs a row
      sees under ``causal`` only (``k <= row + diag``, or ``>=`` when rows are keys),
      for a ``b`` that may hold inf or NaN;
    * ``pv_step(p, b, acc, c, bad, seen_only, diag)``: a barrier that publishes ``p`` and
      ``b``, then ``pv_acc``, or ``pv_acc_seen`` (rows are queries) where ``seen_only``
      and a thread's ``bad`` is set, then a barrier that frees them;
    * ``probs_grads(s_acc, dp_acc, lse_v, delta_v, r0, c0, L, scale, causal,
      keys_are_rows)``: the backward's recomputation, in place: ``s_acc`` becomes
      ``P = exp(scale * S - lse)`` and ``dp_acc`` ``dS = P * (dP - delta)``, 0 for a pair
      outside the segment or not seen; ``lse_v``, ``delta_v`` per row, or per column
      when rows are keys;
    * ``fill(acc, value)``: every element of a 2-D per-thread array;
    * ``store_rows(x, h, base, r0, L, acc, nch, mul)``: ``x[base + r0 + row, h, d] =
      acc[i, c * dj + j] * mul`` for this thread's rows inside the segment and its
      columns of the ``nch`` chunks inside ``D`` (the kernels' epilogue).
    """
    jit = _device_jit()
    load_rows, load_cols = (_load_op(blk, dtype_name, tokens, jit) for tokens in (blk.bm, blk.bn))
    dot_acc, pv_acc, pv_acc_seen, pv_step = _product_ops(blk, dtype_name, jit)
    probs_grads = _probs_grads_op(blk, dtype_name, jit)
    fill, store_rows = _row_ops(blk, jit)
    return TileOps(load_rows, load_cols, dot_acc, pv_acc, pv_acc_seen, probs_grads, fill, store_rows, pv_step)


def _load_op(blk: AttentionBlocking, dtype_name: str, tokens: int, jit):
    """``load(x, h, base, r0, L, d0, buf)`` of a tile of ``tokens`` rows (see :func:`_tile_ops`)."""
    from numba import types

    ZERO = np.dtype(dtype_name).type(0)
    DC, NTX, NT = blk.dc, blk.ntx, blk.ntx * blk.nty
    LOADS = tokens * DC // NT  # elements per thread (the check makes it exact)
    u64 = types.uint64  # unsigned shared-memory indices: no negative-index wraparound code

    @jit
    def load(x, h, base, r0, L, d0, buf):
        tid = cuda.threadIdx.y * NTX + cuda.threadIdx.x
        D = x.shape[2]
        bad = 0  # an integer: the predicate of syncthreads_or
        for e in range(LOADS):
            r = (tid + e * NT) // DC
            dd = (tid + e * NT) % DC
            row = r0 + r
            d = d0 + dd
            val = x[base + row, h, d] if row < L and d < D else ZERO
            buf[u64(dd), u64(r)] = val
            if not math.isfinite(val):
                bad = 1
        return bad

    return load


def _product_ops(blk: AttentionBlocking, dtype_name: str, jit):
    """``dot_acc``, ``pv_acc``, ``pv_acc_seen`` and ``pv_step`` (see :func:`_tile_ops`)."""
    from numba import types

    dtype = getattr(types, dtype_name)
    BN, DC, NTX, NTY, TM, TN, DJ = blk.bn, blk.dc, blk.ntx, blk.nty, blk.tm, blk.tn, blk.dj
    u64 = types.uint64

    @jit
    def dot_acc(a, b, acc):
        tx = u64(cuda.threadIdx.x)
        ty = u64(cuda.threadIdx.y)
        af = cuda.local.array(TM, dtype)
        bf = cuda.local.array(TN, dtype)
        for dd in range(DC):
            k = u64(dd)
            for i in range(TM):
                af[i] = a[k, ty + u64(i * NTY)]
            for j in range(TN):
                bf[j] = b[k, tx + u64(j * NTX)]
            for i in range(TM):
                for j in range(TN):
                    acc[i, j] += af[i] * bf[j]

    @jit
    def pv_acc(p, b, acc, c):
        tx = u64(cuda.threadIdx.x)
        ty = u64(cuda.threadIdx.y)
        pf = cuda.local.array(TM, dtype)
        bf = cuda.local.array(DJ, dtype)
        for kk in range(BN):
            k = u64(kk)
            for i in range(TM):
                pf[i] = p[ty + u64(i * NTY), k]
            for j in range(DJ):
                bf[j] = b[tx + u64(j * NTX), k]
            for i in range(TM):
                for j in range(DJ):
                    acc[i, c * DJ + j] += pf[i] * bf[j]

    @jit
    def pv_acc_seen(p, b, acc, c, diag, keys_are_rows):
        tx = u64(cuda.threadIdx.x)
        ty = cuda.threadIdx.y
        bf = cuda.local.array(DJ, dtype)
        for kk in range(BN):
            k = u64(kk)
            for j in range(DJ):
                bf[j] = b[tx + u64(j * NTX), k]
            for i in range(TM):
                rr = ty + i * NTY
                if kk >= rr + diag if keys_are_rows else kk <= rr + diag:
                    pf = p[u64(rr), k]
                    for j in range(DJ):
                        acc[i, c * DJ + j] += pf * bf[j]

    @jit
    def pv_step(p, b, acc, c, bad, seen_only, diag):
        # one barrier publishes p and b; then the seen pairs only when a thread of the
        # block loaded inf or NaN into b under causal (0 * inf must not reach a row)
        if cuda.syncthreads_or(bad) and seen_only:
            pv_acc_seen(p, b, acc, c, diag, False)
        else:
            pv_acc(p, b, acc, c)
        cuda.syncthreads()

    return dot_acc, pv_acc, pv_acc_seen, pv_step


def _probs_grads_op(blk: AttentionBlocking, dtype_name: str, jit):
    """``probs_grads`` (see :func:`_tile_ops`)."""
    ZERO = np.dtype(dtype_name).type(0)
    NTX, NTY, TM, TN = blk.ntx, blk.nty, blk.tm, blk.tn

    @jit
    def probs_grads(s_acc, dp_acc, lse_v, delta_v, r0, c0, L, scale, causal, keys_are_rows):
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        for i in range(TM):
            row = r0 + ty + i * NTY
            for j in range(TN):
                col = c0 + tx + j * NTX
                seen = row < L and col < L and (not causal or (row <= col if keys_are_rows else col <= row))
                p = ZERO
                ds = ZERO
                if seen:
                    x = j if keys_are_rows else i
                    p = math.exp(s_acc[i, j] * scale - lse_v[x])
                    ds = p * (dp_acc[i, j] - delta_v[x])
                s_acc[i, j] = p
                dp_acc[i, j] = ds

    return probs_grads


def _row_ops(blk: AttentionBlocking, jit):
    """``fill`` and ``store_rows`` (see :func:`_tile_ops`)."""
    DC, NTX, NTY, TM, DJ = blk.dc, blk.ntx, blk.nty, blk.tm, blk.dj

    @jit
    def fill(acc, value):
        for i in range(acc.shape[0]):
            for j in range(acc.shape[1]):
                acc[i, j] = value

    @jit
    def store_rows(x, h, base, r0, L, acc, nch, mul):
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        D = x.shape[2]
        for i in range(TM):
            row = r0 + ty + i * NTY
            if row < L:
                for c in range(nch):
                    for j in range(DJ):
                        d = c * DC + tx + j * NTX
                        if d < D:
                            x[base + row, h, d] = acc[i, c * DJ + j] * mul

    return fill, store_rows


def _softmax_ops(blk: AttentionBlocking, dtype_name: str):
    """The forward's row statistics, over a shared ``part`` ``(bm, ntx)`` scratch:

    * ``online_softmax(s_acc, part, p_s, m_i, l_i, o_acc, r0, c0, L, scale, causal)``:
      one key step of the online softmax: scores masked outside the segment (and after
      the row under ``causal``) and scaled, the row maxima ``m_i`` raised, ``o_acc`` and
      the sums ``l_i`` rescaled, the step's probabilities into ``p_s`` (shared);
    * ``finish_rows(part, m_i, l_i, o_acc, lse, h, base, r0, L)``: ``o_acc`` divided by
      each row's total (summed over the threads of the row) and ``lse`` written.
    """
    from numba import types

    dtype = getattr(types, dtype_name)
    ZERO, ONE = np.dtype(dtype_name).type(0), np.dtype(dtype_name).type(1)
    NEG_INF, NAN = np.dtype(dtype_name).type(-np.inf), np.dtype(dtype_name).type(np.nan)
    NTX, NTY, TM, TN = blk.ntx, blk.nty, blk.tm, blk.tn
    jit = _device_jit()

    @jit
    def online_softmax(s_acc, part, p_s, m_i, l_i, o_acc, r0, c0, L, scale, causal):
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        for i in range(TM):
            row = r0 + ty + i * NTY
            mx = NEG_INF
            for j in range(TN):
                col = c0 + tx + j * NTX
                s = s_acc[i, j] * scale if col < L and (not causal or col <= row) else NEG_INF
                s_acc[i, j] = s
                mx = max(mx, s)
            part[ty + i * NTY, tx] = mx
        cuda.syncthreads()
        for i in range(TM):
            m_new = m_i[i]
            for x in range(NTX):
                m_new = max(m_new, part[ty + i * NTY, x])
            m_use = m_new if m_new != NEG_INF else ZERO  # a row with no key yet stays at 0
            alpha = math.exp(m_i[i] - m_use)
            m_i[i] = m_new
            psum = ZERO
            for j in range(TN):
                p = math.exp(s_acc[i, j] - m_use)
                p_s[ty + i * NTY, tx + j * NTX] = p
                psum += p
            l_i[i] = l_i[i] * alpha + psum
            for j in range(o_acc.shape[1]):
                o_acc[i, j] *= alpha

    @jit
    def finish_rows(part, m_i, l_i, o_acc, lse, h, base, r0, L):
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        for i in range(TM):
            part[ty + i * NTY, tx] = l_i[i]
        cuda.syncthreads()
        for i in range(TM):
            row = r0 + ty + i * NTY
            l_row = ZERO
            for x in range(NTX):
                l_row += part[ty + i * NTY, x]
            # l = 0: every score -inf, the reference's 0 / 0; a NaN score made l NaN
            inv = ONE / l_row if l_row != ZERO else NAN
            for j in range(o_acc.shape[1]):
                o_acc[i, j] *= inv
            if row < L and tx == 0:
                lse[base + row, h] = m_i[i] + math.log(l_row) if l_row != ZERO else NAN

    return online_softmax, finish_rows, dtype


def _kernel_constants(blk: AttentionBlocking, dtype_name: str, nchunks: int) -> tuple:
    """``(dtype, ZERO, OCOLS, RESIDENT, ROW_T, COL_T)`` of a kernel with ``nchunks``
    head-dim chunks: the Numba type, its zero, output columns per thread, whether one
    chunk keeps the row tile resident for the whole walk, and the padded lengths of
    the shared row-tile and column-tile rows."""
    from numba import types

    return (
        getattr(types, dtype_name),
        np.dtype(dtype_name).type(0),
        nchunks * blk.dj,
        nchunks == 1,
        blk.bm + blk.pad,
        blk.bn + blk.pad,
    )


def _name(kernel, kind: str, blk: AttentionBlocking, dtype_name: str, nchunks: int):
    kernel.__name__ = f"attention_{kind}_{dtype_name}_{blk.bm}x{blk.bn}x{blk.dc}x{nchunks}"
    kernel.__qualname__ = kernel.__name__
    return kernel


def make_forward_pyfunc(blk: AttentionBlocking, dtype_name: str, nchunks: int):
    """The forward kernel for ``blk``, ``dtype_name`` and ``nchunks = ceil(D / dc)``.

    ``kernel(items, q, k, v, out, lse, scale, causal)``, grid ``(len(items), H)``:
    block ``(item, h)`` writes ``out`` and ``lse`` of the item's query tile and head.
    """
    dtype, ZERO, OCOLS, RESIDENT, ROW_T, COL_T = _kernel_constants(blk, dtype_name, nchunks)
    BM, BN, DC, NTX, TM, TN, NCH = blk.bm, blk.bn, blk.dc, blk.ntx, blk.tm, blk.tn, nchunks
    NEG_INF, ONE = np.dtype(dtype_name).type(-np.inf), np.dtype(dtype_name).type(1)
    load_rows, load_cols, dot_acc, _, _, _, fill, store_rows, pv_step = _tile_ops(blk, dtype_name)
    online_softmax, finish_rows, _ = _softmax_ops(blk, dtype_name)

    def forward_kernel(items, q, k, v, out, lse, scale, causal):
        h = cuda.blockIdx.y
        hk = h // (q.shape[1] // k.shape[1])  # the key/value head of h's group
        base, L, r0 = items[cuda.blockIdx.x, 0], items[cuda.blockIdx.x, 1], items[cuda.blockIdx.x, 2]

        q_t = cuda.shared.array((DC, ROW_T), dtype)  # query chunk, transposed
        kv_t = cuda.shared.array((DC, COL_T), dtype)  # key chunk, then value chunk
        p_s = cuda.shared.array((BM, COL_T), dtype)  # probabilities of the step
        part = cuda.shared.array((BM, NTX), dtype)  # per-thread row maxima, then row sums
        s_acc = cuda.local.array((TM, TN), dtype)
        o_acc = cuda.local.array((TM, OCOLS), dtype)
        m_i = cuda.local.array(TM, dtype)
        l_i = cuda.local.array(TM, dtype)
        for i in range(TM):
            m_i[i] = NEG_INF
            l_i[i] = ZERO
        fill(o_acc, ZERO)
        if RESIDENT:
            load_rows(q, h, base, r0, L, 0, q_t)

        last = min(L, r0 + BM) if causal else L  # keys up to the tile's last query
        for step in range((last + BN - 1) // BN):
            c0 = step * BN
            # invariant: m_i, l_i, o_acc hold the softmax state of keys [0, c0) for this thread's rows
            fill(s_acc, ZERO)
            for c in range(NCH):
                if not RESIDENT:
                    load_rows(q, h, base, r0, L, c * DC, q_t)
                load_cols(k, hk, base, c0, L, c * DC, kv_t)
                cuda.syncthreads()
                dot_acc(q_t, kv_t, s_acc)
                cuda.syncthreads()
            online_softmax(s_acc, part, p_s, m_i, l_i, o_acc, r0, c0, L, scale, causal)
            for c in range(NCH):
                bad = load_cols(v, hk, base, c0, L, c * DC, kv_t)
                pv_step(p_s, kv_t, o_acc, c, bad, causal, r0 - c0)  # also frees part

        finish_rows(part, m_i, l_i, o_acc, lse, h, base, r0, L)
        store_rows(out, h, base, r0, L, o_acc, NCH, ONE)

    return _name(forward_kernel, "forward", blk, dtype_name, nchunks)


def make_dq_pyfunc(blk: AttentionBlocking, dtype_name: str, nchunks: int):
    """The dQ kernel: ``kernel(items, q, k, v, dout, lse, delta, dq, scale, causal)``,
    grid ``(len(items), H)`` over query tiles."""
    dtype, ZERO, OCOLS, RESIDENT, ROW_T, COL_T = _kernel_constants(blk, dtype_name, nchunks)
    BM, BN, DC, NTX, NTY, TM, TN, NCH = blk.bm, blk.bn, blk.dc, blk.ntx, blk.nty, blk.tm, blk.tn, nchunks
    load_rows, load_cols, dot_acc, _, _, probs_grads, fill, store_rows, pv_step = _tile_ops(blk, dtype_name)

    def dq_kernel(items, q, k, v, dout, lse, delta, dq, scale, causal):
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        h = cuda.blockIdx.y
        hk = h // (q.shape[1] // k.shape[1])  # the key/value head of h's group
        base, L, r0 = items[cuda.blockIdx.x, 0], items[cuda.blockIdx.x, 1], items[cuda.blockIdx.x, 2]

        q_t = cuda.shared.array((DC, ROW_T), dtype)
        do_t = cuda.shared.array((DC, ROW_T), dtype)
        k_t = cuda.shared.array((DC, COL_T), dtype)
        v_t = cuda.shared.array((DC, COL_T), dtype)
        ds_s = cuda.shared.array((BM, COL_T), dtype)
        s_acc = cuda.local.array((TM, TN), dtype)
        dp_acc = cuda.local.array((TM, TN), dtype)
        dq_acc = cuda.local.array((TM, OCOLS), dtype)
        lse_i = cuda.local.array(TM, dtype)
        delta_i = cuda.local.array(TM, dtype)
        for i in range(TM):
            row = r0 + ty + i * NTY
            lse_i[i] = lse[base + row, h] if row < L else ZERO
            delta_i[i] = delta[base + row, h] if row < L else ZERO
        fill(dq_acc, ZERO)
        if RESIDENT:
            load_rows(q, h, base, r0, L, 0, q_t)
            load_rows(dout, h, base, r0, L, 0, do_t)

        last = min(L, r0 + BM) if causal else L
        for step in range((last + BN - 1) // BN):
            c0 = step * BN
            fill(s_acc, ZERO)
            fill(dp_acc, ZERO)
            for c in range(NCH):
                if not RESIDENT:
                    load_rows(q, h, base, r0, L, c * DC, q_t)
                    load_rows(dout, h, base, r0, L, c * DC, do_t)
                bad = load_cols(k, hk, base, c0, L, c * DC, k_t)
                load_cols(v, hk, base, c0, L, c * DC, v_t)
                cuda.syncthreads()
                dot_acc(q_t, k_t, s_acc)
                dot_acc(do_t, v_t, dp_acc)
                cuda.syncthreads()
            probs_grads(s_acc, dp_acc, lse_i, delta_i, r0, c0, L, scale, causal, False)
            for i in range(TM):
                for j in range(TN):
                    ds_s[ty + i * NTY, tx + j * NTX] = dp_acc[i, j]
            for c in range(NCH):
                if not RESIDENT:  # with one chunk k_t (and bad) still hold it
                    bad = load_cols(k, hk, base, c0, L, c * DC, k_t)
                pv_step(ds_s, k_t, dq_acc, c, bad, causal, r0 - c0)

        store_rows(dq, h, base, r0, L, dq_acc, NCH, scale)

    return _name(dq_kernel, "dq", blk, dtype_name, nchunks)


def make_dkdv_pyfunc(blk: AttentionBlocking, dtype_name: str, nchunks: int):
    """The dK/dV kernel: ``kernel(items, q, k, v, dout, lse, delta, dk, dv, scale, causal)``,
    grid ``(len(items), Hkv)`` over key tiles (rows are keys, columns queries); block
    ``(item, hk)`` sums the terms of key/value head ``hk``'s query heads in turn."""
    dtype, ZERO, OCOLS, RESIDENT, ROW_T, COL_T = _kernel_constants(blk, dtype_name, nchunks)
    BM, BN, DC, NTX, NTY, TM, TN, NCH = blk.bm, blk.bn, blk.dc, blk.ntx, blk.nty, blk.tm, blk.tn, nchunks
    ONE = np.dtype(dtype_name).type(1)
    ops = _tile_ops(blk, dtype_name)
    load_rows, load_cols, dot_acc, pv_acc, pv_acc_seen, probs_grads, fill, store_rows, _ = ops

    def dkdv_kernel(items, q, k, v, dout, lse, delta, dk, dv, scale, causal):
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        hk = cuda.blockIdx.y  # a key/value head: the block sums over its group's query heads
        group = q.shape[1] // k.shape[1]
        base, L, r0 = items[cuda.blockIdx.x, 0], items[cuda.blockIdx.x, 1], items[cuda.blockIdx.x, 2]

        k_t = cuda.shared.array((DC, ROW_T), dtype)
        v_t = cuda.shared.array((DC, ROW_T), dtype)
        q_t = cuda.shared.array((DC, COL_T), dtype)
        do_t = cuda.shared.array((DC, COL_T), dtype)
        p_s = cuda.shared.array((BM, COL_T), dtype)  # P^T of the step
        ds_s = cuda.shared.array((BM, COL_T), dtype)  # dS^T of the step
        s_acc = cuda.local.array((TM, TN), dtype)
        dp_acc = cuda.local.array((TM, TN), dtype)
        dk_acc = cuda.local.array((TM, OCOLS), dtype)
        dv_acc = cuda.local.array((TM, OCOLS), dtype)
        lse_j = cuda.local.array(TN, dtype)
        delta_j = cuda.local.array(TN, dtype)
        fill(dk_acc, ZERO)
        fill(dv_acc, ZERO)
        if RESIDENT:
            load_rows(k, hk, base, r0, L, 0, k_t)
            load_rows(v, hk, base, r0, L, 0, v_t)

        first = r0 // BN if causal else 0  # queries before the tile see none of it
        for h in range(hk * group, hk * group + group):
            for step in range(first, (L + BN - 1) // BN):
                c0 = step * BN
                fill(s_acc, ZERO)
                fill(dp_acc, ZERO)
                for j in range(TN):
                    col = c0 + tx + j * NTX
                    lse_j[j] = lse[base + col, h] if col < L else ZERO
                    delta_j[j] = delta[base + col, h] if col < L else ZERO
                for c in range(NCH):
                    if not RESIDENT:
                        load_rows(k, hk, base, r0, L, c * DC, k_t)
                        load_rows(v, hk, base, r0, L, c * DC, v_t)
                    bad = load_cols(q, h, base, c0, L, c * DC, q_t)
                    bad |= load_cols(dout, h, base, c0, L, c * DC, do_t)
                    cuda.syncthreads()
                    dot_acc(k_t, q_t, s_acc)
                    dot_acc(v_t, do_t, dp_acc)
                    cuda.syncthreads()
                probs_grads(s_acc, dp_acc, lse_j, delta_j, r0, c0, L, scale, causal, True)
                for i in range(TM):
                    for j in range(TN):
                        p_s[ty + i * NTY, tx + j * NTX] = s_acc[i, j]
                        ds_s[ty + i * NTY, tx + j * NTX] = dp_acc[i, j]
                for c in range(NCH):
                    if not RESIDENT:  # with one chunk q_t, do_t (and bad) still hold it
                        bad = load_cols(q, h, base, c0, L, c * DC, q_t)
                        bad |= load_cols(dout, h, base, c0, L, c * DC, do_t)
                    # also publishes p_s, ds_s; a non-finite query or dO must not reach the keys
                    # that it does not see
                    if cuda.syncthreads_or(bad) and causal:
                        pv_acc_seen(p_s, do_t, dv_acc, c, r0 - c0, True)
                        pv_acc_seen(ds_s, q_t, dk_acc, c, r0 - c0, True)
                    else:
                        pv_acc(p_s, do_t, dv_acc, c)
                        pv_acc(ds_s, q_t, dk_acc, c)
                    cuda.syncthreads()

        store_rows(dk, hk, base, r0, L, dk_acc, NCH, scale)
        store_rows(dv, hk, base, r0, L, dv_acc, NCH, ONE)

    return _name(dkdv_kernel, "dkdv", blk, dtype_name, nchunks)


def make_delta_pyfunc(dtype_name: str):
    """Kernel ``(out, dout, dlse, with_dlse, delta)``: ``delta[t, h] = sum_d out[t, h, d] *
    dout[t, h, d]``, minus ``dlse[t, h]`` (lse's gradient) ``with_dlse`` (grid-stride: t
    over y, h over x)."""
    ZERO = np.dtype(dtype_name).type(0)

    def delta_kernel(out, dout, dlse, with_dlse, delta):
        N, H, D = out.shape
        for t in range(
            cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y, N, cuda.gridDim.y * cuda.blockDim.y
        ):
            for h in range(
                cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x, H, cuda.gridDim.x * cuda.blockDim.x
            ):
                acc = ZERO
                for d in range(D):
                    acc += out[t, h, d] * dout[t, h, d]
                delta[t, h] = acc - dlse[t, h] if with_dlse else acc

    delta_kernel.__name__ = f"attention_delta_{dtype_name}"
    delta_kernel.__qualname__ = delta_kernel.__name__
    return delta_kernel


def zero_rows3_pyfunc(tokens, x):
    """Kernel: ``x[tokens[i], :, :] = 0`` (grid-stride: i over y, flat ``(h, d)`` over x)."""
    n = tokens.shape[0]
    H, D = x.shape[1], x.shape[2]
    for i in range(cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y, n, cuda.gridDim.y * cuda.blockDim.y):
        t = tokens[i]
        for e in range(
            cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x, H * D, cuda.gridDim.x * cuda.blockDim.x
        ):
            x[t, e // D, e % D] = 0


def zero_rows2_pyfunc(tokens, x):
    """Kernel: ``x[tokens[i], :] = 0``."""
    n = tokens.shape[0]
    H = x.shape[1]
    for i in range(cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y, n, cuda.gridDim.y * cuda.blockDim.y):
        t = tokens[i]
        for e in range(
            cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x, H, cuda.gridDim.x * cuda.blockDim.x
        ):
            x[t, e] = 0


# ------------------------------------------------------------------------ host side


@functools.cache
def _kernel(kind: str, dtype_name: str, nchunks: int = 1):
    """The jitted kernel ``kind`` (``forward``, ``dq``, ``dkdv``, ``delta``) of the active profile."""
    if kind == "delta":
        return cuda.jit(make_delta_pyfunc(dtype_name))
    blk = attention_blocking(dtype_name, backward=kind != "forward")
    make = {"forward": make_forward_pyfunc, "dq": make_dq_pyfunc, "dkdv": make_dkdv_pyfunc}[kind]
    return cuda.jit(make(blk, dtype_name, nchunks))


@functools.cache
def _zero_kernel(ndim: int):
    return cuda.jit(zero_rows3_pyfunc if ndim == 3 else zero_rows2_pyfunc)


def _operands(named: dict):
    """Device views of the ``named`` arrays: all ``[N, heads, D]`` of one dtype, float32
    or float64, the first's shape but ``k`` and ``v`` (one shape, a divisor of its heads:
    grouped-query attention); and that dtype."""
    views = {name: as_device(x, name) for name, x in named.items()}
    first, x0 = next(iter(views.items()))
    dtype = numpy_dtype(x0.dtype)
    if dtype.name not in _DTYPES:
        raise TypeError(f"the CUDA attention kernels take {' or '.join(_DTYPES)}, but {first} is {dtype}")
    if x0.ndim != 3:
        raise ValueError(f"{first} should have shape [N, H, D], but got {tuple(x0.shape)}")
    for name, x in views.items():
        if numpy_dtype(x.dtype) != dtype:
            raise TypeError(
                f"{name} should have {first}'s dtype {dtype}, but got {numpy_dtype(x.dtype)} "
                f"(device kernels do not promote)"
            )
        if name in ("k", "v"):
            check_heads(x0.shape, views["k"].shape, views["v"].shape)
        elif tuple(x.shape) != tuple(x0.shape):
            raise ValueError(
                f"{name} should have {first}'s shape {tuple(x0.shape)}, but got {tuple(x.shape)}"
            )
    return list(views.values()), dtype


def _host_ints(x, name: str) -> np.ndarray:
    """A host int64 copy of the 1-D integer array ``x`` (host, Numba device or torch)."""
    if hasattr(x, "copy_to_host"):
        x = x.copy_to_host()
    elif hasattr(x, "detach"):  # a torch tensor, on any device
        x = x.detach().cpu().numpy()
    elif not isinstance(x, np.ndarray) and hasattr(x, "__cuda_array_interface__"):
        x = cuda.as_cuda_array(x).copy_to_host()
    x = np.asarray(x)
    if x.ndim != 1 or (x.size and x.dtype.kind not in "iu"):
        raise TypeError(f"{name} should be a 1-D integer array, but got {x.dtype} of shape {x.shape}")
    return x.astype(np.int64, copy=False)


def _segments(starts, lengths, N: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Host ``(starts, lengths)``, checked (one size, non-negative lengths, inside the
    ``N`` tokens, disjoint), and the padding tokens (in no segment), all int64."""
    st, ln = _host_ints(starts, "starts"), _host_ints(lengths, "lengths")
    if st.shape != ln.shape:
        raise ValueError(f"starts and lengths should have one size, but got {st.size} and {ln.size}")
    if ln.size and ln.min() < 0:
        s = int(np.argmin(ln))
        raise ValueError(f"lengths should be non-negative, but got lengths[{s}]={ln[s]}")
    used = ln > 0
    outside = used & ((st < 0) | (st > N) | (ln > N - st))  # st + ln could wrap in int64
    if outside.any():
        s = int(np.flatnonzero(outside)[0])
        last = int(st[s]) + int(ln[s]) - 1  # Python ints: no wraparound
        raise ValueError(f"segment {s} (tokens {st[s]} .. {last}) lies outside the {N} tokens")
    edges = np.zeros(N + 1, np.int64)
    np.add.at(edges, st[used], 1)
    np.add.at(edges, st[used] + ln[used], -1)
    cover = np.cumsum(edges[:N])  # cover[t]: how many segments hold token t
    if N and cover.max() > 1:
        t = int(np.argmax(cover > 1))
        raise ValueError(f"segments should be disjoint, but token {t} lies in {int(cover[t])} of them")
    return st, ln, np.flatnonzero(cover == 0).astype(np.int64)


def _scalar(scale, dtype: np.dtype):
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.integer, np.floating)):
        raise TypeError(f"scale should be a real number, but got {type(scale).__name__}")
    return dtype.type(scale)


def _outputs(given: dict, shapes: dict, dtype: np.dtype, like, inputs: tuple):
    """``output`` for each named result (``given[name]``: the caller's array or
    ``None``), refusing two given results that share device memory."""
    pairs = {
        name: output(arr, shapes[name], dtype, like, f"the attention's {name}", inputs, name=name)
        for name, arr in given.items()
    }
    names = list(pairs)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            if given[a] is not None and given[b] is not None and bounds_meet(pairs[a][1], (pairs[b][1],)):
                raise ValueError(f"{a} and {b} overlap in device memory; pass separate arrays")
    return pairs


def _zero_tokens(tokens: np.ndarray, arrays) -> None:
    """Zero rows ``tokens`` of each device array of ``arrays`` (``[N, H, D]`` or ``[N, H]``)."""
    if tokens.size == 0:
        return
    d_tokens = cuda.to_device(tokens)
    for x in arrays:
        launch = copy_launch(1, tokens.size, math.prod(x.shape[1:]), copy_block())
        if launch is not None:
            grid, block = launch
            _zero_kernel(x.ndim)[grid, block](d_tokens, x)


def _launch(kind: str, dtype: np.dtype, D: int, H: int, items: np.ndarray, *args) -> None:
    """Run kernel ``kind`` over work ``items`` x ``H`` heads (nothing when either is empty)."""
    if items.shape[0] == 0 or H == 0:
        return
    if items.shape[0] > MAX_GRID_X or H > MAX_GRID_YZ:
        raise ValueError(
            f"{items.shape[0]} tiles x {H} heads exceed CUDA's grid of {MAX_GRID_X} x {MAX_GRID_YZ} blocks"
        )
    blk = attention_blocking(dtype.name, backward=kind != "forward")
    kernel = _kernel(kind, dtype.name, max(1, -(-D // blk.dc)))
    kernel[(items.shape[0], H), blk.threads](cuda.to_device(items), *args)


def varlen_attention_forward(q, k, v, starts, lengths, *, causal: bool, scale: float, out=None, lse=None):
    """Segment-masked softmax attention on CUDA device arrays: ``(out, lse)``.

    ``q``: ``[N, H, D]``, ``k, v``: ``[N, Hkv, D]`` with ``H`` a multiple of ``Hkv``
    (query head ``h`` reads key/value head ``h // (H // Hkv)``), device arrays (Numba
    device arrays, CUDA torch tensors, any ``__cuda_array_interface__`` object) of one
    dtype, float32 or float64, any strides. ``starts, lengths``: int64 ``(S,)``, host or
    device: segment ``s`` is tokens ``starts[s] .. starts[s] + lengths[s] - 1``
    (disjoint, any order, empty allowed). Token ``t`` attends to the tokens of its
    segment (with ``causal``, those at or before it) with weights ``softmax(scale *
    q[t] . k[j])``.

    Returns ``out`` ``[N, H, D]`` and ``lse`` ``[N, H]`` (natural log of the softmax
    denominator), of ``q``'s dtype and kind; padding tokens get 0 in both. Given
    ``out`` / ``lse`` are written whole and returned.

    >>> q = cuda.to_device(np.ones((6, 2, 3), np.float32))
    >>> o, lse = varlen_attention_forward(q, q, q, np.array([0, 4]), np.array([3, 2]), causal=True, scale=1.0)
    >>> o.shape, lse.shape
    ((6, 2, 3), (6, 2))
    """
    (qd, kd, vd), dtype = _operands({"q": q, "k": k, "v": v})
    N, H, D = qd.shape
    st, ln, pad = _segments(starts, lengths, N)
    sc = _scalar(scale, dtype)
    res = _outputs({"out": out, "lse": lse}, {"out": (N, H, D), "lse": (N, H)}, dtype, q, (qd, kd, vd))
    (out_res, out_d), (lse_res, lse_d) = res["out"], res["lse"]
    _zero_tokens(pad, (out_d, lse_d))
    blk = attention_blocking(dtype.name, backward=False)
    items = attention_items(st, ln, blk.bm, blk.bn, bool(causal))
    _launch("forward", dtype, D, H, items, qd, kd, vd, out_d, lse_d, sc, bool(causal))
    return out_res, lse_res


def varlen_attention_backward(
    dout,
    q,
    k,
    v,
    out,
    lse,
    starts,
    lengths,
    *,
    causal: bool,
    scale: float,
    dq=None,
    dk=None,
    dv=None,
    dlse=None,
):
    """Gradients ``(dq, dk, dv)`` of ``sum(out * dout)`` (plus ``sum(lse * dlse)`` with
    ``dlse`` ``[N, H]``) for :func:`varlen_attention_forward`.

    ``dout, q, out``: ``[N, H, D]``, ``k, v``: ``[N, Hkv, D]``, ``lse``: ``[N, H]``, as
    the forward pass took and returned them (one dtype, any strides); segments,
    ``causal`` and ``scale`` as given to it. The probabilities are recomputed from
    ``lse``. Returns arrays shaped like ``q, k, v`` of ``q``'s dtype and kind, zero on
    padding tokens (``dk, dv`` summed over each key/value head's query heads); given
    ``dq`` / ``dk`` / ``dv`` are written whole and returned.

    >>> q = cuda.to_device(np.ones((6, 2, 3), np.float32))
    >>> st, ln = np.array([0, 4]), np.array([3, 2])
    >>> o, lse = varlen_attention_forward(q, q, q, st, ln, causal=True, scale=1.0)
    >>> [g.shape for g in varlen_attention_backward(q, q, q, q, o, lse, st, ln, causal=True, scale=1.0)]
    [(6, 2, 3), (6, 2, 3), (6, 2, 3)]
    """
    (qd, kd, vd, dod, od), dtype = _operands({"q": q, "k": k, "v": v, "dout": dout, "out": out})
    N, H, D = qd.shape
    lsed = as_device(lse, "lse")
    if tuple(lsed.shape) != (N, H):
        raise ValueError(f"lse should have shape [N, H] = {(N, H)}, but got {tuple(lsed.shape)}")
    if numpy_dtype(lsed.dtype) != dtype:
        raise TypeError(f"lse should have q's dtype {dtype}, but got {numpy_dtype(lsed.dtype)}")
    if dlse is not None:
        dlse = as_device(dlse, "dlse")
        if tuple(dlse.shape) != (N, H) or numpy_dtype(dlse.dtype) != dtype:
            raise ValueError(
                f"dlse should be [N, H] = {(N, H)} of q's dtype {dtype}, but got "
                f"{tuple(dlse.shape)} of {numpy_dtype(dlse.dtype)}"
            )
    st, ln, pad = _segments(starts, lengths, N)
    sc = _scalar(scale, dtype)
    shape, kv_shape = (N, H, D), tuple(kd.shape)
    res = _outputs(
        {"dq": dq, "dk": dk, "dv": dv},
        {"dq": shape, "dk": kv_shape, "dv": kv_shape},
        dtype,
        q,
        (qd, kd, vd, dod, od, lsed),
    )
    (dq_res, dq_d), (dk_res, dk_d), (dv_res, dv_d) = res["dq"], res["dk"], res["dv"]
    _zero_tokens(pad, (dq_d, dk_d, dv_d))
    blk = attention_blocking(dtype.name, backward=True)
    q_items = attention_items(st, ln, blk.bm, blk.bn, bool(causal))
    if q_items.size == 0 or H == 0 or D == 0:
        return dq_res, dk_res, dv_res
    delta = cuda.device_array((N, H), dtype)  # rowsum(dout * out), read by both kernels
    grid, block = copy_launch(1, N, H, copy_block())
    no_dlse = dlse is None
    dl = cuda.device_array((1, 1), dtype) if no_dlse else dlse
    _kernel("delta", dtype.name)[grid, block](od, dod, dl, not no_dlse, delta)
    k_items = attention_items(st, ln, blk.bm, blk.bn, bool(causal), keys_are_rows=True)
    tail = (sc, bool(causal))
    _launch("dq", dtype, D, H, q_items, qd, kd, vd, dod, lsed, delta, dq_d, *tail)
    _launch("dkdv", dtype, D, kv_shape[1], k_items, qd, kd, vd, dod, lsed, delta, dk_d, dv_d, *tail)
    return dq_res, dk_res, dv_res
