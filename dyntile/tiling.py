"""Tiling API: ``(..., M, N)`` <-> ``(..., ceil(M/tm), ceil(N/tn), tm, tn)``.

The tiled layout stores each ``tm x tn`` tile contiguously (the blocked layout of
GEMM panels and of TPU ``(8, 128)`` tiles); edge tiles are padded with ``fill``.
``untile(tile(x, t), x.shape[-2:])`` returns ``x`` exactly.
"""

from __future__ import annotations

import math

import numpy as np

from dyntile import shapes as _shapes
from dyntile.arrays import as_numpy, bit_out, bit_view, carrier_fill, check_out, memory_view, wrap_like
from dyntile.cpu import tile as _tile
from dyntile.dispatch import backend_of, is_torch_tensor
from dyntile.dtypes import moved_by_kernels
from dyntile.fill import check_fill, kernel_fill_bits
from dyntile.threads import copy_threads

__all__ = ["tile", "untile"]


def _host(x, what: str):
    torch_like = is_torch_tensor(x)
    arr, token = as_numpy(x, what=what)
    if arr.dtype.byteorder not in "=|":
        arr = arr.astype(arr.dtype.newbyteorder("="))
    return arr, torch_like, token


def _dest(out, shape: tuple, dt: np.dtype, token, x):
    """A C-contiguous buffer to write, and the user's ``out`` array (or None) to copy
    into; ``out`` must not overlap the input ``x``."""
    if out is None:
        return np.empty(shape, dt), None
    arr = check_out(out, shape, dt, token=token, inputs=(memory_view(x),))
    return (arr, None) if arr.flags.c_contiguous else (np.empty(shape, dt), arr)


def tile(x, tile, *, fill=0, out=None):
    """Store ``x`` of shape ``(..., M, N)`` as contiguous ``tm x tn`` tiles.

    Returns ``(..., ceil(M/tm), ceil(N/tn), tm, tn)``; elements past ``M`` or ``N``
    in the edge tiles are ``fill``. Same kind as ``x`` (NumPy, torch, CUDA).

    >>> t = tile(np.arange(15).reshape(3, 5), (2, 4))
    >>> t.shape
    (2, 2, 2, 4)
    >>> t[0, 1]
    array([[4, 0, 0, 0],
           [9, 0, 0, 0]])
    """
    tm, tn = _shapes.check_tile(tile)
    if backend_of([x], what="x") == "cuda":
        from dyntile import cuda as _cuda

        _shapes.tile_grid(tuple(x.shape), (tm, tn))
        view, token = bit_view(x)  # bfloat16, float8 tensors: tiled as their bits
        if token is None:
            return _cuda.tile_into(x, (tm, tn), check_fill(fill, _cuda.numpy_dtype(x.dtype)).item(), out=out)
        t = _cuda.tile_into(view, (tm, tn), carrier_fill(fill, token), out=bit_out(out, token, "tile"))
        return out if out is not None else t.view(token)
    arr, torch_like, token = _host(x, "x")
    tshape = _shapes.tiled_shape(arr.shape, (tm, tn))
    M, N = arr.shape[-2:]
    gm, gn = tshape[-4:-2]
    dest, user_out = _dest(out, tshape, arr.dtype, token, x)
    bits = kernel_fill_bits(fill, arr.dtype, token)
    if bits is not None:
        B = math.prod(arr.shape[:-2])
        x3 = arr.reshape((B, M, N))  # a view whenever the leading axes allow it
        _tile.tile_into(x3, dest.reshape((B, gm, gn, tm, tn)), bits, copy_threads(dest.nbytes))
    else:
        lead = arr.shape[:-2]
        padded = np.full(lead + (gm * tm, gn * tn), check_fill(fill, arr.dtype), arr.dtype)
        padded[..., :M, :N] = arr
        k = len(lead)
        perm = tuple(range(k)) + (k, k + 2, k + 1, k + 3)
        dest[...] = padded.reshape(lead + (gm, tm, gn, tn)).transpose(perm)
    if user_out is not None:
        user_out[...] = dest
    return out if out is not None else wrap_like(dest, torch_like, token)


def untile(t, shape, *, out=None):
    """Inverse of :func:`tile`: ``(..., gm, gn, tm, tn)`` -> ``(..., M, N)``.

    ``shape`` is ``(M, N)`` (or the full output shape); it must need exactly the
    ``gm x gn`` tiles given, so no data tile is dropped.

    >>> x = np.arange(15).reshape(3, 5)
    >>> np.array_equal(untile(tile(x, (2, 4)), (3, 5)), x)
    True
    """
    if not hasattr(t, "shape"):
        t = np.asarray(t)  # a nested list, as tile takes
    tshape = tuple(int(s) for s in t.shape)
    if len(tshape) < 4:
        raise ValueError(
            f"untile needs a tiled array (..., gm, gn, tm, tn) of at least 4 dimensions, "
            f"but got shape {tshape}"
        )
    lead, (gm, gn, tm, tn) = tshape[:-4], tshape[-4:]
    shape = _shapes.check_shape(shape)
    if len(shape) == len(lead) + 2 and len(shape) > 2:
        if shape[:-2] != lead:
            raise ValueError(f"shape={shape} does not match the leading axes {lead} of the tiled array")
        shape = shape[-2:]
    if len(shape) != 2:
        raise ValueError(f"shape should be (M, N) or (..., M, N), but got {shape}")
    M, N = shape
    if _shapes.tile_grid((M, N), (tm, tn)) != (gm, gn):
        raise ValueError(
            f"shape (M, N)={shape} needs a {_shapes.tile_grid((M, N), (tm, tn))} grid of "
            f"{tm}x{tn} tiles, but the tiled array has {gm}x{gn}; untile never drops tiles"
        )
    if backend_of([t], what="t") == "cuda":
        from dyntile import cuda as _cuda

        view, token = bit_view(t)  # bfloat16, float8 tensors: moved as their bits
        if token is None:
            return _cuda.untile_from(t, (M, N), out=out)
        x = _cuda.untile_from(view, (M, N), out=bit_out(out, token, "untile"))
        return out if out is not None else x.view(token)
    arr, torch_like, token = _host(t, "t")
    dest, user_out = _dest(out, lead + (M, N), arr.dtype, token, t)
    if token is not None or moved_by_kernels(arr.dtype):
        B = math.prod(lead)
        t5 = np.ascontiguousarray(arr).reshape((B, gm, gn, tm, tn))
        _tile.untile_into(t5, dest.reshape((B, M, N)), copy_threads(dest.nbytes))
    else:
        k = len(lead)
        perm = tuple(range(k)) + (k, k + 2, k + 1, k + 3)
        dest[...] = arr.transpose(perm).reshape(lead + (gm * tm, gn * tn))[..., :M, :N]
    if user_out is not None:
        user_out[...] = dest
    return out if out is not None else wrap_like(dest, torch_like, token)
