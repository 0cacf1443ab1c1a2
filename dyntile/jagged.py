"""Jagged API: samples <-> rows stored back to back (``values`` + ``lengths``) -> a padded batch.

The layout ``torch.cat`` of a batch's samples gives, and the one FBGEMM's jagged
tensors and packed token streams use: ``values`` ``(N, *rest)`` holds ``B`` rows, row
``i`` being the next ``lengths[i]`` entries along axis 0.

* :func:`concat_rows` -- samples (lists of numbers, arrays, tensors) -> that form;
  token-id lists and 1-D tensors in one C-level pass;
* :func:`pad_jagged` -- that form -> ``(B, T, *rest)``: one allocation and one copy
  kernel (:func:`dyntile.cpu.pad.pad_flat_rows`), no per-row array objects.
"""

from __future__ import annotations

import math
import sys

import numpy as np

from dyntile import shapes as _shapes
from dyntile.arrays import as_numpy, wrap_like
from dyntile.cpu import number_lists as _number_lists
from dyntile.cpu import pad as _pad
from dyntile.dispatch import backend_of, is_cuda_array, is_torch_tensor
from dyntile.fill import kernel_fill_bits
from dyntile.padding import check_plan, pad_batch
from dyntile.padding_rows import cat_token_rows
from dyntile.padding_samples import as_sample_list, check_side, normalize
from dyntile.threads import copy_threads

__all__ = ["concat_rows", "pad_jagged"]


def concat_rows(samples):
    """Put ``B`` samples back to back along axis 0: ``(values, lengths)``.

    Parameters
    ----------
    samples : sequence of ``B`` arrays ``(L_i, *rest)``
        Lists of numbers, NumPy arrays or CPU torch tensors, with one ``rest``. Types
        follow :func:`pad_batch`: the common dtype, lists weakly typed (bool, int64
        or float64 by their values; an empty list has no type).

    Returns
    -------
    values : ``(sum L_i, *rest)`` (torch if any sample is a tensor).
    lengths : int64 ``(B,)`` (a tensor for torch output).

    The jagged form :func:`pad_jagged` takes: ``pad_jagged(*concat_rows(s))`` pads
    like ``pad_batch(s)``. Lists of Python ints and 1-D CPU tensors of one dtype are
    read in one C-level pass.

    >>> values, lengths = concat_rows([[1, 2, 3], [], [4, 5]])
    >>> values, lengths
    (array([1, 2, 3, 4, 5]), array([3, 0, 2]))
    """
    samples = as_sample_list(samples)
    if not samples:
        raise ValueError("concat_rows needs at least one sample, but got an empty sequence")
    x0 = samples[0]
    if type(x0) is list:
        hit = _number_lists.concat_ints(samples)
        if hit is not None:
            return hit
    elif is_torch_tensor(x0) and x0.dim() == 1:
        hit = cat_token_rows(samples)
        if hit is not None:
            torch = sys.modules["torch"]
            return hit[0].detach(), torch.tensor(hit[1], dtype=torch.int64)
    if backend_of(samples, what="samples") == "cuda":  # (the fast routes above take host data only)
        raise TypeError(
            "concat_rows runs on the host, but the samples are on a CUDA device; "
            "concatenate device arrays on the device (e.g. torch.cat)"
        )
    arrays, shapes, _, torch_like, token = normalize(samples, None)
    bad = np.flatnonzero((shapes[:, 1:] != shapes[0, 1:]).any(axis=1))
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"sample {i} has shape {tuple(shapes[i].tolist())}, but sample 0 has (L, "
            f"{', '.join(map(str, shapes[0, 1:]))}); only the first axis may differ"
        )
    lengths = shapes[:, 0].copy()
    values = wrap_like(np.concatenate(arrays), torch_like, token)
    return values, (sys.modules["torch"].from_numpy(lengths) if torch_like else lengths)


def _row_lengths(lengths) -> list:
    """``lengths`` as a list of non-negative Python ints (a list of ints passes as is)."""
    if type(lengths) is not list or not all(type(n) is int for n in lengths):
        arr, _ = as_numpy(lengths, what="lengths")
        if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
            raise TypeError(
                f"lengths should be a 1-D sequence of integers, but got shape {arr.shape} "
                f"and dtype {arr.dtype}"
            )
        lengths = arr.tolist()
    if lengths and min(lengths) < 0:
        i = next(i for i, n in enumerate(lengths) if n < 0)
        raise ValueError(f"lengths[{i}] is negative ({lengths[i]})")
    return lengths


