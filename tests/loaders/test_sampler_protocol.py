"""The samplers as frameworks see them: torch's BatchSampler contract, ``.sampler`` and
``set_epoch``, and the wrappers that would regroup or re-shard their batches refused."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler  # noqa: E402

from sampler_makers import BOTH, LENGTHS, bucket  # noqa: E402


@pytest.mark.parametrize("make", BOTH)
def test_a_torch_batch_sampler_with_its_epoch_behind_sampler(make):
    s = make()
    assert isinstance(s, BatchSampler)
    assert s.batch_size is None and s.drop_last is False  # batches vary: the sampler decides
    epoch0 = list(s)
    assert list(s.sampler) == [i for b in epoch0 for i in b] and len(s.sampler) == sum(map(len, epoch0))
    s.sampler.set_epoch(1)  # what Lightning and accelerate call
    assert s.epoch == 1 and list(s) != epoch0
    it = iter(s)
    head = [next(it), next(it)]
    list(s.sampler)  # reading the view moves nothing
    assert head + list(it) == list(s)


@pytest.mark.parametrize("make", BOTH)
def test_drawn_as_an_index_sampler_is_refused(make):
    s = make()
    with pytest.raises(TypeError, match=r"batch_sampler=\.\.\.\), not DataLoader\(sampler=\.\.\.\)"):
        next(iter(DataLoader(list(range(len(LENGTHS))), sampler=s, batch_size=4)))
    with pytest.raises(TypeError, match="DynTileTrainer"):
        list(BatchSampler(s, 4, False))


class Shard(BatchSampler):
    """A wrapper that deals batches out to processes, as accelerate's BatchSamplerShard does."""

    def __init__(self, batch_sampler, num_processes, process_index):
        self.batch_sampler, self.num_processes, self.process_index = (
            batch_sampler,
            num_processes,
            process_index,
        )

    def __iter__(self):
        for i, batch in enumerate(self.batch_sampler):
            if i % self.num_processes == self.process_index:
                yield batch

    def __len__(self):
        return len(self.batch_sampler) // self.num_processes


@pytest.mark.parametrize("make", BOTH)
def test_sharded_again_is_refused(make):
    with pytest.raises(RuntimeError, match="prepare_data_loader"):
        list(Shard(make(num_replicas=2, rank=1), 2, 1))
    whole = make(num_replicas=2, rank=1)
    assert list(Shard(whole, 1, 0)) == list(whole)  # a neutralised shard passes batches through
    single = make(num_replicas=1, rank=0)  # one rank's list, dealt out by the wrapper
    assert list(Shard(single, 2, 1)) == list(single)[1::2]


def test_accelerate_shard_is_refused_and_a_neutral_one_passes():
    data_loader = pytest.importorskip("accelerate.data_loader")
    s = bucket(num_replicas=2, rank=0)
    with pytest.raises(RuntimeError, match="BatchSamplerShard deals the batches"):
        list(data_loader.BatchSamplerShard(s, num_processes=2, process_index=0))
    assert list(data_loader.BatchSamplerShard(s, num_processes=1, process_index=0)) == list(s)
    assert list(data_loader.SkipBatchSampler(s, 2)) == list(s)[2:]


class Holder:
    """Not a BatchSampler: an object that keeps the sampler as ``.sampler`` and iterates it."""

    def __init__(self, sampler):
        self.sampler = sampler

    def batches(self):
        return list(self.sampler)


def test_other_callers_named_sampler_are_not_refused():
    s = bucket()
    assert Holder(s).batches() == list(s)


@pytest.mark.parametrize("make", BOTH)
def test_a_framework_rebuilding_it_around_a_sampler_is_told_what_to_do(make):
    # Lightning's call for a batch sampler it could not record: cls(sampler, batch_size=..., drop_last=...)
    ds = DistributedSampler(range(len(LENGTHS)), num_replicas=2, rank=0)
    with pytest.raises(TypeError, match=r"train_dataloader\(\).*use_distributed_sampler=False"):
        type(make())(ds, batch_size=None, drop_last=False)
