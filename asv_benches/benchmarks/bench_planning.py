"""Bucket planning: planner speed, and padding against the number of shapes.

* ``PlanBuckets.time_plan_buckets`` -- exact DP plan of n lengths (1-axis), K buckets;
* ``PlanBuckets2D.time_plan_buckets`` -- 2-axis plan (image sizes) by coordinate descent;
* ``PaddingTradeoff`` -- on the CPython docstring lengths (``../shared/data``;
  a synthetic stand-in when absent), the fraction of padded token slots (lower is better) and
  the number of distinct padded lengths, for K = 1 ... 32 planned buckets:
  ``planner`` is the plan's optimum, ``sampler`` what ``BucketBatchSampler``
  (16384-token budget) achieves batch by batch;
* ``BatchingBaselines`` -- the same two figures for plain batching of 32: in
  ``random`` order padded to each batch's maximum, and ``sorted`` by
  length padded to each batch's maximum (little padding, hundreds of shapes); no
  rounding to a multiple, so these are the plain-batching figures.
"""

from __future__ import annotations

import numpy as np

from dyntile.planning import plan_buckets

from .real_data import docstring_lengths

BUDGET = 16384
BASELINE_BATCH = 32


def padded_fraction(batches, lengths, padded_len) -> tuple[float, int]:
    """Padded fraction over batches, and the number of distinct padded lengths."""
    real = padded = 0
    shapes = set()
    for b in batches:
        T = padded_len(b)
        shapes.add(T)
        padded += len(b) * T
        real += int(lengths[b].sum())
    return 1.0 - real / padded, len(shapes)


class PlanBuckets:
    params = [[10_000, 1_000_000], [8, 32], ["linear", "quadratic"]]
    param_names = ["n", "max_buckets", "cost"]

    def setup(self, n, max_buckets, cost):
        rng = np.random.default_rng(0)
        self.lengths = np.minimum(rng.lognormal(4.0, 1.0, n).astype(np.int64) + 1, 8192)

    def time_plan_buckets(self, n, max_buckets, cost):
        plan_buckets(self.lengths, max_buckets=max_buckets, cost=cost)


class PlanBucketsDistinct:
    """The planner's worst case: 1M lengths nearly all distinct after rounding
    (uniform in [1, 10M), ``multiple=1``: about 950K distinct values). Target: well
    under a second."""

    params = [["linear", "quadratic"]]
    param_names = ["cost"]
    timeout = 120

    def setup(self, cost):
        self.lengths = np.random.default_rng(0).integers(1, 10_000_000, 1_000_000)

    def time_plan_buckets(self, cost):
        plan_buckets(self.lengths, max_buckets=8, multiple=1, cost=cost)


class PlanBuckets2D:
    params = [[10_000, 100_000]]
    param_names = ["n"]

    def setup(self, n):
        rng = np.random.default_rng(0)
        h = rng.integers(64, 1500, n)
        self.hw = np.stack([h, np.clip(h * rng.uniform(0.5, 2.0, n), 64, 2048).astype(np.int64)], axis=1)

    def time_plan_buckets(self, n):
        plan_buckets(self.hw, max_buckets=6, multiple=32)


class PaddingTradeoff:
    params = [["planner", "sampler"], [1, 2, 4, 8, 16, 32]]
    param_names = ["source", "max_buckets"]

    def setup(self, source, max_buckets):
        self.lengths = docstring_lengths()
        self.plan = plan_buckets(self.lengths, max_buckets=max_buckets)
        if source == "planner":
            self.fraction = self.plan.padding_ratio(self.lengths)
            self.shapes = len(self.plan.boundaries)
        else:
            try:
                from loaders import BucketBatchSampler
            except ImportError as e:  # no torch in this environment
                raise NotImplementedError(str(e)) from None
            sampler = BucketBatchSampler(self.lengths, self.plan, max_tokens=BUDGET, seed=0)
            plan, L = self.plan, self.lengths
            self.fraction, self.shapes = padded_fraction(
                list(sampler), L, lambda b: plan.round_up(int(L[b].max()))[0]
            )

    def track_padded_fraction(self, source, max_buckets):
        return self.fraction

    def track_distinct_shapes(self, source, max_buckets):
        return self.shapes

    track_padded_fraction.unit = "fraction of slots"
    track_distinct_shapes.unit = "padded lengths"


class BatchingBaselines:
    params = [["random", "sorted"]]
    param_names = ["order"]

    def setup(self, order):
        L = docstring_lengths()
        idx = (
            np.random.default_rng(0).permutation(len(L))
            if order == "random"
            else np.argsort(L, kind="stable")
        )
        batches = [idx[i : i + BASELINE_BATCH] for i in range(0, len(idx), BASELINE_BATCH)]
        self.fraction, self.shapes = padded_fraction(batches, L, lambda b: int(L[b].max()))

    def track_padded_fraction(self, order):
        return self.fraction

    def track_distinct_shapes(self, order):
        return self.shapes

    track_padded_fraction.unit = "fraction of slots"
    track_distinct_shapes.unit = "padded lengths"
