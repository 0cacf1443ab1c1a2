"""The Python executor of a collate spec: runs every :class:`~loaders._collate_spec.BatchSpec`.

:func:`run` walks the spec over the samples (the handlers of :mod:`loaders._leaf_handlers`
collate each place), then applies what needs the whole batch: the row sequences aligned
with the mask key take its width, the batch dimension is padded (``batch_multiple``,
``bucket_rows``), padded leaves are tiled, and the mask and lengths are made. Every
decision it takes comes from :class:`~loaders._collate_spec.CollateRules`.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from dyntile import tensor_reader
from dyntile.masks import padding_mask
from dyntile.padding import pad_batch, pad_rows

from ._collate_layout import mask_of, stacks, widens
from ._collate_spec import MAP, CollateRules, LeafSpec, Mismatch, NodeSpec, join_key, kind_of
from ._leaf_handlers import HANDLERS, read_leaf

__all__ = ["PythonBatch", "Result", "map_tensors", "run"]

_TENSOR = torch.Tensor
_NP_TO_TORCH: dict = {}


@dataclasses.dataclass
class Result:
    """What an executor gives the collate: the batch, the mask and lengths of its mask
    leaf (``None`` where there are none), its counts, and the rules it ended with (a plan
    grown by ``overflow="extend"``)."""

    out: object
    mask: torch.Tensor | None
    lengths: torch.Tensor | None
    real: int
    total: int
    shapes: list
    truncated: int = 0
    extended: int = 0
    rules: CollateRules | None = None


def run(rules: CollateRules, spec, samples: list) -> Result:
    """Collate ``samples`` (a list, not changed) by ``spec``; :class:`Mismatch` when
    sample 0 is not of its structure."""
    ctx = PythonBatch(rules)
    out = ctx.walk(spec.root, samples)
    if isinstance(spec.root, NodeSpec) and spec.root.kind == MAP:
        ctx.align(out, spec.root, len(samples))
    B = len(samples)
    rows = ctx.batch_rows(B)
    if rows > B:  # batch padding: every tensor leaf gets the batch's rows
        out = map_tensors(out, lambda t, key: ctx.grow_rows(t, B, rows, key))
    if ctx.tiled:  # tiled last, once every padded leaf has its rows
        out = map_tensors(out, lambda t, key: ctx.tile(t, ctx.tiled[key]) if key in ctx.tiled else t)
    mask, lengths = ctx.mask_and_lengths() if isinstance(out, dict) else (None, None)
    return Result(
        out, mask, lengths, ctx.real, ctx.total, ctx.shapes, len(ctx.truncated), ctx.extended, ctx.rules
    )


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


class PythonBatch:
    """State of one batch: the walk, the padded leaves and their counts."""

    __slots__ = (
        "rules",
        "padded",
        "real",
        "total",
        "shapes",
        "truncated",
        "extended",
        "rows",
        "tiled",
        "even",
    )

    def __init__(self, rules: CollateRules):
        self.rules = rules
        self.padded: dict[str, tuple] = {}  # key -> (sizes, axes, out shape): see _note
        self.real = self.total = self.extended = 0
        self.truncated: set = set()  # samples cut (once each, whatever their keys)
        self.shapes: list = []
        self.rows = 0  # bucket_rows: the rows of the mask_from (or first) leaf's bucket
        self.tiled: dict = {}  # tile=: padded key -> its fill, tiled at the end
        self.even: dict = {}  # aligned row key stacked at one length -> that length

    def walk(self, spec, items: list):
        if kind_of(items[0]) != spec.kind:
            raise Mismatch(spec.key)
        return HANDLERS[spec.kind](self, items, spec)

    # ---- leaves of one shape

    def is_ragged(self, spec: LeafSpec, shapes: np.ndarray) -> bool:
        return spec.always or bool((shapes != shapes[0]).any())

    def stacked(self, items: list, spec: LeafSpec, out: torch.Tensor) -> torch.Tensor:
        """``out``, the samples of ``spec`` stacked; an aligned row key's length is noted."""
        if spec.align and out.dim() == 2:
            self.even[spec.key] = out.shape[1]
        return out

    def align(self, out: dict, root: NodeSpec, B: int) -> None:
        """Row keys stacked at the one length of the mask leaf's ``B`` rows take its padded
        width, so that every sequence of a sample has one width."""
        mark = self.mark(B)
        if not self.even or mark is None or mark[0] not in self.even.values():
            return
        length, width = mark
        for k, leaf in zip(root.fields, root.children):
            even = self.even.get(leaf.key)
            if even is not None and widens(True, even, length, width):  # self.even holds aligned keys only
                out[k] = self._widen(out[k], width, leaf.key)

    def mark(self, B: int) -> tuple | None:
        """``(length, width)`` of the mask leaf when it is 1-D and its ``B`` samples have one length."""
        leaf = self._mask_leaf()
        if leaf is None or len(leaf[2]) != 2:
            return None
        sizes = leaf[0].reshape(-1)[:B]  # not the batch's padding rows
        return (int(sizes[0]), leaf[2][1]) if sizes.size and (sizes == sizes[0]).all() else None

    def _widen(self, t: torch.Tensor, width: int, key: str) -> torch.Tensor:
        fill = self.rules.fill_for(key)
        try:
            out = torch.full((t.shape[0], width), fill, dtype=t.dtype)
        except (RuntimeError, TypeError, ValueError, OverflowError) as e:
            raise ValueError(f"key {key!r}: cannot pad a {t.dtype} leaf with fill={fill!r} ({e})") from None
        n = t.shape[1]
        (out[:, :n] if self.rules.side == "right" else out[:, width - n :]).copy_(t)
        self._note(key, np.full(t.shape[0], n, np.int64), (0,), tuple(out.shape), t.numel())
        return out

    # ---- padding

    def pad_rows(self, items: list, spec: LeafSpec) -> torch.Tensor:
        """A 1-D leaf that :meth:`CollateRules.pads_rows` gives the row path, in one
        ``pad_rows`` call (one kernel call for tensors and lists of numbers), which finds
        the lengths, the size and the buffer; stacked when the samples share one length
        and the leaf is no sequence. A leaf it cannot pad raises here, worded as the
        general path words it (:meth:`_row_error`)."""
        r, key = self.rules, spec.key
        fill = r.fill_for(key)
        try:
            batch, lengths, longest, total = pad_rows(
                items, multiple=r.multiple, plan=r.plan, fill=fill, side=r.side, promote=False
            )
        except (TypeError, ValueError) as e:
            raise self._row_error(items, spec, e) from None
        shape = tuple(batch.shape)
        if not isinstance(batch, torch.Tensor):
            batch = torch.from_numpy(batch)
        if stacks(spec.always, longest * len(items) == total):  # one length: the samples, stacked
            return self.stacked(items, spec, _stacked_rows(batch, longest, r.side, items))
        self._note(key, lengths, (0,), shape, total)
        return batch

    def _row_error(self, items: list, spec: LeafSpec, error: Exception) -> Exception:
        """The error of a leaf the row path could not pad, in the general path's words: its
        reading of the samples (:func:`read_leaf`: type, dtype, rank, numbers) raises what
        it finds, then a row past the plan is named (``overflow="error"``, the only policy
        the row path runs under), else ``error`` itself, keyed. Nothing is padded again."""
        _, shapes = read_leaf(items, spec, str(error))
        if self.rules.plan is not None:
            _check_over_plan(shapes, spec.key, (0,), np.array(self.rules.plan.max_sizes))
        return _keyed(error, spec.key)

    def pad(self, items: list, shapes: np.ndarray, spec: LeafSpec) -> torch.Tensor:
        """Pad one ragged leaf: target shape, overflow policy, one allocation, one kernel call."""
        r, key = self.rules, spec.key
        axes = r.padded_axes(shapes, key)
        _check_fixed_axes(shapes, key, axes)
        maxes = shapes[:, axes].max(axis=0)
        if r.plan is not None and r.plan.ndim == len(axes):
            items, shapes, maxes = self._overflow(items, shapes, maxes, key, axes)
            r = self.rules
        target = shapes[0].tolist()
        for a, size in zip(axes, r.target_sizes(maxes, axes)):
            target[a] = size
        B = len(items)
        rows = self.leaf_rows(B, tuple(target[a] for a in axes), key)
        fill = r.fill_for(key)
        out = torch.empty((rows, *target), dtype=_torch_dtype(items[0]), pin_memory=r.pin and r.tile is None)
        try:
            pad_batch(items, shape=tuple(target), fill=fill, side=r.side, out=out[:B] if rows > B else out)
        except (ValueError, TypeError) as e:
            raise _keyed(e, key) from None
        if rows > B:
            out[B:] = fill
            shapes = np.concatenate((shapes, np.zeros((rows - B, shapes.shape[1]), np.int64)))
        self._note(key, shapes, axes, tuple(out.shape), int(shapes.prod(axis=1).sum()))
        if r.tile is not None:
            if out.dim() < 2:
                raise ValueError(
                    f"key {key!r}: tile= needs padded leaves of at least 2 dimensions, but got "
                    f"shape {tuple(out.shape)}"
                )
            self.tiled[key] = fill
        return out

    def _note(self, key: str, sizes: np.ndarray, axes: tuple, shape: tuple, real: int) -> None:
        """Count a padded leaf of ``shape`` holding ``real`` data elements; ``sizes`` (its
        samples' ``(B', d)`` sizes, or the ``(B,)`` lengths of a 1-D leaf) feed the mask
        and lengths."""
        self.padded[key] = (sizes, axes, shape)
        self.real += real
        self.total += math.prod(shape)
        self.shapes.append((key, shape))

    def _overflow(self, items, shapes, maxes, key, axes):
        r = self.rules
        limit = np.array(r.plan.max_sizes)
        if not (maxes > limit).any():
            return items, shapes, maxes
        if r.overflow == "extend":
            self.rules = dataclasses.replace(r, plan=r.plan.extend(tuple(int(x) for x in maxes)))
            self.extended += 1
            return items, shapes, maxes
        if r.overflow == "error":
            _check_over_plan(shapes, key, axes, limit)
        over = (shapes[:, axes] > limit).any(axis=1)
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

    # ---- the batch dimension

    def batch_rows(self, B: int) -> int:
        """Rows of every tensor leaf of this batch of ``B`` samples: ``B`` rounded up to
        ``batch_multiple``, or with ``bucket_rows`` the row count of the bucket of the
        ``mask_from`` leaf (else of the first padded leaf), which the sampler batches by."""
        if self.rules.bucket_rows is None:
            return self.rules.rows_for(B, (), "")
        return max(self.rows, B)

    def leaf_rows(self, B: int, sizes: tuple, key: str) -> int:
        """Rows to allocate for a padded leaf of bucket ``sizes``: the batch's rows when
        known (a leaf padded before the ``mask_from`` leaf gets ``B``, and is grown to
        them at the end by :meth:`grow_rows`)."""
        r = self.rules
        if r.bucket_rows is None:
            return r.rows_for(B, sizes, key)
        if key == r.mask_from if r.mask_from is not None else not self.padded:
            self.rows = r.rows_for(B, sizes, key)
        return self.rows or B

    def grow_rows(self, value: torch.Tensor, B: int, rows: int, key: str) -> torch.Tensor:
        """A collated tensor of ``B`` rows grown to ``rows`` rows of its key's fill
        (numbers, stacked leaves, and a padded leaf allocated before the batch's rows
        were known: its sizes, mask and counts get the extra, empty rows)."""
        if value.dim() == 0 or value.shape[0] != B:
            return value
        fill = self.rules.fill_for(key)
        try:
            extra = torch.full((rows - B, *value.shape[1:]), fill, dtype=value.dtype)
            stored = extra.view(-1)[0].item() if extra.numel() else fill
            if not (value.dtype.is_floating_point or value.dtype.is_complex or stored == fill):
                raise ValueError(f"it would be stored as {stored!r}")  # torch casts silently
        except (RuntimeError, TypeError, ValueError, OverflowError) as e:
            raise ValueError(
                f"key {key!r}: cannot pad the batch dimension of a {value.dtype} leaf with "
                f"fill={fill!r} ({e}); give pad_values[{key.rsplit('.', 1)[-1]!r}]"
            ) from None
        grown = torch.cat((value, extra))
        if key in self.padded:
            sizes, axes, shape = self.padded[key]
            self.padded[key] = (
                np.concatenate((sizes, np.zeros((rows - B,) + sizes.shape[1:], sizes.dtype))),
                axes,
                tuple(grown.shape),
            )
            self.total += extra.numel()
            self.shapes[self.shapes.index((key, shape))] = (key, tuple(grown.shape))
        return grown

    def tile(self, out: torch.Tensor, fill) -> torch.Tensor:
        """A padded leaf in the tiled layout of ``tile=`` (its last two axes)."""
        from dyntile.shapes import tiled_shape
        from dyntile.tiling import tile as tile_fn

        r = self.rules
        dest = torch.empty(tiled_shape(tuple(out.shape), r.tile), dtype=out.dtype, pin_memory=r.pin)
        return tile_fn(out, r.tile, fill=fill, out=dest)

    # ---- masks and lengths

    def _mask_leaf(self) -> tuple | None:
        """``(sizes, axes, shape)`` of the ``mask_from`` leaf, else of the first padded one."""
        if not self.padded:
            return None
        mask_from = self.rules.mask_from
        leaf = self.padded.get(mask_of(self.padded, mask_from))
        if leaf is None:
            raise KeyError(
                f"mask_from={mask_from!r} is not a padded leaf of this batch; "
                f"padded leaves: {list(self.padded)}"
            )
        return leaf

    def mask_and_lengths(self) -> tuple:
        """The bool mask (``(B, *padded sizes)``, true on data) and the lengths (int64
        ``(B,)``, or ``(B, ndim)`` for N-D leaves) of the mask leaf, each as asked."""
        leaf = self._mask_leaf()
        if leaf is None:
            return None, None
        sizes, axes, shape = leaf
        mask = None if self.rules.mask_key is None else self._mask(sizes, axes, shape)
        lengths = None
        if self.rules.lengths_key is not None:
            lengths = torch.from_numpy(sizes if sizes.ndim == 1 or sizes.shape[1] > 1 else sizes[:, 0])
        return mask, lengths

    def _mask(self, lengths: np.ndarray, axes: tuple, shape: tuple) -> torch.Tensor:
        side = self.rules.side
        if lengths.ndim == 1 or (len(axes) == 1 and lengths.shape[1] == 1):  # 1-D leaves: two memsets per row
            return torch.from_numpy(
                padding_mask(lengths if lengths.ndim == 1 else lengths[:, 0], shape[1], side=side)
            )
        mask = None
        for j, a in enumerate(axes):
            size = shape[1 + a]
            pos = np.arange(size).reshape((1,) * (j + 1) + (size,))
            n = lengths[:, a].reshape((-1,) + (1,) * (j + 1))
            inside = pos < n if side == "right" else pos >= size - n
            inside = inside.reshape(inside.shape + (1,) * (len(axes) - j - 1))
            mask = inside if mask is None else mask & inside
        return torch.from_numpy(mask)


