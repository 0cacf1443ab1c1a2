"""The layout of a batch: what each key becomes, decided once per batch, in one place.

A batch of flat dicts of rows and numbers (a tokenizer's, a dataset's of tensors) runs in
one native call (``collate_dicts``, of the native module :mod:`dyntile.tensor_reader`
hands out), in three steps: its reader reports the batch's facts (per key, what its
values are, whether its rows share one length, and its longest row) and each key's total
length; :func:`layout_batch` decides from the facts and the collate's :class:`DictSpec`
every key's width, dtype and fill, which key gives the mask and lengths, and which keys
the counts are of; its writer writes that :class:`BatchLayout` into new tensors. The
reader and the writer decide nothing. A layout depends on the facts alone, which take few
values in a run (the lengths enter by their longest row only, and rows of more than one
length by the width that row pads to, read from the spec's :func:`width_table`): each is
decided once, kept in the spec, and found there by the native call itself.

The rules of a batch are small functions here, which the Python executor
(:mod:`loaders._collate_python`) applies too:

* :func:`stacks`: a row key whose rows share one length is stacked, unless it is a
  declared sequence;
* :func:`mask_of`: the mask and lengths come from ``mask_from``, else from the first
  padded key;
* :func:`widens`: a stacked token or label key of the mask key's one length takes the
  mask key's width;
* :func:`counted`: the counts are of the padded keys in key order, then the widened ones;
* :data:`NUMBER_DTYPES`: Python ints, floats and bools are stacked as int64, float64 and
  bool (``default_collate``'s dtypes).
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
from typing import NamedTuple

import numpy as np
import torch

from dyntile import tensor_reader
from dyntile.fill import kernel_fill_bits
from dyntile.padding import native_row_dtype
from dyntile.threads import PARALLEL_COPY_BYTES

__all__ = [
    "BatchLayout",
    "DictSpec",
    "NUMBER_DTYPES",
    "counted",
    "key_code",
    "layout_batch",
    "mask_of",
    "stacks",
    "widens",
]

#: the dtype of a key of Python numbers, by their type (as ``default_collate`` stacks them)
NUMBER_DTYPES = {int: torch.int64, float: torch.float64, bool: torch.bool}

#: copies of more bytes than this go to the threaded kernels of the Python executor
ONE_THREAD_BYTES = PARALLEL_COPY_BYTES - 1

#: layouts a spec keeps (one per distinct facts) before it starts over
MAX_LAYOUTS = 1024

#: the longest rows a spec's table of widths covers (longer ones are reported as they are)
WIDTH_TABLE_ROWS = 4096

_DTYPE_SHIFT = 5  # a tensor key's code holds 1 + its scalar type from this bit on


class _Codes(NamedTuple):
    """The native reader's kinds and flags of a key's code (its module constants, written
    once, in the C++), the torch dtype of a code's scalar type (``dtypes[code >>
    _DTYPE_SHIFT]``; None: no tensor), and the dtype of each kind of Python numbers."""

    tensor_rows: int
    tensor_scalars: int
    grad: int
    one_length: int
    dtypes: tuple
    numbers: dict


_CODES: list = []


def _codes() -> _Codes:
    """The native reader's codes, read from it once (only a batch it read is laid out)."""
    if not _CODES:
        native = tensor_reader.native_module()
        kinds = {native.INTS: int, native.FLOATS: float, native.BOOLS: bool}
        numbers = {kind: NUMBER_DTYPES[cls] for kind, cls in kinds.items()}
        codes = (native.TENSOR_ROWS, native.TENSOR_SCALARS, native.GRAD, native.ONE_LENGTH)
        _CODES.append(_Codes(*codes, native.scalar_dtypes(), numbers))
    return _CODES[0]


