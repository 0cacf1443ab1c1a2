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

A streaming loader (:class:`~loaders.StreamingPacker`, :class:`~loaders.StreamingBucketer`)
as ``train_dataset`` trains the same way: :class:`DynTileTrainer` gives the ``Trainer``
a ``DataLoader`` over the stream's passes one after another (epoch 0, 1, ...), prepared
with :func:`loaders.integrations.accelerate.prepare_stream_loader` (each rank reads its
own part, whole batches). A stream has no length, so the ``Trainer`` needs
``max_steps`` and sees one endless epoch: every optimizer step takes
``gradient_accumulation_steps`` batches, across passes too, and a resume skips the
batches already trained by drawing them again from the first pass, which lands
exactly where the run stopped (the ``Trainer`` resumes any length-less loader so; it
would restart the count at a pass's end). On several ranks the loader reads in the
main process (``dataloader_num_workers=0``), where the stream keeps the ranks in step.

:func:`register_attention` (from :mod:`loaders.integrations.hf_attention`) makes
``dyntile.varlen_attention`` a model's ``attn_implementation``, so packed batches
train at the cost of their samples.
"""

from __future__ import annotations

import math
import warnings

import torch
from torch.utils.data import DataLoader
from transformers import Trainer, TrainerCallback
from transformers.utils import is_datasets_available

from ..epoch_sampler import EpochBatchSampler
from ..loss import MEANS, LossCounts, loss_counts, normalised_loss
from ..stream_window import StreamWindows
from .accelerate import dyntile_sampler, prepare_data_loader, prepare_stream_loader
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
    subclass may return the sampler from ``_get_train_sampler`` instead. Or
    ``train_dataset``: a :class:`~loaders.StreamingPacker` (with
    ``PackedCollate(stream)``) or :class:`~loaders.StreamingBucketer`, and
    ``max_steps`` (see the module docstring). Other
    arguments are ``Trainer``'s; ``per_device_train_batch_size`` and
    ``dataloader_drop_last`` do not apply (the sampler sizes the batches), the
    ``dataloader_*`` worker options do. Evaluation is the ``Trainer``'s own.

    ``loss_mean``: how a step's loss is normalised over its accumulation window and
    ranks (:mod:`loaders.loss`): ``"token"`` (each loss token weighs the same; the
    window's loss tokens go to the model as ``num_items_in_batch``) or
    ``"sequence"`` (each sample weighs the same, through ``segment_ids`` in a packed
    batch; the loss is computed here from the logits). A model whose ``forward``
    takes no ``num_items_in_batch`` averages each micro-batch on its own: with
    ``"token"`` and gradient accumulation or several ranks that is warned about.

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

    def __init__(
        self,
        *args,
        train_batch_sampler: EpochBatchSampler | None = None,
        loss_mean: str = "token",
        **kwargs,
    ):
        if train_batch_sampler is not None and not isinstance(train_batch_sampler, EpochBatchSampler):
            raise TypeError(
                f"train_batch_sampler should be a dyntile batch sampler (BucketBatchSampler or "
                f"PackingBatchSampler), but got {type(train_batch_sampler).__name__}"
            )
        if loss_mean not in MEANS:
            raise ValueError(f"loss_mean should be one of {MEANS}, but got {loss_mean!r}")
        self.train_batch_sampler = train_batch_sampler
        self.loss_mean = loss_mean
        super().__init__(*args, **kwargs)
        self.add_callback(SamplerEpochCallback)
        if loss_mean == "sequence":
            self.loss_is_scaled_for_ga = True  # compute_loss divides by the window's samples
        elif not (self.model_accepts_loss_kwargs or self.compute_loss_func) and (
            self.args.gradient_accumulation_steps > 1 or self.args.world_size > 1
        ):
            warnings.warn(
                f"{type(self.model).__name__}.forward takes no num_items_in_batch (no **kwargs), so its loss "
                f"is each micro-batch's own mean, and gradient accumulation or several ranks weigh the "
                f"tokens of dyntile's uneven batches unevenly: give the model a forward that takes "
                f"num_items_in_batch, pass compute_loss_func=, or loss_mean='sequence'",
                stacklevel=2,
            )

    def _get_num_items_in_batch(self, batch_samples: list, device: torch.device):
        """The window's loss tokens (``"token"``) or samples (``"sequence"``), over the
        ranks too when the ``Trainer`` averages across devices (:func:`loaders.loss.loss_counts`)."""
        if not batch_samples or "labels" not in batch_samples[0]:
            return super()._get_num_items_in_batch(batch_samples, device)
        shift = self._loss_shifts_labels
        counts = sum((loss_counts(b, shift=shift) for b in batch_samples), LossCounts(0, 0))
        total = torch.tensor(counts.total(self.loss_mean), device=device)
        if self.args.average_tokens_across_devices and self.args.world_size > 1:
            total = self.accelerator.gather(total).sum()
        return total

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        """The ``Trainer``'s, except ``loss_mean="sequence"``: each sample's mean token
        loss, summed, over the window's samples (:func:`loaders.loss.normalised_loss`)."""
        if self.loss_mean != "sequence" or "labels" not in inputs:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        if num_items_in_batch is None:
            num_items_in_batch = self._get_num_items_in_batch([inputs], inputs["labels"].device)
        inputs = dict(inputs)
        labels = inputs.pop("labels")
        outputs = model(**inputs)
        logits = outputs["logits"] if isinstance(outputs, dict) else outputs[0]
        loss = normalised_loss(
            logits,
            labels,
            total=num_items_in_batch,
            segment_ids=inputs.get("segment_ids"),
            mean="sequence",
            shift=self._loss_shifts_labels,
        )
        if self.args.average_tokens_across_devices and self.args.world_size > 1:
            loss = loss * self.args.world_size  # the ranks' gradients are averaged
        return (loss, outputs) if return_outputs else loss

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
        """The training loader: the dyntile sampler as its ``batch_sampler``, or the
        streaming loader as its dataset, prepared by accelerate with the batches kept
        whole (the ``Trainer``'s own loader when ``_get_train_sampler`` returns
        anything else)."""
        if isinstance(self.train_dataset, StreamWindows):
            return self._stream_dataloader(self.train_dataset)
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
        loader = DataLoader(dataset, batch_sampler=sampler, collate_fn=collate, **self._worker_options())
        return prepare_data_loader(self.accelerator, loader)

    def _worker_options(self) -> dict:
        """The ``DataLoader`` options the ``dataloader_*`` arguments set."""
        args = self.args
        options = dict(num_workers=args.dataloader_num_workers, pin_memory=args.dataloader_pin_memory)
        if args.dataloader_num_workers:
            options.update(
                prefetch_factor=args.dataloader_prefetch_factor,
                persistent_workers=args.dataloader_persistent_workers,
            )
        return options

    def _stream_dataloader(self, stream: StreamWindows) -> DataLoader:
        """A ``DataLoader`` over the stream's passes one after another (:class:`_Passes`),
        each rank reading its own part."""
        if self.train_batch_sampler is not None:
            raise ValueError(
                f"train_dataset is a {type(stream).__name__}, which batches itself: pass no "
                f"train_batch_sampler with it"
            )
        if self.args.world_size > 1 and self.args.dataloader_num_workers:
            raise ValueError(
                f"a {type(stream).__name__} on {self.args.world_size} ranks keeps them in step from the "
                f"main process, which DataLoader workers cannot reach: set dataloader_num_workers=0"
            )
        collate = self._get_collator_with_removed_columns(self.data_collator, description="training")
        loader = DataLoader(_Passes(stream), batch_size=None, collate_fn=collate, **self._worker_options())
        return prepare_stream_loader(self.accelerator, loader)


class _Passes(torch.utils.data.IterableDataset):
    """A stream's passes one after another, from epoch ``start`` on, as one iterable of
    batches (ending only after a pass with no batch). ``set_epoch`` sets ``start``, as
    accelerate's loader does at every pass of its own."""

    def __init__(self, stream: StreamWindows):
        self.stream, self.start = stream, 0

    def set_epoch(self, epoch: int) -> None:
        self.start = epoch

    def __iter__(self):
        epoch = self.start
        while True:
            self.stream.set_epoch(epoch)
            taken = False
            for batch in self.stream:
                taken = True
                yield batch
            if not taken:
                return
            epoch += 1


def _is_hf_dataset(dataset) -> bool:
    if not is_datasets_available():
        return False
    import datasets

    return isinstance(dataset, datasets.Dataset)
