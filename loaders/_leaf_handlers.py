"""The Python executor's handlers: one small function per kind of place in a sample.

Like ``torch.utils.data._utils.collate.collate_fn_map``, :data:`HANDLERS` maps a kind
(:func:`loaders._collate_spec.kind_of`) to a handler ``handler(ctx, items, spec)``:
``items`` are the B samples' values at one place of the sample structure, ``spec`` is
that place's :class:`~loaders._collate_spec.LeafSpec` or
:class:`~loaders._collate_spec.NodeSpec`, and ``ctx`` is the batch being collated
(:class:`loaders._collate_python.PythonBatch`: ``ctx.walk`` recurses into structures,
``ctx.pad`` pads a ragged leaf).

Structures: mappings -> dict, namedtuples -> the same namedtuple, tuples and lists
of non-numbers -> list (as ``default_collate``). Leaves: tensors and arrays ->
one padded (or stacked) tensor; lists of numbers -> a 1-D sequence leaf; numbers
-> a ``(B,)`` tensor; strings, bytes and ``None`` -> kept as a list.
"""

from __future__ import annotations

import collections.abc
import itertools
import operator
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from dyntile import tensor_reader
from dyntile.dtypes import promote_samples

from ._collate_layout import NUMBER_DTYPES
from ._collate_spec import (
    ARRAY,
    KEEP,
    MAP,
    NAMEDTUPLE,
    NP_SCALARS,
    NUMBERS,
    ROWS,
    SEQ,
    Mismatch,
    _is_number,
    join_key,
)

__all__ = ["HANDLERS", "mapping_columns", "read_leaf"]


def _where(key: str) -> str:
    return f"key {key!r}" if key else "the samples"


# ----------------------------------------------------------------------------- structures


def collate_mapping(ctx, items: list, spec) -> dict:
    """Dicts -> a dict of collated values; every sample must have the same keys.

    Every sample of sample 0's type, every key of sample 0 present (the column
    lookups raise otherwise) and as many keys in all as ``B`` times sample 0's means
    the same key set; the checks are C-level loops (``map(type)``, ``map(itemgetter)``
    and ``map(len)``). Mappings of mixed types are collated when each is a mapping."""
    key = spec.key
    keys, columns = mapping_columns(items, key)
    if tuple(keys) != spec.fields:
        raise Mismatch(key)
    return {k: ctx.walk(child, column) for k, child, column in zip(keys, spec.children, columns)}


def mapping_columns(items: list, key: str = "") -> tuple[list, list]:
    """``(keys, columns)`` of mapping samples (at the place ``key``): sample 0's keys
    and, per key, the B values. Raises ``KeyError`` naming the first sample that
    lacks a key of sample 0 or adds one, ``TypeError`` naming one that is not a
    mapping (see :func:`collate_mapping`). Exact dicts are read in one native call
    when the native module is in use."""
    try:
        return _mapping_columns(items)
    except (KeyError, TypeError, IndexError):
        keys = list(items[0].keys())
        _raise_key_mismatch(items, keys, key)
        raise TypeError(
            f"{_where(key)}: the samples could not be read as mappings with keys {keys}"
        ) from None


def _mapping_columns(items: list) -> tuple[list, list]:
    native = tensor_reader.native_module()
    if native is not None and type(items) is list:
        got = native.dict_columns(items)
        if got is not None:
            return got
    keys = list(items[0].keys())
    if list(map(type, items)).count(type(items[0])) != len(items) and not all(
        isinstance(x, collections.abc.Mapping) for x in items
    ):
        raise TypeError  # not a mapping: a list or tuple would answer int keys
    columns = [list(map(operator.itemgetter(k), items)) for k in keys]
    if sum(map(len, items)) != len(keys) * len(items):
        raise KeyError
    return keys, columns


def _raise_key_mismatch(items: list, keys: list, key: str):
    for i, item in enumerate(items):
        if not isinstance(item, collections.abc.Mapping):
            raise TypeError(
                f"{_where(key)}: sample {i} is a {type(item).__name__}, but sample 0 is a mapping"
            )
        missing = [k for k in keys if k not in item]
        extra = [k for k in item if k not in keys]
        if missing or extra:
            what = (
                f"is missing key {join_key(key, missing[0])!r}"
                if missing
                else f"has extra key {join_key(key, extra[0])!r}"
            )
            raise KeyError(f"sample {i} {what}; every sample needs the keys of sample 0: {keys}")


