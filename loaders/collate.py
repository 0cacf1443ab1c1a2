"""``DynTileCollate``: a ``collate_fn`` that pads ragged leaves to planned shapes.

Per batch, each ragged leaf (a key whose samples differ in size) costs one output
allocation and one :func:`dyntile.pad_batch` kernel call; masks and lengths come
from one vectorised comparison. Leaves are dispatched by type through the table
in :mod:`loaders.leaf_handlers`; counters live in :mod:`loaders.collate_stats`.
"""
from __future__ import annotations

import math
import warnings
from types import MappingProxyType
from typing import Any, Collection, Mapping, Sequence

import numpy as np
import torch
from torch.utils.data import get_worker_info

from dyntile import tensor_reader
from dyntile.fill import kernel_fill_bits
from dyntile.masks import padding_mask
from dyntile.padding import native_row_dtype, native_row_layout, pad_batch, pad_rows
from dyntile.planning.buckets import BucketPlan
from dyntile.shapes import check_multiple, check_tile, normalize_axis
from dyntile.threads import PARALLEL_COPY_BYTES

from .collate_stats import CollateStats
from .leaf_handlers import handler_for, join_key, mapping_columns
from .worker_transfer import WorkerBatch

__all__ = ["DynTileCollate"]

OVERFLOWS = ("error", "truncate", "extend")
WORKER_TRANSFERS = ("one_buffer", "torch")
STATS_KEY = "collate_stats"
_PIN_WARNED = False


