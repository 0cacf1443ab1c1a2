"""Lightning on dyntile samplers: one device in this process, ddp over 2 ``torchrun``
processes (gloo), with the sampler built in train_dataloader (Lightning rebuilds it with
its DistributedSampler) or at import before the process group (scenarios:
scripts/lightning_runs.py; the docs' recipe: tests/docs/test_readme.py)."""

from pathlib import Path

import pytest

pytest.importorskip("lightning")

from framework_runs import check_scenarios  # noqa: E402

SCRIPT = Path(__file__).resolve().parent / "scripts" / "lightning_runs.py"
WORKS = None


def expected(world: int) -> dict:
    return {
        "packing_in_train_dataloader": WORKS,
        "module_level_without_injection": WORKS,
        # Lightning injects a distributed sampler only under ddp
        "module_level_with_injection": WORKS
        if world == 1
        else r"TypeError: BucketBatchSampler got a DistributedSampler .*use_distributed_sampler=False",
    }


@pytest.mark.parametrize("world", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_scenarios_on_one_device_and_under_ddp_over_torchrun(world, scenario_ranks):
    check_scenarios(scenario_ranks(SCRIPT, world), expected(world))
