"""PackingBatchSampler: every sample once, deterministic, resumable, ranks in step."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dyntile.planning.packing import pack_rows
from loaders.packing_sampler import PackingBatchSampler

LENGTHS = np.random.default_rng(7).integers(0, 90, 401)


def test_every_sample_once_and_rows_decodable():
    s = PackingBatchSampler(LENGTHS, max_tokens=512, seq_len=64, seed=3)
    batches = list(s)
    assert len(batches) == len(s)
    flat = np.concatenate(batches)
    assert np.array_equal(np.sort(flat), np.arange(LENGTHS.size))
    for b in batches:
        d = pack_rows(LENGTHS[b], s.shapes, overflow=s.overflow)
        assert d.shape in s.shapes
        assert sum(LENGTHS[b]) <= d.shape[0] * d.shape[1]


def test_deterministic_per_seed_and_epoch():
    a = PackingBatchSampler(LENGTHS, max_tokens=512, seed=1)
    b = PackingBatchSampler(LENGTHS, max_tokens=512, seed=1)
    assert list(a) == list(b)
    first = list(a)
    a.set_epoch(1)
    assert list(a) != first
    a.set_epoch(0)
    assert list(a) == first
    assert list(PackingBatchSampler(LENGTHS, max_tokens=512, seed=2)) != first


@pytest.mark.parametrize("stop", [0, 1, 5])
def test_resume_equals_uninterrupted(stop):
    full = PackingBatchSampler(LENGTHS, max_tokens=256, seed=4)
    full.set_epoch(2)
    expected = list(full)
    s = PackingBatchSampler(LENGTHS, max_tokens=256, seed=4)
    s.set_epoch(2)
    it = iter(s)
    head = [next(it) for _ in range(stop)]
    state = s.state_dict()
    resumed = PackingBatchSampler(LENGTHS, max_tokens=256, seed=0)
    resumed.load_state_dict(state)
    assert head + list(resumed) == expected
    assert list(resumed) == expected  # a finished epoch replays from its start


def test_state_dict_batches_done_and_checks():
    s = PackingBatchSampler(LENGTHS, max_tokens=256)
    state = s.state_dict(batches_done=3)
    assert state["batches_yielded"] == 3
    with pytest.raises(ValueError, match="batches_done"):
        s.state_dict(batches_done=len(s) + 1)
    other = PackingBatchSampler(LENGTHS[:-1], max_tokens=256)
    with pytest.raises(ValueError, match="num_samples"):
        other.load_state_dict(state)
    with pytest.raises(KeyError, match="missing keys"):
        s.load_state_dict({"epoch": 0})
    with pytest.raises(ValueError, match="another batch layout"):
        PackingBatchSampler(LENGTHS, max_tokens=512).load_state_dict(state)
    # the same layout given as NumPy scalars or another integer dtype is the same layout
    same = PackingBatchSampler(
        np.asarray(LENGTHS, np.int32), max_tokens=np.int64(256), pool_size=np.int64(65536)
    )
    same.load_state_dict(state)


def check_ranks(L, samplers, overflow="extend"):
    """Every rank's epoch: same count, same shape per step, rows within the tiles, every
    sample at least once and at most num_replicas - 1 repeats per shape."""
    R = len(samplers)
    per_rank = [list(s) for s in samplers]
    assert len({len(b) for b in per_rank}) == 1 and all(len(b) == len(s) for b, s in zip(per_rank, samplers))
    for step in zip(*per_rank):
        decoded = [
            pack_rows(L[b], samplers[0].shapes, overflow=overflow) for b in step
        ]  # rows <= B, or raises
        assert len({d.shape for d in decoded}) == 1, "same shape on every rank at every step"
        assert all(0 < len(b) and sum(L[b]) <= d.shape[0] * d.shape[1] for b, d in zip(step, decoded))
    flat = np.concatenate([np.concatenate(b) for b in per_rank if b])
    counts = np.bincount(flat, minlength=len(L))
    assert counts.size == len(L) and counts.min() >= 1, "every sample at least once per epoch, over all ranks"
    assert counts.sum() - len(L) <= (R - 1) * len(samplers[0].shapes), "at most R - 1 repeats per shape"
    return counts


@settings(max_examples=15, deadline=None)
@given(
    n=st.integers(1, 150),
    R=st.integers(1, 4),
    seed=st.integers(0, 5),
    overflow=st.sampled_from(["extend", "split"]),
)
def test_ranks_in_step(n, R, seed, overflow):
    L = np.random.default_rng(seed).integers(0, 100, n)
    samplers = [
        PackingBatchSampler(
            L, max_tokens=256, seq_len=64, overflow=overflow, seed=seed, num_replicas=R, rank=r
        )
        for r in range(R)
    ]
    counts = check_ranks(L, samplers, overflow)
    if R == 1:
        assert np.all(counts == 1)


def replicas(L, R, **kw):
    return [PackingBatchSampler(L, **kw, num_replicas=R, rank=r) for r in range(R)]


@pytest.mark.parametrize("n_long, R", [(6, 4), (6, 3), (130, 4)])
def test_one_row_long_batches_on_any_number_of_ranks(n_long, R):
    # each [1, 104] batch holds one long sample; 6 or 130 of them on 4 ranks used to raise at len()
    L = np.array([100] * n_long + [10] * 40)
    samplers = replicas(L, R, seq_len=64, max_tokens=150)
    assert samplers[0].shapes == ((2, 64), (1, 104))
    for epoch in range(3):
        for s in samplers:
            s.set_epoch(epoch)
        counts = check_ranks(L, samplers)
        assert counts.sum() - L.size == -(-n_long // R) * R - n_long  # the long batches' remainder only


def test_six_short_samples_on_three_ranks_each_once():
    # five 5s top up long rows, 60 is the short shape's only row; two 5s take short rows instead
    L = np.array([96] + [90] * 5 + [60] + [5] * 5)
    samplers = replicas(L, 3, seq_len=64, max_tokens=128)
    for epoch in range(3):
        for s in samplers:
            s.set_epoch(epoch)
        assert np.all(check_ranks(L, samplers) == 1)


def test_small_pools_every_epoch():
    L = np.array([92, 109, 17])
    samplers = replicas(L, 2, seq_len=64, max_tokens=506, pool_size=2)
    for epoch in range(6):
        for s in samplers:
            s.set_epoch(epoch)
        check_ranks(L, samplers)


def test_random_small_configs_every_epoch():
    rng = np.random.default_rng(11)
    for trial in range(60):
        L = rng.integers(0, 110, int(rng.integers(1, 20)))
        R, pool = int(rng.integers(1, 5)), int(rng.integers(2, 9))
        overflow = str(rng.choice(["extend", "split"]))
        try:
            samplers = replicas(
                L,
                R,
                seq_len=64,
                max_tokens=int(rng.integers(128, 600)),
                pool_size=pool,
                overflow=overflow,
                seed=trial,
            )
        except ValueError as e:
            assert "needs" in str(e), e  # a sample over the budget, refused at construction
            continue
        for epoch in range(4):
            for s in samplers:
                s.set_epoch(epoch)
            check_ranks(L, samplers, overflow)


@pytest.mark.parametrize(
    "kw, err, match",
    [
        (dict(lengths=[]), ValueError, "lengths should be non-empty"),
        (dict(pool_size=0), ValueError, "pool_size should be a positive integer or None, but got 0"),
        (dict(pool_size=-3), ValueError, "pool_size should be a positive integer or None, but got -3"),
        (dict(pool_size=2.5), TypeError, "pool_size should be an integer"),
        (dict(pool_size="8"), TypeError, "pool_size should be an integer"),
        (dict(pool_size=True), TypeError, "pool_size should be a positive integer or None"),
    ],
)
def test_bad_arguments_refused_at_construction(kw, err, match):
    kw = {"lengths": LENGTHS, **kw}
    with pytest.raises(err, match=match):
        PackingBatchSampler(kw.pop("lengths"), max_tokens=256, **kw)


def test_dataloader_integration():
    data = [torch.arange(int(n)) for n in LENGTHS[:50]]
    s = PackingBatchSampler(LENGTHS[:50], max_tokens=256)
    loader = torch.utils.data.DataLoader(data, batch_sampler=s, collate_fn=lambda b: sum(len(x) for x in b))
    assert sum(loader) == LENGTHS[:50].sum()


def test_torch_distributed_default_is_single_process():
    s = PackingBatchSampler(LENGTHS, max_tokens=256)
    assert (s.num_replicas, s.rank) == (1, 0)
    with pytest.raises(ValueError, match="rank"):
        PackingBatchSampler(LENGTHS, max_tokens=256, num_replicas=2, rank=2)


def test_bad_budget():
    with pytest.raises(ValueError, match="multiple of multiple=8"):
        PackingBatchSampler(LENGTHS, max_tokens=256, seq_len=60)
    with pytest.raises(ValueError, match="sample"):
        PackingBatchSampler(LENGTHS, max_tokens=64, seq_len=32, overflow="error")


def test_loading_another_seed_rebuilds_the_epoch():
    from loaders import PackingBatchSampler

    lengths = np.random.default_rng(7).integers(1, 60, 200)
    a = PackingBatchSampler(lengths, max_tokens=256, seed=0)
    b = PackingBatchSampler(lengths, max_tokens=256, seed=5)
    assert list(a) != list(b)  # a's epoch 0 is now built (and cached) for seed 0
    a.load_state_dict(b.state_dict(batches_done=0))
    assert list(a) == list(b)


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(attention="dense"),
        dict(attention="dense", d_model=64, step_cost=0),
        dict(overflow="split", attention="varlen", causal=False),
    ],
)
def test_default_row_length_is_the_cost_choice(kw):
    from dyntile.planning import choose_seq_len, pack_lengths

    L = np.random.default_rng(3).lognormal(3.5, 1.0, 3000).astype(np.int64) + 1
    s = PackingBatchSampler(L, max_tokens=2048, seed=4, **kw)
    choice = choose_seq_len(L, max_tokens=2048, **kw)
    assert s.shapes == choice.shapes and s.shapes[0][1] < L.max()
    s.set_epoch(1)
    expected = pack_lengths(L, max_tokens=2048, seed=4, epoch=1, **kw)
    assert len(s.packed_batches()) == len(expected)
    assert all(a.same_as(b) for a, b in zip(s.packed_batches(), expected))


def test_explicit_seq_len_ignores_the_cost_options():
    a = PackingBatchSampler(LENGTHS, max_tokens=512, seq_len=64, seed=3)
    b = PackingBatchSampler(LENGTHS, max_tokens=512, seq_len=64, seed=3, attention="dense", d_model=16)
    assert a.shapes == b.shapes == ((8, 64), (5, 96)) and list(a) == list(b)
    with pytest.raises(ValueError, match="attention should be one of"):
        PackingBatchSampler(LENGTHS, max_tokens=512, seq_len=64, attention="sdpa")
    with pytest.raises(ValueError, match="pass d_model or attention_weight, not both"):
        PackingBatchSampler(LENGTHS, max_tokens=512, d_model=64, attention_weight=0.1)
