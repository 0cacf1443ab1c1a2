"""DynTileTrainer on a packing sampler whose epochs differ in batch count: every batch of
every epoch trains, and max_steps is the exact sum of the epochs' optimizer steps."""

import math

import numpy as np
import pytest

pytest.importorskip("transformers")
pytest.importorskip("accelerate")
import torch  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel, TrainingArguments  # noqa: E402

from loaders import PackedCollate, PackingBatchSampler  # noqa: E402
from loaders.integrations.huggingface import DynTileTrainer  # noqa: E402

# 69 samples whose packed epochs 0 and 1 hold 19 and 20 batches (issue #36)
LENGTHS = np.random.default_rng(48).integers(1, 65, 69)


def train(tmp_path, resume=None, **options):
    sampler = PackingBatchSampler(LENGTHS, max_tokens=128, seq_len=64, seed=5, pool_size=8)
    assert [sampler.batches_in_epoch(e) for e in range(2)] == [19, 20]
    data = [{"input_ids": torch.randint(3, 100, (int(n),))} for n in LENGTHS]
    for item in data:
        item["labels"] = item["input_ids"]
    packed, seen = PackedCollate(sampler), []

    def collate(samples):
        out = packed(samples)
        seen.append(out["lengths"].tolist())
        return {k: out[k] for k in ("input_ids", "labels", "position_ids")}

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=1, n_embd=8, vocab_size=100, n_positions=64))
    options = dict(report_to=[], use_cpu=True, save_strategy="no", disable_tqdm=True) | options
    args = TrainingArguments(str(tmp_path), **options)
    trainer = DynTileTrainer(
        model=model, args=args, train_dataset=data, data_collator=collate, train_batch_sampler=sampler
    )
    trainer.train(resume_from_checkpoint=resume)
    return trainer.state, seen


@pytest.mark.parametrize("accumulate", [1, 2])
def test_every_batch_of_every_epoch_trains(tmp_path, accumulate):
    state, seen = train(tmp_path, num_train_epochs=2, gradient_accumulation_steps=accumulate)
    assert sorted(sum(seen, [])) == sorted(LENGTHS.tolist() * 2)  # each sample once per epoch
    steps = math.ceil(19 / accumulate) + math.ceil(20 / accumulate)
    assert state.global_step == state.max_steps == steps


def test_max_steps_runs_as_many_epochs_as_it_takes(tmp_path):
    state, seen = train(tmp_path, max_steps=39)
    assert sorted(sum(seen, [])) == sorted(LENGTHS.tolist() * 2) and state.global_step == 39


def test_a_resume_after_a_longer_epoch_trains_the_rest_of_its_epoch(tmp_path):
    """A checkpoint at step 42 (epochs of 19 and 20 batches, then batch 3 of epoch 2): the
    resumed run trains epoch 2 from its batch 3, counted over the epochs' own lengths
    (epoch 0's count would say 42 = 2 * 19 + 4)."""
    _, first = train(tmp_path, num_train_epochs=3, save_strategy="steps", save_steps=42)
    state, rest = train(tmp_path, resume=str(tmp_path / "checkpoint-42"), num_train_epochs=3)
    assert rest == first[42:] and state.global_step == len(first)
