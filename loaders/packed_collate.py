"""``collate_packed``: a list of samples -> one packed ``[B, T]`` batch and its segment metadata.

The samples arrive in the order a :class:`~loaders.packing_sampler.PackingBatchSampler`
yields them; :func:`dyntile.planning.packing.pack_rows` (the decoder of the packer
the sampler used) recovers the rows from their lengths, so the layout here is the
sampler's layout. Each ragged leaf takes one :func:`dyntile.concat_rows` (its samples
back to back) and one :func:`dyntile.pad_jagged`: the pieces lie back to back in
the rows, so the concatenated samples are the rows' contents without their tails.

Output (``n`` samples, ``B`` rows of ``T`` tokens; ``P`` pieces = samples, or chunks
of split samples):

* every token key: ``[B, T, *rest]`` (its pad value in empty slots);
* ``position_ids`` int64 ``[B, T]``: 0, 1, ... restarting at each sample (a split
  sample's later chunks continue its count); 0 on padding;
* ``segment_ids`` int32 ``[B, T]``: 1, 2, ... for the pieces of a row, in order;
  **0 on padding**. A zero-length sample takes a segment number no token carries;
* ``cu_seqlens`` int32 ``(S + 1,)``: boundaries of the segments of the flattened
  ``[B * T]`` token stream, as flash-attention's varlen kernels take them, from 0 to
  ``B * T``: every piece is a segment, and so is the padding at the end of each row
  (an empty row is one padding segment of ``T``), so the stream needs no unpadding;
  a zero-length sample shows up as a repeated value. ``max_seqlen`` (int): the
  longest of these segments;
* ``attention_mask`` (only with ``attention_mask=True``) bool ``[B, T, T]``:
  block diagonal, ``True`` where query and key are in the same segment (padding
  attends to the padding of its row, so no softmax row is empty); combine it with
  a causal mask for decoders;
* ``lengths`` int64 ``(n,)``: each sample's length, in sample order; ``packing``:
  the :class:`~dyntile.planning.packing.PackedBatch` (row and offset of each piece).

Label keys (``label_keys``, default ``("labels",)``; pad value -100 unless
``pad_values`` names another): with ``mask_boundary_labels=True`` the label of the
*first token of every piece* is set to that pad value too, so that a model shifting
labels by one (logit ``t`` predicts label ``t + 1``) never learns to predict a
sample's first token from its neighbour's last.

A key the samples bring themselves (their own ``position_ids``, say) is kept: the
output of that name is not computed; but ``attention_mask=True`` always gives the
block-diagonal mask (a tokenizer's own ``attention_mask`` of ones would let packed
samples attend to each other).
"""
from __future__ import annotations

import numbers
import operator
from collections.abc import Mapping
from typing import Any, Sequence

import numpy as np
import torch

from dyntile import concat_rows, pad_jagged
from dyntile.cpu.packing import packed_layout
from dyntile.planning.packing import PackedBatch, pack_rows

__all__ = ["collate_packed"]

_DEFAULT_KEY = "input_ids"
IGNORE_INDEX = -100


def _is_token_leaf(v) -> bool:
    if isinstance(v, torch.Tensor):
        return v.dim() >= 1
    if isinstance(v, np.ndarray):
        return v.ndim >= 1
    return isinstance(v, (list, tuple))


def _split_sample(s, i: int, token_keys: list | None):
    """``(token leaves, other leaves)`` of sample ``i`` (a dict, or one bare sequence)."""
    if type(s) is not dict and not isinstance(s, Mapping):
        if not _is_token_leaf(s) or (isinstance(s, (list, tuple)) and s
                                     and isinstance(s[0], (torch.Tensor, np.ndarray, list, tuple))):
            raise TypeError(f"sample {i} should be a dict (e.g. {{'input_ids': ..., 'labels': ...}}) or one "
                            f"1-D sequence of tokens, but got a {type(s).__name__}"
                            + (" of sequences" if isinstance(s, (list, tuple)) and s else ""))
        return {_DEFAULT_KEY: s}, {}
    tokens, other = {}, {}
    for k, v in s.items():
        (tokens if _is_token_leaf(v) else other)[k] = v
    if token_keys is not None and sorted(tokens) != token_keys:
        raise KeyError(f"sample {i} has token keys {sorted(tokens)}, but sample 0 has {token_keys}")
    if not tokens:
        raise ValueError(f"sample {i} has no token sequence (a 1-D array, tensor or list); got keys {list(s)}")
    return tokens, other


