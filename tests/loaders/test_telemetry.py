"""loaders.telemetry: real tokens, loss tokens, padding and attention waste of a batch,
against the samples' own lengths, for every collate's output; and the callbacks."""

import numpy as np
import pytest
import torch

from loaders import BucketBatchSampler, DynTileCollate, PackedCollate
from loaders.telemetry import StepTelemetry, batch_telemetry

LENGTHS = [5, 11, 3, 1, 7, 9, 2, 6, 13]


def samples(lengths=LENGTHS):
    rng = np.random.default_rng(0)
    out = []
    for n in lengths:
        ids = torch.as_tensor(rng.integers(1, 50, n))
        labels = ids.clone()
        labels[: n // 2] = -100
        out.append({"input_ids": ids, "labels": labels})
    return out


def expected(lengths, slots, rows, T):
    L = np.asarray(lengths)
    loss = sum(n - n // 2 - (1 if n // 2 == 0 else 0) for n in lengths)  # shifted targets
    return dict(
        real=int(L.sum()), loss=loss, pad=1 - L.sum() / slots, waste=1 - (L**2).sum() / (rows * T * T)
    )


def check(t, e):
    assert t.real_tokens == e["real"] and t.loss_tokens == e["loss"]
    assert t.padded_fraction == pytest.approx(e["pad"]) and t.attention_waste == pytest.approx(e["waste"])


@pytest.mark.parametrize("keys", ["all", "segment_ids", "lengths"])
def test_packed_batch(keys):
    out = PackedCollate([(3, 24)])(samples())
    if keys == "lengths":
        out = {"input_ids": out["input_ids"], "labels": out["labels"], "lengths": out["lengths"]}
    elif keys != "all":
        out = {k: out[k] for k in ("input_ids", "labels", keys)}
    check(batch_telemetry(out), expected(LENGTHS, 72, 3, 24))


def test_padded_batch_by_mask_and_by_lengths():
    out = DynTileCollate(multiple=8)(samples())
    B, T = out["input_ids"].shape
    check(batch_telemetry(out), expected(LENGTHS, B * T, B, T))
    del out["lengths"]
    check(batch_telemetry(out), expected(LENGTHS, B * T, B, T))


def test_hugging_faces_flattening():
    from transformers import DataCollatorWithFlattening

    out = DataCollatorWithFlattening(return_tensors="pt")(
        [{"input_ids": s["input_ids"].tolist()} for s in samples()]
    )
    t = batch_telemetry(out)
    assert t.real_tokens == sum(LENGTHS) and t.padded_fraction == 0
    assert t.attention_waste == pytest.approx(1 - sum(n * n for n in LENGTHS) / sum(LENGTHS) ** 2)


def test_steps_add_their_batches():
    steps = StepTelemetry()
    batch = PackedCollate([(3, 24)])(samples())
    steps.observe(batch)
    steps.observe(batch)
    figures = steps.step_end()
    assert figures["real_tokens"] == 2 * sum(LENGTHS) and figures["real_tokens_per_s"] > 0
    assert steps.step_end()["real_tokens"] == 0


def test_hugging_face_callback_counts_what_the_model_trained_on(tmp_path):
    transformers = pytest.importorskip("transformers")
    from loaders.integrations.hf_telemetry import TelemetryCallback
    from loaders.integrations.huggingface import DynTileTrainer

    data = samples(LENGTHS * 2)
    cfg = transformers.LlamaConfig(
        vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32
    )
    model = transformers.LlamaForCausalLM(cfg)
    sampler = BucketBatchSampler(
        [len(s["input_ids"]) for s in data], batch_size=3, shuffle=False, max_buckets=1
    )
    callback = TelemetryCallback()
    args = transformers.TrainingArguments(
        str(tmp_path), max_steps=3, logging_steps=1, use_cpu=True, report_to="none", save_strategy="no"
    )
    trainer = DynTileTrainer(
        model=model,
        args=args,
        train_dataset=data,
        train_batch_sampler=sampler,
        data_collator=DynTileCollate(plan=sampler.plan, lengths_key=None),
        callbacks=[callback],
    )
    trainer.train()
    batches = list(sampler)[:3]
    assert [h["real_tokens"] for h in callback.history] == [
        sum(len(data[i]["input_ids"]) for i in b) for b in batches
    ]
    assert all(h["real_tokens_per_s"] > 0 for h in callback.history)


def test_lightning_callback_logs_each_step(tmp_path):
    lightning = pytest.importorskip("lightning")
    from torch.utils.data import DataLoader

    from loaders.integrations.lightning import TelemetryCallback

    class Tiny(lightning.LightningModule):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(50, 4)

        def training_step(self, batch, index):
            return self.embed(batch["input_ids"]).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = samples()
    packed = PackedCollate([(2, 24)])
    # the batch's "packing" record is a frozen dataclass, which Lightning's device transfer refuses
    loader = DataLoader(
        data, batch_size=3, collate_fn=lambda b: {k: v for k, v in packed(b).items() if k != "packing"}
    )
    callback = TelemetryCallback()
    trainer = lightning.Trainer(
        max_steps=3,
        callbacks=[callback],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(tmp_path),
    )
    trainer.fit(Tiny(), loader)
    assert [h["real_tokens"] for h in callback.history] == [sum(LENGTHS[i : i + 3]) for i in (0, 3, 6)]
    assert "telemetry/real_tokens_per_s" in trainer.callback_metrics
