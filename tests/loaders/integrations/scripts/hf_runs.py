"""Hugging Face Trainer scenarios on dyntile samplers, for ``python`` and ``torchrun``.

``python hf_runs.py [SCENARIO ...]`` (all by default). Each scenario trains a tiny
GPT-2 built from a config for two epochs on an in-memory dataset, between
``framework_runs.mark`` calls; one that is refused records its error with
``framework_runs.note`` and the next one runs.
"""

import numpy as np
import torch
from torch.utils.data import DataLoader
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

import framework_runs
from loaders import BucketBatchSampler, DynTileCollate, PackedCollate, PackingBatchSampler
from loaders.integrations.huggingface import DynTileTrainer, SamplerEpochCallback

LENGTHS = np.random.default_rng(0).integers(3, 61, 157)  # odd sizes: remainders on 2 ranks
DATASET = [{"input_ids": torch.randint(3, 100, (int(n),))} for n in LENGTHS]
for item in DATASET:
    item["labels"] = item["input_ids"]


def model():
    torch.manual_seed(0)
    return GPT2LMHeadModel(
        GPT2Config(
            n_layer=1, n_head=2, n_embd=32, vocab_size=100, n_positions=64, bos_token_id=1, eos_token_id=2
        )
    )


def args(out):
    return TrainingArguments(
        out,
        num_train_epochs=2,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
        logging_strategy="no",
        learning_rate=1e-3,
    )


def bucketing():
    sampler = BucketBatchSampler(LENGTHS, max_tokens=512, max_buckets=4, seed=1)
    collate = DynTileCollate(
        plan=sampler.plan,
        pad_values={"input_ids": 0, "labels": -100},
        bucket_rows=sampler.batch_sizes,
        lengths_key=None,
    )
    return sampler, collate


def packing():
    sampler = PackingBatchSampler(LENGTHS, max_tokens=512, seed=1)
    packed = PackedCollate(sampler)
    keep = ("input_ids", "labels", "position_ids")  # the rest is for varlen attention kernels
    return sampler, lambda samples: {k: v for k, v in packed(samples).items() if k in keep}


def packing_from_get_train_sampler():
    """A DynTileTrainer subclass returning the sampler from _get_train_sampler."""
    train_on_sampler(DynTileTrainer, "packing", *packing())


def train_on_sampler(base: type, out: str, sampler, collate) -> None:
    """Train a subclass of ``base`` (a Trainer) whose _get_train_sampler returns ``sampler``."""

    class SamplerTrainer(base):
        def _get_train_sampler(self, *a, **k):
            return sampler

    SamplerTrainer(model=model(), args=args(out), train_dataset=DATASET, data_collator=collate).train()


def plain_loader_and_callback():
    """The Trainer's own get_train_dataloader returns a plain DataLoader; the callback sets the epoch."""
    sampler, collate = bucketing()
    train_on_loader("plain", lambda t: DataLoader(t.train_dataset, batch_sampler=sampler, collate_fn=collate))


def accelerator_prepare():
    """get_train_dataloader returns accelerator.prepare(DataLoader): accelerate shards over >1 process."""
    sampler, collate = bucketing()
    train_on_loader(
        "prepared",
        lambda t: t.accelerator.prepare(
            DataLoader(t.train_dataset, batch_sampler=sampler, collate_fn=collate)
        ),
    )


def train_on_loader(out: str, loader_of) -> None:
    """Train a plain Trainer whose get_train_dataloader returns ``loader_of(trainer)``, with
    the callback that sets the sampler's epoch."""

    class LoaderTrainer(Trainer):
        def get_train_dataloader(self):
            return loader_of(self)

    LoaderTrainer(
        model=model(), args=args(out), train_dataset=DATASET, callbacks=[SamplerEpochCallback()]
    ).train()


def sampler_from_plain_trainer():
    """A plain Trainer passes _get_train_sampler's result as sampler=: refused."""
    train_on_sampler(Trainer, "sampler", *bucketing())


if __name__ == "__main__":
    framework_runs.run_scenarios(
        packing_from_get_train_sampler,
        plain_loader_and_callback,
        accelerator_prepare,
        sampler_from_plain_trainer,
    )
