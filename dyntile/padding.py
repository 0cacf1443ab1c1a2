"""Padding API: a ragged list of arrays -> one dense, padded batch.

:func:`pad_batch` runs in three steps: it checks the call (:func:`_request`), judges
the batch's kind once (:func:`_kind_of`: the first sample's type, confirmed by the
reader of that kind, which reads every sample's shape in one call) and runs the
route of that kind from :data:`_ROUTES`. A route takes every batch of its kind or
raises naming the sample and what is accepted; no route declines a batch for the
next to try (lists are one kind: what in them is no Python number, NumPy reads).

================  ===============================================  ==============================
kind              samples                                          route
================  ===============================================  ==============================
token rows        1-D CPU tensors of one dtype, read natively      ``padding_rows``, by pointers
gathered rows     the same without the native reader: a torch.cat  ``padding_rows``, from a buffer
tensors           CPU torch tensors of one rank and dtype          ``padding_host.pad_tensors``
arrays            NumPy arrays of one rank and dtype               ``padding_host.pad_arrays``
number lists      lists (NumPy reads what is no Python number)     ``padding_rows.number_rows``
cuda              CUDA arrays or tensors, or ``device="cuda"``     ``padding_cuda.pad_cuda``
mixed             anything else on the host, read by NumPy         ``padding_host.pad_mixed``
================  ===============================================  ==============================

Nothing is ever cut: a target smaller than the data is an error.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from dyntile import shapes as _shapes
from dyntile import tensor_reader
from dyntile.cpu import pad as _pad
from dyntile.dispatch import backend_of, is_torch_tensor
from dyntile.padding_cuda import pad_cuda
from dyntile.padding_host import pad_arrays, pad_mixed, pad_tensors
from dyntile.padding_rows import (
    CARRIERS,
    CAT_ELEMENTS,
    cat_token_rows,
    native_row_dtype,
    native_row_layout,
    number_rows,
    row_plan,
    rows_from_buffer,
    rows_from_pointers,
    tensor_carrier,
)
from dyntile.padding_samples import SIDES, as_sample_list, check_side
from dyntile.planning.buckets import BucketPlan

# the native row helpers are shared with loaders' collates, not part of the top-level API
__all__ = ["pad_batch", "pad_to", "pad_rows", "native_row_dtype", "native_row_layout"]


def check_plan(plan) -> None:
    """``TypeError`` unless ``plan`` (not ``None``) is a
    :class:`~dyntile.planning.buckets.BucketPlan`, or an object with its ``ndim`` and
    ``round_up`` (all the general path uses; the one-call row routes take only
    BucketPlans and leave other plans to it)."""
    if type(plan) is BucketPlan or hasattr(plan, "round_up") and hasattr(plan, "ndim"):
        return
    hint = ""
    if isinstance(plan, (tuple, list)) and plan and all(isinstance(b, int) for b in plan):
        hint = f"; for the boundaries {tuple(plan)} pass plan=BucketPlan({tuple(plan)})"
    text = repr(plan)
    raise TypeError(
        f"plan should be a dyntile BucketPlan (BucketPlan(boundaries), or dyntile.plan_buckets(lengths)), "
        f"but got {type(plan).__name__} {text if len(text) <= 60 else text[:57] + '...'}{hint}"
    )


class PadRequest(NamedTuple):
    """One call of :func:`pad_batch`, checked: ``samples`` a non-empty list, ``left`` the
    side, ``device`` ``None`` (the host) or ``"cuda"``; the rest as passed."""

    samples: list
    multiple: int
    axes: object
    shape: object
    plan: object
    fill: object
    left: bool
    dtype: object
    promote: bool
    out: object
    device: str | None


_new = tuple.__new__  # a PadRequest without the keyword parsing of its __new__

# the kinds of batch, each a key of _ROUTES (strings: their hash is cached)
TOKEN_ROWS = "token rows"
GATHERED_ROWS = "gathered rows"
TENSORS = "tensors"
ARRAYS = "arrays"
NUMBER_LISTS = "number lists"
CUDA = "cuda"
MIXED = "mixed"


def pad_batch(
    arrays: Sequence,
    *,
    multiple: int = 8,
    axes=None,
    shape=None,
    plan=None,
    fill=0,
    side: str = "right",
    dtype=None,
    promote: bool = True,
    out=None,
    device: str | None = None,
):
    """Pad a ragged list of B arrays of one rank ``d >= 1`` into one dense batch.

    Parameters
    ----------
    arrays : NumPy arrays, CPU torch tensors, CUDA arrays, or lists of numbers
        Lists are weakly typed: bool, int64 or float64 by their values (an empty list has
        none), or beside arrays the arrays' dtype if it holds their values exactly.
    multiple, axes, plan, shape
        Each padded axis goes to the batch maximum rounded up to ``multiple``, or to its
        ``plan`` boundary (``BucketPlan.round_up``); or every sample to ``shape``. ``axes``
        (default: axis 0 of 1-D samples, else the axes whose sizes differ, or the first
        ``plan.ndim``): the others must agree. Never cuts.
    fill, side
        The padding's value (storable in the dtype: no NaN in ints) and side ("right",
        or "left": the data at the end).
    dtype, promote
        The batch dtype (samples cast ``same_kind``); default the samples' common dtype,
        which mixed dtypes must reach without rounding (see :mod:`dyntile.dtypes`).
        ``promote=False``: arrays of two dtypes, or tensors beside NumPy arrays, raise.
    out : ``(B, *padded)`` array of the batch dtype, written in place (no grad), optional
    device : ``"cuda"`` pads host arrays into a CUDA buffer; ``"cpu"`` or ``None``: the host
        (CUDA arrays pad on their device).

    Returns
    -------
    batch : ``(B, *padded)`` array of the input kind (torch in, torch out).
    lengths : int64 ``(B,)`` for 1-D samples, else ``(B, d)``: each sample's sizes.

    >>> batch, lengths = pad_batch([np.arange(3), np.arange(5)], multiple=4)
    >>> batch
    array([[0, 1, 2, 0, 0, 0, 0, 0],
           [0, 1, 2, 3, 4, 0, 0, 0]])
    >>> lengths
    array([3, 5])
    """
    request = _request(arrays, multiple, axes, shape, plan, fill, side, dtype, promote, out, device)
    kind, read = _kind_of(request)
    return _ROUTES[kind](request, read)


def _request(arrays, multiple, axes, shape, plan, fill, side, dtype, promote, out, device) -> PadRequest:
    """The call's arguments checked (side, plan, a non-empty sequence, device) as one value."""
    left = SIDES.get(side) if type(side) is str else None
    if left is None:
        left = check_side(side)  # raises, naming what is accepted
    if plan is not None:
        check_plan(plan)
    samples = arrays if type(arrays) is list else as_sample_list(arrays)
    if not samples:
        raise ValueError("pad_batch needs at least one array, but got an empty sequence")
    if device is not None and device != "cuda":
        if device != "cpu":  # "cpu": the host, what None means
            raise ValueError(f"device should be None, 'cpu' or 'cuda', but got {device!r}")
        device = None
    return _new(PadRequest, (samples, multiple, axes, shape, plan, fill, left, dtype, promote, out, device))


