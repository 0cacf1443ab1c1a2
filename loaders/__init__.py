"""PyTorch integration for dyntile: collate functions and batch samplers.

* :mod:`loaders.sampler` -- ``BucketBatchSampler``: a ``batch_sampler`` whose
  batches each hold one bucket, sized from a token budget, deterministic per seed
  and epoch, resumable mid-epoch, and in step across ``torch.distributed`` ranks;
* :mod:`loaders.distributed` -- rank and world-size discovery shared by samplers.

``loaders`` builds on :mod:`dyntile` (never the other way round) and imports torch.
"""
from .sampler import BucketBatchSampler

__all__ = ["BucketBatchSampler"]