class DynTileCollate:
    """Collate samples into tensors, padding ragged leaves to a bucket plan's shapes.

    Walks samples like ``torch.utils.data.default_collate`` (dicts, tuples,
    namedtuples, lists, tensors, NumPy arrays, numbers, strings kept as lists); a
    *list of numbers* is a 1-D sequence leaf. A leaf is **ragged** when its samples'
    shapes differ in the batch, or when its key is a declared sequence: in
    ``pad_keys`` (default: the keys of ``pad_values``) or ``mask_from``. Declared
    sequences get their bucket's length even in a batch whose samples happen to
    share one, so their shapes, masks and the overflow check never depend on the
    batch: **name every sequence key** (``pad_values={"input_ids": 0, "labels":
    -100}``); fixed-size features stay as they are. With a 1-axis plan and nothing
    declared (no ``pad_keys``, ``pad_values`` or ``mask_from``), every 1-D leaf is
    taken for a sequence; ``pad_keys=()`` pads only leaves that differ. Ragged
    leaves are padded with :func:`dyntile.pad_batch`:

    * axes: axis 0 of 1-D leaves; for N-D leaves ``axes`` if given, else the first
      ``plan.ndim`` axes with a plan, else the axes whose sizes differ (axis 0 for
      a declared sequence whose samples share one shape);
    * size: the plan's boundary (``plan.round_up``), or the batch maximum rounded
      up to ``multiple`` without a plan;
    * fill: ``pad_values[key]`` (``key`` is the dict key, or the dotted path of a
      nested leaf), else ``fill``; ``side="left"`` puts data at the end.

    ``batch_multiple`` pads the batch dimension too (extra rows: fill, length 0,
    mask 0), of every tensor leaf: numbers and stacked leaves get their key's fill
    (e.g. ``pad_values={"label": -100}``); lists of strings keep their B entries. ``bucket_rows`` (needs ``plan``; one row count per bucket, in
    ``plan.bucket_shapes()`` order, e.g. ``BucketBatchSampler.batch_sizes``) pads
    every batch to its bucket's row count instead, so the last, partial batch of a
    bucket keeps the bucket's shape: a run sees exactly one shape per bucket (the
    bucket of the ``mask_from`` leaf, else of the first padded leaf, sets the rows
    of every leaf). For dict samples, ``mask_key`` (``(B, T)`` of ``mask_dtype``, true on
    data) and ``lengths_key`` (int64 ``(B,)``, or ``(B, ndim)`` for N-D leaves) are
    added from the leaf ``mask_from`` (default: the first ragged leaf); a sample
    that already has such a key keeps its own; ``None`` turns them off. Other
    sample structures get no extra keys.

    ``tile=(tm, tn)`` stores every padded leaf in the tiled layout of
    :func:`dyntile.tile` (the last two axes of the padded batch; masks untiled).
    ``pin_memory=True`` puts every output tensor (masks, lengths and numbers too) in
    pinned memory when CUDA is available, in the process that collates: with
    ``num_workers > 0`` pass ``pin_memory=True`` to the ``DataLoader`` instead (a
    worker's copy of this collate skips pinning, with a warning); without CUDA it is a
    no-op with a one-time warning. ``overflow`` handles a sample
    over the plan's largest boundary: ``"error"`` (default), ``"truncate"`` (cut to
    the largest boundary, counted in ``stats.truncated_samples``) or ``"extend"``
    (this collate's plan grows a boundary; per process). ``pack``: delegate to
    :func:`loaders.packed_collate.collate_packed`: a ``PackingBatchSampler`` (its
    ``shapes`` and ``overflow``), a sequence of ``(B, T)`` shapes, or a dict of its
    keyword arguments. ``pad_values`` (under the dict's own), ``pin_memory``,
    ``return_stats``, ``stats`` and ``worker_transfer`` apply to packed batches too;
    the layout options (``plan``, ``batch_multiple``, ``mask_key``, ``tile``...) are
    refused with ``pack``.

    ``worker_transfer``: how a dict batch built in a ``DataLoader`` worker reaches the
    main process. ``"one_buffer"`` (default) sends its tensors of up to 1 MiB each in
    one buffer (:mod:`loaders.worker_transfer`); torch's own transfer (``"torch"``)
    gives every tensor a shared-memory segment of its own, at a fixed cost per tensor
    that measured 3-8x a whole collate of 64 token rows. The main process gets the
    same plain ``dict`` of tensors either way.

    ``stats`` counts batches, real and padded elements and distinct shapes **per
    process**: each ``DataLoader`` worker has its own copy, so use
    ``num_workers=0`` or ``return_stats=True`` (each dict batch carries its counts
    under ``"collate_stats"``; fold them with ``stats.update``) for global figures.

    The options are fixed once the collate is built (its routes and caches are worked
    out from them; ``pad_values``, ``bucket_rows`` and ``pack`` read as read-only
    mappings): setting or deleting one raises ``AttributeError``; build a new
    ``DynTileCollate`` to change it.

    >>> collate = DynTileCollate(plan=BucketPlan((8, 16)), pad_values={"labels": -100})
    >>> batch = collate([{"input_ids": [5, 6, 7], "labels": [1, 2, 3]},
    ...                  {"input_ids": [8, 9], "labels": [4, 5]}])
    >>> batch["input_ids"].shape, batch["labels"][1].tolist()
    (torch.Size([2, 8]), [4, 5, -100, -100, -100, -100, -100, -100])
    >>> batch["attention_mask"][1].tolist()[:3], batch["lengths"].tolist()
    ([True, True, False], [3, 2])
    """

    def __init__(self, plan: BucketPlan | None = None, *, multiple: int = 8,
                 pad_values: Mapping[str, Any] | None = None, fill=0, side: str = "right",
                 pad_keys: Collection[str] | None = None, axes: Sequence[int] | None = None,
                 batch_multiple: int | None = None, bucket_rows: Sequence[int] | None = None, mask_key: str | None = "attention_mask",
                 lengths_key: str | None = "lengths", mask_from: str | None = None,
                 mask_dtype: torch.dtype = torch.bool, tile: tuple[int, int] | None = None,
                 pin_memory: bool = False, overflow: str = "error", return_stats: bool = False,
                 pack=None, worker_transfer: str = "one_buffer"):
        if plan is not None and not isinstance(plan, BucketPlan):
            raise TypeError(f"plan should be a dyntile BucketPlan, but got {type(plan).__name__}")
        if side not in ("right", "left"):
            raise ValueError(f"side should be 'right' or 'left', but got {side!r}")
        if overflow not in OVERFLOWS:
            raise ValueError(f"overflow should be one of {OVERFLOWS}, but got {overflow!r}")
        if worker_transfer not in WORKER_TRANSFERS:
            raise ValueError(f"worker_transfer should be one of {WORKER_TRANSFERS}, but got {worker_transfer!r}")
        self.plan = plan
        self.multiple = check_multiple(multiple)
        self.pad_values = _read_only(pad_values or {})
        self.fill = fill
        self.side = side
        self.pad_keys = frozenset(self.pad_values if pad_keys is None else pad_keys)
        # with a 1-axis plan and no sequence key named, every 1-D leaf is taken for one
        self._plans_sequences = (pad_keys is None and not self.pad_values and mask_from is None
                                 and plan is not None and plan.ndim == 1)
        self.axes = None if axes is None else tuple(int(a) for a in axes)
        if self.axes == ():
            raise ValueError("axes should name at least one axis to pad (or be None: see the docstring)")
        self.batch_multiple = None if batch_multiple is None else check_multiple(batch_multiple, "batch_multiple")
        self.bucket_rows = _read_only(_bucket_rows(plan, bucket_rows, batch_multiple))
        self.mask_key, self.lengths_key, self.mask_from = mask_key, lengths_key, mask_from
        self.mask_dtype = mask_dtype
        self.tile = None if tile is None else check_tile(tile)
        self.pin_memory = bool(pin_memory)
        self._pin = self.pin_memory and _pinning_available()
        self.overflow = overflow
        self.return_stats = bool(return_stats)
        self.pack = _read_only(_pack_options(pack, self.pad_values))
        if self.pack is not None:
            _check_pack_options(plan=plan, multiple=multiple, fill=fill, side=side, pad_keys=pad_keys, axes=axes,
                                batch_multiple=batch_multiple, bucket_rows=bucket_rows, mask_key=mask_key,
                                lengths_key=lengths_key, mask_from=mask_from, mask_dtype=mask_dtype, tile=tile,
                                overflow=overflow)
        self.worker_transfer = worker_transfer
        self._worker_buffer = worker_transfer == "one_buffer"
        self.stats = CollateStats()
        self._direct = self._direct_route()
        self._row_specs: dict = {}        # (key, kind of row) -> its fill bits in the native flat-rows route
        self._native_args = self._native_route_args()

    def __setattr__(self, name: str, value) -> None:
        if name in _OPTIONS and name in self.__dict__:
            raise _fixed_option(name, f"build a new DynTileCollate with {name}={value!r}")
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        if name in _OPTIONS:
            raise _fixed_option(name, "it cannot be deleted")
        object.__delattr__(self, name)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        for name in _MAPPING_OPTIONS:                            # a mappingproxy does not pickle
            state[name] = _writable(state.get(name))
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, **{name: _read_only(state.get(name)) for name in _MAPPING_OPTIONS})
        self.__dict__.setdefault("_row_specs", {})                # a collate pickled before they existed
        self.__dict__["_native_args"] = self._native_route_args()

    def _extend_plan(self, plan: BucketPlan) -> None:
        """``overflow="extend"``: this collate's plan grows (per process); the native
        route's layout follows it."""
        object.__setattr__(self, "plan", plan)
        self._native_args = self._native_route_args()

    def _native_route_args(self) -> tuple | None:
        """The arguments after ``(samples, specs)`` of the native flat-rows call
        (``collate_dicts``), or ``None`` when this collate's batches never take it
        (batch padding, tiling, pinning, packing, a plan it cannot read)."""
        cls = type(self)
        overridden = (cls._collate is not DynTileCollate._collate or cls._collate_rows is not DynTileCollate._collate_rows)
        layout = (native_row_layout(self.multiple, self.plan)
                  if self._direct and self.pack is None and not overridden else None)   # a subclass's own route runs
        if layout is None:
            return None
        return (_TENSOR, *layout, self.side == "left", self.mask_from, self.mask_key, self.lengths_key,
                _ONE_THREAD_BYTES)

    def _direct_route(self) -> bool:
        """Whether one ``pad_rows`` call can plan, allocate and copy a 1-D leaf by
        itself: a 1-axis plan (or none), no batch padding, pinning or tiling (those need
        the shape first)."""
        return (self.batch_multiple is None and self.bucket_rows is None and not self._pin
                and self.tile is None and (self.plan is None or self.plan.ndim == 1))

    # ---- collate_fn protocol

    def __call__(self, samples: Sequence) -> Any:
        if self._pin and get_worker_info() is not None:
            self._no_pinning_in_worker()
        args = self._native_args
        got = None
        if args is not None and type(samples) is list and samples and type(samples[0]) is dict:
            native = tensor_reader.native_module()
            if native is not None:                   # the commonest batch: one call
                got = native.collate_dicts(samples, self._row_specs, *args)
        out = self._native_batch(got) if got is not None and len(got) == 5 else self._collate(samples)
        if self._worker_buffer and type(out) is dict and get_worker_info() is not None:
            return WorkerBatch(out)                  # crosses to the main process as one buffer
        return out

    def _collate(self, samples: Sequence) -> Any:
        if len(samples) == 0:
            raise ValueError("DynTileCollate needs at least one sample, but got an empty batch")
        if self.pack is not None:
            return self._collate_packed(samples)
        if self._direct and type(samples) is list and type(samples[0]) is dict:
            out = self._collate_rows(samples)
            if out is not None:
                return out
        ctx = _Batch(self)
        out = ctx.walk(samples if type(samples) is list else list(samples), "")  # the walk never mutates it
        B = len(samples)
        rows = ctx.batch_rows(B)
        if rows > B:                                 # batch padding: every tensor leaf gets the batch's rows
            out = map_tensors(out, lambda t, key: ctx.grow_rows(t, B, rows, key))
        if ctx.tiled:                                # tiled last, once every padded leaf has its rows
            out = map_tensors(out, lambda t, key: ctx.tile(t, ctx.tiled[key]) if key in ctx.tiled else t)
        if isinstance(out, dict):
            self._add_mask_and_lengths(out, ctx.padded)
        if self._pin:                                # padded leaves were allocated pinned; the rest is copied
            out = map_tensors(out, lambda t, key: t if t.is_pinned() else t.pin_memory())
        if self.return_stats and isinstance(out, dict):
            out[STATS_KEY] = _counts(ctx.real, ctx.total, ctx.shapes, len(ctx.truncated), ctx.extended)
        self.stats.add(ctx.real, ctx.total, ctx.shapes, len(ctx.truncated), ctx.extended)
        return out

    def _collate_rows(self, samples: list) -> dict | None:
        """The commonest batch in one pass, without the walk: flat dicts whose every
        value is a 1-D sequence (a list of ints or a 1-D tensor). With the native module
        the whole batch is one call (:meth:`_collate_native`); else, or where it
        declines, each key is one ``pad_rows`` call (what the walk would call for it; an
        unnamed key of equal lengths is stacked, as the walk stacks it). ``None`` for
        any other batch, and for one the walk treats otherwise (a key the kernels
        refuse, a row over the plan): the walk then collates it, or names what is wrong."""
        native = tensor_reader.native_module()
        if native is not None:
            out = self._collate_native(native, samples)
            if out is not None:
                return out
        B = len(samples)
        try:
            keys, columns = mapping_columns(samples)
        except (KeyError, TypeError, IndexError):          # not mappings of one key set: the walk names the sample
            return None
        if not all(_row_leaf(column[0]) for column in columns):
            return None                                  # before any key is padded: the walk pads them once
        out, padded, shapes = {}, {}, []
        real = total = 0
        for k, column in zip(keys, columns):
            name = k if type(k) is str else join_key("", k)   # the walk's name of the leaf (options, stats)
            rows = pad_rows(column, multiple=self.multiple, plan=self.plan, fill=self.fill_for(name), side=self.side)
            if rows is None:
                return None
            batch, lengths, longest, n = rows
            if longest * B == n and not self.always_pads(name, 1):
                out[k] = _stacked_rows(batch, longest, self.side, column)   # one length, not a sequence: as the walk
                continue
            shape = tuple(batch.shape)
            out[k] = batch if type(batch) is _TENSOR else torch.from_numpy(batch)
            padded[name] = (lengths, (0,), shape)
            shapes.append((name, shape))
            real += n
            total += shape[0] * shape[1]
        if self.mask_from is not None and self.mask_from not in padded:
            return None                                  # the walk raises, naming the padded leaves
        self._add_mask_and_lengths(out, padded)
        self._count(out, real, total, shapes)
        return out

    def _collate_native(self, native, samples: list) -> dict | None:
        """The flat-rows batch in one native call (``collate_dicts`` of
        :mod:`dyntile.cpu.torch_tensors`): the columns read straight from the dicts, each
        padded into a new tensor (keys of Python numbers or 0-d tensors stacked, as the
        walk stacks them), the mask and lengths made beside them. The per-key
        fill bits come from ``self._row_specs``, worked out by :meth:`_row_spec` the
        first time a key comes with a kind of row (``__call__`` tries the call first,
        and comes here when a spec is missing). ``None`` where it declines."""
        args, specs = self._native_args, self._row_specs
        if args is None:
            return None
        for _ in range(len(samples[0]) + 1):            # at most one missing spec per key
            got = native.collate_dicts(samples, specs, *args)
            if got is None:
                return None
            if len(got) == 5:
                return self._native_batch(got)
            key, code, value = got
            if len(specs) >= 256:
                specs.clear()
            specs[key, code] = self._row_spec(key, value)
        return None

    def _native_batch(self, got: tuple) -> dict:
        """The batch of a native flat-rows call, counted (and its mask cast to ``mask_dtype``)."""
        out, real, total, shapes, masked = got
        if masked and self.mask_dtype is not torch.bool:
            out[self.mask_key] = out[self.mask_key].to(self.mask_dtype)
        self._count(out, real, total, shapes)
        return out

    def _row_spec(self, key: str, value) -> tuple | None:
        """``(fill bits, always pads)`` of the 1-D rows at ``key`` of the kind of
        ``value`` (sample 0's: a list of ints, or a tensor of some dtype), for
        :meth:`_collate_native`; ``None`` for rows it leaves to the other routes."""
        kind = native_row_dtype(value)
        if kind is None:
            return None
        try:
            bits = kernel_fill_bits(self.fill_for(key), *kind)
        except (TypeError, ValueError):                  # a fill that does not fit: the walk names it
            return None
        return None if bits is None else (bits, self.always_pads(key, 1))

    def _count(self, out: dict, real: int, total: int, shapes: list) -> None:
        """One flat-rows batch's counts: into ``self.stats``, and into ``out`` with ``return_stats``."""
        if self.return_stats:
            out[STATS_KEY] = _counts(real, total, shapes, 0, 0)
        self.stats.add(real, total, shapes)

    def _collate_packed(self, samples: Sequence) -> dict:
        """``pack=``: :func:`loaders.packed_collate.collate_packed`, with this collate's
        counters, ``return_stats`` and pinning."""
        from .packed_collate import collate_packed

        out = collate_packed(samples, **self.pack)
        B, T = out["packing"].shape
        tokens = int(out["packing"].sizes.sum())
        shapes = [(k, tuple(v.shape)) for k, v in out.items()        # the token keys: [B, T, *rest]
                  if isinstance(v, torch.Tensor) and v.shape[:2] == (B, T) and k not in _PACKED_METADATA]
        real = sum(tokens * math.prod(shape[2:]) for _, shape in shapes)   # elements, as unpacked batches count
        total = sum(math.prod(shape) for _, shape in shapes)
        if self._pin:
            out = map_tensors(out, lambda t, key: t.pin_memory())
        if self.return_stats:
            out[STATS_KEY] = _counts(real, total, shapes, 0, 0)
        self.stats.add(real, total, shapes)
        return out

    def _no_pinning_in_worker(self) -> None:
        """In a ``DataLoader`` worker, pinning would start CUDA in the worker (which a
        forked worker of a process that already uses CUDA cannot do), and the batch's
        pages would not survive the transfer to the main process anyway: this worker's
        copy of the collate stops pinning, with one warning per worker."""
        self._pin = False
        self._direct = self._direct_route()
        self._native_args = self._native_route_args()
        warnings.warn("DynTileCollate(pin_memory=True) does not pin in DataLoader workers (pinning there would "
                      "initialise CUDA in the worker, and the transfer to the main process drops it); pass "
                      "pin_memory=True to the DataLoader, which pins in the main process", RuntimeWarning,
                      stacklevel=3)

    def reset_stats(self) -> None:
        """Zero the counters of this process."""
        self.stats = CollateStats()

    def __repr__(self) -> str:
        plan = self.plan.boundaries if self.plan is not None else None
        return (f"DynTileCollate(plan={plan}, multiple={self.multiple}, pad_values={dict(self.pad_values)}, "
                f"side={self.side!r}, batch_multiple={self.batch_multiple}, tile={self.tile}, "
                f"pin_memory={self.pin_memory}, overflow={self.overflow!r}, "
                f"worker_transfer={self.worker_transfer!r})")

    # ---- masks and lengths

    def _add_mask_and_lengths(self, out: dict, padded: dict) -> None:
        """Add the mask and lengths of ``padded``'s ``mask_from`` leaf (or its first):
        ``padded`` maps a key to ``(sizes, axes, shape)`` (see ``_Batch._note``)."""
        if not padded:
            return
        leaf = padded.get(self.mask_from) if self.mask_from is not None else next(iter(padded.values()))
        if leaf is None:
            raise KeyError(f"mask_from={self.mask_from!r} is not a padded leaf of this batch; "
                           f"padded leaves: {list(padded)}")
        sizes, axes, shape = leaf
        if self.mask_key is not None and self.mask_key not in out:
            out[self.mask_key] = self._mask(sizes, axes, shape)
        if self.lengths_key is not None and self.lengths_key not in out:
            out[self.lengths_key] = torch.from_numpy(sizes if sizes.ndim == 1 or sizes.shape[1] > 1 else sizes[:, 0])

    def _mask(self, lengths: np.ndarray, axes: tuple, shape: tuple) -> torch.Tensor:
        """``(B, *padded sizes)``: true where every padded axis is inside the data
        (``lengths``: ``(B, d)``, or ``(B,)`` for the direct route's 1-D leaves)."""
        if lengths.ndim == 1 or (len(axes) == 1 and lengths.shape[1] == 1):  # 1-D leaves: two memsets per row
            mask = torch.from_numpy(padding_mask(lengths if lengths.ndim == 1 else lengths[:, 0], shape[1],
                                                 side=self.side))
            return mask if self.mask_dtype == torch.bool else mask.to(self.mask_dtype)
        mask = None
        for j, a in enumerate(axes):
            size = shape[1 + a]
            pos = np.arange(size)
            n = lengths[:, a].reshape((-1,) + (1,) * (j + 1))
            pos = pos.reshape((1,) * (j + 1) + (size,))
            inside = pos < n if self.side == "right" else pos >= size - n
            inside = inside.reshape(inside.shape + (1,) * (len(axes) - j - 1))
            mask = inside if mask is None else mask & inside
        mask = torch.from_numpy(mask)
        return mask if self.mask_dtype == torch.bool else mask.to(self.mask_dtype)

    # ---- padding one leaf (called by the leaf handlers through _Batch.pad)

    def in_pad_keys(self, key: str) -> bool:
        return key in self.pad_keys or key.rsplit(".", 1)[-1] in self.pad_keys

    def always_pads(self, key: str, ndim: int) -> bool:
        """Whether a leaf of rank ``ndim`` at ``key`` is padded even when its samples
        share one shape: a named sequence (``pad_keys``, ``mask_from``), or any 1-D leaf
        of a plan when none is named."""
        return (ndim == 1 and self._plans_sequences) or self.in_pad_keys(key) or key == self.mask_from

    def fill_for(self, key: str):
        if key in self.pad_values:
            return self.pad_values[key]
        last = key.rsplit(".", 1)[-1]
        return self.pad_values.get(last, self.fill)

    def padded_axes(self, shapes: np.ndarray, key: str) -> tuple[int, ...]:
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
        return differ or (0,)         # a declared sequence whose samples share one shape: its first axis

    def rows_for(self, B: int, sizes: tuple, key: str) -> int:
        """Rows of the padded batch: ``B``, rounded up to ``batch_multiple``, or the
        bucket's row count from ``bucket_rows``."""
        if self.bucket_rows is not None:
            rows = self.bucket_rows.get(sizes)
            if rows is None:           # a size outside the plan (overflow="extend"): no fixed rows
                return B
            if B > rows:
                raise ValueError(f"key {key!r}: a batch of {B} samples in bucket {sizes} is larger than its "
                                 f"bucket_rows entry {rows}; give the sampler's batch sizes")
            return rows
        if self.batch_multiple is None:
            return B
        return -(-B // self.batch_multiple) * self.batch_multiple

    def target_sizes(self, maxes: np.ndarray, key: str, axes: tuple) -> tuple[int, ...]:
        """Padded sizes along ``axes`` for per-axis maxima ``maxes``."""
        plan = self.plan
        if plan is None or plan.ndim != len(axes):
            m = self.multiple
            return tuple(-(-int(x) // m) * m for x in maxes)
        return plan.round_up(tuple(int(x) for x in maxes))


class _Batch:
    """State of one ``__call__``: the walk, the padded leaves and their counts."""

    __slots__ = ("c", "padded", "real", "total", "shapes", "truncated", "extended", "rows", "refused", "tiled")

    def __init__(self, collate: DynTileCollate):
        self.c = collate
        self.padded: dict[str, tuple] = {}           # key -> (sizes, axes, out shape): see _record
        self.real = self.total = self.extended = 0
        self.truncated: set = set()                  # samples cut (once each, whatever their keys)
        self.shapes: list = []
        self.rows = 0                                # bucket_rows: the rows of the mask_from (or first) leaf's bucket
        self.refused: dict = {}                      # key -> why the direct route refused it (not tried twice)
        self.tiled: dict = {}                        # tile=: padded key -> its fill, tiled at the end

    def walk(self, items: list, key: str):
        # the common leaves (token ids as lists of ints, 1-D tensors) go straight to the
        # one-call route: a batch's walk is a handful of Python frames, which matters
        # most when a worker's __getitem__ calls have just evicted them from the caches
        if self.c._direct and _row_leaf(items[0]):
            out = self.pad_direct(items, key)
            if out is not None:
                return out
        return handler_for(type(items[0]), key)(self, items, key)

    def batch_rows(self, B: int) -> int:
        """Rows of every tensor leaf of this batch of ``B`` samples: ``B`` rounded up to
        ``batch_multiple``, or with ``bucket_rows`` the row count of the bucket of the
        ``mask_from`` leaf (else of the first padded leaf), which the sampler batches by."""
        if self.c.bucket_rows is None:
            return self.c.rows_for(B, (), "")
        return max(self.rows, B)

    def leaf_rows(self, B: int, sizes: tuple, key: str) -> int:
        """Rows to allocate for a padded leaf of bucket ``sizes``: the batch's rows when
        known (a leaf padded before the ``mask_from`` leaf gets ``B``, and is grown to
        them at the end by :meth:`grow_rows`)."""
        c = self.c
        if c.bucket_rows is None:
            return c.rows_for(B, sizes, key)
        if key == c.mask_from if c.mask_from is not None else not self.padded:
            self.rows = c.rows_for(B, sizes, key)
        return self.rows or B

    def grow_rows(self, value: torch.Tensor, B: int, rows: int, key: str) -> torch.Tensor:
        """A collated tensor of ``B`` rows grown to ``rows`` rows of its key's fill
        (numbers, stacked leaves, and a padded leaf allocated before the batch's rows
        were known: its sizes, mask and counts get the extra, empty rows)."""
        if value.dim() == 0 or value.shape[0] != B:
            return value
        fill = self.c.fill_for(key)
        try:
            extra = torch.full((rows - B, *value.shape[1:]), fill, dtype=value.dtype)
            stored = extra.view(-1)[0].item() if extra.numel() else fill
            if not (value.dtype.is_floating_point or value.dtype.is_complex or stored == fill):
                raise ValueError(f"it would be stored as {stored!r}")       # torch casts silently
        except (RuntimeError, TypeError, ValueError, OverflowError) as e:
            raise ValueError(f"key {key!r}: cannot pad the batch dimension of a {value.dtype} leaf with "
                             f"fill={fill!r} ({e}); give pad_values[{key.rsplit('.', 1)[-1]!r}]") from None
        grown = torch.cat((value, extra))
        if key in self.padded:
            sizes, axes, shape = self.padded[key]
            self.padded[key] = (np.concatenate((sizes, np.zeros((rows - B,) + sizes.shape[1:], sizes.dtype))),
                                axes, tuple(grown.shape))
            self.total += extra.numel()
            self.shapes[self.shapes.index((key, shape))] = (key, tuple(grown.shape))
        return grown

    def is_ragged(self, key: str, shapes: np.ndarray) -> bool:
        return self.c.always_pads(key, shapes.shape[1]) or bool((shapes != shapes[0]).any())

    def direct(self) -> bool:
        """True when one ``pad_rows`` call can plan, allocate and copy a 1-D leaf by
        itself (see ``DynTileCollate._direct``)."""
        return self.c._direct

    def pad_direct(self, items: list, key: str) -> torch.Tensor | None:
        """Fast route for 1-D leaves of one type: one ``pad_rows`` call (tensors or
        lists of numbers; ``pad_batch`` for 1-D arrays) finds the lengths, the size and
        the buffer. A leaf whose samples all have one length is stacked instead when
        it is not ragged (see ``always_pads``). ``None`` when the
        leaf is refused: the caller's full route then names the sample and applies
        the overflow policy."""
        c = self.c
        if key in self.refused:                      # the walk's shortcut tried this leaf already
            return None
        fill = c.fill_for(key)
        rows = pad_rows(items, multiple=c.multiple, plan=c.plan, fill=fill, side=c.side)
        if rows is None:
            try:
                batch, lengths = pad_batch(items, multiple=c.multiple, plan=c.plan, fill=fill, side=c.side,
                                           promote=False)
            except (TypeError, ValueError) as e:
                self.refused[key] = str(e)
                return None
            lengths = np.asarray(lengths)
            rows = batch, lengths, int(lengths.max()), int(lengths.sum())
        batch, lengths, longest, total = rows
        shape = tuple(batch.shape)                      # (B, T), read before wrapping: a NumPy tuple is cheaper
        if not isinstance(batch, torch.Tensor):
            batch = torch.from_numpy(batch)
        if longest * len(items) == total and not c.always_pads(key, 1):  # one length: the samples, stacked
            return _stacked_rows(batch, longest, c.side, items)
        self._note(key, lengths, (0,), shape, total)
        return batch

    def _record(self, key: str, shapes: np.ndarray, axes: tuple, out: torch.Tensor) -> None:
        """Note a padded leaf ``out`` and its samples' sizes ``shapes`` (``(B', d)`` int64)."""
        self._note(key, shapes, axes, tuple(out.shape), int(shapes.prod(axis=1).sum()))

    def _note(self, key: str, sizes: np.ndarray, axes: tuple, shape: tuple, real: int) -> None:
        """Count a padded leaf of ``shape`` holding ``real`` data elements; ``sizes`` (its
        samples' ``(B', d)`` sizes, or the ``(B,)`` lengths of a 1-D leaf) feed the mask
        and lengths."""
        self.padded[key] = (sizes, axes, shape)
        self.real += real
        self.total += math.prod(shape)
        self.shapes.append((key, shape))

    def pad(self, items: list, shapes: np.ndarray, key: str) -> torch.Tensor:
        """Pad one ragged leaf: target shape, overflow policy, one allocation, one kernel call."""
        c = self.c
        axes = c.padded_axes(shapes, key)
        items, shapes = self._check_fixed_axes(items, shapes, key, axes)
        maxes = shapes[:, axes].max(axis=0)
        if c.plan is not None and c.plan.ndim == len(axes):
            items, shapes, maxes = self._overflow(items, shapes, maxes, key, axes)
        target = shapes[0].tolist()
        for a, size in zip(axes, c.target_sizes(maxes, key, axes)):
            target[a] = size
        B = len(items)
        rows = self.leaf_rows(B, tuple(target[a] for a in axes), key)
        fill = c.fill_for(key)
        out = torch.empty((rows, *target), dtype=_torch_dtype(items[0]), pin_memory=c._pin and c.tile is None)
        try:
            pad_batch(items, shape=tuple(target), fill=fill, side=c.side, out=out[:B] if rows > B else out)
        except (ValueError, TypeError) as e:
            raise type(e)(f"key {key!r}: {e}") from None
        if rows > B:
            out[B:] = fill
            shapes = np.concatenate((shapes, np.zeros((rows - B, shapes.shape[1]), np.int64)))
        self._record(key, shapes, axes, out)
        if c.tile is not None:
            if out.dim() < 2:
                raise ValueError(f"key {key!r}: tile= needs padded leaves of at least 2 dimensions, but got "
                                 f"shape {tuple(out.shape)}")
            self.tiled[key] = fill
        return out

    def _check_fixed_axes(self, items, shapes, key, axes):
        fixed = [a for a in range(shapes.shape[1]) if a not in axes]
        if fixed:
            differ = (shapes[:, fixed] != shapes[0, fixed]).any(axis=1)
            if differ.any():
                i = int(np.flatnonzero(differ)[0])
                raise ValueError(f"key {key!r}: sample {i} has shape {tuple(shapes[i].tolist())} and sample 0 has "
                                 f"{tuple(shapes[0].tolist())}, but only axes {list(axes)} are padded; pass axes= "
                                 f"to pad the others")
        return items, shapes

    def _overflow(self, items, shapes, maxes, key, axes):
        c = self.c
        limit = np.array(c.plan.max_sizes)
        if not (maxes > limit).any():
            return items, shapes, maxes
        if c.overflow == "extend":
            c._extend_plan(c.plan.extend(tuple(int(x) for x in maxes)))
            self.extended += 1
            return items, shapes, maxes
        over = (shapes[:, axes] > limit).any(axis=1)
        i = int(np.flatnonzero(over)[0])
        if c.overflow == "error":
            raise ValueError(
                f"key {key!r}: sample {i} has shape {tuple(shapes[i].tolist())}, over the plan's largest boundary "
                f"{tuple(int(x) for x in limit)} along axes {list(axes)}; pass overflow='truncate' to cut it "
                f"or overflow='extend' to grow the plan")
        items = list(items)
        shapes = shapes.copy()
        for i in np.flatnonzero(over):
            index = [slice(None)] * shapes.shape[1]
            for a, top in zip(axes, limit):
                index[a] = slice(0, int(top))
            items[i] = items[i][tuple(index)]
            shapes[i, list(axes)] = np.minimum(shapes[i, list(axes)], limit)
        self.truncated.update(np.flatnonzero(over).tolist())
        return items, shapes, shapes[:, axes].max(axis=0)

    def tile(self, out: torch.Tensor, fill) -> torch.Tensor:
        """A padded leaf in the tiled layout of ``tile=`` (its last two axes)."""
        from dyntile.tiling import tile as tile_fn
        from dyntile.shapes import tiled_shape

        dest = torch.empty(tiled_shape(tuple(out.shape), self.c.tile), dtype=out.dtype, pin_memory=self.c._pin)
        return tile_fn(out, self.c.tile, fill=fill, out=dest)


def map_tensors(value, fn, key: str = ""):
    """``value`` (a collated structure: dicts, namedtuples, lists) with every tensor
    ``t`` at ``key`` replaced by ``fn(t, key)``; strings and other values kept."""
    if isinstance(value, torch.Tensor):
        return fn(value, key)
    if isinstance(value, dict):
        return {k: map_tensors(v, fn, join_key(key, k)) for k, v in value.items()}
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(map_tensors(v, fn, join_key(key, f)) for f, v in zip(value._fields, value)))
    if isinstance(value, list):
        return [map_tensors(v, fn, join_key(key, str(j))) for j, v in enumerate(value)]
    return value


#: DynTileCollate's options (its __init__ arguments), fixed once it is built
_OPTIONS = frozenset({"plan", "multiple", "pad_values", "fill", "side", "pad_keys", "axes", "batch_multiple",
                      "bucket_rows", "mask_key", "lengths_key", "mask_from", "mask_dtype", "tile", "pin_memory",
                      "overflow", "return_stats", "pack", "worker_transfer"})
#: the options held as read-only mappings (their nested dicts too)
_MAPPING_OPTIONS = ("pad_values", "bucket_rows", "pack")
_NP_TO_TORCH: dict = {}
_TENSOR = torch.Tensor
_ONE_THREAD_BYTES = PARALLEL_COPY_BYTES - 1    # larger batches go to the threaded copy of pad_rows


def _fixed_option(name: str, what_to_do: str) -> AttributeError:
    return AttributeError(f"DynTileCollate's {name!r} is fixed once it is built (its routes and caches are "
                          f"worked out from its options); {what_to_do}")


def _remap(options: Mapping | None, make):
    """A copy of a dict option, it and its nested dicts built by ``make`` (None stays None)."""
    if options is None:
        return None
    return make({k: _remap(v, make) if isinstance(v, Mapping) else v for k, v in options.items()})


def _read_only(options: Mapping | None) -> MappingProxyType | None:
    """A read-only view of a dict option, nested dicts included."""
    return _remap(options, MappingProxyType)


def _writable(options: Mapping | None) -> dict | None:
    """The plain dicts behind :func:`_read_only` (for pickling)."""
    return _remap(options, dict)


def _stacked_rows(batch, longest: int, side: str, rows: list) -> torch.Tensor:
    """B rows of one length ``longest``, padded into ``batch`` (NumPy or torch): the
    samples stacked, the padding cut off (what ``default_collate`` gives for them).
    Tensor ``rows`` of which one requires grad are stacked by ``torch.stack``, which
    records autograd, as ``default_collate`` does (the padded copy holds no grad_fn)."""
    if isinstance(rows[0], _TENSOR) and tensor_reader.requires_grad(rows):
        return torch.stack([r if isinstance(r, _TENSOR) else torch.as_tensor(r, dtype=batch.dtype) for r in rows])
    t = batch if type(batch) is _TENSOR else torch.from_numpy(batch)
    return (t[:, :longest] if side == "right" else t[:, t.shape[1] - longest:]).contiguous()


def _row_leaf(x) -> bool:
    """Whether ``x`` is a leaf of the one-call route: a list of ints (judged by its first
    element; the kernel checks the rest) or a 1-D tensor."""
    cls = type(x)
    return (cls is list and bool(x) and type(x[0]) is int) or (cls is _TENSOR and x.dim() == 1)


def _counts(real: int, total: int, shapes: list, truncated: int, extended: int) -> dict:
    """One batch's counts, as ``return_stats=True`` adds them under ``STATS_KEY``."""
    return {"real_elements": real, "padded_elements": total, "shapes": shapes,
            "truncated_samples": truncated, "plan_extensions": extended}


def _torch_dtype(x) -> torch.dtype:
    if isinstance(x, torch.Tensor):
        return x.dtype
    dt = x.dtype
    t = _NP_TO_TORCH.get(dt)
    if t is None:
        t = _NP_TO_TORCH[dt] = torch.from_numpy(np.empty(0, dt)).dtype
    return t


def _pinning_available() -> bool:
    global _PIN_WARNED
    if torch.cuda.is_available():
        return True
    if not _PIN_WARNED:
        warnings.warn("DynTileCollate(pin_memory=True): pinned memory needs CUDA, which this torch build or "
                      "machine lacks; outputs are allocated in ordinary memory", RuntimeWarning, stacklevel=3)
        _PIN_WARNED = True
    return False


def _bucket_rows(plan, bucket_rows, batch_multiple) -> dict | None:
    """``{bucket sizes: rows}`` from one row count per bucket of ``plan``."""
    if bucket_rows is None:
        return None
    if plan is None:
        raise ValueError("bucket_rows needs a plan: one row count per bucket of plan.bucket_shapes()")
    if batch_multiple is not None:
        raise ValueError("pass either bucket_rows or batch_multiple, not both")
    shapes = plan.bucket_shapes()
    rows = [check_multiple(r, "bucket_rows[i]") for r in bucket_rows]
    if len(rows) != len(shapes):
        raise ValueError(f"bucket_rows has {len(rows)} entries but the plan has {len(shapes)} buckets")
    return dict(zip(shapes, rows))


def _pack_options(pack, pad_values: dict) -> dict | None:
    """``collate_packed``'s keyword arguments from ``pack=``; ``pad_values`` are this
    collate's, under those the dict itself gives."""
    if pack is None:
        return None
    if hasattr(pack, "shapes"):                      # a PackingBatchSampler
        options = {"shapes": tuple(pack.shapes), "overflow": getattr(pack, "overflow", "second_shape")}
    elif isinstance(pack, Mapping):
        options = dict(pack)
        if "shapes" in options:
            options["shapes"] = tuple(options["shapes"])
    else:
        options = {"shapes": tuple(pack)}
    options["pad_values"] = {**pad_values, **dict(options.get("pad_values") or {})}
    return options


#: what collate_packed adds beside the token keys
_PACKED_METADATA = frozenset({"position_ids", "segment_ids", "attention_mask"})
#: options of DynTileCollate that the packed layout decides itself: the values it takes
#: (the defaults; mask_key=None too: no (B, T) mask is what pack gives anyway)
_WITH_PACK = {"plan": (None,), "multiple": (8,), "fill": (0,), "side": ("right",), "pad_keys": (None,),
              "axes": (None,), "batch_multiple": (None,), "bucket_rows": (None,), "mask_key": ("attention_mask", None),
              "lengths_key": ("lengths",), "mask_from": (None,), "mask_dtype": (torch.bool,), "tile": (None,),
              "overflow": ("error",)}


def _check_pack_options(**given) -> None:
    """``ValueError`` naming the options given with ``pack=`` that it would ignore."""
    ignored = [k for k, v in given.items() if not any(v is a or v == a for a in _WITH_PACK[k])]
    if ignored:
        raise ValueError(f"with pack=, the packed layout sets the shapes, masks and padding, so {ignored} "
                         f"would be ignored; drop them (pad_values, pin_memory, return_stats and "
                         f"worker_transfer apply; collate_packed's own options go in the pack dict)")
