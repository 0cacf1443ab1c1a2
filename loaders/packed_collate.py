"""``PackedCollate``: whole samples laid end to end in packed ``[B, T]`` rows.

The samples arrive in the order a :class:`~loaders.packing_sampler.PackingBatchSampler`
yields them; :func:`dyntile.planning.packing.pack_rows` (the decoder of the packer
the sampler used) recovers the rows from their lengths, so the layout here is the
sampler's. Each token key is one output allocation and one copy kernel call
(:func:`dyntile.cpu.packed_rows.place_pieces`), which reads the samples where they
lie; the segment metadata is one more pass (``packed_layout``).

Outputs (``n`` samples, ``B`` rows of ``T`` tokens; *pieces* are the samples, or
the chunks of split ones):

* every token key: ``[B, T, *rest]``, its pad value in empty slots (0, or -100 for
  label keys, unless ``pad_values`` names another);
* ``position_ids`` int64 ``[B, T]``: 0, 1, ... restarting at each sample (a split
  sample's later chunks continue its count); 0 on padding;
* ``segment_ids`` int32 ``[B, T]``: 1, 2, ... for the pieces of a row, in order;
  **0 on padding**. A zero-length sample takes a number no token carries;
* ``cu_seqlens`` int32 ``(S + 1,)``: the segments of the flattened ``[B * T]``
  stream, as flash-attention's varlen kernels take them, from 0 to ``B * T``: every
  piece is a segment, and so is the padding at the end of each row, so the stream
  needs no unpadding; a zero-length sample repeats a value. ``max_seqlen`` (int):
  the longest of these segments;
* ``lengths`` int64 ``(n,)``: each sample's length, in sample order; ``packing``:
  the :class:`~dyntile.planning.packing.PackedBatch` (row and offset of each piece);
* ``use_cache``: ``False`` (the ``use_cache`` option): a Hugging Face decoder that
  builds a KV cache (its config's default outside the ``Trainer``) reads no
  restarting ``position_ids``, and its packed samples would see each other;
* on request, what Hugging Face models take to keep packed samples apart (see
  :class:`PackedCollate`).

A sample's own ``attention_mask`` (a tokenizer's, all ones) is left out: a packed
2-D mask of ones would tell a model that each row is one sequence.

A key the samples bring themselves (their own ``position_ids``, say) is kept: the
output of that name is not computed.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch
from torch.utils.data import get_worker_info

from dyntile import concat_rows
from dyntile.arrays import torch_fill_bits
from dyntile.cpu.packed_rows import packed_layout, place_pieces
from dyntile.fill import check_fill, fill_bits
from dyntile.planning.packing import (
    PackedBatch,
    check_packing_overflow,
    check_packing_shapes,
    pack_checked_rows,
)
from dyntile.tensor_reader import describe_rows

from ._collate_spec import LABEL_KEYS, CollateRules
from ._leaf_handlers import check_ints_fit, check_one_dtype, mapping_columns
from .collate_stats import STATS_KEY, CollateStats, batch_counts
from .key_names import key_mapping, key_names
from .pinning import pinning_available, warn_no_pinning_in_worker
from .worker_transfer import WorkerBatch

__all__ = ["PackedCollate", "collate_packed", "ATTENTION_MASKS"]

#: the packed attention masks PackedCollate makes: none, [B, T, T] bool, [B, 1, T, T] additive float
ATTENTION_MASKS = (None, "block", "additive")
_DEFAULT_KEY = "input_ids"
_FLASH_KEYS = ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k")


class PackedCollate:
    """A ``collate_fn`` that packs whole samples into ``[B, T]`` rows, with segment metadata.

    ``shapes``: a :class:`~loaders.packing_sampler.PackingBatchSampler` (its
    ``shapes`` and ``overflow``), or one or two ``(B, T)``. Samples are dicts whose
    sequence values (lists, arrays, tensors of ``(L, *rest)``, one ``L`` per sample)
    are the token keys, their other values stacked per sample; or bare sequences
    (key ``"input_ids"``). The docs' packing guide lists the options and
    outputs; the module docstring details the outputs.

    >>> collate = PackedCollate([(2, 8)])
    >>> out = collate([[5, 6, 7], [8, 9]])
    >>> out["input_ids"][0].tolist(), out["position_ids"][0].tolist()
    ([5, 6, 7, 8, 9, 0, 0, 0], [0, 1, 2, 0, 1, 0, 0, 0])
    >>> out["segment_ids"][0].tolist(), out["cu_seqlens"].tolist()
    ([1, 1, 1, 2, 2, 0, 0, 0], [0, 3, 5, 8, 16])
    """

    def __init__(
        self,
        shapes,
        *,
        overflow: str | None = None,
        pad_values: Mapping[str, Any] | None = None,
        label_keys: Sequence[str] = LABEL_KEYS,
        mask_boundary_labels: bool = True,
        attention_mask: str | bool | None = None,
        causal: bool = False,
        mask_dtype: torch.dtype = torch.float32,
        flash_attention_kwargs: bool = False,
        use_cache: bool | None = False,
        pin_memory: bool = False,
        return_stats: bool = False,
        worker_transfer: str = "one_buffer",
    ):
        if hasattr(shapes, "shapes") and hasattr(shapes, "overflow"):  # a PackingBatchSampler
            overflow = shapes.overflow if overflow is None else overflow
            shapes = shapes.shapes
        self.shapes = check_packing_shapes(shapes)
        self.overflow = check_packing_overflow("extend" if overflow is None else overflow)
        self.pad_values = dict(key_mapping(pad_values, "pad_values", "PackedCollate") or {})
        self.label_keys = label_keys = key_names(label_keys, "label_keys", "PackedCollate")
        self._fills = CollateRules(pad_values=dict(self.pad_values), label_keys=frozenset(label_keys))
        self.mask_boundary_labels = bool(mask_boundary_labels)
        self.attention_mask = _check_mask(attention_mask, mask_dtype)
        self.causal = bool(causal)
        self.mask_dtype = mask_dtype
        self.flash_attention_kwargs = bool(flash_attention_kwargs)
        self.use_cache = None if use_cache is None else bool(use_cache)
        if worker_transfer not in ("one_buffer", "torch"):
            raise ValueError(
                f"worker_transfer should be 'one_buffer' or 'torch', but got {worker_transfer!r}"
            )
        self.worker_transfer = worker_transfer
        self.pin_memory = bool(pin_memory)
        self._pin = self.pin_memory and pinning_available("PackedCollate")
        self.return_stats = bool(return_stats)
        self.stats = CollateStats()
        self._bits: dict = {}  # (key, dtype) -> (fill bits, element width) of its pad value

    def __call__(self, samples: Sequence) -> dict:
        in_worker = get_worker_info() is not None
        if in_worker and self._pin:
            self._pin = False
            warn_no_pinning_in_worker("PackedCollate")
        out = self._collate(samples)
        return WorkerBatch(out) if in_worker and self.worker_transfer == "one_buffer" else out

    def _collate(self, samples: Sequence) -> dict:
        if len(samples) == 0:
            raise ValueError("PackedCollate needs at least one sample, but got an empty batch")
        tokens, others = _columns(samples)
        self._check_own_keys(tokens, others)
        if "attention_mask" in tokens:  # a packed 2-D mask of ones would join a row's samples
            _check_all_ones(tokens.pop("attention_mask"))
        sources = {key: _token_source(column, key) for key, column in tokens.items()}
        lengths = _common_lengths(sources)
        packed = pack_checked_rows(lengths, self.shapes, self.overflow)
        B, T = packed.shape
        dst = packed.rows * T + packed.offsets
        out: dict[str, Any] = {key: self._place(key, src, packed, dst) for key, src in sources.items()}
        self._count(out, packed)
        position, segment, cu, longest = packed_layout(
            packed.rows, packed.offsets, packed.sizes, packed.starts, B, T
        )
        segment_ids, cu_seqlens = torch.from_numpy(segment), torch.from_numpy(cu)
        computed = {
            "position_ids": torch.from_numpy(position),
            "segment_ids": segment_ids,
            "cu_seqlens": cu_seqlens,
            "max_seqlen": int(longest),
            "lengths": torch.from_numpy(lengths),
        }
        out.update((k, v) for k, v in computed.items() if k not in out and k not in others)
        out.update((k, _stack_leaf(column, k)) for k, column in others.items())
        if self.attention_mask is not None:  # asked for: it replaces a tokenizer's own mask of ones
            out["attention_mask"] = self._mask(segment_ids)
        if self.flash_attention_kwargs:
            out.update(zip(_FLASH_KEYS, (cu_seqlens, cu_seqlens, int(longest), int(longest))))
        if self.use_cache is not None and "use_cache" not in others:
            out["use_cache"] = self.use_cache
        out["packing"] = packed
        if self._pin:
            out = {
                k: v.pin_memory() if isinstance(v, torch.Tensor) and not v.is_pinned() else v
                for k, v in out.items()
            }
        return out

    def _check_own_keys(self, tokens: dict, others: dict) -> None:
        """``ValueError`` for a sample key that an output this collate always writes would
        replace (``packing``; the flash-attention keys and the stats when asked for); the
        outputs it computes otherwise (``position_ids``...) yield to a sample's own."""
        written = {"packing"}
        if self.flash_attention_kwargs:
            written.update(_FLASH_KEYS)
        if self.return_stats:
            written.add(STATS_KEY)
        clash = sorted(k for k in written if k in tokens or k in others)
        if clash:
            raise ValueError(
                f"the samples have the key {clash[0]!r}, which PackedCollate's output holds "
                f"(its own, replacing the samples'); rename that key of the samples"
            )

    def _place(self, key: str, src: _Source, packed: PackedBatch, dst: np.ndarray) -> torch.Tensor:
        """One token key's ``[B, T, *rest]`` output: its pad value, then every piece."""
        B, T = packed.shape
        out = torch.empty((B, T, *src.rest), dtype=src.dtype, pin_memory=self._pin)
        bits, width = self._fill_of(key, src.dtype, out.element_size())
        kernel_fills = width == out.element_size()  # else (complex128) torch fills, the kernel moves bytes
        first = self.mask_boundary_labels and key in self.label_keys
        if not kernel_fills:
            out.fill_(self._fill_value(key))
        row = math.prod(src.rest) * out.element_size() // width
        place_pieces(
            src.ptrs,
            src.strides,
            src.lengths,
            packed.indices,
            packed.starts,
            packed.sizes,
            dst,
            out.data_ptr(),
            B * T,
            row,
            width,
            bits,
            first and kernel_fills,
            kernel_fills,
        )
        if first and not kernel_fills:
            out.view(B * T, -1).index_fill_(0, torch.from_numpy(dst[packed.sizes > 0]), self._fill_value(key))
        return out

    def _fill_value(self, key: str):
        return self._fills.fill_for(key)

    def _fill_of(self, key: str, dtype: torch.dtype, itemsize: int) -> tuple[int, int]:
        """``(bits, width)`` of ``key``'s pad value in ``dtype`` for the copy kernel
        (width 1 and bits 0 for elements it does not fill); errors name the key."""
        got = self._bits.get((key, dtype))
        if got is None:
            fill = self._fill_value(key)
            try:
                if dtype.is_floating_point and dtype.itemsize <= 2 and dtype not in (torch.float16,):
                    got = torch_fill_bits(fill, dtype), itemsize
                else:
                    np_dtype = torch.empty(0, dtype=dtype).numpy().dtype
                    if itemsize in (1, 2, 4, 8):
                        got = fill_bits(fill, np_dtype), itemsize
                    else:  # checked here, filled by torch
                        check_fill(fill, np_dtype)
                        got = 0, 1
            except (TypeError, ValueError) as e:  # a fill the dtype cannot hold
                raise type(e)(f"pad value {fill!r} for key {key!r}: {e}") from None
            self._bits[key, dtype] = got
        return got

    def _mask(self, segment_ids: torch.Tensor) -> torch.Tensor:
        """The asked-for mask: a query and a key attend when they share a segment
        (padding attends to the padding of its row, so no softmax row is empty)."""
        allowed = segment_ids[:, :, None] == segment_ids[:, None, :]
        if self.causal:
            T = segment_ids.shape[1]
            allowed &= torch.ones(T, T, dtype=torch.bool).tril_()
        if self.attention_mask == "block":
            return allowed
        additive = torch.zeros(allowed.shape, dtype=self.mask_dtype)
        return additive.masked_fill_(~allowed, torch.finfo(self.mask_dtype).min)[:, None]

    def _count(self, out: dict, packed: PackedBatch) -> None:
        """The batch's real and padded elements per token key: into ``self.stats``, and
        into ``out`` with ``return_stats``."""
        tokens = int(packed.sizes.sum())
        shapes = [(k, tuple(v.shape)) for k, v in out.items()]
        real = sum(tokens * math.prod(shape[2:]) for _, shape in shapes)
        total = sum(math.prod(shape) for _, shape in shapes)
        self.stats.add(real, total, shapes)
        if self.return_stats:
            out[STATS_KEY] = batch_counts(real, total, shapes)


