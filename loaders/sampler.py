"""``BucketBatchSampler``: batches of one bucket each, sized from a token budget.

The epoch's batch list is a pure function of ``(lengths, plan, seed, epoch,
num_replicas)``, so every rank builds the same list, a resumed run regenerates
it and skips by slicing, and no state other than three integers is saved.

How one epoch is built (with ``R = num_replicas``):

1. each bucket's sample indices are shuffled (``shuffle=True``) with a generator
   seeded by ``(seed, epoch)``;
2. each bucket is cut into *steps* of ``R`` batches of its batch size ``bs``;
3. the remainder ``m < R * bs`` of a bucket forms one last, smaller step of ``R``
   batches of ``ceil(m / R)`` samples each, filled up by repeating at most
   ``R - 1`` samples of the same bucket (like ``DistributedSampler``). With
   ``drop_last=True`` the remainder is dropped instead. For ``R = 1`` this is the
   usual partial last batch and nothing is repeated;
4. the steps of all buckets are shuffled together, and rank ``r`` takes batch
   ``r`` of every step.

So every rank gets the same number of batches, and at every step all ranks pad
to the same shape (same bucket, same batch size); each sample appears once per
epoch on exactly one rank, apart from the repeats of step 3.
"""

from __future__ import annotations

import operator

import numpy as np

from dyntile.overflow import BUCKET_OVERFLOWS, check_overflow
from dyntile.planning.buckets import BucketPlan, plan_buckets

from .epoch_sampler import EpochBatchSampler, layout_digest

__all__ = ["BucketBatchSampler"]


