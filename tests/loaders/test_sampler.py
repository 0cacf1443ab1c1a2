"""BucketBatchSampler: coverage, budgets, determinism, resume, ranks in step."""

from __future__ import annotations

import collections

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dyntile.planning import BucketPlan, plan_buckets
from loaders.distributed import resolve_replicas
from loaders.sampler import BucketBatchSampler
from shared_data import load_shared


def random_lengths(n, seed=0):
    rng = np.random.default_rng(seed)
    return np.minimum(rng.lognormal(3.5, 1.0, size=n).astype(np.int64), 1000)


@pytest.mark.parametrize("n, max_tokens", [(1, 4096), (7, 512), (997, 4096), (1000, 2000)])
def test_every_index_once_and_within_budget(n, max_tokens):
    L = random_lengths(n)
    s = BucketBatchSampler(L, max_tokens=max_tokens, max_buckets=4, seed=1)
    batches = list(s)
    assert len(batches) == len(s)
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(n))
    bounds = np.asarray(s.plan.boundaries)
    for b in batches:
        buckets = set(s.bucket_ids[b].tolist())
        assert len(buckets) == 1  # one bucket per batch
        assert len(b) * bounds[buckets.pop()] <= max_tokens  # under the budget


def test_fixed_batch_size_and_no_shuffle_is_sorted_by_bucket():
    L = np.array([3, 50, 4, 60, 5, 70, 6])
    s = BucketBatchSampler(L, BucketPlan((8, 72)), batch_size=2, shuffle=False)
    assert list(s) == [[0, 2], [4, 6], [1, 3], [5]]


def test_quadratic_budget():
    L = random_lengths(300, seed=2)
    s = BucketBatchSampler(L, max_tokens=2**20, cost="quadratic", max_buckets=4)
    bounds = np.asarray(s.plan.boundaries)
    for b in s:
        assert len(b) * bounds[s.bucket_ids[b[0]]] ** 2 <= 2**20


def test_deterministic_per_seed_and_epoch():
    L = random_lengths(500)
    a = BucketBatchSampler(L, max_tokens=2048, seed=3)
    b = BucketBatchSampler(L, max_tokens=2048, seed=3)
    assert list(a) == list(b)
    e0 = list(a)
    a.set_epoch(1)
    b.set_epoch(1)
    assert list(a) == list(b) != e0
    assert list(BucketBatchSampler(L, max_tokens=2048, seed=4)) != e0


def test_drop_last_keeps_only_full_batches():
    L = random_lengths(500)
    s = BucketBatchSampler(L, max_tokens=2048, drop_last=True, max_buckets=4)
    batches = list(s)
    assert len(batches) == len(s)
    for b in batches:
        assert len(b) == s.batch_sizes[s.bucket_ids[b[0]]]
    flat = [i for b in batches for i in b]
    assert len(flat) == len(set(flat))
    per_bucket = collections.Counter(s.bucket_ids[flat].tolist())
    counts = np.bincount(s.bucket_ids, minlength=s.plan.num_buckets)
    for k, bs in enumerate(s.batch_sizes):
        assert per_bucket.get(k, 0) == counts[k] // bs * bs


@settings(max_examples=25, deadline=None)
@given(stop=st.integers(0, 40), epoch=st.integers(0, 3), replicas=st.integers(1, 3))
def test_resume_equals_uninterrupted_run(stop, epoch, replicas):
    L = random_lengths(400, seed=7)
    kwargs = dict(max_tokens=1024, max_buckets=4, seed=11, num_replicas=replicas, rank=replicas - 1)
    full = BucketBatchSampler(L, **kwargs)
    full.set_epoch(epoch)
    expected = list(full)
    stop = min(stop, len(expected))
    first = BucketBatchSampler(L, **kwargs)
    first.set_epoch(epoch)
    it = iter(first)
    head = [next(it) for _ in range(stop)]
    state = first.state_dict()
    resumed = BucketBatchSampler(L, **{**kwargs, "seed": 0})  # seed comes from the state
    resumed.load_state_dict(state)
    resumed.set_epoch(epoch)  # same epoch: keeps the position
    assert head + list(resumed) == expected
    resumed.set_epoch(epoch + 1)  # next epoch starts afresh
    assert len(list(resumed)) == len(expected)