def collate_packed(samples: Sequence, shapes, **options) -> dict:
    """``PackedCollate(shapes, **options)(samples)``: one batch, without keeping a collate.

    >>> collate_packed([[5, 6, 7], [8, 9]], [(1, 8)])["segment_ids"].tolist()
    [[1, 1, 1, 2, 2, 0, 0, 0]]
    """
    return PackedCollate(shapes, **options)(samples)


# ----------------------------------------------------------------------------- reading the samples


class _Source(NamedTuple):
    """One token key's samples as the copy kernel reads them: sample ``i`` has
    ``lengths[i]`` rows of ``rest`` elements at ``ptrs[i]``, ``strides[i]`` bytes apart;
    ``owner`` keeps that memory alive."""

    ptrs: np.ndarray
    strides: np.ndarray
    lengths: np.ndarray
    dtype: torch.dtype
    rest: tuple
    owner: Any


def _is_token_leaf(v) -> bool:
    if isinstance(v, torch.Tensor):
        return v.dim() >= 1
    if isinstance(v, np.ndarray):
        return v.ndim >= 1
    return isinstance(v, (list, tuple))


def _columns(samples: Sequence) -> tuple[dict, dict]:
    """``({token key: column}, {other key: column})``; a column holds the key's value
    in every sample."""
    s0 = samples[0]
    if not isinstance(s0, Mapping):
        _check_bare(s0, 0)
        return {_DEFAULT_KEY: list(samples)}, {}
    try:
        keys, columns = mapping_columns(samples if type(samples) is list else list(samples))
    except (KeyError, TypeError, IndexError):
        _raise_mismatch(samples)
        raise
    tokens, others = {}, {}
    for key, column in zip(keys, columns):
        (tokens if _is_token_leaf(column[0]) else others)[key] = column
    if not tokens:
        raise ValueError(f"sample 0 has no token sequence (a 1-D array, tensor or list); got keys {keys}")
    return tokens, others


