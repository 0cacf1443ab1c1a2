"""Ranks of the samplers: read when they are needed (a sampler built before the process
group splits over it), explicit ones fixed, a framework's distributed ``sampler=``."""

from __future__ import annotations

import pickle

import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import DistributedSampler, RandomSampler  # noqa: E402

from sampler_makers import BOTH, LENGTHS, bucket, packing  # noqa: E402


@pytest.mark.parametrize("make", BOTH)
def test_sampler_argument_gives_the_ranks(make):
    ds = DistributedSampler(range(len(LENGTHS)), num_replicas=3, rank=2, shuffle=True, seed=9)
    s = make(sampler=ds)
    assert s.replicas() == (3, 2)
    assert list(s) == list(make(num_replicas=3, rank=2))  # its order is the sampler's own, not ds's
    assert make(sampler=ds, num_replicas=3).replicas() == (3, 2)
    with pytest.raises(ValueError, match="given rank=1, but its sampler="):
        make(sampler=ds, rank=1)
    with pytest.raises(ValueError, match="lengths for 301 samples, but the dataset"):
        make(sampler=DistributedSampler(range(300), num_replicas=3, rank=2))
    with pytest.raises(TypeError, match="orders its own batches.*RandomSampler"):
        make(sampler=RandomSampler(range(len(LENGTHS))))


def fake_process_group(monkeypatch) -> dict:
    """torch.distributed as the samplers read it, without starting a group: set
    ``group["ranks"] = (world, rank)`` for init_process_group, clear it for none."""
    import torch.distributed as dist

    group = {}
    monkeypatch.setattr(dist, "is_available", lambda: True)
    monkeypatch.setattr(dist, "is_initialized", lambda: "ranks" in group)
    monkeypatch.setattr(dist, "get_world_size", lambda *a, **k: group["ranks"][0])
    monkeypatch.setattr(dist, "get_rank", lambda *a, **k: group["ranks"][1])
    return group


@pytest.fixture
def launched(monkeypatch):
    """A process under a 2-process launcher (WORLD_SIZE=2) before its process group starts;
    ``start(world, rank)`` then stands for init_process_group."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    group = fake_process_group(monkeypatch)
    return lambda world, rank: group.update(ranks=(world, rank))


@pytest.mark.parametrize("make", BOTH)
def test_ranks_are_read_when_needed(make, launched):
    s = make()  # built before the process group
    for use in (len, lambda s: next(iter(s)), lambda s: s.state_dict()):
        with pytest.raises(RuntimeError, match="WORLD_SIZE=2.*init_process_group.*num_replicas= and rank="):
            use(s)
    assert len(make(num_replicas=2, rank=1)) == len(make(num_replicas=2, rank=1))  # explicit: unaffected
    launched(2, 1)
    expected = make(num_replicas=2, rank=1)
    assert (s.num_replicas, s.rank, len(s)) == (2, 1, len(expected)) and list(s) == list(expected)
    assert s.state_dict()["num_replicas"] == 2


def test_a_single_process_answer_is_not_kept(monkeypatch):
    """Without a launcher the sampler is one process until a group starts: taken
    before then, its length does not go stale."""
    group = fake_process_group(monkeypatch)
    s = bucket()
    single = len(s)
    group["ranks"] = (2, 0)
    assert len(s) == len(bucket(num_replicas=2, rank=0)) < single
    group.clear()  # a group's answer, once seen, holds
    assert s.replicas() == (2, 0)


def test_pickled_samplers_keep_explicit_ranks_and_discover_the_rest(launched):
    explicit, lazy = bucket(num_replicas=2, rank=1), bucket()
    explicit, lazy = pickle.loads(pickle.dumps(explicit)), pickle.loads(pickle.dumps(lazy))
    assert explicit.replicas() == (2, 1)
    launched(2, 0)
    assert lazy.replicas() == (2, 0)


def test_bad_ranks_are_refused_at_construction():
    with pytest.raises(ValueError, match="rank should be a non-negative"):
        bucket(rank=-1)
    with pytest.raises(ValueError, match=r"rank should be in \[0, 1\]"):
        packing(num_replicas=2, rank=2)
    with pytest.raises(ValueError, match="num_replicas should be a positive"):
        bucket(num_replicas=0)
