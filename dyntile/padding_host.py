"""The host routes of :func:`dyntile.padding.pad_batch`: N-D batches into one buffer.

Each takes the call (``req``, a :class:`dyntile.padding.PadRequest`) and what the
choice of route read of the batch, and runs: the padded shape
(:func:`dyntile.padding_shape.target_shape`), ``out=`` checked, one allocation, one
copy kernel (:mod:`dyntile.cpu.pad`; NumPy for dtypes it does not move).

* :func:`pad_arrays` -- NumPy arrays of one rank and dtype, as they are;
* :func:`pad_tensors` -- CPU torch tensors of one rank and dtype, from their pointers;
* :func:`pad_mixed` -- anything else on the host, read by NumPy
  (:func:`dyntile.padding_samples.normalize`), which names the sample it cannot take.
"""

from __future__ import annotations

import sys

import numpy as np

from dyntile.arrays import check_out, memory_view, wrap_like
from dyntile.cpu import pad as _pad
from dyntile.fill import check_fill, kernel_fill_bits
from dyntile.padding_samples import memory_of, normalize
from dyntile.padding_shape import target_shape
from dyntile.threads import copy_threads

__all__ = ["copy_batch", "pad_arrays", "pad_mixed", "pad_tensors"]


def pad_arrays(req, read) -> tuple:
    """NumPy arrays ``host`` (``read``: ``(host, shapes, dtype, torch_like, token)``; the
    samples themselves when they are native-order arrays of one rank and dtype) padded
    into one new or given batch of the samples' kind."""
    host, shapes, dt, torch_like, token = read
    samples, multiple, axes, shape, plan, fill, left, _, _, out, _ = req  # (one unpacking: read per batch)
    if dt.kind in "US":  # a fill of 0 would become the string '0'
        i = next((i for i, x in enumerate(samples) if getattr(x, "dtype", dt) == dt), 0)
        raise TypeError(
            f"sample {i} has dtype {dt}; pad_batch pads numbers (bool, integer, float, complex, "
            f"datetime) and records, not strings"
        )
    target = (len(host),) + target_shape(shapes, multiple, axes, shape, plan)
    dest = None if out is None else check_out(out, target, dt, "this batch", token, memory_of(samples))
    if dest is None:
        dest = np.empty(target, dt)
    copy_batch(host, dest, fill, left, token)
    lengths = shapes.ravel() if shapes.shape[1] == 1 else shapes
    if not torch_like:
        return (dest if out is None else out), lengths
    return (out if out is not None else wrap_like(dest, True, token)), wrap_like(lengths, True)


def pad_mixed(req, read=None) -> tuple:
    """Any other host batch (mixed kinds, dtypes to promote, ``dtype=``, lists beside
    arrays, views NumPy must resolve): every sample read by NumPy, then :func:`pad_arrays`."""
    return pad_arrays(req, normalize(req.samples, req.dtype, req.promote))


def copy_batch(arrays: list, out: np.ndarray, fill, left: bool, token=None) -> None:
    """Run the copy kernel (or the NumPy fallback for dtypes it does not move)."""
    dt = out.dtype
    bits = kernel_fill_bits(fill, dt, token)
    if bits is not None:
        if out.flags.c_contiguous:
            _pad.pad_into(arrays, out, bits, left, copy_threads(out.nbytes))
        else:
            tmp = np.empty(out.shape, dt)
            _pad.pad_into(arrays, tmp, bits, left, copy_threads(out.nbytes))
            out[...] = tmp
        return
    out[...] = check_fill(fill, dt)
    for b, a in enumerate(arrays):
        if left:
            index = (b,) + tuple(slice(S - s, S) for S, s in zip(out.shape[1:], a.shape))
        else:
            index = (b,) + tuple(slice(0, s) for s in a.shape)
        out[index] = a


def pad_tensors(req, read) -> tuple:
    """CPU torch tensors of one rank and a dtype the kernels move, read by their
    pointers and strides (``read``: their carrier ``(dtype, token)`` and
    :func:`dyntile.tensor_reader.describe_tensors`'s answer): no per-sample NumPy views."""
    samples, multiple, axes, shape, plan, fill, left, _, _, out, _ = req
    (dt, token), (shapes, strides, ptrs, _, _) = read
    target = (len(samples),) + target_shape(shapes, multiple, axes, shape, plan)
    dest = None
    if out is not None:
        near = _tensors_near(out, samples, ptrs, shapes, strides, dt.itemsize)
        dest = check_out(out, target, dt, "this batch", token, near)
    bits = kernel_fill_bits(fill, dt, token)
    buf = dest if dest is not None and dest.flags.c_contiguous else np.empty(target, dt)
    _pad.pad_pointers(ptrs, shapes, strides, buf, bits, left, copy_threads(buf.nbytes))
    if dest is not None and buf is not dest:
        dest[...] = buf
    lengths = shapes.ravel() if shapes.shape[1] == 1 else shapes
    batch = out if out is not None else wrap_like(buf, True, token)
    return batch, sys.modules["torch"].from_numpy(lengths)


def _tensors_near(out, samples: list, ptrs, shapes, strides, width: int) -> tuple:
    """:func:`memory_of` for the tensors whose bytes (from their pointers, sizes and
    byte strides) reach into ``out``'s byte range: the only ones ``check_out`` need test
    for overlap. One vectorised bounds test instead of a NumPy view per sample (a fresh
    ``out``, as a collate's, meets none: a view each cost 5x the padding)."""
    try:
        view = memory_view(out)
    except (TypeError, ValueError, AttributeError, RuntimeError):  # not an array: check_out names it
        return memory_of(samples)
    if type(view) is not np.ndarray:
        return memory_of(samples)
    return tuple(memory_view(samples[i]) for i in _pad.reaching(view, ptrs, shapes, strides, width))
