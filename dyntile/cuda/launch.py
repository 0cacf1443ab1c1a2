"""Launch configurations, chosen from the problem shape (pure Python, tested).

CUDA limits grid ``y`` and ``z`` to 65535 blocks; the copy kernels use grid-stride
loops, so their grids are clipped, and the GEMM walks batches past the limit in
chunks (:func:`gemm_launch` returns one launch per chunk). The attention kernels
take a table of work items, one block per item and head (:func:`attention_items`).
"""

from __future__ import annotations

import numpy as np

from .config import GemmBlocking

__all__ = ["MAX_GRID_YZ", "MAX_GRID_X", "gemm_launch", "copy_launch", "attention_items"]

MAX_GRID_X = 2**31 - 1
MAX_GRID_YZ = 65535


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def gemm_launch(
    batch: int, m: int, n: int, blocking: GemmBlocking
) -> list[tuple[int, tuple[int, int, int], tuple[int, int]]]:
    """Launches of the GEMM kernel for ``batch`` products of ``m x n`` outputs.

    Returns ``[(batch_start, grid, block), ...]``: ``grid = (ceil(n/bn), ceil(m/bm), nb)``
    covers batches ``batch_start .. batch_start + nb``; ``block`` is the thread grid.
    No launch for an empty output.

    >>> gemm_launch(3, 33, 17, GemmBlocking(8, 8, 4, 2, 2, 1))
    [(0, (3, 5, 3), (4, 4))]
    """
    if batch <= 0 or m <= 0 or n <= 0:
        return []
    gx, gy = _cdiv(n, blocking.bn), _cdiv(m, blocking.bm)
    if gy > MAX_GRID_YZ:
        raise ValueError(f"matrix of {m} rows needs {gy} row blocks, over CUDA's grid limit {MAX_GRID_YZ}")
    block = blocking.threads
    return [(z0, (gx, gy, min(MAX_GRID_YZ, batch - z0)), block) for z0 in range(0, batch, MAX_GRID_YZ)]


def copy_launch(
    batch: int, rows: int, cols: int, block: tuple[int, int]
) -> tuple[tuple[int, int, int], tuple[int, int]] | None:
    """Grid and block of a copy kernel over ``batch x rows x cols`` elements.

    ``x`` runs along ``cols`` (the contiguous axis), ``y`` along ``rows``, ``z`` along
    the batch; the kernels loop with grid strides, so each grid axis is clipped to
    CUDA's limit. ``None`` when there is nothing to do.

    >>> copy_launch(2, 5, 33, (4, 2))
    ((9, 3, 2), (4, 2))
    >>> copy_launch(70000, 1, 8, (128, 4))
    ((1, 1, 65535), (128, 4))
    """
    if batch <= 0 or rows <= 0 or cols <= 0:
        return None
    bx, by = block
    grid = (min(MAX_GRID_X, _cdiv(cols, bx)), min(MAX_GRID_YZ, _cdiv(rows, by)), min(MAX_GRID_YZ, batch))
    return grid, (bx, by)


def attention_items(
    starts: np.ndarray, lengths: np.ndarray, rows: int, cols: int, causal: bool, keys_are_rows: bool = False
) -> np.ndarray:
    """Work items of an attention kernel: int64 ``(n, 3)`` rows ``(start, length, r0)``.

    Item ``(start, length, r0)`` is the tile of ``rows`` tokens from ``r0`` of the
    segment of ``length`` tokens from token ``start``; its block walks that segment's
    other side ``cols`` tokens at a step. Rows are queries (forward, dQ) or keys
    (dK/dV, ``keys_are_rows``); under ``causal`` a query tile walks the keys up to its
    last query, a key tile the queries from its first key. Items come heaviest first
    (most steps), so a long segment's tiles start before the short ones fill in.
    Empty segments have no items.

    >>> attention_items(np.array([0, 9]), np.array([5, 3]), 4, 2, causal=True).tolist()
    [[0, 5, 4], [0, 5, 0], [9, 3, 0]]
    """
    starts = np.asarray(starts, np.int64)
    lengths = np.asarray(lengths, np.int64)
    keep = lengths > 0
    starts, lengths = starts[keep], lengths[keep]
    ntiles = -(-lengths // rows)
    seg = np.repeat(np.arange(lengths.size), ntiles)
    first = np.cumsum(ntiles) - ntiles
    r0 = (np.arange(seg.size, dtype=np.int64) - first[seg]) * rows
    length = lengths[seg]
    steps = -(-length // cols)
    if causal and keys_are_rows:
        steps = steps - r0 // cols
    elif causal:
        steps = (np.minimum(length, r0 + rows) - 1) // cols + 1
    order = np.argsort(-steps, kind="stable")
    return np.ascontiguousarray(np.stack([starts[seg], length, r0], axis=1)[order])
