"""BucketBatchSampler under a real 2-process torch.distributed (gloo, localhost) group."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

from gloo_ranks import on_gloo_ranks  # noqa: E402

WORLD = 2


def _worker(rank: int) -> dict:
    from loaders.sampler import BucketBatchSampler

    lengths = np.random.default_rng(0).integers(1, 400, size=301)
    sampler = BucketBatchSampler(lengths, max_tokens=2048, max_buckets=4, seed=5)  # ranks from dist
    sampler.set_epoch(2)
    batches = list(sampler)
    shapes = [(len(b), sampler.plan.round_up(int(lengths[b].max()))[0]) for b in batches]
    gathered = [None] * WORLD
    dist.all_gather_object(gathered, shapes)  # the collective itself must not hang
    return {
        "rank": sampler.rank,
        "replicas": sampler.num_replicas,
        "batches": batches,
        "shapes": shapes,
        "gathered_equal": gathered[0] == gathered[1],
    }


@pytest.mark.slow
def test_two_ranks_over_gloo(tmp_path):
    res = on_gloo_ranks(_worker, tmp_path, WORLD)
    assert [r["rank"] for r in res] == [0, 1] and all(r["replicas"] == WORLD for r in res)
    assert res[0]["shapes"] == res[1]["shapes"] and res[0]["gathered_equal"]
    flat = [i for r in res for b in r["batches"] for i in b]
    assert set(flat) == set(range(301))
    assert len(flat) - 301 < WORLD * 4  # < R repeats per bucket
