"""Tiled layout on the GPU: ``(B, M, N) <-> (B, gm, gn, tm, tn)``, fill at the edges.

Both kernels walk the dense ``(B, rows, cols)`` index space with grid-stride loops,
``x`` along the contiguous column axis, so reads and writes of a warp coalesce
within each tile row of ``tn`` elements. Leading axes of ``(..., M, N)`` inputs are
merged into one batch axis (:func:`dyntile.cuda.runtime.as_batched`) and restored.
"""

from __future__ import annotations

import functools
import math

from .config import copy_block
from .launch import copy_launch
from .runtime import as_batched, as_device, cuda, numpy_dtype, output

__all__ = ["tile_into", "untile_from", "tile_pyfunc", "untile_pyfunc"]


def tile_pyfunc(x, t, fill):
    """Kernel: ``t[b, i // tm, j // tn, i % tm, j % tn] = x[b, i, j]`` (``fill`` outside x)."""
    B, M, N = x.shape
    gm, gn, tm, tn = t.shape[1], t.shape[2], t.shape[3], t.shape[4]
    for b in range(cuda.blockIdx.z, B, cuda.gridDim.z):
        for i in range(
            cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y, gm * tm, cuda.gridDim.y * cuda.blockDim.y
        ):
            gi = i // tm
            ii = i - gi * tm
            for j in range(
                cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x,
                gn * tn,
                cuda.gridDim.x * cuda.blockDim.x,
            ):
                gj = j // tn
                t[b, gi, gj, ii, j - gj * tn] = x[b, i, j] if i < M and j < N else fill


def untile_pyfunc(t, x):
    """Kernel: ``x[b, i, j] = t[b, i // tm, j // tn, i % tm, j % tn]`` for ``i < M, j < N``."""
    B, M, N = x.shape
    tm, tn = t.shape[3], t.shape[4]
    for b in range(cuda.blockIdx.z, B, cuda.gridDim.z):
        for i in range(
            cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y, M, cuda.gridDim.y * cuda.blockDim.y
        ):
            gi = i // tm
            ii = i - gi * tm
            for j in range(
                cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x, N, cuda.gridDim.x * cuda.blockDim.x
            ):
                gj = j // tn
                x[b, i, j] = t[b, gi, gj, ii, j - gj * tn]


@functools.cache
def tile_kernel():
    """The jitted tile kernel."""
    return cuda.jit(tile_pyfunc)


@functools.cache
def untile_kernel():
    """The jitted untile kernel."""
    return cuda.jit(untile_pyfunc)


def _writable_view(dest, shape3):
    """``dest`` reshaped to ``shape3`` when that is a view, else ``None``."""
    if dest.is_c_contiguous():
        return dest.reshape(shape3)
    if dest.ndim == len(shape3):
        return dest
    return None


def tile_into(x, tile, fill, out=None):
    """Device array ``x`` of shape ``(..., M, N)`` in tiled layout ``(..., gm, gn, tm, tn)``.

    ``gm = ceil(M / tm)``, ``gn = ceil(N / tn)``; edge tiles are completed with ``fill``.
    Returns the input's kind (CUDA torch tensor or Numba device array), or ``out``.

    >>> import numpy as np
    >>> t = tile_into(cuda.to_device(np.ones((5, 33, 17), np.float32)), (8, 8), 0.0)
    >>> t.shape
    (5, 5, 3, 8, 8)
    """
    xd = as_device(x, "x")
    if xd.ndim < 2:
        raise ValueError(
            f"tile_into needs an array of at least 2 dimensions (..., M, N), but got shape {xd.shape}"
        )
    tm, tn = (int(v) for v in tile)
    *lead, M, N = xd.shape
    gm, gn = -(-M // tm), -(-N // tn)
    dtype = numpy_dtype(xd.dtype)
    shape = (*lead, gm, gn, tm, tn)
    result, dest = output(out, shape, dtype, x, "tile", inputs=(xd,))
    if math.prod(shape) == 0:
        return result
    B = math.prod(lead)
    x3 = as_batched(xd, 2)
    t5 = _writable_view(dest, (B, gm, gn, tm, tn))
    target = t5 if t5 is not None else cuda.device_array((B, gm, gn, tm, tn), dtype)
    grid, block = copy_launch(B, gm * tm, gn * tn, copy_block())
    tile_kernel()[grid, block](x3, target, dtype.type(fill))
    if t5 is None:
        dest[...] = target.reshape(shape)
    return result


def untile_from(t, shape, out=None):
    """Tiled device array ``t`` of shape ``(..., gm, gn, tm, tn)`` back to ``(..., M, N)``.

    ``shape = (M, N)`` must fit the grid: ``ceil(M / tm) == gm`` and ``ceil(N / tn) == gn``.

    >>> import numpy as np
    >>> x = untile_from(cuda.to_device(np.ones((5, 3, 8, 8), np.float32)), (33, 17))
    >>> x.shape
    (33, 17)
    """
    td = as_device(t, "t")
    if td.ndim < 4:
        raise ValueError(f"untile_from needs a tiled array (..., gm, gn, tm, tn), but got shape {td.shape}")
    M, N = (int(v) for v in shape)
    *lead, gm, gn, tm, tn = td.shape
    if -(-M // tm) != gm or -(-N // tn) != gn:
        raise ValueError(
            f"shape {(M, N)} does not match the tile grid of t {td.shape}: it needs "
            f"ceil(M/tm)={-(-M // tm)} x ceil(N/tn)={-(-N // tn)} tiles, t has {gm} x {gn}"
        )
    dtype = numpy_dtype(td.dtype)
    out_shape = (*lead, M, N)
    result, dest = output(out, out_shape, dtype, t, "untile", inputs=(td,))
    if math.prod(out_shape) == 0:
        return result
    B = math.prod(lead)
    t5 = as_batched(td, 4)
    x3 = _writable_view(dest, (B, M, N))
    target = x3 if x3 is not None else cuda.device_array((B, M, N), dtype)
    grid, block = copy_launch(B, M, N, copy_block())
    untile_kernel()[grid, block](t5, target)
    if x3 is None:
        dest[...] = target.reshape(out_shape)
    return result
