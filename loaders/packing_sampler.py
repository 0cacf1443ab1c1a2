"""``PackingBatchSampler``: whole samples packed end to end in fixed ``[B, T]`` batches.

Each step yields the sample indices of one batch of ``B`` rows of ``T`` tokens, in
the order :func:`dyntile.planning.packing.pack_lengths` lists them (each row's
first sample first). The collate (:func:`loaders.packed_collate.collate_packed`)
recovers the rows from the lengths it receives by calling
:func:`dyntile.planning.packing.pack_rows`, the decoder of the same packer, so
sampler and collate always agree on the layout.

The epoch's batches are a pure function of ``(lengths, shapes, seed, epoch,
num_replicas)``: every rank builds the same list and takes batch ``rank`` of every
step; a resumed run rebuilds it and skips by slicing (nothing is replayed).

Remainder handling: every sample is yielded exactly once per epoch, on exactly one
rank; nothing is repeated or dropped. The number of batches of each shape is
rounded up to a multiple of ``num_replicas`` and rows are spread evenly over the
batches, so some batches hold fewer than ``B`` rows (the collate pads the missing
rows); all ranks get the same number of batches and the same shape at every step.
"""
from __future__ import annotations

import operator
from typing import Iterator

import numpy as np
import torch.utils.data

from dyntile.planning.packing import PackedBatch, pack_lengths, packing_shapes

from .distributed import resolve_replicas

__all__ = ["PackingBatchSampler"]

_STATE_KEYS = ("epoch", "seed", "batches_yielded", "num_replicas", "num_samples")


class PackingBatchSampler(torch.utils.data.Sampler):
    """A ``batch_sampler`` of packed batches: ``B`` rows of ``T`` tokens each step.

    ``lengths``: int ``(n,)``, tokens per sample of the dataset. The budget is
    ``max_tokens`` per batch (or ``batch_rows``); ``seq_len`` (``T``) defaults to the
    longest sample rounded up to ``multiple`` (or ``plan``'s largest boundary),
    capped by the budget. Samples longer than ``T`` follow ``overflow``
    (``"second_shape"``, ``"split"`` or ``"error"``, see
    :mod:`dyntile.planning.packing`). :attr:`shapes` lists the batch shapes
    (one or two ``(B, T)``); pass them to the collate. Deterministic per ``seed``
    and epoch (:meth:`set_epoch`); resumable (:meth:`state_dict`);
    ``num_replicas``/``rank`` default to ``torch.distributed``.

    >>> sampler = PackingBatchSampler([5, 3, 6, 2, 7, 1], max_tokens=16, seed=0)
    >>> sampler.shapes, len(sampler), sorted(i for b in sampler for i in b)
    (((2, 8),), 2, [0, 1, 2, 3, 4, 5])
    """

    def __init__(self, lengths, *, max_tokens: int | None = None, seq_len: int | None = None,
                 batch_rows: int | None = None, multiple: int = 8, overflow: str = "second_shape",
                 pool_size: int | None = 65536, shuffle: bool = True, seed: int = 0, plan=None,
                 num_replicas: int | None = None, rank: int | None = None):
        self.lengths = np.asarray(lengths)
        self._shape_args = dict(seq_len=seq_len, max_tokens=max_tokens, batch_rows=batch_rows,
                                multiple=multiple, overflow=overflow, plan=plan)
        self.shapes = packing_shapes(self.lengths, **self._shape_args)
        self.lengths = self.lengths.astype(np.int64)
        self.overflow = overflow
        self.pool_size = pool_size
        self.shuffle = bool(shuffle)
        self.seed = _check_seed(seed)
        self.num_replicas, self.rank = resolve_replicas(num_replicas, rank)
        self.epoch = 0
        self._yielded = 0
        self._loaded = False
        self._cache: tuple[int, list[PackedBatch]] | None = None

    # ---- epoch construction

    def packed_batches(self, epoch: int | None = None) -> list[PackedBatch]:
        """Every rank's :class:`PackedBatch` of ``epoch`` (default: the current one), in step order."""
        epoch = self.epoch if epoch is None else operator.index(epoch)
        if self._cache is None or self._cache[0] != epoch:
            packed = pack_lengths(self.lengths, **self._shape_args, pool_size=self.pool_size,
                                  shuffle=self.shuffle, seed=self.seed, epoch=epoch,
                                  num_replicas=self.num_replicas)
            self._cache = (epoch, packed)
        return self._cache[1]

    def batches(self, epoch: int | None = None) -> list[list[int]]:
        """This rank's batches of ``epoch``: lists of sample indices, in order."""
        packed = self.packed_batches(epoch)
        return [b.sample_order.tolist() for b in packed[self.rank::self.num_replicas]]

    # ---- Sampler protocol

    def __iter__(self) -> Iterator[list[int]]:
        batches = self.batches()
        # continue a partial pass (or a loaded state); after a finished pass, replay the epoch
        start = self._yielded if self._yielded < len(batches) or self._loaded else 0
        self._loaded = False
        self._yielded = start
        for batch in batches[start:]:
            self._yielded += 1
            yield batch

    def __len__(self) -> int:
        """Batches of the current epoch on this rank (the same on every rank; may vary by epoch)."""
        return len(self.packed_batches()) // self.num_replicas

    def set_epoch(self, epoch: int) -> None:
        """Use ``epoch``'s packing next; a new epoch restarts from its first batch."""
        epoch = operator.index(epoch)
        if epoch != self.epoch:
            self._yielded = 0
            self._loaded = False
        self.epoch = epoch

    # ---- checkpointing

    def state_dict(self, batches_done: int | None = None) -> dict:
        """Position in the epoch: ``epoch``, ``seed``, ``batches_yielded`` (and checks).

        A ``DataLoader`` with workers draws batches ahead of the training loop; pass
        ``batches_done`` (batches the loop consumed this epoch) to save that position.
        """
        done = self._yielded if batches_done is None else operator.index(batches_done)
        if not 0 <= done <= len(self):
            raise ValueError(f"batches_done should be in [0, {len(self)}], but got {done}")
        return {"epoch": self.epoch, "seed": self.seed, "batches_yielded": done,
                "num_replicas": self.num_replicas, "num_samples": len(self.lengths)}

    def load_state_dict(self, state: dict) -> None:
        """Resume from :meth:`state_dict`: the next iteration continues where it stopped."""
        missing = [k for k in _STATE_KEYS if k not in state]
        if missing:
            raise KeyError(f"sampler state is missing keys {missing}; expected the keys of state_dict(): {_STATE_KEYS}")
        for key, mine in (("num_replicas", self.num_replicas), ("num_samples", len(self.lengths))):
            if state[key] != mine:
                raise ValueError(f"sampler state was saved with {key}={state[key]}, but this sampler has "
                                 f"{key}={mine}; the epoch's batches would differ")
        self.seed = _check_seed(state["seed"])
        self.epoch = operator.index(state["epoch"])
        done = operator.index(state["batches_yielded"])
        if not 0 <= done <= len(self):
            raise ValueError(f"batches_yielded should be in [0, {len(self)}], but got {done}")
        self._yielded = done
        self._loaded = True


def _check_seed(seed) -> int:
    s = operator.index(seed)
    if s < 0:
        raise ValueError(f"seed should be a non-negative integer, but got {s}")
    return s