def _check_bare(s, i: int) -> None:
    """``TypeError`` unless ``s`` is one bare token sequence (not a dict, scalar or a
    tuple of sequences)."""
    nested = isinstance(s, (list, tuple)) and s and isinstance(s[0], (torch.Tensor, np.ndarray, list, tuple))
    if not _is_token_leaf(s) or nested:
        raise TypeError(
            f"sample {i} should be a dict (e.g. {{'input_ids': ..., 'labels': ...}}) or one "
            f"1-D sequence of tokens, but got a {type(s).__name__}" + (" of sequences" if nested else "")
        )


def _raise_mismatch(samples: Sequence) -> None:
    """Name the first sample that is not a dict with sample 0's token keys."""
    keys = sorted(k for k, v in samples[0].items() if _is_token_leaf(v))
    for i, s in enumerate(samples):
        if not isinstance(s, Mapping):
            _check_bare(s, i)
            raise TypeError(f"sample {i} is a {type(s).__name__}, but sample 0 is a dict")
        mine = sorted(k for k, v in s.items() if _is_token_leaf(v))
        if mine != keys:
            raise KeyError(f"sample {i} has token keys {mine}, but sample 0 has {keys}")


def _token_source(column: list, key: str) -> _Source:
    """Where one token key's values lie: 1-D CPU tensors of one dtype are read in
    place (one native call); anything else is concatenated first
    (:func:`dyntile.concat_rows`, whose dtype rules apply)."""
    x0 = column[0]
    if type(x0) is torch.Tensor and x0.dim() == 1:
        rows = describe_rows(column)
        if rows is not None:
            shapes, strides, ptrs, _, _ = rows
            return _Source(ptrs, strides.reshape(-1), shapes.reshape(-1), x0.dtype, (), column)
    check_one_dtype(column, key)  # DynTileCollate's rule: no promotion across samples
    try:
        values, lens = concat_rows(column)
    except (TypeError, ValueError) as e:
        raise type(e)(f"key {key!r}: {e}") from None
    values = torch.from_numpy(values) if isinstance(values, np.ndarray) else values.contiguous()
    lens = np.asarray(lens, dtype=np.int64)
    row_bytes = values.element_size() * math.prod(values.shape[1:])
    ptrs = (values.data_ptr() + (np.cumsum(lens) - lens) * row_bytes).astype(np.intp)
    return _Source(
        ptrs, np.full(lens.size, row_bytes, np.int64), lens, values.dtype, tuple(values.shape[1:]), values
    )


