"""accelerate: prepare a loader on a dyntile sampler with its batches kept whole.

``accelerator.prepare(loader)`` wraps the loader's batch sampler in a
``BatchSamplerShard`` that deals its batches out to the processes. A dyntile
sampler already gives each rank its own batches (the same count on every rank,
one shape per step), so dealing them out again would lose half of each rank's
share on 2 processes (the samplers refuse it). :func:`prepare_data_loader`
prepares the loader as accelerate does (device placement, the end-of-loader flag
that gradient accumulation reads, ``set_epoch`` on every pass) and then turns the
shard into a pass-through, as Hugging Face's Trainer does for its own rank-aware
batch sampler. ``split_batches`` and ``dispatch_batches`` cut every batch across
processes, so they are refused.

A loader over a streaming loader (:class:`~loaders.StreamingPacker`,
:class:`~loaders.StreamingBucketer`: each rank reads its own part and yields whole
batches) is prepared by :func:`prepare_stream_loader`: accelerate would otherwise
dispatch an ``IterableDataset`` from rank 0 or regroup its items per process.

The prepared loader counts passes (``iteration``) and sets that epoch on the sampler
at the start of every pass, and it draws one batch ahead of the loop to know the
last one. So :func:`prepare_data_loader` keeps the two in step: the loader's pass
counter *is* the sampler's epoch (``sampler.set_epoch``, ``loader.set_epoch`` and
``sampler.load_state_dict`` all move both; a whole pass moves both to the next
epoch), and the sampler's :meth:`~loaders.epoch_sampler.EpochBatchSampler.state_dict`
saves the batches the loop received, not those drawn ahead.
"""

from __future__ import annotations

from accelerate.data_loader import BatchSamplerShard, DataLoaderShard
from accelerate.data_loader import prepare_data_loader as _accelerate_prepare
from torch.utils.data import IterableDataset

from ..epoch_sampler import EpochBatchSampler

__all__ = ["dyntile_sampler", "prepare_data_loader", "prepare_stream_loader"]


def dyntile_sampler(loader) -> EpochBatchSampler | None:
    """The dyntile batch sampler of ``loader`` (a ``DataLoader`` or one accelerate
    prepared), through the batch-sampler wrappers around it; ``None`` if it has none.

    >>> from torch.utils.data import DataLoader
    >>> from loaders import BucketBatchSampler
    >>> s = BucketBatchSampler([3, 9, 4], batch_size=2)
    >>> dyntile_sampler(DataLoader(range(3), batch_sampler=s)) is s
    True
    """
    found = getattr(loader, "batch_sampler", None)
    for _ in range(8):  # BatchSamplerShard, SkipBatchSampler: a few levels at most
        if isinstance(found, EpochBatchSampler) or found is None:
            return found
        found = getattr(found, "batch_sampler", None)
    return None


def prepare_data_loader(accelerator, loader, **kwargs):
    """``accelerator.prepare_data_loader(loader, **kwargs)`` keeping a dyntile sampler's batches whole.

    ``loader``: a ``DataLoader`` whose ``batch_sampler`` is a dyntile sampler with
    ranks from ``torch.distributed`` (the default); any other loader is prepared
    unchanged. Returns accelerate's prepared loader, each rank drawing exactly its
    sampler's batches.

    >>> from accelerate import Accelerator
    >>> from torch.utils.data import DataLoader
    >>> from loaders import BucketBatchSampler
    >>> loader = DataLoader(range(5), batch_sampler=BucketBatchSampler([3, 9, 4, 8, 2], batch_size=2))
    >>> len(prepare_data_loader(Accelerator(cpu=True), loader))
    3
    """
    sampler = dyntile_sampler(loader)
    if sampler is None:
        return accelerator.prepare_data_loader(loader, **kwargs)
    for option in ("split_batches", "dispatch_batches"):
        if getattr(accelerator, option, False):
            raise ValueError(
                f"{option}=True cuts every batch of the loader's {type(sampler).__name__} across "
                f"processes, but the sampler gives each rank whole batches: set "
                f"{option}=False in accelerate's DataLoaderConfiguration"
            )
    prepared = accelerator.prepare_data_loader(loader, **kwargs)
    shard = getattr(prepared, "batch_sampler", None)
    if isinstance(shard, BatchSamplerShard) and shard.batch_sampler is sampler:
        theirs, ours = (shard.num_processes, shard.process_index), sampler.replicas()
        if theirs != ours:
            raise ValueError(
                f"accelerate runs {theirs[0]} processes (this one is {theirs[1]}), but the loader's "
                f"{type(sampler).__name__} splits over {ours[0]} ranks (this one is {ours[1]}): "
                f"build the sampler without num_replicas= and rank= (they come from "
                f"torch.distributed, which accelerate starts)"
            )
        shard.num_processes, shard.process_index = 1, 0  # every batch of this rank's sampler, in order
    if type(prepared) is DataLoaderShard:
        prepared._dyntile_sampler = sampler
        # DataLoaderShard's __class__ is a read-only property (it reports DataLoader): the
        # instance's own class is set through object's slot
        object.__dict__["__class__"].__set__(prepared, _SamplerDataLoaderShard)
    return prepared


