"""DynTileTrainer over a StreamingPacker (scripts/hf_stream_run.py), in one process and over
2 ``torchrun`` processes (gloo) whose shards differ 5x: every pass of the stream the ranks
train every sample (the big shard's each once, the small shard's rank repeating to keep
in step), in the same number of steps, in a new order; the Trainer reaches max_steps with
``gradient_accumulation_steps`` finite losses a step, and nothing hangs. A resumed run
trains the batches an uninterrupted one does."""

import math
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

SCRIPT = Path(__file__).resolve().parent / "scripts" / "hf_stream_run.py"


def _rank(events: list[dict]) -> tuple[dict, dict, list[float]]:
    """``({epoch: [batches]}, the end note, losses)`` of one rank."""
    notes = [e["note"] for e in events if "note" in e]
    batches: dict = {}
    for n in notes:
        if "batch" in n:
            batches.setdefault(n["epoch"], []).append(n["batch"])
    losses = [e["loss"] for e in events if "loss" in e]
    return batches, next(n for n in notes if "global_step" in n), losses


@pytest.mark.parametrize("world", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_trainer_trains_a_stream_on_every_rank(world, scenario_ranks):
    ranks = [_rank(events) for events in scenario_ranks(SCRIPT, world)]
    end = ranks[0][1]
    for _, rank_end, losses in ranks:  # 2 micro-batches a step on every rank, all finite
        assert rank_end["global_step"] == end["max_steps"]
        assert len(losses) == 2 * end["max_steps"] and all(map(math.isfinite, losses))
    finished = sorted(ranks[0][0])[:-1]  # the last pass is cut by max_steps
    assert len(finished) >= 2
    for epoch in finished:
        steps = {len(batches[epoch]) for batches, _, _ in ranks}
        assert len(steps) == 1, f"epoch {epoch}: the ranks took {steps} steps"
        seen = [Counter(s for b in batches[epoch] for s in b) for batches, _, _ in ranks]
        assert sum(seen, Counter()).keys() == set(range(end["samples"])), f"epoch {epoch}: a sample missed"
        for counts, (_, rank_end, _) in zip(seen, ranks):
            assert counts.keys() == set(rank_end["shard"])  # each rank its own shard
        assert set(seen[0].values()) == {1}  # the big shard's rank: each sample once
        if world == 2:  # the small shard's rank repeats batches to keep DDP in step
            assert max(seen[1].values()) > 1
    first = ranks[0][0]
    assert first[0][0] != first[1][0], "epoch 1 repeats epoch 0's order"


def test_a_resume_trains_what_the_uninterrupted_run_does(tmp_path):
    """Over passes of 8 batches, 12 steps of 2: the checkpoint at step 6 lies in pass 1."""
    from stream_training import named_samples, train

    data = named_samples(120)
    whole, resumed = [], []
    train(tmp_path / "whole", data, 12, lambda *batch: whole.append(batch))
    train(tmp_path / "cut", data, 12, lambda *batch: None, save=6)
    train(
        tmp_path / "cut",
        data,
        12,
        lambda *b: resumed.append(b),
        resume=str(tmp_path / "cut" / "checkpoint-6"),
    )
    assert len({epoch for epoch, _ in whole[:24]}) >= 3  # the run crosses passes
    assert resumed == whole  # the first 12 drawn again and skipped, then the same 12 trained


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


def test_one_rank_with_workers_reads_pass_after_pass(tmp_path):
    """Two workers, each its part of every pass; the passes follow one another."""
    import itertools

    trainer = _trainer(tmp_path, dataloader_num_workers=2)
    batches = [b["lengths"].tolist() for b in itertools.islice(trainer.get_train_dataloader(), 6)]
    assert sorted(n for b in batches[:2] for n in b) == [2, 3, 5, 6]  # pass 0: every sample once
    assert sorted(n for b in batches for n in b) == sorted([2, 3, 5, 6] * 3)