def _common_lengths(sources: dict) -> np.ndarray:
    """The samples' lengths, the same under every token key (``ValueError`` naming the
    first sample where they differ)."""
    lengths = None
    for src in sources.values():
        if lengths is None:
            lengths = src.lengths
        elif not np.array_equal(src.lengths, lengths):
            i = int(np.flatnonzero(src.lengths != lengths)[0])
            got = {k: int(s.lengths[i]) for k, s in sources.items()}
            raise ValueError(f"sample {i}: token keys should have one length, but got {got}")
    return np.ascontiguousarray(lengths, dtype=np.int64)


def _check_all_ones(masks: list) -> None:
    """``ValueError`` naming the first sample whose own ``attention_mask`` hides a token:
    packing takes unpadded samples, and the segments keep them apart."""
    for i, m in enumerate(masks):
        m = np.asarray(m.cpu() if isinstance(m, torch.Tensor) else m)
        if not m.all():
            raise ValueError(
                f"sample {i} has attention_mask 0 at position {int(np.argmin(m != 0))}: packing takes "
                f"unpadded samples (tokenize with padding=False, or drop the padding first)"
            )


def _stack_leaf(values: list, key: str):
    """Per-sample values of a non-token key: a tensor for numbers and 0-d arrays or
    tensors, else the list as it is (strings, None, mixed); ints past int64 are refused,
    as :class:`~loaders.collate.DynTileCollate` refuses them."""
    check_ints_fit(values, key)
    if all(isinstance(v, torch.Tensor) and v.dim() == 0 for v in values):
        return torch.stack(values)
    if all(
        isinstance(v, (numbers.Number, np.generic)) or (isinstance(v, np.ndarray) and v.ndim == 0)
        for v in values
    ):
        try:
            return torch.as_tensor(np.asarray(values))
        except (TypeError, ValueError):
            pass
    return values


def _check_mask(attention_mask, mask_dtype) -> str | None:
    """``attention_mask`` as one of :data:`ATTENTION_MASKS` (``True`` reads as ``"block"``)."""
    if attention_mask is True:
        return "block"
    if attention_mask is False:
        return None
    if attention_mask not in ATTENTION_MASKS:
        raise ValueError(f"attention_mask should be one of {ATTENTION_MASKS}, but got {attention_mask!r}")
    if attention_mask == "additive" and not (
        isinstance(mask_dtype, torch.dtype) and mask_dtype.is_floating_point
    ):
        raise TypeError(
            f"attention_mask='additive' needs a floating mask_dtype (the model's), but got {mask_dtype}"
        )
    return attention_mask