def prepare_stream_loader(accelerator, loader):
    """``loader`` (a ``DataLoader(stream, batch_size=None)`` over a streaming loader, or
    another ``IterableDataset`` whose items are whole batches) prepared for
    ``accelerator`` with each rank's batches its own and whole: device placement, the
    end-of-loader flag gradient accumulation reads, ``set_epoch`` on the stream every
    pass; no dispatch from rank 0, no regrouping. The stream keeps the ranks in step
    itself (``num_workers=0`` under the process group accelerate starts).

    >>> from accelerate import Accelerator
    >>> from torch.utils.data import DataLoader
    >>> from loaders import StreamingPacker
    >>> stream = StreamingPacker([[1] * n for n in (5, 3, 6, 2)], max_tokens=16, seq_len=8, buffer_size=4)
    >>> [len(b) for b in prepare_stream_loader(Accelerator(cpu=True), DataLoader(stream, batch_size=None))]
    [4]
    """
    stream = getattr(loader, "dataset", None)
    if not isinstance(stream, IterableDataset) or loader.batch_size is not None:
        raise TypeError(
            "prepare_stream_loader takes a DataLoader(stream, batch_size=None) over a StreamingPacker, "
            f"StreamingBucketer or another IterableDataset of whole batches, but got a "
            f"{type(loader).__name__} over {type(stream).__name__}"
            + ("" if loader.batch_size is None else f" with batch_size={loader.batch_size}")
        )
    for option in ("split_batches", "dispatch_batches"):
        if getattr(accelerator, option, False):
            raise ValueError(
                f"{option}=True cuts every batch of the stream across processes, but each rank reads "
                f"its own part of the stream: set {option}=False in accelerate's DataLoaderConfiguration"
            )
    prepared = _accelerate_prepare(
        loader,
        accelerator.device,
        num_processes=1,  # this rank's stream, as it is
        process_index=0,
        put_on_device=accelerator.device_placement,
        dispatch_batches=False,
        non_blocking=accelerator.non_blocking,
        use_stateful_dataloader=accelerator.use_stateful_dataloader,
    )
    prepared._is_accelerate_prepared = True  # registered with the accelerator as it is
    return accelerator.prepare_data_loader(prepared)


class _SamplerDataLoaderShard(DataLoaderShard):
    """accelerate's ``DataLoaderShard`` in step with its dyntile sampler: its pass counter
    is the sampler's epoch, and the sampler's position is the batches the loop received."""

    @property
    def iteration(self) -> int:
        return self._dyntile_sampler.epoch

    @iteration.setter
    def iteration(self, epoch: int) -> None:
        if "_dyntile_sampler" in self.__dict__:  # DataLoaderShard.__init__ sets it before the sampler
            self._dyntile_sampler.set_epoch(epoch)

    def __iter__(self):
        sampler = self._dyntile_sampler
        for received, batch in enumerate(super().__iter__(), 1):
            sampler.note_received(received)
            yield batch