def key_code(kind: int, dtype=None, grad: bool = False, one_length: bool = False) -> int:
    """The native reader's code of a key (what it reports in a batch's facts):
    its ``kind`` (a constant of the native module: ``LIST_ROWS``...), the tensors' torch
    ``dtype`` (None for Python values), whether one requires grad, and whether its rows
    share one length.

    >>> native = tensor_reader.native_module()
    >>> key_code(native.LIST_ROWS, one_length=True) == native.LIST_ROWS | native.ONE_LENGTH
    True
    """
    c = _codes()
    typed = 0 if dtype is None else c.dtypes.index(dtype) << _DTYPE_SHIFT
    return kind | (c.grad if grad else 0) | (c.one_length if one_length else 0) | typed


def stacks(always: bool, one_length: bool) -> bool:
    """Whether a row key is stacked as it is: its rows share one length (``one_length``)
    and it is no declared sequence (``always``).

    >>> stacks(False, True), stacks(True, True), stacks(False, False)
    (True, False, False)
    """
    return one_length and not always


def mask_of(padded, mask_from=None):
    """The key that gives the mask and lengths: ``mask_from`` when one is named, else the
    first of the ``padded`` keys (in key order); ``None`` for none.

    >>> mask_of(["ids", "labels"]), mask_of(["ids", "labels"], "labels"), mask_of([])
    ('ids', 'labels', None)
    """
    if mask_from is not None:
        return mask_from
    return next(iter(padded), None)


def widens(align: bool, length: int, mark_length: int | None, mark_width: int) -> bool:
    """Whether a stacked row key of one ``length`` takes the mask key's width
    ``mark_width``: it is a token or label key (``align``), and the mask key's rows all
    have that one length (``mark_length``; ``None`` when they differ) and were padded.

    >>> widens(True, 5, 5, 8), widens(True, 5, 5, 5), widens(False, 5, 5, 8), widens(True, 5, None, 8)
    (True, False, False, False)
    """
    return align and mark_length is not None and length == mark_length and mark_width != length


def counted(padded: list, widened: list) -> list:
    """The order the counts (and the stats' shapes) list keys in: the padded keys in key
    order, then the widened ones (widening waits for the mask key). :func:`layout_batch`
    builds its shapes in this order as it goes, and the Python executor counts its
    leaves as it pads them, the widened ones last.

    >>> counted(["ids"], ["labels"])
    ['ids', 'labels']
    """
    return [*padded, *widened]


class KeyRule(NamedTuple):
    """What the plan knows of one key of a flat dict: whether it holds rows (else numbers),
    whether it pads at one length (``always``) or takes the mask key's width (``align``),
    and its fill."""

    key: str
    row: bool
    always: bool
    align: bool
    fill: object


@dataclasses.dataclass(eq=False)
class DictSpec:
    """The plan of a flat dict batch that the native reader and writer run: its keys (in
    sample 0's order), a :class:`KeyRule` per key, the padded width of a longest row
    (``size_of``: -1 past the plan), the index of ``mask_from`` (-1), what to make of the
    mask key (``want``: 1 lengths, 2 mask) and the side."""

    keys: tuple
    rules: tuple
    size_of: object
    mask_from: int
    want: int
    left: bool

    def __post_init__(self):
        # each key's fill bits by dtype (None: not holdable), and the layout of each facts seen
        self.bits = tuple({} for _ in self.rules)
        self.layouts = {}
        self.widths = width_table(self.size_of)
        self.decide = functools.partial(layout_batch, self)  # what the native call asks for new facts

    def __eq__(self, other) -> bool:
        return isinstance(other, DictSpec) and (
            self.keys,
            self.rules,
            self.size_of,
            self.mask_from,
            self.want,
            self.left,
        ) == (other.keys, other.rules, other.size_of, other.mask_from, other.want, other.left)

    __hash__ = None

    def fill_bits(self, j: int, dtype) -> int | None:
        """The fill bits of key ``j`` in ``dtype`` (a torch dtype; ``None``: int64 lists), or
        ``None`` when the writer cannot hold it (the Python executor names the fill)."""
        got = self.bits[j].get(dtype, _UNSET)
        if got is _UNSET:
            carrier = native_row_dtype([] if dtype is None else torch.empty(0, dtype=dtype))
            try:
                got = None if carrier is None else kernel_fill_bits(self.rules[j].fill, *carrier)
            except (TypeError, ValueError):
                got = None
            self.bits[j][dtype] = got
        return got