def _token_columns(samples: Sequence):
    """The common case, read with C-level loops: dicts whose values are all token
    sequences (lists, arrays, tensors) under one set of keys. ``(keys, columns)``, or
    ``None``: the general path then reads (and checks) the samples one by one."""
    s0 = samples[0]
    if type(s0) is not dict or not s0 or not all(map(_is_token_leaf, s0.values())):
        return None
    keys = sorted(s0)
    try:
        columns = [list(map(operator.itemgetter(k), samples)) for k in keys]
        if sum(map(len, samples)) != len(keys) * len(samples):
            return None
    except (KeyError, TypeError):
        return None
    return keys, columns


def _flat_tokens(keys: list, columns: list) -> tuple[dict, list]:
    """``({key: values tensor (N, *rest)}, lengths)``: each key's samples back to back
    (:func:`dyntile.concat_rows`), every key with the same length per sample."""
    flats, lens_of = {}, {}
    for key, column in zip(keys, columns):
        try:
            values, lens = concat_rows(column)
        except (TypeError, ValueError) as e:
            raise type(e)(f"key {key!r}: {e}") from None
        flats[key] = torch.from_numpy(values) if isinstance(values, np.ndarray) else values
        lens_of[key] = lens.tolist()
    lengths = lens_of[keys[0]]
    for key in keys[1:]:
        if lens_of[key] != lengths:
            i = next(i for i, (a, b) in enumerate(zip(lens_of[key], lengths)) if a != b)
            raise ValueError(f"sample {i}: token keys should have one length, but got "
                             f"{ {k: lens[i] for k, lens in lens_of.items()} }")
    return flats, lengths


def _row_fill(packed: PackedBatch) -> np.ndarray:
    """int64 ``(B,)``: tokens in each row. :func:`pack_rows` lays the pieces out back
    to back in sample order (rows in order, offsets 0, size, ...), so the samples'
    tokens, concatenated, are the rows' contents without their padding tails."""
    return np.bincount(packed.rows, weights=packed.sizes, minlength=packed.shape[0]).astype(np.int64)


def _scatter_rows(flat, slots: np.ndarray, shape: tuple, fill: int):
    """A 1-D integer tensor's tokens into a new ``shape`` tensor at ``slots`` of its flat
    view, ``fill`` elsewhere (one ``index_copy_``); ``None`` for the cases
    :func:`dyntile.pad_jagged` handles (arrays, other dtypes, extra axes)."""
    if not isinstance(flat, torch.Tensor) or flat.dim() != 1 or flat.dtype not in _SCATTER_DTYPES:
        return None
    info = torch.iinfo(flat.dtype)
    if not info.min <= fill <= info.max:
        return None                          # pad_jagged names the fill the dtype cannot hold
    dense = flat.new_full(shape, fill)
    dense.view(-1).index_copy_(0, torch.from_numpy(slots), flat)
    return dense


_SCATTER_DTYPES = (torch.int64, torch.int32)


