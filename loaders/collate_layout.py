"""The layout of a batch: what each key becomes, decided once per batch, in one place.

A batch of flat dicts of rows and numbers (a tokenizer's, a dataset's of tensors) runs in
three steps: the native reader (``read_dicts`` of :mod:`dyntile.cpu.torch_tensors`)
reports, per key, what its values are and their longest row and total length;
:func:`layout_batch` decides from that and the collate's :class:`DictSpec` every key's
width, dtype and fill, which key gives the mask and lengths, and the batch's counts; the
native writer (``write_dicts``) writes that :class:`BatchLayout` into new tensors. The
reader and the writer decide nothing.

The rules of a batch are small functions here, which the Python executor
(:mod:`loaders.collate_python`) applies too:

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
from typing import NamedTuple

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
    "layout_batch",
    "mask_of",
    "stacks",
    "widens",
]

#: the dtype of a key of Python numbers, by their type (as ``default_collate`` stacks them)
NUMBER_DTYPES = {int: torch.int64, float: torch.float64, bool: torch.bool}

#: copies of more bytes than this go to the threaded kernels of the Python executor
ONE_THREAD_BYTES = PARALLEL_COPY_BYTES - 1

# the kinds the native reader reports: its module constants, written once, in the C++
# (without a usable native module no batch is laid out, and they are never read)
try:
    from dyntile.cpu import torch_tensors as _reader
except ImportError:
    _reader = None
TENSOR_ROWS = getattr(_reader, "TENSOR_ROWS", None)
TENSOR_SCALARS = getattr(_reader, "TENSOR_SCALARS", None)
_KIND_DTYPES = {
    getattr(_reader, "INTS", None): NUMBER_DTYPES[int],
    getattr(_reader, "FLOATS", None): NUMBER_DTYPES[float],
    getattr(_reader, "BOOLS", None): NUMBER_DTYPES[bool],
}


def stacks(always: bool, rows: int, longest: int, total: int) -> bool:
    """Whether a row key is stacked as it is: its ``rows`` share one length (``longest *
    rows == total``) and it is no declared sequence (``always``).

    >>> stacks(False, 3, 4, 12), stacks(True, 3, 4, 12), stacks(False, 3, 4, 10)
    (True, False, False)
    """
    return not always and longest * rows == total


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
        # read per batch: each key's flags, and its fill bits by dtype (None: not holdable)
        self.flags = tuple((r.row, r.always, r.align) for r in self.rules)
        self.bits = tuple({} for _ in self.rules)

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
    counts of the padded keys (real and total elements, and ``(key, (B, T))`` in
    :func:`counted`'s order)."""

    widths: tuple
    dtypes: tuple
    bits: tuple
    mark: int
    want: int
    left: bool
    real: int
    total: int
    shapes: list


def layout_batch(spec: DictSpec, read: tuple) -> BatchLayout | None:
    """The layout of a batch whose ``read`` is ``(B, per key (kind, dtype, longest, total,
    grad))`` (``read_dicts``'s report), or ``None`` when the Python executor collates it:
    a key of another kind than the plan's (the structure changed), a longest row past the
    plan (its overflow rule), rows of one length requiring grad (``torch.stack`` records
    autograd), a copy large enough for the threaded kernels, or a fill the dtype cannot
    hold (it is named there).

    >>> native = tensor_reader.native_module()
    >>> ids = KeyRule("ids", row=True, always=False, align=True, fill=0)
    >>> spec = DictSpec(("ids",), (ids,), size_of_rows(8, None), mask_from=-1, want=3, left=False)
    >>> layout = layout_batch(spec, (2, ((native.LIST_ROWS, None, 3, 4, False),)))
    >>> layout.widths, layout.mark, layout.real, layout.total, layout.shapes
    ((8,), 0, 4, 16, [('ids', (2, 8))])
    """
    B, keys = read
    size_of, flags, bits_of, names = spec.size_of, spec.flags, spec.bits, spec.keys
    m = size_of.m if type(size_of) is _Multiple else 0
    widths, dtypes, bits = [], [], []
    padded, stacked, shapes = [], None, []  # shapes: see counted
    real = total = 0
    for j, (kind, dtype, longest, rows_total, grad) in enumerate(keys):
        row, always, align = flags[j]
        if kind > TENSOR_ROWS:  # numbers
            if row or grad:  # a row key of the plan holds numbers; torch.stack records autograd
                return None
            widths.append(0)
            dtypes.append(dtype if kind == TENSOR_SCALARS else _KIND_DTYPES[kind])
            bits.append(0)
            continue
        if not row:
            return None
        T = -(-longest // m) * m if m else size_of(longest)
        b = bits_of[j].get(dtype, _UNSET)
        if b is _UNSET:
            b = spec.fill_bits(j, dtype)
        if T < 0 or b is None or T * B * (8 if dtype is None else dtype.itemsize) > ONE_THREAD_BYTES:
            return None
        if stacks(always, B, longest, rows_total):
            if grad:
                return None
            T = longest
            if stacked is None:
                stacked = []
            stacked.append(j)
        else:
            padded.append(j)
            shapes.append((names[j], (B, T)))
            real += rows_total
            total += B * T
        widths.append(T)
        dtypes.append(_INT64 if dtype is None else dtype)
        bits.append(b)
    mark = mask_of(padded, None if spec.mask_from < 0 else spec.mask_from)
    if mark is None:
        return _new(BatchLayout, (tuple(widths), tuple(dtypes), tuple(bits), -1, 0, spec.left, 0, 0, []))
    if stacked is not None:
        _, _, m_longest, m_total, _ = keys[mark]
        mark_length = m_longest if m_longest * B == m_total else None
        width = widths[mark]
        for j in stacked:
            if widens(flags[j][2], keys[j][2], mark_length, width):
                widths[j] = width
                shapes.append((names[j], (B, width)))  # after the padded keys: see counted
                real += keys[j][3]
                total += B * width
    layout = (tuple(widths), tuple(dtypes), tuple(bits), mark, spec.want, spec.left, real, total, shapes)
    return _new(BatchLayout, layout)


_new = tuple.__new__
_INT64 = torch.int64


def run_layout(samples: list, spec: DictSpec) -> tuple | None:
    """``(out, mask, lengths, real, total, shapes)`` of ``samples`` by the native reader,
    :func:`layout_batch` and the native writer; ``None`` when the batch is for the Python
    executor (another structure, a value the reader does not take, a layout it decides
    there, or a list holding other numbers than ints, which the writer meets)."""
    native = tensor_reader.native_module()
    got = None if native is None else native.read_dicts(samples, spec.keys)  # None: switched off
    if got is None:
        return None
    read, keys = got
    layout = layout_batch(spec, (len(samples), keys))
    if layout is None:
        return None
    written = native.write_dicts(read, *layout[:6])  # widths, dtypes, bits, mark, want, left
    if written is None:
        return None
    out, mask, lengths = written
    return out, mask, lengths, layout.real, layout.total, layout.shapes
