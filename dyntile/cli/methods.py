"""The four ways the demo batches a corpus, each a ``batch_sampler`` + ``collate_fn`` pair.

Every collate returns ``[B, T]`` int64 ``input_ids`` and ``position_ids`` and integer
``segment_ids`` (0 = padding, ``k >= 1`` = k-th sequence of a row), the input of
:class:`~dyntile.cli.model.TinyTransformer`:

* ``random``  -- shuffled greedy token-budget batches, ``pad_sequence`` to the batch max;
* ``sorted``  -- the same from length-sorted pools;
* ``buckets`` -- dyntile's plan, ``loaders.BucketBatchSampler`` + ``loaders.DynTileCollate``;
* ``packing`` -- ``loaders.PackingBatchSampler`` + ``loaders.PackedCollate(sampler)``, rows of the length
  :func:`dyntile.planning.choose_seq_len` picks for the method's attention; with
  ``stream=True``, ``loaders.StreamingPacker`` over a stream of the corpus instead
  (:class:`StreamBatching`: the row length from the stream's first samples).

Each method trains with an attention (:data:`~dyntile.cli.model.ATTENTIONS`): by
default (:data:`DEFAULT_ATTENTION`) the baselines keep what a user has without dyntile
(SDPA with the padding mask), dyntile's rows use :func:`dyntile.varlen_attention`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from dyntile.cli.baselines import BudgetBatchSampler, pad_sequence_collate
from dyntile.cli.corpus import Corpus
from dyntile.shapes import round_up

__all__ = [
    "METHODS",
    "LABELS",
    "DEFAULT_ATTENTION",
    "Batching",
    "StreamBatching",
    "TokenDataset",
    "build_batching",
]

METHODS = ("random", "sorted", "buckets", "packing")
LABELS = {
    "random": "random + pad_sequence",
    "sorted": "sorted pools + pad_sequence",
    "buckets": "dyntile buckets",
    "packing": "dyntile packing",
}
DEFAULT_ATTENTION = {"random": "dense", "sorted": "dense", "buckets": "varlen", "packing": "varlen"}


class TokenDataset(torch.utils.data.Dataset):
    """Map-style dataset over a :class:`Corpus`: item ``i`` is ``{"input_ids": int64 (L_i,)}``."""

    def __init__(self, corpus: Corpus):
        self.corpus = corpus

    def __len__(self) -> int:
        return len(self.corpus)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": torch.from_numpy(self.corpus.sequence(i))}


@dataclass(frozen=True)
class Batching:
    """A batching method: ``batch_sampler`` and ``collate_fn`` for a ``DataLoader``.

    ``dynamic``: what the method tells ``torch.compile`` about its shapes. ``None``
    for the baselines (torch's default: a static graph, then a dynamic recompile at
    the first new shape); ``False`` for dyntile (the plan bounds the shapes: one
    static graph per bucket, or per packed shape).
    """

    name: str
    batch_sampler: torch.utils.data.Sampler
    collate_fn: Callable[[list], dict]
    dynamic: bool | None = None
    attention: str = "dense"
    #: the row length choice of packed batches (:class:`dyntile.planning.SeqLenChoice`), else None
    packing: object = None

    @property
    def label(self) -> str:
        return LABELS[self.name]

    def loader(self, dataset: TokenDataset) -> torch.utils.data.DataLoader:
        """A single-process ``DataLoader`` (the demo runs on small machines)."""
        return torch.utils.data.DataLoader(
            dataset, batch_sampler=self.batch_sampler, collate_fn=self.collate_fn
        )


def pack_seq_len(lengths: np.ndarray, pack_len: int | None, max_tokens: int, multiple: int = 8) -> int:
    """Row length ``T`` of packed batches for an explicit ``--pack-len`` (``None``: the
    longest sample), no longer than the longest sample needs, within the budget.

    >>> pack_seq_len(np.array([3, 40]), 512, 4096), pack_seq_len(np.array([3, 900]), 512, 4096)
    (40, 512)
    >>> pack_seq_len(np.array([3, 900]), None, 4096)
    904
    """
    longest = round_up(int(lengths.max()), multiple)
    wanted = longest if pack_len is None else round_up(pack_len, multiple)
    return min(wanted, longest, max_tokens // multiple * multiple)


def build_batching(
    name: str,
    corpus: Corpus,
    plan,
    *,
    max_tokens: int,
    pack_len: int | None,
    seed: int,
    pack_overflow: str = "extend",
    attention: str | None = None,
    d_model: int = 64,
    stream: bool = False,
) -> Batching:
    """Fresh sampler + collate for method ``name`` (one of :data:`METHODS`), trained with
    ``attention`` (default :data:`DEFAULT_ATTENTION`); ``d_model`` weighs attention in
    the packed row length's cost; ``stream``: packing streams the corpus."""
    if name not in METHODS:
        raise ValueError(f"method should be one of {METHODS}, but got {name!r}")
    lengths = corpus.lengths
    attention = DEFAULT_ATTENTION[name] if attention is None else attention
    if name in ("random", "sorted"):
        return Batching(
            name,
            BudgetBatchSampler(lengths, max_tokens, order=name, seed=seed),
            pad_sequence_collate,
            attention=attention,
        )
    from loaders import BucketBatchSampler, DynTileCollate, PackedCollate, PackingBatchSampler

    if name == "buckets":
        # batch_multiple=1: every bucket uses the whole token budget, like the baselines
        sampler = BucketBatchSampler(
            lengths, plan=plan, max_tokens=max_tokens, batch_multiple=1, shuffle=True, seed=seed
        )
        # bucket_rows: a bucket's last, partial batch keeps the bucket's shape (empty rows)
        collate = DynTileCollate(plan=plan, pad_values={"input_ids": 0}, bucket_rows=sampler.batch_sizes)
        return Batching(name, sampler, _BucketCollate(collate), dynamic=False, attention=attention)
    if name == "packing" and stream:
        return _stream_batching(corpus, plan, max_tokens, pack_len, seed, pack_overflow, attention, d_model)
    if name == "packing":
        seq_len, choice = _packing_seq_len(
            lengths, lengths, pack_len, max_tokens, plan.multiple, pack_overflow, attention, d_model
        )
        sampler = PackingBatchSampler(
            lengths, max_tokens=max_tokens, seq_len=seq_len, overflow=pack_overflow, seed=seed
        )
        return Batching(
            name,
            sampler,
            _PackedCollate(PackedCollate(sampler)),
            dynamic=False,
            attention=attention,
            packing=choice,
        )
    raise ValueError(f"method should be one of {METHODS}, but got {name!r}")


