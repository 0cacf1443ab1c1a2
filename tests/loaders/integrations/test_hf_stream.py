"""DynTileTrainer over a StreamingPacker (scripts/hf_stream_run.py), in one process and over
2 ``torchrun`` processes (gloo) whose shards differ 5x: every epoch the ranks together
train every sample once (plus the batches the dry rank repeats, reported), in the same
number of steps, in a new order; the Trainer reaches max_steps with a finite loss at
every step, and nothing hangs."""

import math
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

SCRIPT = Path(__file__).resolve().parent / "scripts" / "hf_stream_run.py"


def _epochs(events: list[dict]) -> tuple[dict, list[dict], dict, list[float]]:
    """``({epoch: [batches]}, [reports of finished epochs], the end note, losses)`` of one rank."""
    notes = [e["note"] for e in events if "note" in e]
    batches: dict = {}
    for n in notes:
        if "batch" in n:
            batches.setdefault(n["epoch"], []).append(n["batch"])
    reports = [n["report"] for n in notes if "report" in n and n["report"].get("steps")]
    losses = [e["loss"] for e in events if "loss" in e]
    return batches, reports, next(n for n in notes if "global_step" in n), losses


@pytest.mark.parametrize("world", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_trainer_trains_a_stream_on_every_rank(world, scenario_ranks):
    ranks = [_epochs(events) for events in scenario_ranks(SCRIPT, world)]
    end = ranks[0][2]
    for _, _, rank_end, losses in ranks:  # every rank in step: as many backward passes, all finite
        assert rank_end["global_step"] == end["max_steps"]
        assert len(losses) == len(ranks[0][3]) >= end["max_steps"] and all(map(math.isfinite, losses))
    finished = {rep["epoch"] for rep in ranks[0][1]}
    assert len(finished) >= 2  # the run crosses epochs
    for epoch in sorted(finished):
        seen: Counter = Counter()
        steps = set()
        for batches, reports, _, _ in ranks:
            report = next(rep for rep in reports if rep["epoch"] == epoch)
            mine = batches[epoch]
            assert len(mine) == report["steps"]  # every batch collated once, none drawn twice
            steps.add(report["steps"])
            for batch in mine[: report["steps"] - report["repeated_batches"]]:
                seen.update(batch)
        assert len(steps) == 1, f"epoch {epoch}: the ranks took {steps} steps"
        if world == 2:  # the small shard's rank kept in step by repeating
            assert ranks[1][1][0]["repeated_batches"] > 0
        assert seen == Counter(range(end["samples"])), f"epoch {epoch}: not every sample once"
    first = ranks[0][0]
    assert first[0][0] != first[1][0], "epoch 1 repeats epoch 0's order"


def _trainer(tmp_path, **options):
    import torch
    from transformers import TrainingArguments

    from loaders import BucketBatchSampler, PackedCollate, StreamingPacker
    from loaders.integrations.huggingface import DynTileTrainer

    stream = StreamingPacker([[3] * n for n in (5, 3, 6, 2)], max_tokens=16, seq_len=8, buffer_size=4)
    sampler = BucketBatchSampler([5, 3], batch_size=1) if options.pop("sampler", False) else None
    args = TrainingArguments(str(tmp_path), max_steps=1, report_to=[], use_cpu=True, **options)
    return DynTileTrainer(
        model=torch.nn.Linear(2, 2),
        args=args,
        train_dataset=stream,
        data_collator=PackedCollate(stream),
        train_batch_sampler=sampler,
    )


def test_a_stream_takes_no_batch_sampler(tmp_path):
    with pytest.raises(
        ValueError, match="StreamingPacker, which batches itself: pass no train_batch_sampler"
    ):
        _trainer(tmp_path, sampler=True).get_train_dataloader()


def test_workers_on_several_ranks_are_refused(tmp_path, monkeypatch):
    """Workers cannot reach the process group the stream keeps the ranks in step with."""
    from transformers import TrainingArguments

    trainer = _trainer(tmp_path, dataloader_num_workers=2)
    monkeypatch.setattr(TrainingArguments, "world_size", property(lambda self: 2))
    with pytest.raises(ValueError, match="on 2 ranks .* set dataloader_num_workers=0"):
        trainer.get_train_dataloader()


def test_one_rank_with_workers_trains_every_sample(tmp_path):
    trainer = _trainer(tmp_path, dataloader_num_workers=2)
    batches = [b["lengths"].tolist() for b in trainer.get_train_dataloader()]
    assert sorted(n for b in batches for n in b) == [2, 3, 5, 6]
