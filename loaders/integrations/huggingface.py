"""Hugging Face ``Trainer`` on a dyntile batch sampler: whole batches, a new order each epoch.

Left to itself the ``Trainer`` passes what ``_get_train_sampler`` returns to its
``DataLoader`` as ``sampler=`` (which would group a batch sampler's batches again;
the samplers refuse it), lets accelerate deal batches out to the processes again,
and calls ``set_epoch`` only on a loader accelerate prepared. :class:`DynTileTrainer`
puts the sampler in as the loader's ``batch_sampler``, prepares the loader with
:func:`loaders.integrations.accelerate.prepare_data_loader` (batches kept whole over
``torchrun`` ranks) and sets the epoch; :class:`SamplerEpochCallback` sets it for a
``Trainer`` whose own ``get_train_dataloader`` returns a plain ``DataLoader``.

The ``Trainer`` sizes every epoch, and ``max_steps``, from the loader's ``len()`` at
the start (epoch 0's). A packing epoch's batch count varies with the shuffle, so
:class:`DynTileTrainer` counts each epoch's own batches
(:meth:`~loaders.epoch_sampler.EpochBatchSampler.batches_in_epoch`): every batch of
every epoch trains, and ``max_steps`` (the learning-rate schedule's length) is the
exact sum.
"""

from __future__ import annotations

import math

from torch.utils.data import DataLoader
from transformers import Trainer, TrainerCallback
from transformers.utils import is_datasets_available

from ..epoch_sampler import EpochBatchSampler
from .accelerate import dyntile_sampler, prepare_data_loader

__all__ = ["DynTileTrainer", "SamplerEpochCallback"]


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

    # ---- epochs of varying length: each counted on its own

    def _update_steps(self, sampler: EpochBatchSampler, epoch: int) -> tuple[int, int]:
        """``(batches, optimizer steps)`` of ``epoch``, as the ``Trainer`` counts steps."""
        batches = sampler.batches_in_epoch(epoch)
        return batches, max(math.ceil(batches / self.args.gradient_accumulation_steps), 1)

    def set_initial_training_values(self, args, dataloader):
        """The ``Trainer``'s counts, with ``max_steps`` the exact sum of the epochs'
        optimizer steps (``num_train_epochs`` given), or enough epochs to reach it
        (``max_steps`` given)."""
        values = list(super().set_initial_training_values(args, dataloader))
        sampler = self._sized_sampler = dyntile_sampler(dataloader)
        if sampler is None:
            return tuple(values)
        if args.max_steps > 0:  # epochs until the steps are reached
            epochs, done = 0, 0
            while done < args.max_steps:
                done += self._update_steps(sampler, epochs)[1]
                epochs += 1
            values[0] = epochs
        else:
            whole, part = divmod(args.num_train_epochs, 1)
            steps = [self._update_steps(sampler, e)[1] for e in range(math.ceil(args.num_train_epochs))]
            values[6] = sum(steps[: int(whole)]) + (math.ceil(part * steps[-1]) if part else 0)
        return tuple(values)

    def _init_training_state(self, max_steps, per_epoch, *args, **kwargs):
        """The ``Trainer``'s state; on resume, the epoch and batch reached counted over
        the epochs' own lengths."""
        epochs, in_epoch = super()._init_training_state(max_steps, per_epoch, *args, **kwargs)
        sampler = getattr(self, "_sized_sampler", None)  # the loader's, from set_initial_training_values
        if sampler is None or self.state.global_step == 0:
            return epochs, in_epoch
        epochs, left = 0, self.state.global_step
        while left >= self._update_steps(sampler, epochs)[1]:
            left -= self._update_steps(sampler, epochs)[1]
            epochs += 1
        in_epoch = 0 if self.args.ignore_data_skip else left * self.args.gradient_accumulation_steps
        return epochs, in_epoch

    def _run_epoch(self, *, epoch, train_dataloader, steps_in_epoch, num_update_steps_per_epoch, **kwargs):
        """One epoch of the ``Trainer``, sized by this epoch's own batch count."""
        sampler = dyntile_sampler(train_dataloader)
        if sampler is not None:
            steps_in_epoch, num_update_steps_per_epoch = self._update_steps(sampler, epoch)
        return super()._run_epoch(
            epoch=epoch,
            train_dataloader=train_dataloader,
            steps_in_epoch=steps_in_epoch,
            num_update_steps_per_epoch=num_update_steps_per_epoch,
            **kwargs,
        )

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