def collate_packed(samples: Sequence, shapes, *, overflow: str = "second_shape",
                   pad_values: Mapping[str, Any] | None = None, label_keys: Sequence[str] = ("labels",),
                   mask_boundary_labels: bool = True, attention_mask: bool = False) -> dict:
    """Pack ``samples`` (the order a packing sampler yielded them) into ``[B, T]`` tensors.

    ``samples``: dicts whose 1-D (or ``(L, *rest)``) arrays / tensors / lists are the
    token keys (one length per sample), other leaves are stacked per sample; or bare
    1-D sequences (key ``"input_ids"``). ``shapes``: the sampler's ``shapes`` (one or
    two ``(B, T)``); ``overflow``: the sampler's. ``pad_values``: fill per key
    (default 0, -100 for label keys). Use as ``collate_fn=functools.partial(collate_packed,
    shapes=sampler.shapes, overflow=sampler.overflow)``. See the module docstring for the
    outputs.

    >>> out = collate_packed([[5, 6, 7], [8, 9]], [(2, 8)])
    >>> out["input_ids"].tolist()[0], out["position_ids"].tolist()[0]
    ([5, 6, 7, 8, 9, 0, 0, 0], [0, 1, 2, 0, 1, 0, 0, 0])
    >>> out["segment_ids"].tolist()[0], out["cu_seqlens"].tolist()
    ([1, 1, 1, 2, 2, 0, 0, 0], [0, 3, 5, 8, 16])
    """
    if len(samples) == 0:
        raise ValueError("collate_packed needs at least one sample, but got an empty batch")
    pad_values = dict(pad_values or {})
    label_keys = tuple(label_keys)
    fast = _token_columns(samples)
    if fast is not None:
        (keys, columns), split = fast, None
    else:
        split = [_split_sample(samples[0], 0, None)]
        keys = sorted(split[0][0])
        split += [_split_sample(s, i, keys) for i, s in enumerate(samples[1:], 1)]
        columns = [[tok[key] for tok, _ in split] for key in keys]
    flats, lengths = _flat_tokens(keys, columns)
    lengths = np.array(lengths, dtype=np.int64)
    packed = pack_rows(lengths, shapes, overflow=overflow)
    B, T = packed.shape
    used = _row_fill(packed)
    rows = used.tolist()
    starts = packed.rows * T + packed.offsets          # each piece's first slot in [B * T]
    boundaries = torch.from_numpy(starts[packed.sizes > 0])

    position, segment, cu, longest, slots = packed_layout(packed.rows, packed.offsets, packed.sizes, packed.starts,
                                                          B, T)
    out: dict[str, Any] = {}
    for key in keys:
        fill = pad_values.get(key, IGNORE_INDEX if key in label_keys else 0)
        try:
            dense = _scatter_rows(flats[key], slots, (B, T), fill) if type(fill) is int else None
            if dense is None:
                dense, _ = pad_jagged(flats[key], rows, shape=(T,), fill=fill)
        except (TypeError, ValueError) as e:                       # a fill the dtype cannot hold
            raise type(e)(f"pad value {fill!r} for key {key!r}: {e}") from None
        if key in label_keys and mask_boundary_labels:
            dense.view(B * T, *dense.shape[2:]).index_fill_(0, boundaries, fill)
        out[key] = dense

    segment_ids = torch.from_numpy(segment)
    others = sorted({k for _, o in split or () for k in o})
    computed = {"position_ids": torch.from_numpy(position), "segment_ids": segment_ids,
                "cu_seqlens": torch.from_numpy(cu), "max_seqlen": int(longest), "lengths": torch.from_numpy(lengths)}
    out.update((k, v) for k, v in computed.items() if k not in out and k not in others)  # a sample's key is kept
    for key in others:
        out[key] = _stack_leaf([o.get(key) for _, o in split])
    if attention_mask:                 # asked for: the block mask, even over a tokenizer's own mask of ones
        out["attention_mask"] = segment_ids[:, :, None] == segment_ids[:, None, :]
    out["packing"] = packed
    return out


def _stack_leaf(values: list):
    """Per-sample values of a non-token key: a tensor for numbers and 0-d arrays or
    tensors, else the list as it is (strings, None, mixed)."""
    if all(isinstance(v, torch.Tensor) and v.dim() == 0 for v in values):
        return torch.stack(values)
    if all(isinstance(v, (numbers.Number, np.generic)) or (isinstance(v, np.ndarray) and v.ndim == 0)
           for v in values):
        try:
            return torch.as_tensor(np.asarray(values))
        except (TypeError, ValueError):
            pass
    return values
