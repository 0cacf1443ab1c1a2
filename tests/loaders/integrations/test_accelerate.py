"""loaders.integrations.accelerate: a prepared loader draws exactly its sampler's batches;
options that cut batches across processes, and ranks that disagree, are refused."""

from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("accelerate")
from accelerate import Accelerator, DataLoaderConfiguration  # noqa: E402
from accelerate.data_loader import BatchSamplerShard, SkipBatchSampler  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from loaders import BucketBatchSampler, PackingBatchSampler  # noqa: E402
from loaders.integrations.accelerate import dyntile_sampler, prepare_data_loader  # noqa: E402

LENGTHS = np.random.default_rng(5).integers(1, 90, 203)


class TwoProcesses:
    """An Accelerator's prepare_data_loader as it is on process ``index`` of 2: the batch
    sampler dealt out by a BatchSamplerShard."""

    split_batches = dispatch_batches = False

    def __init__(self, index):
        self.index = index

    def prepare_data_loader(self, loader):
        shard = BatchSamplerShard(loader.batch_sampler, num_processes=2, process_index=self.index)
        return DataLoader(loader.dataset, batch_sampler=shard, collate_fn=loader.collate_fn)


@pytest.mark.parametrize(
    "make",
    [
        lambda **k: BucketBatchSampler(LENGTHS, max_tokens=600, seed=4, **k),
        lambda **k: PackingBatchSampler(LENGTHS, max_tokens=600, seed=4, **k),
    ],
)
def test_each_process_draws_its_sampler_batches_whole(make):
    drawn = []
    for rank in (0, 1):
        sampler = make(num_replicas=2, rank=rank)
        prepared = prepare_data_loader(
            TwoProcesses(rank), DataLoader(range(len(LENGTHS)), batch_sampler=sampler, collate_fn=list)
        )
        assert dyntile_sampler(prepared) is sampler and len(prepared) == len(sampler)
        drawn.append(list(prepared))
        assert drawn[-1] == list(sampler)
    assert {i for batches in drawn for b in batches for i in b} == set(range(len(LENGTHS)))


def test_ranks_that_disagree_with_accelerate_are_refused():
    sampler = BucketBatchSampler(LENGTHS, max_tokens=600, num_replicas=3, rank=1)
    with pytest.raises(ValueError, match=r"accelerate runs 2 processes .* splits over 3 ranks"):
        prepare_data_loader(TwoProcesses(1), DataLoader(range(len(LENGTHS)), batch_sampler=sampler))


@pytest.mark.parametrize("option", ["split_batches", "dispatch_batches"])
def test_options_that_cut_batches_are_refused(option):
    accelerator = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(**{option: True}))
    loader = DataLoader(range(len(LENGTHS)), batch_sampler=BucketBatchSampler(LENGTHS, max_tokens=600))
    with pytest.raises(ValueError, match=f"{option}=True cuts every batch"):
        prepare_data_loader(accelerator, loader)


def test_one_process_and_other_loaders_are_prepared_as_accelerate_does():
    accelerator = Accelerator(cpu=True)
    sampler = BucketBatchSampler(LENGTHS, max_tokens=600, seed=2)
    prepared = prepare_data_loader(accelerator, DataLoader(range(len(LENGTHS)), batch_sampler=sampler))
    assert [b.tolist() for b in prepared] == sampler.batches(0)
    plain = prepare_data_loader(accelerator, DataLoader(range(10), batch_size=4))
    assert dyntile_sampler(plain) is None and len(plain) == 3


def test_dyntile_sampler_looks_through_wrappers():
    sampler = BucketBatchSampler(LENGTHS, max_tokens=600)
    wrapped = SimpleNamespace(batch_sampler=SkipBatchSampler(BatchSamplerShard(sampler), 2))
    assert dyntile_sampler(wrapped) is sampler
    assert dyntile_sampler(None) is None and dyntile_sampler(DataLoader(range(3))) is None


def prepared_packing(workers=0):
    sampler = PackingBatchSampler(LENGTHS, max_tokens=600, seed=4)
    loader = DataLoader(range(len(LENGTHS)), batch_sampler=sampler, collate_fn=list, num_workers=workers)
    return sampler, prepare_data_loader(Accelerator(cpu=True), loader)


def test_the_loader_pass_counter_is_the_sampler_epoch():
    sampler, prepared = prepared_packing()
    sampler.set_epoch(3)
    assert list(prepared) == sampler.batches(3)  # not epoch 0's
    assert sampler.epoch == 4 and list(prepared) == sampler.batches(4)  # a whole pass: the next epoch
    prepared.set_epoch(1)  # as Hugging Face's Trainer calls it
    assert sampler.epoch == 1 and list(prepared) == sampler.batches(1)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_resume_continues_at_the_batch_the_loop_received(workers):
    sampler, prepared = prepared_packing(workers)
    sampler.set_epoch(2)
    batches = iter(prepared)
    received = [next(batches) for _ in range(3)]  # the loader has drawn a batch (or more) ahead
    state = sampler.state_dict()
    assert state["epoch"] == 2 and state["batches_yielded"] == 3
    del batches
    sampler, prepared = prepared_packing(workers)  # a new process
    sampler.load_state_dict(state)
    assert received + list(prepared) == sampler.batches(2)  # the saved epoch, from its batch 3
    assert list(prepared) == sampler.batches(3)