def test_every_iteration_is_a_whole_pass():
    """A pass stopped early is not continued (a DataLoader with workers has drawn
    batches ahead of the loop, which the sampler cannot tell from used ones): the
    next pass is the whole epoch, as with torch's samplers."""
    s = BucketBatchSampler(random_lengths(200), max_tokens=1024, seed=3)
    expected = list(s)
    for stop in (0, 1, len(expected) // 2):
        it = iter(s)
        for _ in range(stop):
            next(it)
        assert list(s) == expected


def test_state_dict_batches_done_and_checks():
    L = random_lengths(100)
    s = BucketBatchSampler(L, max_tokens=1024)
    assert s.state_dict(batches_done=2)["batches_yielded"] == 2
    with pytest.raises(ValueError, match="batches_done should be in"):
        s.state_dict(batches_done=10**6)
    other = BucketBatchSampler(L, max_tokens=1024, num_replicas=2, rank=0)
    with pytest.raises(ValueError, match="num_replicas=1.*num_replicas=2"):
        other.load_state_dict(s.state_dict())
    with pytest.raises(KeyError, match="missing keys"):
        s.load_state_dict({"epoch": 0})
    # another budget, order, shuffle or drop_last: the position would mean other batches
    for changed in (
        BucketBatchSampler(L, max_tokens=4096),
        BucketBatchSampler(L[::-1], max_tokens=1024),
        BucketBatchSampler(L, max_tokens=1024, shuffle=False),
        BucketBatchSampler(L, max_tokens=1024, drop_last=True),
    ):
        with pytest.raises(ValueError, match="another batch layout"):
            changed.load_state_dict(s.state_dict())
    same = BucketBatchSampler(L, max_tokens=1024, seed=9)  # the seed travels in the state
    same.load_state_dict(s.state_dict(batches_done=2))
    old = {k: v for k, v in s.state_dict().items() if k != "layout"}  # a state from before layouts
    BucketBatchSampler(L, max_tokens=4096).load_state_dict(old)


@pytest.mark.parametrize("replicas, drop_last", [(2, False), (3, False), (2, True), (4, False)])
def test_ranks_in_step(replicas, drop_last):
    L = random_lengths(613, seed=5)
    plan = plan_buckets(L, max_buckets=6)
    samplers = [
        BucketBatchSampler(
            L, plan, max_tokens=1536, seed=2, drop_last=drop_last, num_replicas=replicas, rank=r
        )
        for r in range(replicas)
    ]
    for s in samplers:
        s.set_epoch(3)
    per_rank = [list(s) for s in samplers]
    assert len({len(b) for b in per_rank}) == 1
    assert all(len(b) == len(samplers[0]) for b in per_rank)
    bounds = np.asarray(plan.boundaries)
    for step in zip(*per_rank):
        assert len({len(b) for b in step}) == 1  # same batch size
        assert len({int(bounds[samplers[0].bucket_ids[b].max()]) for b in step}) == 1  # same padded length
        assert len({int(samplers[0].bucket_ids[i]) for b in step for i in b}) == 1
    flat = [i for batches in per_rank for b in batches for i in b]
    seen = collections.Counter(flat)
    if drop_last:
        assert max(seen.values()) == 1
    else:
        assert set(seen) == set(range(len(L)))  # everyone once ...
        repeats = collections.Counter(
            int(samplers[0].bucket_ids[i]) for i, c in seen.items() for _ in range(c - 1)
        )
        assert all(r < replicas for r in repeats.values())  # ... plus < R repeats per bucket


def test_bad_input():
    L = np.array([3, 4, 100])
    with pytest.raises(ValueError, match=r"lengths\[2\]=100 is over the largest boundary 64"):
        BucketBatchSampler(L, BucketPlan((8, 64)), batch_size=2)
    with pytest.raises(ValueError, match="exactly one of max_tokens"):
        BucketBatchSampler(L, max_tokens=100, batch_size=2)
    with pytest.raises(ValueError, match="exactly one of max_tokens"):
        BucketBatchSampler(L)
    with pytest.raises(ValueError, match="smaller than one sample of bucket"):
        BucketBatchSampler(L, max_tokens=50)
    # an empty bucket over the budget is no error; a sample in one is named
    assert BucketBatchSampler([3, 5, 7], BucketPlan((8, 1024)), max_tokens=64).batch_sizes == (8, 1)
    with pytest.raises(ValueError, match=r"bucket 1 .*; it holds sample 2 \(length 700\)"):
        BucketBatchSampler([3, 5, 700], BucketPlan((8, 1024)), max_tokens=64)
    with pytest.raises(ValueError, match=r"rank should be in \[0, 1\]"):
        BucketBatchSampler(L, batch_size=2, num_replicas=2, rank=2)
    with pytest.raises(ValueError, match="seed should be a non-negative"):
        BucketBatchSampler(L, batch_size=2, seed=-1)
    with pytest.raises(ValueError, match="epoch should be a non-negative"):
        BucketBatchSampler(L, batch_size=2).set_epoch(-1)
    with pytest.raises(TypeError, match="BucketPlan"):
        BucketBatchSampler(L, plan=(8, 64), batch_size=2)


def test_resolve_replicas_defaults_to_one_process():
    assert resolve_replicas() == (1, 0)
    assert resolve_replicas(3, 2) == (3, 2)
    with pytest.raises(ValueError, match="num_replicas should be a positive"):
        resolve_replicas(0, 0)


def test_multi_axis_plan():
    rng = np.random.default_rng(0)
    hw = rng.integers(10, 300, size=(200, 2))
    s = BucketBatchSampler(hw, max_tokens=300 * 300 * 4, max_buckets=3, multiple=32)
    batches = list(s)
    assert sorted(i for b in batches for i in b) == list(range(200))
    for b in batches:
        assert len(set(s.bucket_ids[b].tolist())) == 1


def test_achieved_padding_equals_plan_optimum_on_real_lengths():
    L = load_shared("lengths_cpython_docstrings.npy")
    for k in (2, 8):
        plan = plan_buckets(L, max_buckets=k)
        s = BucketBatchSampler(L, plan, max_tokens=16384)
        real = padded = 0
        for b in s:
            padded += len(b) * plan.round_up(int(L[b].max()))[0]
            real += int(L[b].sum())
        assert abs((1 - real / padded) - plan.padding_ratio(L)) < 0.01


@pytest.mark.parametrize("replicas", [2, 3])
def test_ranks_get_one_collated_shape_per_step(replicas):
    """The sampler and DynTileCollate together: at every step every rank's batch has
    the same tensor shapes and keys, also for batches whose samples share one length."""
    from loaders import DynTileCollate

    L = np.array([3, 5, 3, 3, 6, 6, 12, 12, 12, 9, 16, 2, 2, 2, 2, 7])
    plan = BucketPlan((8, 16))
    data = [{"input_ids": list(range(1, n + 1))} for n in L]
    samplers = [
        BucketBatchSampler(L, plan, batch_size=2, shuffle=False, num_replicas=replicas, rank=r)
        for r in range(replicas)
    ]
    collate = DynTileCollate(plan, bucket_rows=samplers[0].batch_sizes)
    for step in zip(*[list(s) for s in samplers]):
        batches = [collate([data[i] for i in b]) for b in step]
        shapes = {tuple((k, tuple(v.shape)) for k, v in sorted(out.items())) for out in batches}
        assert len(shapes) == 1, shapes
        assert dict(next(iter(shapes)))["input_ids"][1] in plan.boundaries


def test_overflow_options_pair_with_the_collate():
    """A length over the plan: an error by default; "truncate" puts it in the last
    bucket, "extend" grows the sampler's plan; the collate given the same option (and
    the sampler's plan) then yields only the plan's shapes."""
    import torch

    from loaders import DynTileCollate

    L = np.array([3, 5, 20, 7, 30, 9])
    with pytest.raises(ValueError, match=r"lengths\[2\]=20 is over the largest boundary 16"):
        BucketBatchSampler(L, BucketPlan((8, 16)), batch_size=2)
    with pytest.raises(ValueError, match="overflow should be one of"):
        BucketBatchSampler(L, BucketPlan((8, 16)), batch_size=2, overflow="cut")
    for overflow, boundaries in (("truncate", (8, 16)), ("extend", (8, 16, 32))):
        s = BucketBatchSampler(L, BucketPlan((8, 16)), batch_size=2, overflow=overflow, seed=1)
        assert s.plan.boundaries == boundaries
        assert sorted(i for b in s for i in b) == list(range(len(L)))
        collate = DynTileCollate(s.plan, overflow=overflow)
        for b in s:
            out = collate([{"x": torch.arange(int(L[i]))} for i in b])
            assert out["x"].shape[1] in boundaries
            assert len({int(s.bucket_ids[i]) for i in b}) == 1
    multi = BucketBatchSampler(
        [[3, 40], [9, 5]], BucketPlan(((8, 16), (8, 16))), batch_size=1, overflow="extend"
    )
    assert multi.plan.axis_boundaries == ((8, 16), (8, 16, 40))


def test_truncate_takes_uint64_lengths_and_budget_errors_name_the_right_thing():
    """uint64 lengths cut with int64 boundaries promoted to float64, and were refused as
    floats; a bad max_tokens was blamed on a sample."""
    s = BucketBatchSampler(
        np.array([5, 40], np.uint64),
        plan=BucketPlan((8, 32)),
        max_tokens=64,
        overflow="truncate",
        shuffle=False,
    )
    assert sorted(map(sorted, s)) == [[0], [1]] and s.bucket_ids.tolist() == [0, 1]
    with pytest.raises(ValueError, match=r"max_tokens should be a positive integer, but got 0$"):
        BucketBatchSampler([5], max_tokens=0)
    with pytest.raises(ValueError, match=r"raise max_tokens to at least 64; it holds sample 0 \(length 50\)"):
        BucketBatchSampler([50], plan=BucketPlan((8, 64)), max_tokens=8)
