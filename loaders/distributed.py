"""Rank and world size for samplers: explicit values, else ``torch.distributed``, else one process.

Shared by :class:`loaders.sampler.BucketBatchSampler` and the packing sampler so
that every sampler discovers replicas the same way.
"""
from __future__ import annotations

import operator

__all__ = ["resolve_replicas"]


def _from_torch_distributed() -> tuple[int, int] | None:
    try:
        import torch.distributed as dist
    except ImportError:  # torch built without distributed support
        return None
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return None


def resolve_replicas(num_replicas: int | None = None, rank: int | None = None) -> tuple[int, int]:
    """``(num_replicas, rank)`` for a sampler.

    Values given explicitly win; a missing one comes from an initialised
    ``torch.distributed`` process group, and without one the answer is ``(1, 0)``.

    >>> resolve_replicas(4, 1)
    (4, 1)
    >>> resolve_replicas()          # no process group initialised
    (1, 0)
    """
    if num_replicas is None or rank is None:
        found = _from_torch_distributed() or (1, 0)
        num_replicas = found[0] if num_replicas is None else num_replicas
        rank = found[1] if rank is None else rank
    num_replicas = operator.index(num_replicas)
    rank = operator.index(rank)
    if num_replicas < 1:
        raise ValueError(f"num_replicas should be a positive integer, but got {num_replicas}")
    if not 0 <= rank < num_replicas:
        raise ValueError(f"rank should be in [0, {num_replicas - 1}] for num_replicas={num_replicas}, but got {rank}")
    return num_replicas, rank