def _keyed(error: Exception, key: str) -> Exception:
    """``error`` (of a padding call on one leaf) naming the leaf's key."""
    return type(error)(f"key {key!r}: {error}")


def _check_over_plan(shapes: np.ndarray, key: str, axes: tuple, limit: np.ndarray) -> None:
    """``ValueError`` naming the first sample of ``shapes`` (``(B, ndim)``) past the plan's
    largest boundary ``limit`` along ``axes`` (what ``overflow="error"`` says)."""
    over = (shapes[:, axes] > limit).any(axis=1)
    if over.any():
        i = int(np.flatnonzero(over)[0])
        raise ValueError(
            f"key {key!r}: sample {i} has shape {tuple(shapes[i].tolist())}, over the plan's largest "
            f"boundary {tuple(int(x) for x in limit)} along axes {list(axes)}; pass "
            f"overflow='truncate' to cut it or overflow='extend' to pad past the plan"
        )


def _check_fixed_axes(shapes: np.ndarray, key: str, axes: tuple) -> None:
    fixed = [a for a in range(shapes.shape[1]) if a not in axes]
    if fixed:
        differ = (shapes[:, fixed] != shapes[0, fixed]).any(axis=1)
        if differ.any():
            i = int(np.flatnonzero(differ)[0])
            raise ValueError(
                f"key {key!r}: sample {i} has shape {tuple(shapes[i].tolist())} and sample 0 has "
                f"{tuple(shapes[0].tolist())}, but only axes {list(axes)} are padded; pass axes= "
                f"to pad the others"
            )


def _stacked_rows(batch, longest: int, side: str, rows: list) -> torch.Tensor:
    """B rows of one length ``longest``, padded into ``batch``: the samples stacked, the
    padding cut off (what ``default_collate`` gives for them). Tensor ``rows`` of which
    one requires grad are stacked by ``torch.stack``, which records autograd, as
    ``default_collate`` does (the padded copy holds no grad_fn)."""
    if isinstance(rows[0], _TENSOR) and tensor_reader.requires_grad(rows):
        return torch.stack(
            [r if isinstance(r, _TENSOR) else torch.as_tensor(r, dtype=batch.dtype) for r in rows]
        )
    return (batch[:, :longest] if side == "right" else batch[:, batch.shape[1] - longest :]).contiguous()


def _torch_dtype(x) -> torch.dtype:
    if isinstance(x, torch.Tensor):
        return x.dtype
    dt = x.dtype
    t = _NP_TO_TORCH.get(dt)
    if t is None:
        t = _NP_TO_TORCH[dt] = torch.from_numpy(np.empty(0, dt)).dtype
    return t
