"""``numpy.matmul`` for CUDA device arrays, on the GEMM kernel of :mod:`.gemm`.

The wrapper applies matmul's rules through :func:`dyntile.shapes.matmul_shapes`
(1-D operands promoted then squeezed, leading axes broadcast, NumPy's errors), merges
each operand's leading axes into one batch axis and hands the kernel two small int32
tables, ``a_index[z]`` and ``b_index[z]``: which matrix of A and of B output batch ``z``
multiplies. Broadcasting thus never copies data.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from dyntile.shapes import matmul_shapes

from .config import gemm_blocking
from .gemm import gemm_kernel
from .launch import gemm_launch
from .runtime import as_batched, as_device, contiguous, cuda, numpy_dtype, output

__all__ = ["matmul"]

_DTYPES = ("float32", "float64")


@functools.lru_cache(maxsize=64)
def _batch_tables(a_lead: tuple[int, ...], b_lead: tuple[int, ...]):
    """Device tables mapping each broadcast batch to its A and B matrices (cached)."""
    batch = np.broadcast_shapes(a_lead, b_lead)
    ia = np.broadcast_to(np.arange(math.prod(a_lead), dtype=np.int32).reshape(a_lead), batch).ravel()
    ib = np.broadcast_to(np.arange(math.prod(b_lead), dtype=np.int32).reshape(b_lead), batch).ravel()
    return cuda.to_device(np.ascontiguousarray(ia)), cuda.to_device(np.ascontiguousarray(ib))


def _as_matrix(x, vector_shape):
    """1-D operands become matrices (``(1, K)`` for a, ``(K, 1)`` for b)."""
    return contiguous(x).reshape(vector_shape) if x.ndim == 1 else x


def matmul(a, b, out=None):
    """``numpy.matmul(a, b)`` for float32 or float64 CUDA device arrays.

    ``a (..., M, K) @ b (..., K, N) -> (..., M, N)``; 1-D operands and broadcast batch
    axes follow NumPy. Both operands need the same dtype (no promotion on the device).
    Returns a CUDA torch tensor for torch input, else a Numba device array, or ``out``.

    >>> a, b = np.ones((2, 3, 4), np.float32), np.ones((4, 5), np.float32)
    >>> c = matmul(cuda.to_device(a), cuda.to_device(b))
    >>> c.shape
    (2, 3, 5)
    """
    ad, bd = as_device(a, "a"), as_device(b, "b")
    dta, dtb = numpy_dtype(ad.dtype), numpy_dtype(bd.dtype)
    if dta != dtb or dta.name not in _DTYPES:
        raise TypeError(
            f"the CUDA matmul needs a and b of one dtype among {_DTYPES}, but got a {dta} and b {dtb}; "
            f"cast them first (device kernels do not promote)"
        )
    shapes = matmul_shapes(tuple(ad.shape), tuple(bd.shape))
    batch, M, K, N, out_shape = shapes.batch, shapes.m, shapes.k, shapes.n, shapes.out_shape
    result, dest = output(out, out_shape, dta, a, inputs=(ad, bd))
    total = math.prod(batch)
    if total * M * N == 0:
        return result
    if K == 0:  # empty sum: numpy gives zeros
        dest[...] = np.zeros(out_shape, dta)
        return result
    am = _as_matrix(ad, (1, K))
    bm = _as_matrix(bd, (K, 1))
    a3, b3 = as_batched(am, 2), as_batched(bm, 2)
    ia, ib = _batch_tables(am.shape[:-2], bm.shape[:-2])
    c3 = dest.reshape(total, M, N) if dest.is_c_contiguous() else cuda.device_array((total, M, N), dta)
    kernel = gemm_kernel(dta.name)
    for z0, grid, block in gemm_launch(total, M, N, gemm_blocking(dta.name)):
        kernel[grid, block](a3, b3, c3, ia, ib, z0)
    if not dest.is_c_contiguous():
        dest[...] = c3.reshape(dest.shape)
    return result