_UNSET = object()


def size_of_rows(multiple: int, bounds) -> object:
    """``size_of(longest)``: ``longest`` rounded up to ``multiple``, or the smallest of the
    ascending ``bounds`` ``>=`` it, -1 past the last.

    >>> size_of_rows(8, None)(13), size_of_rows(1, [8, 16])(9), size_of_rows(1, [8, 16])(17)
    (16, 16, -1)
    """
    if bounds is None:
        return _Multiple(multiple)
    return _Bounds(tuple(int(b) for b in bounds))


@functools.lru_cache(maxsize=64)
def width_table(size_of) -> bytes:
    """The widths ``size_of`` pads each longest row ``0 <= n < N`` to, as native int64 bytes
    (the native reader reports a row key whose rows differ in length by this width, where
    the table has it). A layout depends on such a key's longest row only through its width,
    and ``size_of`` keeps a width as it is, so :func:`layout_batch` decides the same from
    either; ``N`` stops where ``size_of`` is -1 (past the plan), which only the row
    itself then tells.

    >>> np.frombuffer(width_table(size_of_rows(4, None)), np.int64)[:6].tolist()
    [0, 4, 4, 4, 4, 8]
    """
    n = 0
    widths = []
    while n < WIDTH_TABLE_ROWS and (w := size_of(n)) >= 0:
        widths.append(w)
        n += 1
    return np.asarray(widths, np.int64).tobytes()


