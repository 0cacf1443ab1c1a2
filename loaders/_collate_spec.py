"""The collate's rules and the plan of a batch: what each place of a sample is, decided once.

:class:`CollateRules` holds a :class:`~loaders.collate.DynTileCollate`'s options and every
decision made from them: a key's fill, whether it is a declared sequence, the axes and
sizes it is padded to, the rows of a padded batch. :func:`plan_batch` reads sample 0's
structure and returns a :class:`BatchSpec`: a tree of :class:`NodeSpec` (dicts, tuples,
namedtuples) over :class:`LeafSpec` (row sequences, tensors, number columns, kept lists),
and for flat dicts of rows and numbers the :class:`~loaders._collate_layout.DictSpec` that
the native reader and writer run, each batch laid out by
:func:`~loaders._collate_layout.layout_batch`.

A batch that the native route leaves (``None``) goes to the Python executor
(:mod:`loaders._collate_python`) under the same plan; it raises :class:`Mismatch` when
sample 0 is not of the spec's structure, and the collate then plans the batch again.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import numbers
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import numpy as np
import torch

from dyntile import tensor_reader
from dyntile.arrays import numpy_carrier
from dyntile.padding import native_row_dtype, native_row_layout
from dyntile.planning.buckets import BucketPlan
from dyntile.shapes import normalize_axis

from ._collate_layout import DictSpec, KeyRule, run_layout, size_of_rows

__all__ = [
    "IGNORE_INDEX",
    "LABEL_KEYS",
    "BatchSpec",
    "CollateRules",
    "LeafSpec",
    "Mismatch",
    "NodeSpec",
    "kind_of",
    "plan_batch",
    "signature",
]

#: the fill of label keys that ``pad_values`` does not name: what PyTorch's losses ignore
IGNORE_INDEX = -100
#: the keys read as labels by default (Hugging Face's names)
LABEL_KEYS = ("labels", "label", "label_ids")
#: the per-token keys of Hugging Face's tokenizers, which take the width of the mask's key
TOKEN_KEYS = frozenset(
    {"input_ids", "attention_mask", "token_type_ids", "special_tokens_mask", "position_ids"}
)

# leaf kinds
ROWS, ARRAY, NUMBERS, NP_SCALARS, KEEP = "rows", "array", "numbers", "np_scalars", "keep"
# structure kinds
MAP, SEQ, NAMEDTUPLE = "map", "seq", "namedtuple"


class Mismatch(Exception):
    """Sample 0 of a batch is not of its spec's structure: the batch is planned again."""


