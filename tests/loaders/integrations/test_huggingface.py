"""Hugging Face Trainer on dyntile samplers: DynTileTrainer and SamplerEpochCallback, in one
process and over 2 ``torchrun`` processes (gloo), against the refusals of the routes
that would lose samples (scenarios: scripts/hf_runs.py; the docs' recipe:
tests/docs/test_readme.py)."""

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from framework_runs import check_scenarios  # noqa: E402

SCRIPT = Path(__file__).resolve().parent / "scripts" / "hf_runs.py"
WORKS = None


def expected(world: int) -> dict:
    return {
        "packing_from_get_train_sampler": WORKS,
        "plain_loader_and_callback": WORKS,
        # accelerate shards only over several processes
        "accelerator_prepare": WORKS
        if world == 1
        else r"RuntimeError: BatchSamplerShard .*prepare_data_loader",
        "sampler_from_plain_trainer": r"Error: .*DynTileTrainer",
    }


@pytest.mark.parametrize("world", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_scenarios_in_one_process_and_over_torchrun(world, scenario_ranks):
    check_scenarios(scenario_ranks(SCRIPT, world), expected(world))


def test_trainer_refuses_a_sampler_that_is_not_dyntile():
    from loaders.integrations.huggingface import DynTileTrainer

    with pytest.raises(TypeError, match="train_batch_sampler should be a dyntile batch sampler"):
        DynTileTrainer(model=None, train_batch_sampler=[[0, 1]])


def test_callback_counts_epochs_from_the_trainer_state():
    from types import SimpleNamespace

    from torch.utils.data import DataLoader

    from loaders import BucketBatchSampler
    from loaders.integrations.huggingface import SamplerEpochCallback

    sampler = BucketBatchSampler(np.arange(1, 30), batch_size=4)
    loader = DataLoader(range(29), batch_sampler=sampler)
    callback = SamplerEpochCallback()
    callback.on_train_begin(None, SimpleNamespace(epoch=2.4), None)  # resumed in epoch 2
    for expected_epoch in (2, 3):
        callback.on_epoch_begin(None, None, None, train_dataloader=loader)
        assert sampler.epoch == expected_epoch
        callback.on_epoch_end(None, None, None)
    callback.on_epoch_begin(
        None, None, None, train_dataloader=DataLoader(range(3))
    )  # no dyntile sampler: no-op