def _kind_of(req: PadRequest) -> tuple:
    """``(kind, read)``: the batch's kind, a key of :data:`_ROUTES`, judged once by the
    first sample's type and the reader of that kind (:data:`_READERS`), and what the
    reader learnt of the samples (``None`` where the route reads them itself)."""
    if req.device is not None:
        return CUDA, None
    x0 = req.samples[0]
    reader = _READERS.get(type(x0))
    if reader is None:
        if not is_torch_tensor(x0):
            return _other_kind(req)
        reader = _tensors_kind
        if type(x0) is sys.modules["torch"].Tensor:  # torch is loaded now: its tensors join the table
            _READERS[type(x0)] = reader
    return reader(req)


def _arrays_kind(req: PadRequest) -> tuple:
    """NumPy arrays of one rank ``>= 1``, native byte order and one dtype (``dtype=``'s,
    if given), as they are: ``arrays``, read as :func:`pad_arrays` takes it; else another kind."""
    shapes, dt, bad = _pad.describe(req.samples)
    if bad == -1 and dt is not None and (req.dtype is None or np.dtype(req.dtype) == dt) and shapes.shape[1]:
        return ARRAYS, (req.samples, shapes, dt, False, None)
    return _other_kind(req)


def _lists_kind(req: PadRequest) -> tuple:
    """Lists: ``number lists`` (their reader also runs the copy), but with ``dtype=`` NumPy reads them."""
    return (NUMBER_LISTS, None) if req.dtype is None else _other_kind(req)