def collate_sequence(ctx, items: list, spec) -> list:
    """Tuples (and lists of non-numbers) -> a list with one collated value per position."""
    key = spec.key
    n = len(items[0])
    if n != len(spec.children):
        raise Mismatch(key)
    kind = type(items[0])
    known = issubclass(kind, (tuple, list))  # a sample of sample 0's tuple or list type: no ABC check
    for i, item in enumerate(items):
        if not ((known and type(item) is kind) or _is_sequence(item)):
            raise TypeError(
                f"{_where(key)}: sample {i} is a {type(item).__name__}, but sample 0 is a "
                f"{type(items[0]).__name__}; every sample's value of one key needs one kind"
            )
        if len(item) != n:
            what = "numbers" if not n or _is_number(items[0][0]) else type(items[0][0]).__name__
            raise ValueError(
                f"{_where(key)}: sample {i} has {len(item)} elements, but sample 0 has {n}; a "
                f"{type(items[0]).__name__} of {what} is collated position by position (as "
                f"default_collate does), which needs equal sizes; only lists of numbers and "
                f"arrays are padded"
            )
    return [ctx.walk(child, list(column)) for child, column in zip(spec.children, zip(*items))]


def collate_namedtuple(ctx, items: list, spec):
    """Namedtuples -> the same namedtuple of collated fields (named ``key.field``, as
    ``pad_values`` and ``pad_keys`` take them)."""
    if type(items[0]) is not spec.cls:
        raise Mismatch(spec.key)
    return spec.cls(*collate_sequence(ctx, items, spec))


# ----------------------------------------------------------------------------- leaves


def collate_arrays(ctx, items: list, spec) -> torch.Tensor:
    """Tensors / arrays of one rank and dtype -> one tensor, padded when ragged.

    Plain CPU tensors are read by the native reader (:mod:`dyntile.tensor_reader`)
    in one call when it is built; otherwise, and for anything it refuses, this reads
    ``type``, ``dtype`` and ``shape`` per sample (one pass each, in C-level
    comprehensions) and names any mismatch. The copy is one kernel call in
    ``ctx.pad``. 1-D rows that the rules give the row path go to one ``pad_rows`` call
    (:meth:`PythonBatch.pad_rows`), decided before either runs.
    """
    key = spec.key
    x0 = items[0]
    if x0.ndim != spec.ndim:
        raise Mismatch(key)
    if x0.ndim == 1 and ctx.rules.pads_rows(x0):  # pad_rows(promote=False) checks kinds and dtypes
        return ctx.pad_rows(items, spec)
    items, shapes = read_leaf(items, spec)
    if shapes.shape[1] == 0 or not ctx.is_ragged(spec, shapes):
        return ctx.stacked(items, spec, _stack(items))
    return ctx.pad(items, shapes, spec)


def read_leaf(items: list, spec, reason: str | None = None) -> tuple[list, np.ndarray]:
    """``(items, shapes)`` of a tensor, array or row leaf as the general path pads it: tensors
    and arrays as they are, lists of numbers as arrays of the batch's dtype, and their
    ``(B, ndim)`` shapes; else the error naming the key and the first sample of another
    type, dtype, rank or kind of number (for a list among tensors, ``reason``: why the row
    path could not join it to them). The one wording of these errors: the row path names
    its failures by this reading too."""
    key = spec.key
    if spec.kind == ROWS:
        arrays = _number_arrays(items, key)
        return arrays, np.fromiter(map(len, arrays), np.int64, len(arrays)).reshape(-1, 1)
    return items, _shapes(items, key, reason)


def _shapes(items: list, key: str, reason: str | None) -> np.ndarray:
    """The ``(B, ndim)`` shapes of tensors or arrays of one type, dtype and rank (else an
    error naming the first sample that differs); plain CPU tensors in one native call."""
    if type(items[0]) is torch.Tensor:  # the native reader checks dtype and rank too
        described = tensor_reader.describe_native(items)
        if described is not None:
            return described[0]
    if len({(type(x), getattr(x, "dtype", None)) for x in items}) > 1:
        check_one_dtype(items, key)  # the tensors or arrays (PackedCollate's rule too)
        _raise_mixed(items, type(items[0]), items[0].dtype, key, reason)  # a list among them
    shape_list = [x.shape for x in items]
    ndim = len(shape_list[0])
    if len({len(s) for s in shape_list}) > 1:
        i = next(i for i, s in enumerate(shape_list) if len(s) != ndim)
        raise ValueError(
            f"{_where(key)}: sample {i} has shape {tuple(shape_list[i])} ({len(shape_list[i])} "
            f"dimensions), but sample 0 has shape {tuple(shape_list[0])} ({ndim} dimensions)"
        )
    flat = itertools.chain.from_iterable(shape_list)
    return np.fromiter(flat, np.int64, count=len(items) * ndim).reshape(len(items), ndim)


