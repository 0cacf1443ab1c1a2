"""DynTileTrainer's loss normalisation: batch 8 with no accumulation and batch 2 over 4
accumulation steps log one loss, step by step, for the token and the sequence mean."""

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

from loaders import BucketBatchSampler, DynTileCollate  # noqa: E402
from loaders.integrations.huggingface import DynTileTrainer  # noqa: E402

LENGTHS = np.random.default_rng(0).integers(2, 30, 40)


def dataset():
    rng = np.random.default_rng(1)
    out = []
    for n in LENGTHS:
        ids = torch.as_tensor(rng.integers(3, 50, n))
        labels = ids.clone()
        labels[: rng.integers(0, n)] = -100  # a prompt that is not trained on
        out.append({"input_ids": ids, "labels": labels})
    return out


def logged_losses(tmp_path, batch, accumulation, mean, model=None):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32
    )
    model = model or transformers.LlamaForCausalLM._from_config(cfg, attn_implementation="sdpa")
    sampler = BucketBatchSampler(LENGTHS, batch_size=batch, shuffle=False, max_buckets=1)
    args = transformers.TrainingArguments(
        str(tmp_path / f"{batch}-{mean}"),
        max_steps=5,
        gradient_accumulation_steps=accumulation,
        logging_steps=1,
        learning_rate=1e-2,
        use_cpu=True,
        report_to="none",
        save_strategy="no",
    )
    trainer = DynTileTrainer(
        model=model,
        args=args,
        train_dataset=dataset(),
        train_batch_sampler=sampler,
        data_collator=DynTileCollate(plan=sampler.plan, lengths_key=None),
        loss_mean=mean,
    )
    trainer.train()
    return [h["loss"] for h in trainer.state.log_history if "loss" in h]


def test_accumulation_logs_the_loss_of_the_whole_batch(tmp_path):
    whole = {}
    for mean in ("token", "sequence"):
        whole[mean] = logged_losses(tmp_path, 8, 1, mean)
        accumulated = logged_losses(tmp_path, 2, 4, mean)
        assert len(whole[mean]) == len(accumulated) == 5
        np.testing.assert_allclose(accumulated, whole[mean], rtol=1e-5, atol=1e-6)
    assert abs(whole["token"][0] - whole["sequence"][0]) > 1e-4  # two different means


class NoKwargs(torch.nn.Module):
    """A model whose forward takes no num_items_in_batch: its loss is a per-batch mean."""

    def __init__(self):
        super().__init__()
        self.head = torch.nn.Embedding(50, 50)

    def forward(self, input_ids, labels=None, attention_mask=None):
        logits = self.head(input_ids)
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten())
        return {"loss": loss, "logits": logits}


def test_a_model_without_num_items_in_batch_is_warned_about(tmp_path):
    sampler = BucketBatchSampler(LENGTHS, batch_size=2, shuffle=False, max_buckets=1)
    args = transformers.TrainingArguments(
        str(tmp_path), gradient_accumulation_steps=4, use_cpu=True, report_to="none"
    )
    with pytest.warns(UserWarning, match="takes no num_items_in_batch"):
        DynTileTrainer(model=NoKwargs(), args=args, train_dataset=dataset(), train_batch_sampler=sampler)
    with pytest.raises(ValueError, match="loss_mean should be one of"):
        DynTileTrainer(model=NoKwargs(), args=args, train_dataset=dataset(), loss_mean="row")
