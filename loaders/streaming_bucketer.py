"""``StreamingBucketer``: a stream of samples in padded buckets, batch sizes from a token budget.

The streaming form of :class:`~loaders.sampler.BucketBatchSampler`, for
:class:`~loaders.collate.DynTileCollate`. The boundaries come from ``plan`` (a
:class:`~dyntile.planning.BucketPlan`) or are planned from the first ``probe_size``
samples of the source (:func:`dyntile.planning.plan_buckets`); each bucket's batch
size from the budget (:meth:`BucketPlan.batch_sizes`). Each window
(:mod:`loaders.stream_window`) is cut into full batches of one bucket each; a
bucket's unfinished batch is carried to the next window (its samples' positions are
part of the state), and the stream's last window yields what is left as smaller
batches: nothing is dropped. So that a window always takes new samples, the carried
samples are at most half the buffer: beyond that, the fullest unfinished batches are
yielded as they are.

Samples longer than the plan's largest boundary (``overflow``): ``"extend"``
(default) gives the plan one more boundary, ``max_len`` (default: the budget,
rounded to ``multiple``), before the stream starts, so that every batch fits the
plan the collate has; ``"error"`` refuses them, naming the sample's position.
"""

from __future__ import annotations

import operator

import numpy as np

from dyntile.overflow import check_overflow
from dyntile.planning.buckets import BucketPlan, plan_buckets
from dyntile.shapes import check_multiple, round_up

from .stream_ranks import rank0_value
from .stream_window import StreamWindows, window_args

__all__ = ["StreamingBucketer"]

_OVERFLOWS = ("extend", "error")


class StreamingBucketer(StreamWindows):
    """An ``IterableDataset`` of bucketed batches over any stream of samples.

    Arguments as :class:`~loaders.streaming_packer.StreamingPacker` (``source``,
    ``max_tokens``, ``buffer_size``, ``length``, ``seed``, ``shuffle``,
    ``drop_last``, ``source_shards``, ranks, ``balance_steps``), and: ``plan`` (else planned from the
    first ``probe_size`` samples with ``max_buckets``, ``multiple``, ``cost``);
    ``batch_multiple`` (see :meth:`BucketPlan.batch_sizes`); ``overflow`` and
    ``max_len`` (module docstring). :attr:`plan` and :attr:`batch_sizes` are fixed
    at construction: give ``DynTileCollate(bucketer.plan)``.

    >>> from dyntile.planning import BucketPlan
    >>> b = StreamingBucketer([[1] * n for n in (5, 9, 3, 12, 7, 2)], max_tokens=32,
    ...                       plan=BucketPlan((8, 16)), overflow="error", buffer_size=6)
    >>> b.batch_sizes, sorted(sorted(len(s) for s in batch) for batch in b)
    ((4, 2), [[2, 3, 5, 7], [9, 12]])
    """

    def __init__(
        self,
        source,
        *,
        max_tokens: int,
        buffer_size: int = 4096,
        plan: BucketPlan | None = None,
        length=None,
        seed: int = 0,
        shuffle: bool = True,
        drop_last: bool = False,
        overflow: str = "extend",
        max_len: int | None = None,
        max_buckets: int = 8,
        multiple: int = 8,
        batch_multiple: int = 8,
        cost: str | None = None,
        probe_size: int | None = None,
        source_shards=None,
        num_replicas: int | None = None,
        rank: int | None = None,
        balance_steps: int = 8,
    ):
        super().__init__(source, exact=False, **window_args(locals()))
        self.overflow = check_overflow(overflow, _OVERFLOWS)
        m = check_multiple(multiple)
        if plan is None:
            probe = self._source.probe(self.buffer_size if probe_size is None else operator.index(probe_size))
            if probe.size == 0:
                raise ValueError("the source yielded no sample to plan buckets from: pass plan=")
            plan = plan_buckets(probe, max_buckets=max_buckets, multiple=m, cost=cost or "linear")
            plan = rank0_value(plan, "ranks" in self._source.shards)
        if not isinstance(plan, BucketPlan) or plan.ndim != 1:
            raise TypeError(f"plan should be a one-axis dyntile BucketPlan, but got {plan!r}")
        if self.overflow == "extend":
            top = self.max_tokens // m * m if max_len is None else round_up(max_len, m)
            if top > plan.max_sizes[0]:
                plan = plan.extend((top,))
        self.plan = plan
        self._power = 2 if (cost or plan.cost) == "quadratic" else 1
        self.batch_sizes = plan.batch_sizes(self.max_tokens, cost=cost, multiple=batch_multiple)
        if self.buffer_size < max(self.batch_sizes):
            b = int(np.argmax(self.batch_sizes))
            raise ValueError(
                f"buffer_size={self.buffer_size} is smaller than one batch of bucket {b} "
                f"({self.batch_sizes[b]} samples of up to {plan.boundaries[b]} tokens): raise buffer_size "
                "to at least that, or plan fewer short buckets"
            )

    def _config(self) -> dict:
        return {
            **super()._config(),
            "boundaries": list(self.plan.boundaries),
            "batch_sizes": list(self.batch_sizes),
        }

    def _check_window(self, lengths: np.ndarray, positions: np.ndarray) -> None:
        top = self.plan.max_sizes[0]
        bad = np.flatnonzero(lengths > top)
        if bad.size:
            i = int(bad[0])
            raise ValueError(
                f"sample {int(positions[i])} of this reader has length {int(lengths[i])}, longer than the "
                f"plan's largest boundary {top} (overflow={self.overflow!r}); pass max_len= or a larger plan"
            )

    def _plan_window(self, lengths: np.ndarray, seed: int, last: bool):
        if lengths.size == 0:
            return [], np.zeros(0), np.zeros(0, np.int64)
        rng = np.random.default_rng([self.seed, seed])
        order = rng.permutation(lengths.size) if self.shuffle else np.arange(lengths.size)
        bucket = self.plan.bucket_of(lengths)[order]
        by_bucket = order[np.argsort(bucket, kind="stable")]
        ends = np.cumsum(np.bincount(bucket, minlength=self.plan.num_buckets))
        batches, sizes, rests = [], [], []
        for b, (a, e) in enumerate(zip(np.append(0, ends[:-1]), ends)):
            bs = self.batch_sizes[b]
            members = by_bucket[a:e]
            full = members.size // bs * bs
            batches += np.split(members[:full], full // bs) if full else []
            sizes += [self.plan.boundaries[b]] * (full // bs)
            if members.size > full:
                rests.append((b, members[full:]))
        carried = sum(r.size for _, r in rests)
        rests.sort(key=lambda br: -br[1].size)  # the fullest first
        while rests and (last or carried > self.buffer_size // 2):
            b, r = rests.pop(0)
            batches.append(r)
            sizes.append(self.plan.boundaries[b])
            carried -= r.size
        if self.shuffle and batches:
            perm = rng.permutation(len(batches))
            batches, sizes = [batches[k] for k in perm], [sizes[k] for k in perm]
        costs = np.array([len(x) * float(s) ** self._power for x, s in zip(batches, sizes)])
        carry = np.concatenate([r for _, r in rests]) if rests else np.zeros(0, np.int64)
        return batches, costs, carry
