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
    same = PackingBatchSampler(np.asarray(LENGTHS, np.int32), max_tokens=np.int64(256), pool_size=np.int64(65536))
    same.load_state_dict(state)


@settings(max_examples=15, deadline=None)
@given(n=st.integers(1, 150), R=st.integers(1, 4), seed=st.integers(0, 5),
       overflow=st.sampled_from(["second_shape", "split"]))
def test_ranks_in_step(n, R, seed, overflow):
    L = np.random.default_rng(seed).integers(0, 100, n)
    try:
        samplers = [PackingBatchSampler(L, max_tokens=256, seq_len=64, overflow=overflow, seed=seed,
                                        num_replicas=R, rank=r) for r in range(R)]
        per_rank = [list(s) for s in samplers]
    except ValueError as e:
        assert "num_replicas" in str(e)
        return
    assert len({len(b) for b in per_rank}) == 1 and all(len(b) == len(s) for b, s in zip(per_rank, samplers))
    for step in zip(*per_rank):
        shapes = {pack_rows(L[b], samplers[0].shapes, overflow=overflow).shape for b in step}
        assert len(shapes) == 1, "same shape on every rank at every step"
    flat = np.concatenate([np.concatenate(b) for b in per_rank if b]) if any(per_rank) else np.zeros(0)
    assert np.array_equal(np.sort(flat), np.arange(n)), "every sample once per epoch, over all ranks"


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
    assert list(a) != list(b)          # a's epoch 0 is now built (and cached) for seed 0
    a.load_state_dict(b.state_dict(batches_done=0))
    assert list(a) == list(b)
