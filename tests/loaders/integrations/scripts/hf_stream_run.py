"""DynTileTrainer training a tiny Llama over a StreamingPacker, with gradient accumulation:
each rank notes every batch it collates (its samples, the stream's epoch);
``tests/loaders/integrations/test_hf_stream.py``
runs it in one process and over 2 ``torchrun`` processes and checks the notes. On 2
ranks each reads its own shard (``source_shards="ranks"``), rank 1's a fifth of rank 0's,
so rank 1 runs dry first every epoch and repeats batches to keep DDP in step."""

import os
import tempfile

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM, TrainingArguments

from framework_runs import note
from loaders import PackedCollate, StreamingPacker
from loaders.integrations.huggingface import DynTileTrainer, register_attention

N, MAX_STEPS = 120, 20
rng = np.random.default_rng(0)
data = []
for i, n in enumerate(rng.integers(2, 60, N)):
    ids = torch.from_numpy(rng.integers(3, 500, int(n)))
    ids[0] = 3 + i  # the sample's name
    data.append({"input_ids": ids, "labels": ids.clone()})
world, rank = int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("RANK", 0))
shard = data if world == 1 else data[: N * 5 // 6] if rank == 0 else data[N * 5 // 6 :]
packer = StreamingPacker(shard, max_tokens=512, buffer_size=64, seq_len=128, source_shards="ranks")
packed = PackedCollate(packer)


def collate(samples):
    note(batch=[int(s["input_ids"][0]) - 3 for s in samples], epoch=packer.epoch)
    return packed(samples)


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
with tempfile.TemporaryDirectory() as out:
    args = TrainingArguments(
        out,
        max_steps=MAX_STEPS,
        gradient_accumulation_steps=2,
        learning_rate=1e-3,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        logging_steps=5,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    trainer = DynTileTrainer(model=model, args=args, train_dataset=packer, data_collator=collate)
    trainer.train()
note(
    global_step=trainer.state.global_step,
    samples=N,
    max_steps=MAX_STEPS,
    shard=[int(s["input_ids"][0]) - 3 for s in shard],
)