def _padded_length(longest: int, multiple, shape, plan, rest: tuple) -> int:
    """``T``: ``shape[0]``, the plan's boundary, or ``longest`` rounded up to ``multiple``."""
    if shape is not None and plan is not None:
        raise ValueError("pass either shape= or plan=, not both")
    if shape is not None:
        target = _shapes.check_shape(shape)
        if len(target) not in (1, 1 + len(rest)) or (len(target) > 1 and target[1:] != rest):
            raise ValueError(
                f"shape should be (T,) or (T, {', '.join(map(str, rest))}) for values with "
                f"rows of shape {rest}, but got {target}"
            )
        if target[0] < longest:
            raise ValueError(
                f"shape {target} is shorter than the longest row ({longest}); pad_jagged never cuts"
            )
        return target[0]
    if plan is not None:
        check_plan(plan)
        if plan.ndim != 1:
            raise ValueError(f"pad_jagged pads one axis, but the plan has {plan.ndim} axes")
        return plan.round_up(longest)[0]
    m = _shapes.check_multiple(multiple)
    return -(-longest // m) * m


def pad_jagged(values, lengths, *, multiple: int = 8, shape=None, plan=None, fill=0, side: str = "right"):
    """Pad ``B`` rows stored back to back into one dense ``(B, T, *rest)`` batch.

    Parameters
    ----------
    values : ``(N, *rest)`` NumPy array or CPU torch tensor (host only)
        The rows, one after another along axis 0 (e.g. ``torch.cat`` of the samples).
    lengths : ``B`` non-negative integers summing to ``N``
        Row ``i`` is ``values[o_i : o_i + lengths[i]]``, ``o_i = sum(lengths[:i])``.
    multiple, plan, shape
        ``T``: the longest row rounded up to ``multiple`` (default), to the 1-axis
        ``plan``'s boundary, or ``shape[0]`` (``shape`` is ``(T,)`` or ``(T, *rest)``).
        Never cuts: a ``T`` shorter than a row is an error.
    fill, side
        The padding's value (storable in the dtype) and side ("left": data ends at ``T``).

    Returns
    -------
    batch : ``(B, T, *rest)`` of ``values``' dtype and kind (torch in, torch out).
    lengths : int64 ``(B,)`` (a tensor for torch ``values``).

    >>> batch, lengths = pad_jagged(np.arange(1, 6), [3, 0, 2], multiple=4)
    >>> batch
    array([[1, 2, 3, 0],
           [0, 0, 0, 0],
           [4, 5, 0, 0]])
    """
    left = check_side(side)
    arr, token = _host_values(values)
    rows = _row_lengths(lengths)
    if sum(rows) != arr.shape[0]:
        raise ValueError(f"lengths sum to {sum(rows)}, but values has {arr.shape[0]} rows along axis 0")
    T = _padded_length(max(rows, default=0), multiple, shape, plan, tuple(arr.shape[1:]))
    batch = _write_rows(arr, rows, T, fill, left, token)
    out_lengths = np.array(rows, dtype=np.int64)
    if is_torch_tensor(values):
        return wrap_like(batch, True, token), sys.modules["torch"].from_numpy(out_lengths)
    return batch, out_lengths


def _host_values(values) -> tuple:
    """``(array, token)``: ``values`` as a native-order NumPy array of rank ``>= 1`` (its
    torch-only dtype as ``token``); ``TypeError`` for device arrays, ``ValueError`` for 0-d."""
    if is_cuda_array(values):
        raise TypeError(
            "pad_jagged runs on the host, but values is on a CUDA device; pad device arrays "
            "with pad_batch (CUDA kernels), or copy values to the host first"
        )
    arr, token = as_numpy(values, what="values")
    if arr.ndim == 0:
        raise ValueError("values should have shape (N, *rest), but got a 0-d array")
    if not arr.dtype.isnative:  # the kernel copies raw bytes into a native-order output
        arr = arr.astype(arr.dtype.newbyteorder("="))
    return arr, token


def _write_rows(arr: np.ndarray, rows: list, T: int, fill, left: bool, token) -> np.ndarray:
    """The ``(B, T, *rest)`` batch of the rows ``rows`` of ``arr``: one kernel call, or
    :func:`pad_batch` over row views for a dtype the width-typed kernels do not move."""
    rest = tuple(arr.shape[1:])
    bits = kernel_fill_bits(fill, arr.dtype, token)
    if bits is None and not rows:
        return np.empty((0, T) + rest, arr.dtype)
    if bits is None:
        ends = np.cumsum(rows).tolist()
        views = [arr[e - n : e] for n, e in zip(rows, ends)]
        return pad_batch(views, shape=(T,) + rest, fill=fill, side="left" if left else "right")[0]
    R = math.prod(rest)  # each row is lengths[i] * R contiguous elements; pad it to T * R
    flat = np.ascontiguousarray(arr)
    lengths = [n * R for n in rows] if R != 1 else rows
    batch = _pad.pad_flat_rows(
        flat.ctypes.data, flat.size, lengths, flat.dtype, lambda _longest: T * R, bits, left, copy_threads
    )[0]
    return batch.reshape((len(rows), T) + rest)
