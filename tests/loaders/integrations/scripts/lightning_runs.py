"""Lightning scenarios on dyntile samplers, for ``python`` (1 device) and ``torchrun`` (ddp).

``python lightning_runs.py [SCENARIO ...]`` (all by default). Each scenario fits a tiny
language model for two epochs on an in-memory dataset, on CPU, one device per
process, between ``framework_runs.mark`` calls; one that is refused records its error
with ``framework_runs.note`` and the next one runs.
"""

import os

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader

import framework_runs
from loaders import BucketBatchSampler, DynTileCollate, PackedCollate, PackingBatchSampler

LENGTHS = np.random.default_rng(0).integers(3, 61, 157)
DATASET = [{"input_ids": torch.randint(3, 100, (int(n),))} for n in LENGTHS]
# built at import: before Lightning starts the process group (under torchrun, WORLD_SIZE=2 already)
MODULE_SAMPLER = BucketBatchSampler(LENGTHS, max_tokens=512, max_buckets=4, seed=1)


class TinyLM(L.LightningModule):
    def __init__(self, loader):
        super().__init__()
        torch.manual_seed(0)
        self.embed, self.head = torch.nn.Embedding(100, 16), torch.nn.Linear(16, 100)
        self.loader = loader

    def training_step(self, batch, index):
        x = batch["input_ids"]
        logits = self.head(self.embed(x))[:, :-1]
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), x[:, 1:].flatten(), ignore_index=0)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self):
        return self.loader()


def fit(loader, **trainer_args):
    devices = int(os.environ.get("WORLD_SIZE", 1))
    trainer = L.Trainer(
        max_epochs=2,
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **trainer_args,
    )
    trainer.fit(TinyLM(loader))


def bucket_loader(sampler):
    collate = DynTileCollate(plan=sampler.plan, pad_values={"input_ids": 0}, bucket_rows=sampler.batch_sizes)
    return DataLoader(DATASET, batch_sampler=sampler, collate_fn=collate)


def packing_in_train_dataloader():
    """Built in the hook; under ddp Lightning rebuilds it with sampler=DistributedSampler (the default)."""

    def loader():
        sampler = PackingBatchSampler(LENGTHS, max_tokens=512, seed=1)
        packed = PackedCollate(sampler)
        # the batch's "packing" record is a frozen dataclass, which Lightning's device transfer refuses
        return DataLoader(
            DATASET,
            batch_sampler=sampler,
            collate_fn=lambda samples: {k: v for k, v in packed(samples).items() if k != "packing"},
        )

    fit(loader)


def module_level_without_injection():
    """Built before the process group; ranks are read when the epoch starts."""
    fit(lambda: bucket_loader(MODULE_SAMPLER), use_distributed_sampler=False)


def module_level_with_injection():
    """Built before the process group, Lightning's default: it cannot rebuild it, so it is told what to do."""
    fit(lambda: bucket_loader(MODULE_SAMPLER))


if __name__ == "__main__":
    framework_runs.run_scenarios(
        packing_in_train_dataloader, module_level_without_injection, module_level_with_injection
    )
