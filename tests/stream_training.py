"""A tiny Llama trained by ``DynTileTrainer`` over a ``StreamingPacker``, recording the batches
it collates: what ``tests/loaders/integrations/test_hf_stream.py`` and its torchrun script
(``scripts/hf_stream_run.py``) share."""

from __future__ import annotations

import numpy as np


def named_samples(n: int, seed: int = 0) -> list[dict]:
    """``n`` token samples of 2-59 tokens, sample ``i``'s first token ``i + 3`` (its name)."""
    import torch

    rng = np.random.default_rng(seed)
    data = []
    for i, length in enumerate(rng.integers(2, 60, n)):
        ids = torch.from_numpy(rng.integers(3, 500, int(length)))
        ids[0] = i + 3
        data.append({"input_ids": ids, "labels": ids.clone()})
    return data


def name(sample: dict) -> int:
    return int(sample["input_ids"][0]) - 3


def train(out, samples: list, max_steps: int, record, resume=None, save: int | None = None, **options):
    """Train a tiny Llama (``dyntile_varlen``, accumulation 2) for ``max_steps`` over a
    ``StreamingPacker`` of ``samples`` (``options``: the packer's); ``record(epoch,
    names)`` sees every batch collated. Returns the trainer."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, TrainingArguments

    from loaders import PackedCollate, StreamingPacker
    from loaders.integrations.huggingface import DynTileTrainer, register_attention

    packer = StreamingPacker(samples, max_tokens=512, buffer_size=64, seq_len=128, **options)
    packed = PackedCollate(packer)

    def collate(batch):
        record(packer.epoch, [name(s) for s in batch])
        return packed(batch)

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=512,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=128,
    )
    model = LlamaForCausalLM._from_config(config, attn_implementation=register_attention())
    args = TrainingArguments(
        str(out),
        max_steps=max_steps,
        gradient_accumulation_steps=2,
        learning_rate=1e-3,
        report_to=[],
        use_cpu=True,
        save_strategy="steps" if save else "no",
        save_steps=save or 1,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    trainer = DynTileTrainer(model=model, args=args, train_dataset=packer, data_collator=collate)
    trainer.train(resume_from_checkpoint=resume)
    return trainer
