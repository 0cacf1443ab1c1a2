"""The two batch samplers on one dataset of odd lengths, as the sampler tests build them:
``bucket(**kw)``, ``packing(**kw)`` and ``BOTH`` to parametrize over."""

from __future__ import annotations

import numpy as np

from loaders import BucketBatchSampler, PackingBatchSampler

LENGTHS = np.random.default_rng(3).integers(1, 120, 301)


def bucket(**kw) -> BucketBatchSampler:
    return BucketBatchSampler(LENGTHS, max_tokens=512, max_buckets=4, seed=2, **kw)


def packing(**kw) -> PackingBatchSampler:
    return PackingBatchSampler(LENGTHS, max_tokens=512, seed=2, **kw)


BOTH = [bucket, packing]