class BucketBatchSampler(EpochBatchSampler):
    """A ``batch_sampler`` whose every batch holds samples of one bucket.

    ``lengths``: int array ``(n,)`` (or ``(n, d)`` for a multi-axis plan), the
    size of every sample of the dataset. ``plan``: a :class:`~dyntile.planning.BucketPlan`;
    by default one is planned from ``lengths`` (``max_buckets``, ``multiple``,
    ``cost``). Give either ``max_tokens`` (each bucket's batch size from the token
    budget, see :meth:`BucketPlan.batch_sizes`, rounded to ``batch_multiple``) or a
    fixed ``batch_size``. Shuffling is deterministic in ``seed`` and the epoch
    (:meth:`set_epoch`); :meth:`state_dict` saves the position mid-epoch.
    ``num_replicas``/``rank`` default to ``torch.distributed``'s, read when iteration
    starts (see the module docstring for how ranks stay in step); ``sampler``: a
    framework's distributed sampler whose ranks to take (Lightning passes one, see
    :func:`loaders.distributed.ranks_of_sampler`). ``overflow``: a length over the plan's
    largest boundary is an error (``"error"``, default); ``"truncate"`` puts it in the
    last bucket (pair with ``DynTileCollate(overflow="truncate")``); ``"extend"``
    grows ``self.plan`` once to fit every length (give that plan to the collate).

    >>> sampler = BucketBatchSampler([5, 9, 30, 31, 7, 8], max_tokens=64, max_buckets=2)
    >>> sampler.plan.boundaries, sampler.batch_sizes
    ((8, 32), (8, 2))
    >>> sorted(len(b) for b in sampler), len(sampler)
    ([1, 2, 3], 3)
    """

    def __init__(
        self,
        lengths,
        plan: BucketPlan | None = None,
        *,
        max_tokens: int | None = None,
        batch_size: int | None = None,
        cost: str | None = None,
        batch_multiple: int = 8,
        max_buckets: int = 8,
        multiple: int = 8,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        num_replicas: int | None = None,
        rank: int | None = None,
        overflow: str = "error",
        sampler=None,
    ):
        lengths = np.asarray(lengths)
        self.plan, lengths = _fit_plan(lengths, plan, overflow, max_buckets, multiple, cost)
        self.overflow = overflow
        if (max_tokens is None) == (batch_size is None):
            raise ValueError(
                "give exactly one of max_tokens (a token budget) and batch_size, "
                f"but got max_tokens={max_tokens!r}, batch_size={batch_size!r}"
            )
        self.bucket_ids = self.plan.bucket_of(lengths)  # validates lengths, names an overflow
        if max_tokens is not None:
            self.batch_sizes = self._budget_sizes(lengths, max_tokens, cost, batch_multiple)
        else:
            self.batch_sizes = (_positive(batch_size, "batch_size"),) * self.plan.num_buckets
        super().__init__(
            len(self.bucket_ids),
            shuffle=shuffle,
            seed=seed,
            num_replicas=num_replicas,
            rank=rank,
            sampler=sampler,
        )
        self.drop_last = bool(drop_last)
        order = np.argsort(self.bucket_ids, kind="stable")
        splits = np.cumsum(np.bincount(self.bucket_ids, minlength=self.plan.num_buckets))[:-1]
        self._members = np.split(order, splits)  # sample indices of each bucket, ascending
        self._len_for: dict[int, int] = {}  # num_replicas -> batches per epoch
        self.layout = layout_digest(
            np.ascontiguousarray(self.bucket_ids, np.int64),
            tuple(self.batch_sizes),
            self.shuffle,
            self.drop_last,
        )

    def _budget_sizes(self, lengths, max_tokens, cost, multiple) -> tuple[int, ...]:
        """The plan's batch sizes for the buckets that hold samples; a budget under one
        sample names the first such sample."""
        occupied = np.flatnonzero(np.bincount(self.bucket_ids, minlength=self.plan.num_buckets)).tolist()
        self.plan.batch_sizes(
            max_tokens, cost=cost, multiple=multiple, required=[]
        )  # the arguments themselves
        try:
            return self.plan.batch_sizes(max_tokens, cost=cost, multiple=multiple, required=occupied)
        except ValueError as e:
            for b in occupied:
                try:
                    self.plan.batch_sizes(max_tokens, cost=cost, multiple=multiple, required=[b])
                except ValueError:
                    i = int(np.flatnonzero(self.bucket_ids == b)[0])
                    raise ValueError(f"{e}; it holds sample {i} (length {lengths[i].tolist()})") from None
            raise

    # ---- epoch construction

    def _steps_in_bucket(self, n: int, bs: int, R: int) -> int:
        full, rem = divmod(n, bs * R)
        return full + (1 if rem and not self.drop_last else 0)

    def _bucket_steps(self, idx: np.ndarray, bs: int) -> list[np.ndarray]:
        """Steps ``(R, batch)`` of one bucket's (shuffled) indices; see the module docstring."""
        R = self.num_replicas
        full = len(idx) // (bs * R)
        steps = list(idx[: full * bs * R].reshape(full, R, bs))
        rem = idx[full * bs * R :]
        if rem.size and not self.drop_last:
            per_rank = -(-rem.size // R)
            filler = np.resize(idx, per_rank * R - rem.size)  # repeats < R samples of this bucket
            steps.append(np.concatenate((rem, filler)).reshape(R, per_rank))
        return steps

    def epoch_steps(self, epoch: int) -> list[np.ndarray]:
        """All steps of ``epoch`` (every rank's batches), each an int64 array ``(num_replicas, batch)``."""
        rng = np.random.default_rng((self.seed, operator.index(epoch)))
        steps: list[np.ndarray] = []
        for idx, bs in zip(self._members, self.batch_sizes):
            if self.shuffle:
                idx = rng.permutation(idx)
            steps.extend(self._bucket_steps(idx, bs))
        if self.shuffle:
            steps = [steps[i] for i in rng.permutation(len(steps))]
        return steps

    def batches(self, epoch: int) -> list[list[int]]:
        """This rank's batches of ``epoch``, in order."""
        rank = self.rank
        return [step[rank].tolist() for step in self.epoch_steps(epoch)]

    def batches_in_epoch(self, epoch: int) -> int:
        """Batches of ``epoch`` on this rank: the same in every epoch (``len()``)."""
        return len(self)

    def __len__(self) -> int:
        """Batches per epoch on this rank (the same on every rank)."""
        R = self.num_replicas
        if R not in self._len_for:
            sizes = zip(self._members, self.batch_sizes)
            self._len_for[R] = sum(self._steps_in_bucket(len(m), bs, R) for m, bs in sizes)
        return self._len_for[R]


def _fit_plan(lengths: np.ndarray, plan, overflow: str, max_buckets: int, multiple: int, cost):
    """``(plan, lengths)`` for the sampler: ``plan`` checked (or planned from ``lengths``),
    then fitted to lengths over its largest boundary as ``overflow`` says (``"extend"``:
    a grown plan; ``"truncate"``: lengths cut to that boundary, as the collate cuts them)."""
    if plan is None:
        plan = plan_buckets(lengths, max_buckets=max_buckets, multiple=multiple, cost=cost or "linear")
    if not isinstance(plan, BucketPlan):
        raise TypeError(f"plan should be a dyntile BucketPlan, but got {type(plan).__name__}")
    check_overflow(overflow, BUCKET_OVERFLOWS)
    if overflow != "error" and lengths.size:
        top = np.asarray(plan.max_sizes)
        longest = lengths.reshape(len(lengths), -1).max(axis=0)
        if longest.size == top.size and (longest > top).any():
            if overflow == "extend":
                plan = plan.extend(tuple(int(x) for x in longest))
            else:
                top = top.astype(lengths.dtype)  # uint64 with int64 would promote to float64
                lengths = np.minimum(lengths, top if plan.multi_axis else top[0])
    return plan, lengths


def _positive(value, name: str) -> int:
    n = operator.index(value)
    if n < 1:
        raise ValueError(f"{name} should be a positive integer, but got {n}")
    return n