def check_one_dtype(items: list, key: str) -> None:
    """``TypeError`` naming the first tensor or array among ``items`` (one key's values)
    of another type or dtype than the first one: both collates take one type and dtype
    per key and promote none (int64 with int32, float32 with float64); lists of numbers
    are weakly typed and join them when the dtype holds their values.

    >>> check_one_dtype([np.zeros(2, np.int64), [3], np.zeros(1, np.int32)], "input_ids")
    Traceback (most recent call last):
    TypeError: key 'input_ids': sample 2 has dtype int32, but sample 0 has dtype int64; ...
    """
    typed = [(i, x) for i, x in enumerate(items) if isinstance(x, (torch.Tensor, np.ndarray))]
    if not typed:
        return
    i0, x0 = typed[0]
    for i, x in typed:
        if type(x) is not type(x0) or x.dtype != x0.dtype:
            same = type(x) is type(x0)
            what = f"dtype {x.dtype}" if same else f"type {type(x).__name__}"
            want = f"dtype {x0.dtype}" if same else f"type {type(x0).__name__}"
            raise TypeError(
                f"{_where(key)}: sample {i} has {what}, but sample {i0} has {want}; "
                f"every sample's value of one key needs one type and dtype"
            )


def _raise_mixed(items: list, kind: type, dtype, key: str, reason: str | None = None):
    """``TypeError`` naming the first sample of another type or dtype than sample 0; for
    a list of numbers, ``reason``: why the row path (where lists join tensors of a
    dtype that holds their values) could not join it."""
    i, got = next(
        (i, x) for i, x in enumerate(items) if type(x) is not kind or getattr(x, "dtype", None) != dtype
    )
    if reason is not None and not hasattr(got, "dtype"):  # a list the tensors' dtype cannot hold
        raise TypeError(f"{_where(key)}: {reason}")
    what = f"dtype {got.dtype}" if type(got) is kind else f"type {type(got).__name__}"
    want = f"dtype {dtype}" if type(got) is kind else f"type {kind.__name__}"
    raise TypeError(
        f"{_where(key)}: sample {i} has {what}, but sample 0 has {want}; "
        f"every sample's value of one key needs one type and dtype"
    )


def _stack(items: list) -> torch.Tensor:
    if isinstance(items[0], torch.Tensor):
        return torch.stack(items)
    return torch.from_numpy(np.stack(items))


def collate_number_lists(ctx, items: list, spec) -> torch.Tensor:
    """Lists of numbers (1-D sequences) -> one padded tensor (bool, int64 or float64,
    as ``numpy.asarray`` reads them; empty lists carry no type)."""
    if ctx.rules.pads_rows(items[0]):  # pad_rows reads the lists of Python numbers itself
        return ctx.pad_rows(items, spec)
    arrays, shapes = read_leaf(items, spec)
    if not ctx.is_ragged(spec, shapes):
        return ctx.stacked(items, spec, torch.from_numpy(np.stack(arrays)))
    return ctx.pad(arrays, shapes, spec)


def _number_arrays(items: list, key: str) -> list:
    """One array per list of numbers, all of the batch's dtype (views of one buffer)."""
    i = next((i for i, x in enumerate(items) if not isinstance(x, (list, tuple))), None)
    if i is not None:
        raise TypeError(
            f"{_where(key)}: sample {i} is a {type(items[i]).__name__}, but sample 0 is a list of "
            f"numbers; every sample's value of one key needs one kind"
        )
    lengths = [len(x) for x in items]
    try:
        flat = np.array(list(itertools.chain.from_iterable(items)))
    except (TypeError, ValueError):  # e.g. a nested list (another rank): named below
        flat = None
    if flat is None or (flat.size and flat.dtype.kind not in "biufc"):
        _raise_not_numbers(items, key)
    if flat.size == 0:  # empty lists carry no type (as in pad_batch)
        flat = flat.astype(np.int64)
    elif flat.dtype.kind in "fc":  # each list is typed by its own values (as in pad_batch):
        _check_float_lists(items, key)  # an int list must not round in float64 (complex128)
    ends = np.cumsum(lengths).tolist()
    return [flat[e - n : e] for e, n in zip(ends, lengths)]


def _shown(value: int) -> str:
    """An int for a message: huge ones by their size."""
    return f"an int of {value.bit_length()} bits" if value.bit_length() > 200 else str(value)


