"""``PackingBatchSampler``: whole samples packed end to end in fixed ``[B, T]`` batches.

Each step yields the sample indices of one batch of ``B`` rows of ``T`` tokens, in
the order :func:`dyntile.planning.packing.pack_lengths` lists them (each row's
first sample first). The collate (:class:`loaders.packed_collate.PackedCollate`)
recovers the rows from the lengths it receives by calling
:func:`dyntile.planning.packing.pack_rows`, the decoder of the same packer, so
sampler and collate always agree on the layout.

The epoch's batches are a pure function of ``(lengths, shapes, seed, epoch,
num_replicas)``: every rank builds the same list and takes batch ``rank`` of every
step; a resumed run rebuilds it and skips by slicing (nothing is replayed).

Remainder handling (as :class:`loaders.sampler.BucketBatchSampler`): all ranks get
the same number of batches and the same shape at every step. The number of batches
of each shape is rounded up to a multiple of ``num_replicas`` and rows are spread
evenly over them, so some batches hold fewer than ``B`` rows (the collate pads the
missing rows). Every sample is yielded at least once per epoch; when a shape has too
few samples for that many batches (e.g. 6 samples that each need a ``[1, T2]``
batch, on 4 ranks), at most ``num_replicas - 1`` samples of that shape are repeated
in the epoch, none for a single process; see :mod:`dyntile.planning.packing`. So the
count may vary by epoch (:meth:`PackingBatchSampler.__len__`), but no epoch fails:
bad arguments (empty ``lengths``, a ``pool_size`` that is not a positive integer, a
budget under one sample) are refused at construction.
"""

from __future__ import annotations

import operator

import numpy as np

from dyntile.planning.packing import PackedBatch, pack_into_shapes, packing_shapes
from dyntile.planning.packing_checks import check_budget, check_packing_overflow, check_pool_size
from dyntile.planning.packing_cost import RowCost, cost_model

from .epoch_sampler import EpochBatchSampler, layout_digest

__all__ = ["PackingBatchSampler"]


class PackingBatchSampler(EpochBatchSampler):
    """A ``batch_sampler`` of packed batches: ``B`` rows of ``T`` tokens each step.

    ``lengths``: int ``(n,)``, tokens per sample of the dataset. The budget is
    ``max_tokens`` per batch (or ``batch_rows``); ``seq_len`` (``T``) defaults to
    ``plan``'s largest boundary, else (with ``max_tokens``) to the row length of least
    training cost for the model's ``attention`` (``"varlen"``: a kernel that attends
    within segments; ``"dense"``: a ``[B, 1, T, T]`` mask over the whole row), counting
    slots, attention scores and steps (``causal``, ``d_model`` or
    ``attention_weight``, ``step_cost``: see :mod:`dyntile.planning.packing_cost`,
    whose ``choose_seq_len`` reports the cost; or all of them as one ``cost``, a
    :class:`~dyntile.planning.packing_cost.RowCost`, kept as :attr:`cost`), else to
    the longest sample rounded up to ``multiple``; capped by the budget. Samples longer
    than ``T`` follow ``overflow`` (``"extend"``: a second, longer shape; ``"split"``;
    ``"error"``: see :mod:`dyntile.overflow`). :attr:`shapes` lists the batch shapes
    (one or two ``(B, T)``); pass them to the collate. Deterministic per ``seed``
    and epoch (:meth:`set_epoch`); resumable (:meth:`state_dict`);
    ``num_replicas``/``rank`` default to ``torch.distributed``'s, read when iteration
    starts (``sampler``: a framework's distributed sampler whose ranks to take, see
    :func:`loaders.distributed.ranks_of_sampler`). ``pool_size``: samples
    sorted together before packing (``None``: the whole epoch). With several ranks a
    few samples may be repeated in an epoch (at most ``num_replicas - 1`` per shape,
    see the module docstring).

    >>> sampler = PackingBatchSampler([5, 3, 6, 2, 7, 1], max_tokens=16, seed=0)
    >>> sampler.shapes, len(sampler), sorted(i for b in sampler for i in b)
    (((2, 8),), 2, [0, 1, 2, 3, 4, 5])
    """

    def __init__(
        self,
        lengths,
        *,
        max_tokens: int | None = None,
        seq_len: int | None = None,
        batch_rows: int | None = None,
        multiple: int = 8,
        overflow: str = "extend",
        pool_size: int | None = 65536,
        shuffle: bool = True,
        seed: int = 0,
        plan=None,
        num_replicas: int | None = None,
        rank: int | None = None,
        sampler=None,
        cost: RowCost | None = None,
        **cost_options,
    ):
        self.lengths = np.asarray(lengths)
        overflow = check_packing_overflow(overflow)
        budget = check_budget(max_tokens, batch_rows)
        self.cost = cost_model(cost, max_tokens=budget, caller="PackingBatchSampler", **cost_options)
        self.shapes = packing_shapes(
            self.lengths,
            seq_len,
            max_tokens=max_tokens,
            batch_rows=batch_rows,
            multiple=multiple,
            overflow=overflow,
            plan=plan,
            cost=self.cost,
        )  # chosen once: every epoch packs into these shapes
        if self.lengths.size == 0:
            raise ValueError(f"lengths should be non-empty, but got shape {self.lengths.shape}")
        self.lengths = self.lengths.astype(np.int64)
        self.overflow = overflow
        self.pool_size = check_pool_size(pool_size)
        super().__init__(
            len(self.lengths),
            shuffle=shuffle,
            seed=seed,
            num_replicas=num_replicas,
            rank=rank,
            sampler=sampler,
        )
        self.layout = layout_digest(
            np.ascontiguousarray(self.lengths),
            [tuple(s) for s in self.shapes],
            overflow,
            self.pool_size,
            self.shuffle,
        )
        self._cache: tuple[tuple[int, int, int], list[PackedBatch]] | None = None

    # ---- epoch construction

    def packed_batches(self, epoch: int | None = None) -> list[PackedBatch]:
        """Every rank's :class:`PackedBatch` of ``epoch`` (default: the current one), in step order."""
        epoch = self.epoch if epoch is None else operator.index(epoch)
        key = (self.seed, epoch, self.num_replicas)
        if self._cache is None or self._cache[0] != key:
            packed = pack_into_shapes(
                self.lengths,
                self.shapes,
                overflow=self.overflow,
                pool_size=self.pool_size,
                shuffle=self.shuffle,
                seed=self.seed,
                epoch=epoch,
                num_replicas=key[2],
            )
            self._cache = (key, packed)
        return self._cache[1]

    def batches(self, epoch: int | None = None) -> list[list[int]]:
        """This rank's batches of ``epoch``: lists of sample indices, in order."""
        packed = self.packed_batches(epoch)
        R, rank = self.replicas()
        return [b.sample_order.tolist() for b in packed[rank::R]]

    def batches_in_epoch(self, epoch: int) -> int:
        """Batches of ``epoch`` on this rank (the count varies by epoch with the shuffle)."""
        return len(self.packed_batches(epoch)) // self.num_replicas

    def __len__(self) -> int:
        """Batches of the current epoch on this rank (the same on every rank; may vary by epoch)."""
        return len(self.packed_batches()) // self.num_replicas
