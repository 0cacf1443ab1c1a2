"""Ragged pad on the GPU: scatter a ragged batch into one padded buffer with fill.

The samples travel as one flat, C-ordered staging buffer plus a small int64 table
``meta`` of shape ``(B + 1, 1 + d)``: row 0 is ``(0, *padded)``, row ``1 + b`` is
``(offset of sample b in the flat buffer, *shape of sample b)``. One kernel then
writes every element of the ``(B, R, L)`` view of the output (``L``: the last padded
axis, ``R``: the product of the others) from the flat buffer or with ``fill``.

* NumPy host samples are packed with the table into one pinned host buffer and
  copied in ONE host-to-device transfer;
* device samples (Numba device arrays, CUDA torch tensors) are concatenated on the
  device (device-to-device copies; strided ones through Numba's copy kernel).
"""

from __future__ import annotations

import functools
import math
import sys
import threading

import numpy as np

from .config import copy_block
from .launch import copy_launch
from .runtime import as_device, cuda, is_device_array, numpy_dtype, output

__all__ = ["pad_into", "pad_kernel", "pad_pyfunc", "numpy_dtype"]


def pad_pyfunc(flat, meta, out, fill, left):
    """Kernel: ``out[b, r, c]`` = the sample element at that padded position, else ``fill``.

    Grid-stride loops over ``(c, r, b)`` (x, y, z). Invariant: ``src`` is the flat
    index of the sample element at padded row ``r`` (column 0 after the shift),
    ``inside`` says whether the row lies in the sample.
    """
    nd = meta.shape[1] - 1
    B, R, L = out.shape
    last_pad = meta[0, nd]
    for b in range(cuda.blockIdx.z, B, cuda.gridDim.z):
        last = meta[1 + b, nd]
        shift_c = last_pad - last if left else 0
        for r in range(
            cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y, R, cuda.gridDim.y * cuda.blockDim.y
        ):
            inside = True
            src = meta[1 + b, 0]
            rem = r
            stride = last
            for d in range(nd - 2, -1, -1):
                p = meta[0, 1 + d]
                s = meta[1 + b, 1 + d]
                i = rem % p - (p - s if left else 0)
                rem //= p
                inside = inside and 0 <= i < s
                src += i * stride
                stride *= s
            for c in range(
                cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x, L, cuda.gridDim.x * cuda.blockDim.x
            ):
                j = c - shift_c
                if inside and 0 <= j < last:
                    out[b, r, c] = flat[src + j]
                else:
                    out[b, r, c] = fill


@functools.cache
def pad_kernel():
    """The jitted pad kernel (compiled per dtype and layout on first launch)."""
    return cuda.jit(pad_pyfunc)


def _meta_table(shapes: list[tuple[int, ...]], padded: tuple[int, ...]) -> tuple[np.ndarray, int]:
    """The ``meta`` table and the total number of sample elements."""
    sizes = [math.prod(s) for s in shapes]
    meta = np.empty((len(shapes) + 1, 1 + len(padded)), np.int64)
    meta[0, 0] = 0
    meta[0, 1:] = padded
    meta[1:, 0] = np.cumsum([0] + sizes[:-1]) if shapes else []
    meta[1:, 1:] = shapes
    return meta, sum(sizes)


class _PinnedStaging:
    """A growing pinned host buffer, reused across calls (pinned allocation is slow)."""

    def __init__(self):
        self._buf = None
        self.lock = threading.Lock()

    def get(self, nbytes: int) -> np.ndarray:
        if self._buf is None or self._buf.size < nbytes:
            self._buf = cuda.pinned_array(max(4096, 1 << (nbytes - 1).bit_length()), np.uint8)
        return self._buf[:nbytes]


_STAGING = _PinnedStaging()


