"""The one-call row routes: B 1-D rows -> ``(batch, lengths, longest, total)``.

The hot case of a collate (token ids, labels): 1-D CPU torch tensors read by their
pointers (:mod:`dyntile.tensor_reader`) or gathered by one ``torch.cat``, and lists
of Python numbers read without an array per list (:mod:`dyntile.cpu.number_lists`).
The padded length of rows and the fill's bits are worked out once per (dtype, fill,
multiple or plan) and cached (:func:`row_setup`). :mod:`dyntile.padding` decides
which batches come here; these routes only run.
"""

from __future__ import annotations

import bisect
import operator
import sys

import numpy as np

from dyntile import shapes as _shapes
from dyntile.arrays import check_out, numpy_carrier
from dyntile.cpu import number_lists as _number_lists
from dyntile.cpu import pad as _pad
from dyntile.dispatch import is_torch_tensor
from dyntile.fill import fill_bits, fill_key, kernel_fill_bits
from dyntile.padding_shape import target_shape
from dyntile.planning.buckets import BucketPlan
from dyntile.threads import copy_threads

__all__ = [
    "CARRIERS",
    "CAT_ELEMENTS",
    "cat_token_rows",
    "native_row_dtype",
    "native_row_layout",
    "number_rows",
    "row_plan",
    "rows_from_buffer",
    "rows_from_pointers",
    "tensor_carrier",
]

#: batches of about this many elements or more (judged by the first sample) skip the
#: torch.cat route: its copy and buffer then outweigh the per-tensor reads it saves
CAT_ELEMENTS = 1 << 20
_INT64 = np.dtype(np.int64)
_INT64_MAX = 2**63 - 1
_DTYPE = operator.attrgetter("dtype")


def row_plan(plan) -> bool:
    """Whether the row routes take ``plan``: none, or a one-axis :class:`BucketPlan`
    (a plan of the protocol only is asked for its ``round_up`` by the general routes)."""
    return plan is None or (type(plan) is BucketPlan or isinstance(plan, BucketPlan)) and plan.ndim == 1


def native_row_dtype(x0):
    """``(numpy dtype, token)`` of the rows the native row kernels pad, judged by the
    first (a list of ints: int64; a torch tensor: its dtype's carrier), or ``None``
    for rows they leave to the other routes (complex: conjugate bits; dtypes NumPy
    cannot carry, such as quantized or sub-byte ones; anything else)."""
    if type(x0) is list:
        return _INT64, None
    if type(x0) is np.ndarray or not is_torch_tensor(x0):
        return None
    return tensor_carrier(x0.dtype)


def tensor_carrier(dtype):
    """``(numpy dtype, token)`` that carries the torch ``dtype`` in the copy kernels (every
    such NumPy dtype is one they move), or ``None`` for one they leave to NumPy's reading:
    complex (a tensor's conjugate bit) and dtypes NumPy cannot carry (quantized, sub-byte)."""
    if dtype.is_complex:
        return None
    carrier = numpy_carrier(dtype)
    if carrier is not None:
        CARRIERS[dtype] = carrier
    return carrier


#: torch dtype -> its :func:`tensor_carrier` (those that have one), looked up per batch
CARRIERS: dict = {}


def native_row_layout(multiple: int, plan=None):
    """How the collate's native route (:mod:`loaders._collate_layout`) takes the padded
    length of rows: ``(multiple, None)`` without a plan (the longest row
    rounded up to ``multiple``), ``(1, boundaries as int64)`` with a one-axis plan (the
    smallest boundary ``>=`` it); ``None`` for a plan they cannot take (more axes, a
    boundary past int64)."""
    if plan is None:
        return multiple, None
    if plan.ndim != 1 or plan.axis_boundaries[0][-1] > _INT64_MAX:
        return None
    return 1, np.asarray(plan.axis_boundaries[0], np.int64)


def plan_rows(plan):
    """``size_of(longest)`` for a one-axis plan: the smallest boundary ``>=`` it, by one
    ``bisect`` (``plan.round_up`` validates and builds tuples: per batch, that cost
    more than the rest of the planning); over the plan, ``round_up`` raises."""
    bounds = plan.axis_boundaries[0]
    top = bounds[-1]

    def size_of(n: int) -> int:
        if 0 <= n <= top:
            return bounds[bisect.bisect_left(bounds, n)]
        return plan.round_up(n)[0]

    return size_of


#: (dtype, token, fill key, multiple's type, multiple or plan boundaries) -> (fill bits,
#: size_of): what the row routes would otherwise work out again for every batch
_ROW_SETUP: dict = {}


