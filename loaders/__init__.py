"""PyTorch integration for dyntile: collate functions and batch samplers.

* :mod:`loaders.collate` -- ``DynTileCollate``: a ``collate_fn`` that pads ragged
  leaves to a bucket plan's shapes, with masks, lengths and per-process counters. Its
  private parts: the rules and the plan of a batch in :mod:`loaders._collate_spec`, the
  layout of a flat dict batch in :mod:`loaders._collate_layout` (run by the native
  module :mod:`dyntile.tensor_reader` hands out), the Python executor of a plan in
  :mod:`loaders._collate_python` (its leaf handlers in :mod:`loaders._leaf_handlers`);
  counters in :mod:`loaders.collate_stats`;
* :mod:`loaders.sampler` -- ``BucketBatchSampler``: a ``batch_sampler`` whose
  batches each hold one bucket, sized from a token budget, deterministic per seed
  and epoch, resumable mid-epoch, and in step across ``torch.distributed`` ranks;
* :mod:`loaders.packing_sampler` / :mod:`loaders.packed_collate` --
  ``PackingBatchSampler`` and ``PackedCollate``: whole samples packed into
  fixed ``[B, T]`` rows, with the segment metadata attention needs;
* :mod:`loaders.streaming_packer` / :mod:`loaders.streaming_bucketer` --
  ``StreamingPacker`` and ``StreamingBucketer``: the same over any iterable of
  samples (a stream), window by window in bounded memory, resumable, ranks in step;
  what they share is in :mod:`loaders.stream_window` (windows, state),
  :mod:`loaders.stream_source` (sharding, lengths) and :mod:`loaders.stream_ranks`;
* :mod:`loaders.worker_transfer` -- ``WorkerBatch``: a batch built in a ``DataLoader``
  worker crosses to the main process as one buffer, not one shared-memory segment
  per tensor;
* :mod:`loaders.distributed` -- rank and world-size discovery shared by samplers.

``loaders`` builds on :mod:`dyntile` (never the other way round) and imports torch.
"""

from .collate import DynTileCollate
from .packed_collate import PackedCollate
from .packing_sampler import PackingBatchSampler
from .sampler import BucketBatchSampler
from .stream_ranks import RanksInStep
from .streaming_bucketer import StreamingBucketer
from .streaming_packer import StreamingPacker

__all__ = [
    "BucketBatchSampler",
    "DynTileCollate",
    "PackedCollate",
    "PackingBatchSampler",
    "RanksInStep",
    "StreamingBucketer",
    "StreamingPacker",
]
