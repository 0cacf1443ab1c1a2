"""Padding masks from lengths: which positions of a padded batch hold data."""

from __future__ import annotations

import numpy as np

from dyntile.arrays import as_numpy, wrap_like
from dyntile.cpu import pad as _pad
from dyntile.dispatch import is_torch_tensor
from dyntile.dtypes import as_int64
from dyntile.shapes import check_shape

__all__ = ["padding_mask"]


def padding_mask(lengths, shape, *, side: str = "right"):
    """Boolean mask ``(B, *shape)``: true where a sample of ``lengths`` has data.

    ``lengths`` is what :func:`dyntile.pad_batch` returns: ``(B,)`` for 1-D samples
    (``shape`` is then ``(T,)`` or ``T``), or ``(B, d)`` with ``shape`` the padded
    per-sample shape of ``d`` axes. ``side`` must match the padding ("left": data at
    the end of each axis). torch lengths give a torch mask.

    >>> padding_mask(np.array([1, 3]), 4).astype(int)
    array([[1, 0, 0, 0],
           [1, 1, 1, 0]])
    """
    if side not in ("right", "left"):
        raise ValueError(f"side should be 'right' or 'left', but got {side!r}")
    if type(shape) is int and type(lengths) is np.ndarray and lengths.dtype == np.int64 and lengths.ndim == 1:
        return _mask_rows(lengths, shape, side)  # the common case (a collate's lengths), kept cheap
    torch_like = is_torch_tensor(lengths)
    n, _ = as_numpy(lengths, what="lengths")
    shape = check_shape(shape)
    n = _as_sizes(n, len(shape))
    if n.shape[1] != len(shape):
        raise ValueError(
            f"lengths give {n.shape[1]} sizes per sample but shape={shape} has {len(shape)} axes"
        )
    if len(shape) == 1:
        mask = _mask_rows(n[:, 0], shape[0], side)
    else:
        if n.size and (n.min() < 0 or (n > np.array(shape)).any()):
            _raise_out_of_range(n, shape)
        mask = np.ones((len(n),) + shape, np.bool_)
        for a, size in enumerate(shape):
            pos = np.arange(size).reshape((1,) * (a + 1) + (size,) + (1,) * (len(shape) - a - 1))
            k = n[:, a].reshape((-1,) + (1,) * len(shape))
            mask &= (pos < k) if side == "right" else (pos >= size - k)
    return wrap_like(mask, torch_like)


def _as_sizes(n: np.ndarray, d: int) -> np.ndarray:
    """Lengths as int64 ``(B, d')``: ``(B,)`` is one size per sample, ``(B, d')`` d' sizes;
    integers only (1.9 is not cut to 1), below 2**63."""
    if n.size == 0 and n.ndim == 1:
        return np.zeros((0, d), np.int64)  # np.asarray([]) is float64, torch.tensor([]) float32
    if n.dtype.kind not in "iu":
        raise TypeError(f"lengths should be integers, but got an array of dtype {n.dtype}")
    if n.ndim > 2:
        raise ValueError(f"lengths should have shape (B,) or (B, d), but got shape {n.shape}")
    n = as_int64(n)
    if n.ndim == 0:
        return n.reshape(1, 1)
    return n.reshape(len(n), 1) if n.ndim == 1 else n


def _mask_rows(lengths: np.ndarray, T: int, side: str) -> np.ndarray:
    """``(B, T)`` mask of int64 lengths ``(B,)``: two memsets per row (the kernel checks the range)."""
    return _pad.mask_rows(
        lengths if lengths.flags.c_contiguous else np.ascontiguousarray(lengths), T, side == "left"
    )


def _raise_out_of_range(n: np.ndarray, shape: tuple) -> None:
    b, a = np.argwhere((n < 0) | (n > np.array(shape)))[0]
    raise ValueError(f"lengths[{b}] has size {n[b, a]} along axis {a}, outside 0..{shape[a]}")