def row_setup(dt: np.dtype, token, multiple, plan, fill) -> tuple:
    """``(fill bits, size_of)`` for rows of ``dt``, a dtype the kernels move (``token``:
    a torch-only dtype it carries), under ``plan`` (see :func:`row_plan`):
    ``size_of(longest)`` gives the padded length. Raises for a fill ``dt`` cannot hold."""
    key = (
        dt,
        token,
        (int, fill) if type(fill) is int else fill_key(fill),  # fill_key's, without its call for an int
        type(multiple),  # 8.0 == 8, but only 8 is a multiple
        multiple if plan is None else plan.boundaries,
    )  # a plan's hash costs more
    try:
        return _ROW_SETUP[key]
    except KeyError:
        pass
    except TypeError:  # an unhashable fill (a 0-d array): work it out uncached
        key = None
    bits = kernel_fill_bits(fill, dt, token)
    if plan is not None:
        setup = (bits, plan_rows(plan))
    else:
        m = _shapes.check_multiple(multiple)
        setup = (bits, lambda n: -(-n // m) * m)
    if key is not None:
        if len(_ROW_SETUP) >= 256:
            _ROW_SETUP.clear()
        _ROW_SETUP[key] = setup
    return setup


def cat_token_rows(samples: list):
    """``(flat, lengths)`` for 1-D CPU tensors of one dtype: ``torch.cat`` of them
    (one C++ loop) and their lengths as a list of ints; ``None`` when the samples are
    not such rows (other ranks, devices, layouts, mixed dtypes, non-tensors)."""
    torch = sys.modules["torch"]
    try:
        flat = torch.cat(samples)
    except (RuntimeError, TypeError):
        return None
    # cat promotes dtypes and skips legacy empty 1-D tensors, so check both
    if (
        flat.dim() != 1
        or not flat.is_cpu
        or flat.layout is not torch.strided
        or list(map(_DTYPE, samples)).count(samples[0].dtype) != len(samples)
    ):
        return None
    return flat, list(map(torch.Tensor.numel, samples))


def rows_from_pointers(req, read) -> tuple:
    """1-D CPU tensors read natively (``read``: their :func:`tensor_carrier` and
    :func:`dyntile.tensor_reader.describe_rows`'s ``(shapes, strides, ptrs, longest,
    total)``): one kernel copies from their memory."""
    (dt, token), (shapes, strides, ptrs, longest, total) = read
    samples, multiple, _, _, plan, fill, left, _, _, _, _ = req  # (one unpacking: read per batch)
    bits, size_of = row_setup(dt, token, multiple, plan, fill)
    batch = np.empty((len(samples), size_of(longest)), dt)  # too short: plan.round_up raised
    _pad.pad_pointers(ptrs, shapes, strides, batch, bits, left, copy_threads(batch.nbytes))
    batch = sys.modules["torch"].from_numpy(batch)
    return (batch if token is None else batch.view(token)), shapes.ravel(), longest, total


def rows_from_buffer(req, read) -> tuple:
    """1-D CPU tensors gathered by ``torch.cat`` (``read``: their :func:`tensor_carrier`
    and :func:`cat_token_rows`'s ``(flat, lengths)``; reading each tensor's pointer and
    strides through torch's bindings costs more than this copy): the kernel pads them
    from that buffer."""
    (dt, token), (flat, lengths) = read
    bits, size_of = row_setup(dt, token, req.multiple, req.plan, req.fill)
    batch, lengths, longest, total = _pad.pad_flat_rows(
        flat.data_ptr(), flat.shape[0], lengths, dt, size_of, bits, req.left, copy_threads
    )
    batch = sys.modules["torch"].from_numpy(batch)
    return (batch if token is None else batch.view(token)), lengths, longest, total


def number_rows(req, read=None):
    """Lists of Python numbers (token ids from a tokenizer), read without building an
    array per list: ``(batch, lengths, longest, total)``, in one pass for lists of ints
    (a scan first for bools and floats). ``None`` when a list holds something else:
    another element type (nested lists, NumPy scalars), or an int the batch dtype cannot
    store exactly (past int64, rounded in float64); NumPy reads those."""
    samples, multiple, axes, shape, plan, fill, left, _, _, out, _ = req  # (one unpacking: read per batch)
    if axes is None and shape is None and out is None and (plan is None or row_plan(plan)):
        try:
            bits, size_of = row_setup(_INT64, None, multiple, plan, fill)
        except (TypeError, ValueError):  # e.g. fill=0.5 (fine for float lists): the scan route checks
            bits = None
        if bits is not None:
            rows = _number_lists.pad_ints(samples, size_of, bits, left)  # token ids: one pass
            if rows is not None:
                return rows
    lengths, dt = _number_lists.scan(samples)
    if dt is None:
        return None
    target = (len(samples),) + target_shape(lengths.reshape(-1, 1), multiple, axes, shape, plan)
    dest = np.empty(target, dt) if out is None else check_out(out, target, dt, "this batch")
    buf = dest if dest.flags.c_contiguous else np.empty(target, dt)
    if _number_lists.pad_into(samples, buf, fill_bits(fill, dt), left) != -1:
        return None
    if buf is not dest:
        dest[...] = buf
    return (dest if out is None else out), lengths, int(lengths.max(initial=0)), int(lengths.sum())