class _Multiple(NamedTuple):
    m: int

    def __call__(self, n: int) -> int:
        return -(-n // self.m) * self.m


class _Bounds(NamedTuple):
    bounds: tuple

    def __call__(self, n: int) -> int:
        i = bisect.bisect_left(self.bounds, n)
        return self.bounds[i] if i < len(self.bounds) else -1


class BatchLayout(NamedTuple):
    """What the writer makes of a batch of ``B`` flat dicts: per key its width (the padded
    ``T`` of a row key, its one length when stacked; 0 for numbers), dtype and fill bits;
    the index of the mask key (-1: none) and what to make of it (``want``); the side; the
    keys the counts are of (their indices, in :func:`counted`'s order; ``None`` when they
    are every row key), their padded elements, and ``(key, (B, T))`` of each."""

    widths: tuple
    dtypes: tuple
    bits: tuple
    mark: int
    want: int
    left: bool
    counted: tuple | None
    total: int
    shapes: tuple

    def real(self, totals: tuple) -> int:
        """The data elements of the counted keys, whose lengths sum to ``totals`` (per key:
        0 for a number key)."""
        if self.counted is None:
            return sum(totals)
        return sum(map(totals.__getitem__, self.counted))


def layout_batch(spec: DictSpec, facts: tuple) -> BatchLayout | None:
    """The layout of a batch whose ``facts`` are ``(B, code, longest, code, longest, ...)``
    (the native reader's report: per key its :func:`key_code` and longest row, or the
    width that row pads to: see :func:`width_table`), or ``None``
    when the Python executor collates it: a key of another kind than the plan's (the
    structure changed), a longest row past the plan (its overflow rule), rows of one
    length requiring grad (``torch.stack`` records autograd), a copy large enough for the
    threaded kernels, or a fill the dtype cannot hold (it is named there). Decided once
    per facts, then kept in ``spec``.

    >>> ids = KeyRule("ids", row=True, always=False, align=True, fill=0)
    >>> spec = DictSpec(("ids",), (ids,), size_of_rows(8, None), mask_from=-1, want=3, left=False)
    >>> layout = layout_batch(spec, (2, key_code(tensor_reader.native_module().LIST_ROWS), 3))
    >>> layout.widths, layout.mark, layout.real((4,)), layout.total, layout.shapes
    ((8,), 0, 4, 16, (('ids', (2, 8)),))
    """
    layouts = spec.layouts
    layout = layouts.get(facts, _UNSET)
    if layout is _UNSET:
        if len(layouts) >= MAX_LAYOUTS:
            layouts.clear()
        layout = layouts[facts] = _decide(spec, facts)
    return layout


def _decide(spec: DictSpec, facts: tuple) -> BatchLayout | None:
    """:func:`layout_batch`'s answer, worked out: the rules applied key by key."""
    B, c = facts[0], _CODES[0] if _CODES else _codes()
    codes, longests = facts[1::2], facts[2::2]
    widths, dtypes, bits = [], [], []
    padded, stacked, shapes = [], [], []  # shapes: see counted
    total = 0
    kind_bits, rows, one_length = c.grad - 1, c.tensor_rows, c.one_length
    for j, (rule, code, longest) in enumerate(zip(spec.rules, codes, longests)):
        kind, dtype, grad = code & kind_bits, c.dtypes[code >> _DTYPE_SHIFT], code & c.grad
        if kind > rows:  # numbers
            if rule.row or grad:  # a row key of the plan holds numbers; torch.stack records autograd
                return None
            widths.append(0)
            dtypes.append(dtype if kind == c.tensor_scalars else c.numbers[kind])
            bits.append(0)
            continue
        if not rule.row:
            return None
        T = spec.size_of(longest)
        b = spec.bits[j].get(dtype, _UNSET)
        if b is _UNSET:
            b = spec.fill_bits(j, dtype)
        if T < 0 or b is None or T * B * (8 if dtype is None else dtype.itemsize) > ONE_THREAD_BYTES:
            return None
        if stacks(rule.always, bool(code & one_length)):
            if grad:
                return None
            T = longest
            stacked.append(j)
        else:
            padded.append(j)
            shapes.append((rule.key, (B, T)))
            total += B * T
        widths.append(T)
        dtypes.append(torch.int64 if dtype is None else dtype)
        bits.append(b)
    mark = mask_of(padded, None if spec.mask_from < 0 else spec.mask_from)
    if mark is None:
        return BatchLayout(tuple(widths), tuple(dtypes), tuple(bits), -1, 0, spec.left, (), 0, ())
    widened = []
    if stacked:
        mark_length = longests[mark] if codes[mark] & one_length else None
        width = widths[mark]
        widened = [j for j in stacked if widens(spec.rules[j].align, longests[j], mark_length, width)]
    for j in widened:
        widths[j] = width
        shapes.append((spec.keys[j], (B, width)))  # after the padded keys: see counted
        total += B * width
    every = len(widened) == len(stacked)  # every row key counted: the counts are the whole batch's
    keys = None if every else tuple(counted(padded, widened))
    layout = (
        tuple(widths),
        tuple(dtypes),
        tuple(bits),
        mark,
        spec.want,
        spec.left,
        keys,
        total,
        tuple(shapes),
    )
    return BatchLayout(*layout)


def run_layout(samples: list, spec: DictSpec) -> tuple | None:
    """``(out, mask, lengths, real, total, shapes)`` of ``samples`` by the native reader,
    :func:`layout_batch` and the native writer (one native call: a layout kept for the
    batch's facts is found there); ``None`` when the batch is for the Python executor
    (another structure, a value the reader does not take, a layout it decides there, or a
    list holding other numbers than ints, which the writer meets)."""
    native = tensor_reader.native_module()
    if native is None:
        return None
    got = native.collate_dicts(samples, spec.keys, spec.layouts, spec.decide, spec.widths)
    if got is None:  # None: switched off, or for the Python executor
        return None
    out, mask, lengths, layout, totals = got
    return out, mask, lengths, layout.real(totals), layout.total, layout.shapes