def _upload_host(samples, meta: np.ndarray, total: int, dtype: np.dtype):
    """Copy ``meta`` and every host sample to the device in one transfer.

    Returns device views ``(flat, meta)``."""
    meta_bytes = -(-meta.nbytes // 16) * 16  # keep the data aligned for any dtype
    nbytes = meta_bytes + total * dtype.itemsize
    with _STAGING.lock:
        host = _STAGING.get(nbytes)
        host[: meta.nbytes] = meta.view(np.uint8).ravel()
        data = host[meta_bytes:].view(dtype)
        for b, x in enumerate(samples):
            o = meta[1 + b, 0]
            n = x.size
            data[o : o + n].reshape(x.shape)[...] = x  # strided gather on the host
        dev = cuda.to_device(host)  # the one host-to-device copy
    d_meta = dev[: meta.nbytes].view(np.int64).reshape(meta.shape)
    d_flat = dev[meta_bytes:].view(dtype)
    return d_flat, d_meta


def _concat_device(samples, meta: np.ndarray, total: int, dtype: np.dtype):
    """Concatenate device samples into one flat device buffer (device-to-device)."""
    flat = cuda.device_array(max(total, 1), dtype)
    for b, x in enumerate(samples):
        n = math.prod(x.shape)
        if n == 0:
            continue
        o = int(meta[1 + b, 0])
        dst = flat[o : o + n]
        if x.is_c_contiguous():
            dst.copy_to_device(x.reshape(n))
        else:
            dst.reshape(x.shape)[...] = x
    return flat, cuda.to_device(meta)


def _host_array(x, i: int, dtype: np.dtype) -> np.ndarray:
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        x = x.detach().numpy()
    x = np.asarray(x)
    if x.dtype != dtype:
        raise TypeError(f"pad_into needs every sample of dtype {dtype}, but sample {i} has {x.dtype}")
    return x


def pad_into(samples, out_shape, dtype, fill, left: bool, out=None):
    """Pad a ragged batch into a device array of ``out_shape = (B, *padded)``.

    ``samples``: device arrays (Numba device arrays, CUDA torch tensors) or NumPy
    host arrays (one host-to-device transfer), all of rank ``len(padded)`` and
    dtype ``dtype``, each no larger than ``padded``. ``left`` puts the data at the
    end of every padded axis. Returns a CUDA torch tensor for torch input, else a
    Numba device array; ``out`` (a device array of ``out_shape``) is filled and returned.

    >>> x = pad_into([np.arange(3.0), np.arange(5.0)], (2, 8), np.float64, 0.0, False)
    >>> x.shape
    (2, 8)
    """
    dtype = numpy_dtype(dtype)
    out_shape = tuple(int(s) for s in out_shape)
    padded = out_shape[1:]
    if len(samples) != out_shape[0]:
        raise ValueError(f"out_shape {out_shape} is for {out_shape[0]} samples, but got {len(samples)}")
    on_device = [is_device_array(x) for x in samples]
    if any(on_device) and not all(on_device):
        i = on_device.index(not on_device[0])
        raise TypeError(
            f"samples mix device and host arrays: sample 0 is on the "
            f"{'GPU' if on_device[0] else 'host'} but sample {i} is not; move them to one device first"
        )
    if on_device and on_device[0]:
        arrays = [as_device(x, f"samples[{i}]") for i, x in enumerate(samples)]
        for i, x in enumerate(arrays):
            if numpy_dtype(x.dtype) != dtype:
                raise TypeError(f"pad_into needs every sample of dtype {dtype}, but sample {i} has {x.dtype}")
    else:
        arrays = [_host_array(x, i, dtype) for i, x in enumerate(samples)]
    shapes = [tuple(int(s) for s in x.shape) for x in arrays]
    for i, s in enumerate(shapes):
        if len(s) != len(padded) or any(a > p for a, p in zip(s, padded)):
            raise ValueError(
                f"sample {i} of shape {s} does not fit the padded sample shape {padded}; pad_into never cuts"
            )
    result, dest = output(
        out,
        out_shape,
        dtype,
        samples[0] if on_device and on_device[0] else None,
        inputs=tuple(arrays) if on_device and on_device[0] else (),
    )
    if math.prod(out_shape) == 0:
        return result
    if len(padded) == 0:
        raise ValueError("pad_into pads arrays of at least 1 dimension, but got 0-d samples")
    meta, total = _meta_table(shapes, padded)
    if on_device[0]:
        flat, d_meta = _concat_device(arrays, meta, total, dtype)
    else:
        flat, d_meta = _upload_host(arrays, meta, total, dtype)
    _launch(flat, d_meta, dest, dtype.type(fill), left)
    return result


def _launch(flat, meta, dest, fill, left: bool) -> None:
    B, *mid, L = tuple(dest.shape)
    R = math.prod(mid)
    view3 = dest.reshape(B, R, L) if dest.is_c_contiguous() else None
    target = view3 if view3 is not None else cuda.device_array((B, R, L), dest.dtype)
    grid, block = copy_launch(B, R, L, copy_block())
    pad_kernel()[grid, block](flat, meta, target, fill, bool(left))
    if view3 is None:
        dest[...] = target.reshape(dest.shape)