@dataclasses.dataclass(frozen=True, eq=False)
class CollateRules:
    """A collate's options, and the decisions made from them (one place for each rule)."""

    plan: BucketPlan | None = None
    multiple: int = 8
    pad_values: Mapping = dataclasses.field(default_factory=lambda: MappingProxyType({}))
    fill: Any = 0
    side: str = "right"
    pad_keys: frozenset = frozenset()
    plans_sequences: bool = False
    axes: tuple | None = None
    batch_multiple: int | None = None
    bucket_rows: Mapping | None = None
    mask_key: str | None = "attention_mask"
    lengths_key: str | None = "lengths"
    mask_from: str | None = None
    mask_dtype: torch.dtype = torch.bool
    tile: tuple | None = None
    pin: bool = False
    overflow: str = "error"
    label_keys: frozenset = frozenset(LABEL_KEYS)

    def __post_init__(self):
        # the native layout is read once: the bounds array is one object, so specs compare by it
        object.__setattr__(self, "native_layout", self._native_layout())
        object.__setattr__(self, "pads_rows_directly", self._pads_rows_directly())

    def _native_layout(self) -> tuple | None:
        """``(multiple, bounds)`` of the native executor, or ``None`` when these options need
        the Python executor for every batch (batch padding, tiling, pinning, a plan of
        more axes)."""
        if (
            self.batch_multiple is not None
            or self.bucket_rows is not None
            or self.pin
            or self.tile is not None
        ):
            return None
        return native_row_layout(self.multiple, self.plan)

    def _pads_rows_directly(self) -> bool:
        """Whether these options let a 1-D leaf take the row path (see :meth:`pads_rows`): no
        batch padding, pinning or tiling, which need its shape first, and no plan unless
        it is of one axis and a row past it is an error (``overflow="truncate"`` and
        ``"extend"`` change the samples or the plan first)."""
        return (
            self.batch_multiple is None
            and self.bucket_rows is None
            and not self.pin
            and self.tile is None
            and (self.plan is None or (self.plan.ndim == 1 and self.overflow == "error"))
        )

    def pads_rows(self, x0) -> bool:
        """Whether the 1-D leaf whose sample 0 is ``x0`` is padded by one ``pad_rows`` call
        (the row path) rather than by the general path, which reads its shapes first:
        the options allow it (:meth:`_pads_rows_directly`) and ``x0`` is no tensor of a
        dtype NumPy cannot carry (quantized, sub-byte), which the general path stacks as
        ``default_collate`` does. Decided once per leaf and batch, before either path
        runs: the row path hands no leaf on, and raises its errors as the general path
        words them."""
        return self.pads_rows_directly and (
            type(x0) is not torch.Tensor or numpy_carrier(x0.dtype) is not None
        )

    def named(self, key: str, names) -> bool:
        """Whether ``key`` (a dotted path) or its last part is in ``names``."""
        return key in names or key.rsplit(".", 1)[-1] in names

    def fill_for(self, key: str):
        """The pad value of ``key``: ``pad_values`` (the path, then its last part), then
        :data:`IGNORE_INDEX` for a label key, then ``fill``."""
        if key in self.pad_values:
            return self.pad_values[key]
        last = key.rsplit(".", 1)[-1]
        if last in self.pad_values:
            return self.pad_values[last]
        return IGNORE_INDEX if last in self.label_keys else self.fill

    def always_pads(self, key: str, ndim: int) -> bool:
        """Whether a leaf of rank ``ndim`` is padded even when its samples share one
        shape: a declared sequence (``pad_keys``, ``mask_from``), or any 1-D leaf of a
        1-axis plan when nothing is declared."""
        return (ndim == 1 and self.plans_sequences) or self.named(key, self.pad_keys) or key == self.mask_from

    def aligns(self, key: str) -> bool:
        """Whether a row key of a dict sample, stacked at the one length of the mask key's
        rows, takes the mask key's padded width: a tokenizer's per-token key or a label key
        (a fixed-size feature that happens to have that length keeps its shape)."""
        return key in TOKEN_KEYS or key in self.label_keys

    def padded_axes(self, shapes: np.ndarray, key: str) -> tuple[int, ...]:
        """Axes padded of a leaf whose samples have ``shapes`` (``(B, ndim)``)."""
        ndim = shapes.shape[1]
        if ndim == 1:
            return (0,)
        if self.axes is not None:
            try:
                return tuple(sorted(normalize_axis(a, ndim) for a in self.axes))
            except ValueError as e:
                raise ValueError(f"key {key!r}: {e}") from None
        if self.plan is not None and self.plan.ndim <= ndim:
            return tuple(range(self.plan.ndim))
        differ = tuple(int(a) for a in np.flatnonzero((shapes != shapes[0]).any(axis=0)))
        return differ or (0,)  # a declared sequence whose samples share one shape: its first axis

    def target_sizes(self, maxes: np.ndarray, axes: tuple) -> tuple[int, ...]:
        """Padded sizes along ``axes`` for per-axis maxima ``maxes``: the plan's
        boundaries, else each rounded up to ``multiple``."""
        if self.plan is None or self.plan.ndim != len(axes):
            m = self.multiple
            return tuple(-(-int(x) // m) * m for x in maxes)
        return self.plan.round_up(tuple(int(x) for x in maxes))

    def rows_for(self, B: int, sizes: tuple, key: str) -> int:
        """Rows of a padded batch of ``B`` samples whose bucket is ``sizes``: ``B``
        rounded up to ``batch_multiple``, or the bucket's ``bucket_rows`` entry."""
        if self.bucket_rows is not None:
            rows = self.bucket_rows.get(sizes)
            if rows is None:  # a size outside the plan (overflow="extend"): no fixed rows
                return B
            if B > rows:
                raise ValueError(
                    f"key {key!r}: a batch of {B} samples in bucket {sizes} is larger than its "
                    f"bucket_rows entry {rows}: the samples' lengths disagree with the lengths the "
                    f"sampler batched them by (were they yielded by a BucketBatchSampler over these "
                    f"samples' lengths, and is bucket_rows its batch_sizes?)"
                )
            return rows
        if self.batch_multiple is None:
            return B
        return -(-B // self.batch_multiple) * self.batch_multiple


@dataclasses.dataclass(frozen=True)
class LeafSpec:
    """One leaf: ``kind`` (``rows``, ``array``, ``numbers``, ``np_scalars``, ``keep``),
    its rank in sample 0, whether it pads even when its samples share one shape
    (``always``), and whether it takes the mask key's width when its rows have the
    mask key's one length (``align``: see :meth:`CollateRules.aligns`)."""

    key: str
    kind: str
    ndim: int = 0
    always: bool = False
    align: bool = False


@dataclasses.dataclass(frozen=True)
class NodeSpec:
    """A structure: ``kind`` (``map``, ``seq``, ``namedtuple``), its fields (dict keys,
    or the number of positions) and one spec per field."""

    key: str
    kind: str
    fields: tuple
    children: tuple
    cls: type | None = None


@dataclasses.dataclass(frozen=True, eq=False)
class BatchSpec:
    """The plan of a batch: the spec of its samples, the native route's
    :class:`~loaders._collate_layout.DictSpec` and the native route itself
    (:func:`~loaders._collate_layout.run_layout`; both ``None`` when only the Python
    executor runs it)."""

    root: LeafSpec | NodeSpec
    native: DictSpec | None = None
    run_native: Callable | None = None


def kind_of(value) -> str:
    """The kind of a sample's value at one place (see :class:`LeafSpec`, :class:`NodeSpec`)."""
    cls = type(value)
    kind = _KINDS.get(cls)
    if kind is None:
        kind = _KINDS[cls] = _kind_of_type(cls)
    if kind is _LIST:  # a list of numbers is a row sequence; any other list a structure
        return ROWS if not value or _is_number(value[0]) else SEQ
    if kind is None:
        raise TypeError(
            f"cannot collate values of type {cls.__name__}; DynTileCollate takes tensors, NumPy "
            f"arrays, numbers, lists of numbers, strings and dicts, tuples and lists of these"
        )
    return kind


_LIST = "list"
_KINDS: dict = {list: _LIST}


def _kind_of_type(cls: type) -> str | None:
    if issubclass(cls, (torch.Tensor, np.ndarray)):
        return ARRAY
    if issubclass(cls, (str, bytes, type(None), np.str_, np.bytes_)):
        return KEEP
    if issubclass(cls, collections.abc.Mapping):
        return MAP
    if issubclass(cls, tuple) and hasattr(cls, "_fields"):
        return NAMEDTUPLE
    if issubclass(cls, list):
        return _LIST
    if issubclass(cls, np.generic) and not issubclass(cls, (np.number, np.bool_)):
        return None  # np.void and the like: no numbers
    if issubclass(cls, (bool, numbers.Number)):
        return NUMBERS
    if issubclass(cls, np.generic):
        return NP_SCALARS
    if issubclass(cls, collections.abc.Sequence):
        return SEQ
    return None


_EXACT_NUMBERS = frozenset((int, float, bool))


def _is_number(v: Any) -> bool:
    if type(v) in _EXACT_NUMBERS:  # token ids: no ABC check
        return True
    return isinstance(v, (numbers.Number, np.number, np.bool_)) and not isinstance(v, (str, bytes))


def join_key(key: str, part) -> str:
    """The dotted name of a place inside ``key`` (``pad_values`` and stats use it)."""
    return f"{key}.{part}" if key else str(part)


def signature(sample) -> tuple:
    """What a plan is cached by: the sample's type, and a dict's keys in their order."""
    if type(sample) is dict:
        return (dict, *sample)
    return (type(sample),)


def plan_batch(rules: CollateRules, sample) -> BatchSpec:
    """The spec of batches whose samples are like ``sample`` (sample 0)."""
    root = plan_value(rules, sample, "", top=True)
    native = dict_spec(rules, root, sample)
    return BatchSpec(root, native, None if native is None else run_layout)


def plan_value(rules: CollateRules, value, key: str, top: bool = False) -> LeafSpec | NodeSpec:
    """The spec of the place ``key`` whose sample-0 value is ``value``."""
    try:
        kind = kind_of(value)
    except TypeError as e:
        raise TypeError(f"{f'key {key!r}' if key else 'the samples'}: {e}") from None
    if kind == MAP:
        keys = tuple(value.keys())
        children = tuple(plan_value(rules, value[k], join_key(key, k)) for k in keys)
        if top:  # the token sequences of a dict sample share the mask key's width
            children = tuple(
                dataclasses.replace(c, align=True) if _is_row(c) and rules.aligns(c.key) else c
                for c in children
            )
        return NodeSpec(key, MAP, keys, children)
    if kind in (SEQ, NAMEDTUPLE):
        names = getattr(value, "_fields", None) or [str(j) for j in range(len(value))]
        children = tuple(plan_value(rules, v, join_key(key, name)) for name, v in zip(names, value))
        return NodeSpec(key, kind, tuple(names), children, type(value) if kind == NAMEDTUPLE else None)
    ndim = 1 if kind == ROWS else value.ndim if kind == ARRAY else 0
    return LeafSpec(
        key, kind, ndim, always=kind in (ROWS, ARRAY) and ndim > 0 and rules.always_pads(key, ndim)
    )


def _is_row(spec) -> bool:
    return isinstance(spec, LeafSpec) and spec.ndim == 1


def dict_spec(rules: CollateRules, root, sample) -> DictSpec | None:
    """The native route's :class:`~loaders._collate_layout.DictSpec` for ``root``, or
    ``None`` unless it is a flat dict of str keys whose values the native reader takes
    (row sequences and number columns, at least one row key, ``mask_from`` among them)
    under options the writer takes."""
    layout = rules.native_layout
    flat = type(sample) is dict and isinstance(root, NodeSpec) and root.kind == MAP
    if layout is None or tensor_reader.native_module() is None or not flat:
        return None
    keys = []
    for k, leaf in zip(root.fields, root.children):
        row = _native_row(leaf, sample[k]) if type(k) is str and isinstance(leaf, LeafSpec) else None
        if row is None:
            return None
        keys.append(KeyRule(k, row, leaf.always, leaf.align, rules.fill_for(leaf.key)))
    mark = root.fields.index(rules.mask_from) if rules.mask_from in root.fields else -1
    if not any(k.row for k in keys) or (rules.mask_from is not None and (mark < 0 or not keys[mark].row)):
        return None  # numbers alone, or mask_from no row key: the Python executor collates or names them
    spec = DictSpec(
        root.fields,
        tuple(keys),
        size_of_rows(*layout),
        mark,
        (1 if rules.lengths_key is not None else 0) | (2 if rules.mask_key is not None else 0),
        rules.side == "left",
    )
    for j, (k, v0) in enumerate(zip(keys, sample.values())):
        if k.row and spec.fill_bits(j, None if type(v0) is list else v0.dtype) is None:
            return None  # a fill the dtype cannot hold: the Python executor names it
    return spec


def _native_row(leaf: LeafSpec, v0) -> bool | None:
    """Whether one key is a row key (``True``) or a number key (``False``) of the native
    reader, judged by sample 0's value; ``None`` for values it does not read."""
    cls = type(v0)
    if leaf.kind == NUMBERS and cls in (int, float, bool):
        return False
    if cls is torch.Tensor and v0.dim() == 0:
        return False
    if not ((cls is list and (not v0 or type(v0[0]) is int)) or (cls is torch.Tensor and v0.dim() == 1)):
        return None
    return True if native_row_dtype(v0) is not None else None