def _tensors_kind(req: PadRequest) -> tuple:
    """CPU torch tensors of one dtype NumPy carries (every such dtype is one the kernels
    move): 1-D rows under the row options (read natively, or when small gathered by
    one ``torch.cat``), else ``tensors`` of one rank; another kind for anything these
    readers refuse (``dtype=``, other devices, dtypes or ranks, negative views)."""
    samples, _, axes, shape, plan, _, _, dtype, _, out, _ = req  # (one unpacking: read per batch)
    x0 = samples[0]
    carrier = None if dtype is not None else CARRIERS.get(x0.dtype) or tensor_carrier(x0.dtype)
    if carrier is None:
        return _other_kind(req)
    if axes is None and shape is None and out is None and x0.dim() == 1 and (plan is None or row_plan(plan)):
        read = tensor_reader.describe_rows(samples)  # refuses CUDA tensors, as describe_tensors does
        if read is not None:
            return TOKEN_ROWS, (carrier, read)
        if x0.is_cuda:  # (not gathered on the device)
            return _other_kind(req)
        if len(samples) * x0.numel() <= CAT_ELEMENTS:  # long rows: the extra copy costs more than it saves
            read = cat_token_rows(samples)
            if read is not None:
                return GATHERED_ROWS, (carrier, read)
    read = tensor_reader.describe_tensors(samples)
    if read[4] == -1 and read[0].shape[1] > 0:
        return TENSORS, (carrier, read)
    return _other_kind(req)


def _other_kind(req: PadRequest) -> tuple:
    """``cuda`` when every sample is on a CUDA device, ``mixed`` when none is; a
    ``TypeError`` naming the first sample of the other kind when both are there."""
    return (CUDA if backend_of(req.samples, what="arrays") == "cuda" else MIXED), None


#: the reader that judges a batch's kind, by its first sample's type (``torch.Tensor``
#: joins once seen; its subclasses and anything else are judged in _kind_of)
_READERS = {np.ndarray: _arrays_kind, list: _lists_kind}


def _batch_of(rows_route):
    """A row route as a route of :func:`pad_batch`: its batch, and its lengths as a tensor."""

    def route(req: PadRequest, read) -> tuple:
        rows = rows_route(req, read)
        return rows[0], sys.modules["torch"].from_numpy(rows[1])

    return route


def _pad_number_lists(req: PadRequest, read) -> tuple:
    """Lists of Python numbers by their own reader; lists holding anything else (nested
    lists, NumPy scalars, ints the batch dtype cannot store) by NumPy, which names them."""
    rows = number_rows(req, read)
    return pad_mixed(req) if rows is None else (rows[0], rows[1])


#: the route of each kind of batch: ``route(request, read) -> (batch, lengths)``
_ROUTES = {
    TOKEN_ROWS: _batch_of(rows_from_pointers),
    GATHERED_ROWS: _batch_of(rows_from_buffer),
    TENSORS: pad_tensors,
    ARRAYS: pad_arrays,
    NUMBER_LISTS: _pad_number_lists,
    CUDA: pad_cuda,
    MIXED: pad_mixed,
}

