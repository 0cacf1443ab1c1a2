"""End to end: DataLoader(batch_sampler=BucketBatchSampler, collate_fn=DynTileCollate), 2 workers."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from dyntile.planning import plan_buckets
from loaders import BucketBatchSampler, DynTileCollate
from loaders.collate_stats import CollateStats


class Tokens(Dataset):
    def __init__(self, lengths, seed=0):
        rng = np.random.default_rng(seed)
        self.seqs = [rng.integers(1, 30000, n) for n in lengths]

    def __len__(self):
        return len(self.seqs)

    def __getitem__(self, i):
        s = torch.from_numpy(self.seqs[i])
        return {"input_ids": s, "labels": s.clone(), "index": i}


def test_loop_stopped_early_then_a_whole_epoch():
    """Workers draw batches ahead; after a ``break``, the next pass still yields the
    epoch's every sample once."""
    sampler = BucketBatchSampler(np.full(64, 8), batch_size=4, seed=0)
    loader = DataLoader(list(range(64)), batch_sampler=sampler, num_workers=2)
    next(iter(loader))
    seen = [i for batch in loader for i in batch.tolist()]
    assert sorted(seen) == list(range(64))


@pytest.mark.parametrize("num_workers", [0, 2])
def test_loader_with_sampler_and_collate(num_workers):
    lengths = np.random.default_rng(1).integers(1, 300, size=150)
    plan = plan_buckets(lengths, max_buckets=4)
    sampler = BucketBatchSampler(lengths, plan, max_tokens=2048, seed=3)
    collate = DynTileCollate(
        plan,
        pad_values={"input_ids": 0, "labels": -100, "index": -1},
        batch_multiple=8,
        pin_memory=True,
        return_stats=True,
    )
    data = Tokens(lengths)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pin_memory without CUDA: torch's and ours
        loader = DataLoader(
            data, batch_sampler=sampler, collate_fn=collate, num_workers=num_workers, pin_memory=True
        )
        batches = list(loader)
    assert len(batches) == len(sampler)
    seen = []
    totals = CollateStats()
    allowed = set(plan.boundaries)
    for batch in batches:
        B, T = batch["input_ids"].shape
        assert T in allowed and B % 8 == 0
        assert batch["index"].shape == (B,)  # batch padding reaches every leaf
        real = [i for i in batch["index"].tolist() if i >= 0]
        assert batch["index"][len(real) :].eq(-1).all()
        seen += real
        for row, i in enumerate(real):
            n = len(data.seqs[i])
            assert batch["lengths"][row] == n
            np.testing.assert_array_equal(batch["input_ids"][row, :n].numpy(), data.seqs[i])
            assert (batch["labels"][row, n:] == -100).all()
            assert batch["attention_mask"][row].sum() == n
        assert not batch["attention_mask"][len(real) :].any()  # batch-padding rows
        totals.update(batch["collate_stats"])
    assert sorted(seen) == list(range(len(lengths)))
    assert totals.batches == len(batches) and totals.distinct_shapes <= 2 * len(plan.boundaries) * 8
    if num_workers == 0:  # main-process stats equal the folded per-batch ones
        assert collate.stats.real_elements == totals.real_elements
