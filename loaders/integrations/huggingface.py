"""Hugging Face ``Trainer`` on a dyntile batch sampler: whole batches, a new order each epoch.

Left to itself the ``Trainer`` passes what ``_get_train_sampler`` returns to its
``DataLoader`` as ``sampler=`` (which would group a batch sampler's batches again;
the samplers refuse it), lets accelerate deal batches out to the processes again,
and calls ``set_epoch`` only on a loader accelerate prepared. :class:`DynTileTrainer`
puts the sampler in as the loader's ``batch_sampler``, prepares the loader with
:func:`loaders.integrations.accelerate.prepare_data_loader` (batches kept whole over
``torchrun`` ranks) and sets the epoch; :class:`SamplerEpochCallback` sets it for a
``Trainer`` whose own ``get_train_dataloader`` returns a plain ``DataLoader``.
:func:`register_attention` (from :mod:`loaders.integrations.hf_attention`) makes
``dyntile.varlen_attention`` a model's ``attn_implementation``, so packed batches
train at the cost of their samples.
"""

from __future__ import annotations

from torch.utils.data import DataLoader
from transformers import Trainer, TrainerCallback
from transformers.utils import is_datasets_available

from ..epoch_sampler import EpochBatchSampler
from .accelerate import dyntile_sampler, prepare_data_loader
from .hf_attention import register_attention

__all__ = ["DynTileTrainer", "SamplerEpochCallback", "register_attention"]


class SamplerEpochCallback(TrainerCallback):
    """Sets the epoch of the training loader's dyntile sampler before every epoch.

    The epoch count starts from the trainer state's (a resumed run's) and goes up
    by one per epoch, as the ``Trainer``'s own loop counts. ``Trainer(...,
    callbacks=[SamplerEpochCallback()])``; :class:`DynTileTrainer` adds it itself.

    >>> from loaders import BucketBatchSampler
    >>> sampler = BucketBatchSampler([3, 9, 4], batch_size=2)
    >>> callback, loader = SamplerEpochCallback(), DataLoader(range(3), batch_sampler=sampler)
    >>> callback.on_epoch_end(None, None, None)
    >>> callback.on_epoch_begin(None, None, None, train_dataloader=loader)
    >>> sampler.epoch
    1
    """

    def __init__(self):
        self.epoch = 0

    def on_train_begin(self, args, state, control, **kwargs):
        self.epoch = int(state.epoch or 0)  # a resumed run starts in the epoch it stopped in

    def on_epoch_begin(self, args, state, control, train_dataloader=None, **kwargs):
        sampler = dyntile_sampler(train_dataloader)
        if sampler is not None:
            sampler.set_epoch(self.epoch)

    def on_epoch_end(self, args, state, control, **kwargs):
        self.epoch += 1


class DynTileTrainer(Trainer):
    """A ``transformers.Trainer`` whose training batches come from a dyntile batch sampler.

    ``train_batch_sampler``: a :class:`~loaders.BucketBatchSampler` or
    :class:`~loaders.PackingBatchSampler` over ``train_dataset`` (one length per
    item; ranks from ``torch.distributed``, so one sampler serves ``python`` and
    ``torchrun``); pair it with a ``data_collator`` such as
    ``DynTileCollate(plan=sampler.plan, bucket_rows=sampler.batch_sizes, ...)``. A
    subclass may return the sampler from ``_get_train_sampler`` instead. Other
    arguments are ``Trainer``'s; ``per_device_train_batch_size`` and
    ``dataloader_drop_last`` do not apply (the sampler sizes the batches), the
    ``dataloader_*`` worker options do. Evaluation is the ``Trainer``'s own.

    >>> import tempfile, torch
    >>> from transformers import TrainingArguments
    >>> from loaders import BucketBatchSampler
    >>> sampler, out = BucketBatchSampler([3, 9, 4, 12], batch_size=2), tempfile.TemporaryDirectory()
    >>> trainer = DynTileTrainer(model=torch.nn.Linear(2, 2), train_dataset=list(range(4)),
    ...                          args=TrainingArguments(out.name, report_to=[], use_cpu=True),
    ...                          train_batch_sampler=sampler)
    >>> dyntile_sampler(trainer.get_train_dataloader()) is sampler
    True
    >>> out.cleanup()
    """

    def __init__(self, *args, train_batch_sampler: EpochBatchSampler | None = None, **kwargs):
        if train_batch_sampler is not None and not isinstance(train_batch_sampler, EpochBatchSampler):
            raise TypeError(
                f"train_batch_sampler should be a dyntile batch sampler (BucketBatchSampler or "
                f"PackingBatchSampler), but got {type(train_batch_sampler).__name__}"
            )
        self.train_batch_sampler = train_batch_sampler
        super().__init__(*args, **kwargs)
        self.add_callback(SamplerEpochCallback)

    def _get_train_sampler(self, *args, **kwargs):
        if self.train_batch_sampler is not None:
            return self.train_batch_sampler
        return super()._get_train_sampler(*args, **kwargs)

    def get_train_dataloader(self) -> DataLoader:
        """The training loader: the dyntile sampler as its ``batch_sampler``, prepared
        by accelerate with the batches kept whole (the ``Trainer``'s own loader when
        ``_get_train_sampler`` returns anything else)."""
        sampler = self._get_train_sampler()
        if not isinstance(sampler, EpochBatchSampler):
            return super().get_train_dataloader()
        if self.train_dataset is None:
            raise ValueError("Trainer: training requires a train_dataset.")
        dataset, collate = self.train_dataset, self.data_collator
        # the Trainer's own two routes to drop what the model's forward does not take
        if _is_hf_dataset(dataset):
            dataset = self._remove_unused_columns(dataset, description="training")
        else:
            collate = self._get_collator_with_removed_columns(collate, description="training")
        args = self.args
        workers = (
            dict(
                prefetch_factor=args.dataloader_prefetch_factor,
                persistent_workers=args.dataloader_persistent_workers,
            )
            if args.dataloader_num_workers
            else {}
        )
        loader = DataLoader(
            dataset,
            batch_sampler=sampler,
            collate_fn=collate,
            num_workers=args.dataloader_num_workers,
            pin_memory=args.dataloader_pin_memory,
            **workers,
        )
        return prepare_data_loader(self.accelerator, loader)


def _is_hf_dataset(dataset) -> bool:
    if not is_datasets_available():
        return False
    import datasets

    return isinstance(dataset, datasets.Dataset)
