"""Lightning on dyntile samplers: one device in this process, ddp over 2 ``torchrun``
processes (gloo), with the sampler built in train_dataloader (Lightning rebuilds it with
its DistributedSampler) or at import before the process group (scenarios:
scripts/lightning_runs.py; the docs' recipe: tests/docs/test_readme.py)."""

from pathlib import Path

import pytest

pytest.importorskip("lightning")

from framework_runs import check_scenarios, run_in_process, torchrun  # noqa: E402

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


def test_scenarios_on_one_device(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    check_scenarios([run_in_process(SCRIPT)], expected(1))


@pytest.mark.slow
def test_scenarios_under_ddp_over_two_torchrun_processes(tmp_path):
    done, ranks = torchrun(SCRIPT, tmp_path)
    assert done.returncode == 0, done.stdout[-6000:]
    check_scenarios(ranks, expected(2))