class _Steps:
    """A stream's batch count and shapes, where the demo reads a batch sampler's."""

    def __init__(self, shapes, n: int):
        self.shapes, self._n = shapes, n

    def __len__(self) -> int:
        return self._n


class _SizedLoader:
    """A ``DataLoader`` over an ``IterableDataset``, with the stream's batch count as ``len``."""

    def __init__(self, loader, n: int):
        self.loader, self._n = loader, n

    def __iter__(self):
        return iter(self.loader)

    def __len__(self) -> int:
        return self._n


class _CorpusStream:
    """The corpus read in order, one sample after another, as a stream source."""

    def __init__(self, corpus: Corpus):
        self.dataset = TokenDataset(corpus)

    def __iter__(self):
        return (self.dataset[i] for i in range(len(self.dataset)))


@dataclass(frozen=True)
class StreamBatching(Batching):
    """The packing method over a stream of the corpus: ``loaders.StreamingPacker`` in a
    ``DataLoader(batch_size=None)``; ``batch_sampler`` holds its shapes and batch count."""

    packer: object = None
    #: the samples the row length was chosen on: the stream's first, before the rest is read
    probed: int = 0

    @property
    def label(self) -> str:
        return LABELS[self.name] + " (stream)"

    def loader(self, dataset: TokenDataset):
        dl = torch.utils.data.DataLoader(self.packer, batch_size=None, collate_fn=self.collate_fn)
        return _SizedLoader(dl, len(self.batch_sampler))


def _packing_seq_len(seen, lengths, pack_len, max_tokens, multiple, overflow, attention, d_model):
    """``(seq_len, choice)``: the row length that costs least on the lengths ``seen`` so far
    (``choice``: :func:`~dyntile.planning.choose_seq_len`'s answer), or ``--pack-len``'s
    rule over ``lengths`` (``choice`` ``None``)."""
    if pack_len is not None:
        return pack_seq_len(lengths, pack_len, max_tokens, multiple), None
    from dyntile.planning import choose_seq_len

    options = dict(max_tokens=max_tokens, multiple=multiple, overflow=overflow, attention=attention)
    choice = choose_seq_len(seen, d_model=d_model, **options)
    return choice.seq_len, choice


def _stream_batching(
    corpus, plan, max_tokens, pack_len, seed, overflow, attention, d_model
) -> StreamBatching:
    """Packing over a stream of the corpus: the row length from the stream's first
    ``buffer_size`` samples (or ``--pack-len``); long rows as long as the corpus's longest
    sample (a stream without that knowledge takes the budget's, or ``max_len=``)."""
    from loaders import PackedCollate, StreamingPacker

    lengths, buffer_size = corpus.lengths, 4096
    seq_len, choice = _packing_seq_len(
        lengths[:buffer_size], lengths, pack_len, max_tokens, plan.multiple, overflow, attention, d_model
    )
    packer = StreamingPacker(
        _CorpusStream(corpus),
        max_tokens=max_tokens,
        buffer_size=buffer_size,
        seq_len=seq_len,
        max_len=int(lengths.max()),
        multiple=plan.multiple,
        overflow=overflow,
        seed=seed,
    )
    n = sum(1 for _ in packer)  # the planning alone, for the table's batch count
    collate = _PackedCollate(PackedCollate(packer))
    return StreamBatching(
        "packing",
        _Steps(packer.shapes, n),
        collate,
        dynamic=False,
        attention=attention,
        packing=choice,
        packer=packer,
        probed=min(buffer_size, len(lengths)),
    )


class _BucketCollate:
    """``DynTileCollate`` pads ``input_ids`` to the bucket and, through ``bucket_rows``,
    to the bucket's row count (one shape per bucket); segment ids are its mask."""

    def __init__(self, collate):
        self.collate = collate
        self._positions: dict = {}  # (B, T) -> its position ids: a plan has a few shapes

    def __call__(self, samples: list[dict]) -> dict[str, torch.Tensor]:
        out = self.collate(samples)
        ids = out["input_ids"]
        positions = self._positions.get(ids.shape)
        if positions is None:
            positions = self._positions[ids.shape] = torch.arange(ids.shape[1]).expand_as(ids).contiguous()
        return {"input_ids": ids, "position_ids": positions, "segment_ids": out["attention_mask"].long()}


class _PackedCollate:
    """``PackedCollate(sampler)`` lays samples end to end in ``[B, T]`` rows, segments per row."""

    def __init__(self, collate):
        self.collate = collate

    def __call__(self, samples: list[dict]) -> dict[str, torch.Tensor]:
        out = self.collate(samples)
        return {
            "input_ids": out["input_ids"],
            "position_ids": out["position_ids"],
            "segment_ids": out["segment_ids"],
        }
