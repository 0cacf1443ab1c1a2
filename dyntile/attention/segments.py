"""Segment tables: where each segment of a varlen attention call lies in the token stream.

Both layouts of :func:`dyntile.varlen_attention` reduce to one table over a flat stream
of ``N`` tokens: ``starts`` and ``lengths``, int64 ``(S,)``; segment ``s`` is tokens
``starts[s] .. starts[s] + lengths[s] - 1``, and a token in no segment is padding.

* ``segment_ids`` ``[B, T]`` (the stream is the ``B * T`` tokens row by row): each
  maximal run of one non-zero id inside a row is a segment, 0 is padding. An id that
  comes back later in its row is an error: a segment is contiguous.
* ``cu_seqlens`` ``(S + 1,)`` (flash-attention's varlen layout): segment ``s`` is
  ``cu_seqlens[s] .. cu_seqlens[s + 1] - 1``; tokens from ``cu_seqlens[-1]`` on are padding.
"""

from __future__ import annotations

import numpy as np

__all__ = ["from_segment_ids", "from_cu_seqlens"]


def _integers(x: np.ndarray, name: str) -> np.ndarray:
    if x.dtype.kind not in "iu" or x.dtype == np.bool_:
        raise TypeError(f"{name} should be integers, but got dtype {x.dtype}")
    return x


def from_segment_ids(segment_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(starts, lengths)`` of the runs of non-zero ids of ``segment_ids`` ``[B, T]``.

    >>> from_segment_ids(np.array([[1, 1, 2, 0], [1, 1, 1, 1]]))
    (array([0, 2, 4]), array([2, 1, 4]))
    """
    seg = _integers(np.asarray(segment_ids), "segment_ids")
    if seg.ndim != 2:
        raise ValueError(f"segment_ids should have shape [B, T], but got shape {seg.shape}")
    B, T = seg.shape
    flat = seg.reshape(-1)
    if flat.size == 0:
        empty = np.zeros(0, np.int64)
        return empty, empty
    if seg.dtype.kind == "i" and flat.min() < 0:
        b, t = np.unravel_index(int(np.argmin(flat)), seg.shape)
        raise ValueError(
            f"segment_ids should be >= 0 (0 = padding), but segment_ids[{b}, {t}] is {seg[b, t]}"
        )
    first = np.ones(flat.size, np.bool_)
    np.not_equal(flat[1:], flat[:-1], out=first[1:])
    first[::T] = True
    starts = np.flatnonzero(first)
    lengths = np.diff(starts, append=flat.size)
    ids = flat[starts]
    real = ids != 0
    starts, lengths, ids = starts[real], lengths[real], ids[real]
    _check_contiguous(starts // T, ids, starts, T)
    return starts.astype(np.int64, copy=False), lengths.astype(np.int64, copy=False)


def _check_contiguous(rows: np.ndarray, ids: np.ndarray, starts: np.ndarray, T: int) -> None:
    """Refuse an id that has two runs in one row (tokens of one segment apart)."""
    if ids.size < 2:
        return
    order = np.lexsort((starts, ids, rows))
    r, i = rows[order], ids[order]
    again = np.flatnonzero((r[1:] == r[:-1]) & (i[1:] == i[:-1]))
    if again.size:
        a, b = starts[order[again[0]]], starts[order[again[0] + 1]]
        raise ValueError(
            f"segment_ids[{a // T}] has segment {i[again[0]]} at positions {a % T} and {b % T} "
            f"with other tokens between them; each segment should be one contiguous run"
        )


def from_cu_seqlens(cu_seqlens: np.ndarray, total: int) -> tuple[np.ndarray, np.ndarray]:
    """``(starts, lengths)`` of ``cu_seqlens`` ``(S + 1,)`` over a stream of ``total`` tokens.

    >>> from_cu_seqlens(np.array([0, 3, 3, 7]), 8)
    (array([0, 3, 3]), array([3, 0, 4]))
    """
    cu = _integers(np.asarray(cu_seqlens), "cu_seqlens")
    if cu.ndim != 1 or cu.size < 1:
        raise ValueError(f"cu_seqlens should have shape (S + 1,) with S >= 0, but got shape {cu.shape}")
    if cu.dtype == np.uint64 and cu.max() > np.iinfo(np.int64).max:
        raise ValueError(f"cu_seqlens should be offsets into the {total} tokens, but got {cu.max()}")
    cu = cu.astype(np.int64, copy=False)
    if cu[0] != 0:
        raise ValueError(f"cu_seqlens should start at 0, but starts at {cu[0]}")
    # compared, not differenced: int64 differences of far-apart offsets wrap around
    down = np.flatnonzero(cu[1:] < cu[:-1])
    if down.size:
        s = int(down[0])
        raise ValueError(
            f"cu_seqlens should be non-decreasing, but cu_seqlens[{s + 1}] = {cu[s + 1]} "
            f"is less than cu_seqlens[{s}] = {cu[s]}"
        )
    if cu[-1] > total:
        raise ValueError(
            f"cu_seqlens should end at most at the {total} tokens of q (dim 0), but ends at {cu[-1]}"
        )
    return cu[:-1].copy(), np.diff(cu)  # 0 <= cu <= total now: no difference wraps