#: the kinds :func:`pad_rows` pads, each to ``(batch, lengths, longest, total)``
_ROW_ROUTES = {TOKEN_ROWS: rows_from_pointers, GATHERED_ROWS: rows_from_buffer, NUMBER_LISTS: number_rows}


def pad_rows(
    samples: list, *, multiple: int = 8, plan=None, fill=0, side: str = "right", promote: bool = True
):
    """A collate's one-call route: B 1-D rows -> ``(batch, lengths, longest, total)``.

    ``samples``: 1-D rows as :func:`pad_batch` takes them; 1-D CPU torch tensors of one
    dtype and lists of Python numbers (token ids as tokenizers give them) take one
    kernel call that also counts them, any other kind :func:`pad_batch`'s route for it.
    ``batch`` is ``(B, T)`` (a torch tensor for tensors, NumPy for lists and arrays; ``T``
    as :func:`pad_batch` chooses it), ``lengths`` int64 NumPy ``(B,)``, ``longest`` and
    ``total`` the longest row and the sum of the lengths (a caller needs no pass over
    ``lengths``). Errors are :func:`pad_batch`'s, and a sample of another rank than 1 is
    refused, naming it.

    >>> batch, lengths, longest, total = pad_rows([[1, 2, 3], [4]], multiple=4)
    >>> batch.tolist(), lengths.tolist(), longest, total
    ([[1, 2, 3, 0], [4, 0, 0, 0]], [3, 1], 3, 4)
    """
    req = _request(samples, multiple, None, None, plan, fill, side, None, promote, None, None)
    kind, read = _kind_of(req)
    route = _ROW_ROUTES.get(kind)
    rows = None if route is None else route(req, read)
    if rows is not None:
        return rows
    # another kind (arrays, mixed, lists NumPy reads): pad_batch's route of that kind
    batch, lengths = _ROUTES[kind](req, read)
    lengths = np.asarray(lengths)
    if lengths.ndim != 1:
        shapes = [tuple(np.shape(x)) for x in req.samples]
        i = next((i for i, s in enumerate(shapes) if len(s) != 1), 0)
        raise ValueError(
            f"pad_rows pads 1-D rows, but sample {i} has shape {shapes[i]}; "
            "pad_batch pads samples of any rank"
        )
    return batch, lengths, int(lengths.max(initial=0)), int(lengths.sum())


def pad_to(x, shape, *, fill=0, side: str = "right", out=None):
    """Pad one array ``x`` up to ``shape`` (same rank); never cuts.

    >>> pad_to(np.ones((2, 3), int), (4, 4))
    array([[1, 1, 1, 0],
           [1, 1, 1, 0],
           [0, 0, 0, 0],
           [0, 0, 0, 0]])
    """
    target = _shapes.check_shape(shape)
    xshape = tuple(int(s) for s in getattr(x, "shape", np.shape(x)))
    if len(target) != len(xshape):
        raise ValueError(f"cannot pad x of shape {xshape} to shape {target}: the ranks differ")
    for a, (s, t) in enumerate(zip(xshape, target)):
        if t < s:
            raise ValueError(
                f"cannot pad x of shape {xshape} to shape {target}: axis {a} would be cut "
                f"({s} > {t}); pad_to never truncates"
            )
    batch_out = None
    if out is not None:
        if not hasattr(out, "shape") or not hasattr(out, "reshape"):
            raise TypeError(f"out should be an array (NumPy, torch or CUDA), but got {type(out).__name__}")
        oshape = tuple(out.shape)
        if oshape != target:
            raise ValueError(f"out has shape {oshape}, but pad_to needs {target}")
        batch_out = out.reshape((1,) + target)  # a view: adding a unit axis never copies
    batch, _ = pad_batch([x], shape=target, fill=fill, side=side, out=batch_out)
    return out if out is not None else batch[0]