def _raise_not_numbers(items: list, key: str):
    """The error for lists NumPy cannot read as one numeric array: the first sample
    holding a non-number, else (numbers all, read as Python objects) the first int
    past 64 bits. Never a bare ``StopIteration``: out of a ``collate_fn`` it ends a
    ``DataLoader`` epoch without a word."""
    for i, x in enumerate(items):
        for v in x:
            if not _is_number(v):
                raise TypeError(
                    f"{_where(key)}: sample {i} should be a list of numbers, but holds a {type(v).__name__}"
                )
    for i, x in enumerate(items):
        big = next((v for v in x if isinstance(v, int) and not -(2**63) <= v < 2**64), None)
        if big is not None:
            raise ValueError(
                f"{_where(key)}: sample {i} holds {big}, which no integer dtype holds "
                f"(int64 and uint64 are the widest)"
            )
    raise TypeError(
        f"{_where(key)}: the samples' numbers make an array of Python objects (NumPy reads them as "
        f"no one numeric dtype); pass them as one dtype"
    )


def _check_float_lists(items: list, key: str) -> None:
    """``TypeError`` naming the first list whose ints float64 would round (the typing
    of lists that ``pad_batch`` applies: :func:`dyntile.dtypes.promote_samples`)."""
    arrays = [(i, np.asarray(x)) for i, x in enumerate(items)]
    i = next((i for i, a in arrays if a.dtype == object), None)
    if i is not None:
        raise TypeError(
            f"{_where(key)}: sample {i} holds ints outside int64, which float64 (the "
            f"batch's dtype) would round; pass them as floats or as one dtype"
        )
    if all(a.dtype.kind in "biu" for _, a in arrays):  # ints only: uint64 with int64 reads as float64
        big = next(i for i, a in arrays if a.dtype.kind == "u")
        small = next(i for i, a in arrays if a.dtype.kind != "u" and a.size)
        raise TypeError(
            f"{_where(key)}: sample {big} holds ints that do not fit int64 (e.g. "
            f"{max(items[big])}) and sample {small} holds ints read as int64: no integer dtype "
            f"holds both, and float64 would round them; pass every sample as one dtype "
            f"(e.g. a uint64 array)"
        )
    try:
        promote_samples([], arrays)
    except TypeError as e:
        raise TypeError(f"{_where(key)}: {e} (the batch is float64: another sample holds floats)") from None


def check_ints_fit(items: list, key: str) -> None:
    """``ValueError`` naming the first of one key's Python ints that int64 (the dtype of
    a key of ints, in both collates) cannot hold."""
    big = next((i for i, x in enumerate(items) if type(x) is int and not -(2**63) <= x < 2**63), None)
    if big is not None:
        raise ValueError(
            f"{_where(key)}: sample {big} holds {_shown(items[big])}, which int64 (the dtype of a "
            f"key of ints) cannot hold; pass it as a float"
        ) from None


def collate_numbers(ctx, items: list, spec) -> torch.Tensor:
    """Python numbers -> a ``(B,)`` tensor: float64 for floats, int64 for ints (as ``default_collate``)."""
    key = spec.key
    dtype = NUMBER_DTYPES.get(type(items[0]))
    try:
        if dtype is not None and list(map(type, items)).count(type(items[0])) == len(items):
            return torch.tensor(items, dtype=dtype)  # numbers of one kind: the layout's dtypes
        if isinstance(items[0], float):
            return torch.tensor(items, dtype=torch.float64)
        return torch.tensor(items)
    except (TypeError, ValueError, RuntimeError, OverflowError):
        i = next((i for i, x in enumerate(items) if not _is_number(x)), None)
        if i is None:
            check_ints_fit(items, key)
            raise
        raise TypeError(
            f"{_where(key)}: sample {i} is a {type(items[i]).__name__}, but sample 0 is a number "
            f"({type(items[0]).__name__}); every sample's value of one key needs one kind"
        ) from None


def collate_numpy_scalars(ctx, items: list, spec) -> torch.Tensor:
    """NumPy scalars -> a ``(B,)`` tensor of their dtype."""
    return torch.as_tensor(np.array(items))


def keep_list(ctx, items: list, spec) -> list:
    """Strings, bytes, ``None``: kept as a list of the B values."""
    return list(items)


# ----------------------------------------------------------------------------- dispatch

HANDLERS: dict[str, Callable] = {
    ARRAY: collate_arrays,
    ROWS: collate_number_lists,
    NUMBERS: collate_numbers,
    NP_SCALARS: collate_numpy_scalars,
    KEEP: keep_list,
    MAP: collate_mapping,
    SEQ: collate_sequence,
    NAMEDTUPLE: collate_namedtuple,
}


def _is_sequence(v: Any) -> bool:
    return isinstance(v, collections.abc.Sequence) and not isinstance(v, (str, bytes))
