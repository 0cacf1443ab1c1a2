"""Baseline batching: budget respected, every sample once, pad_sequence collate correct."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dyntile.cli.baselines import BudgetBatchSampler, pad_sequence_collate


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(1, 50), min_size=1, max_size=80),
    st.integers(50, 300),
    st.sampled_from(["random", "sorted"]),
    st.integers(0, 3),
)
def test_every_sample_once_and_budget_respected(lengths, budget, order, seed):
    s = BudgetBatchSampler(lengths, budget, order=order, pool_size=16, seed=seed)
    batches = list(s)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert len(s) == len(batches)
    for b in batches:
        assert len(b) * max(lengths[i] for i in b) <= budget
    assert batches == list(BudgetBatchSampler(lengths, budget, order=order, pool_size=16, seed=seed))


def test_sorted_pools_pad_less_than_random_and_epochs_differ():
    lengths = np.random.default_rng(0).lognormal(3, 1, 3000).astype(int) + 1
    lengths = np.minimum(lengths, 500)

    def padded(order):
        bs = list(BudgetBatchSampler(lengths, 2048, order=order, seed=0))
        return 1 - lengths.sum() / sum(len(b) * lengths[b].max() for b in bs)

    assert padded("sorted") < 0.5 * padded("random")
    s = BudgetBatchSampler(lengths, 2048, seed=0)
    first = list(s)
    s.set_epoch(1)
    assert list(s) != first


def test_errors():
    with pytest.raises(ValueError, match="order"):
        BudgetBatchSampler([3], 10, order="shuffled")
    with pytest.raises(ValueError, match="sample 1 has 12 tokens"):
        BudgetBatchSampler([3, 12], 10)


def test_pad_sequence_collate_against_reference():
    rng = np.random.default_rng(1)
    seqs = [rng.integers(1, 99, n) for n in (3, 0, 7, 1)]
    out = pad_sequence_collate([{"input_ids": torch.from_numpy(s)} for s in seqs])
    assert out["input_ids"].shape == (4, 7)
    for i, s in enumerate(seqs):
        ref = np.zeros(7, np.int64)
        ref[: len(s)] = s
        np.testing.assert_array_equal(out["input_ids"][i].numpy(), ref)
        np.testing.assert_array_equal(out["segment_ids"][i].numpy(), np.arange(7) < len(s))
        np.testing.assert_array_equal(out["position_ids"][i].numpy(), np.arange(7))
