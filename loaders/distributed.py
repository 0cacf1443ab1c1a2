"""Rank and world size for samplers: explicit values, else ``torch.distributed``, else one process.

Shared by :class:`loaders.sampler.BucketBatchSampler` and the packing sampler so
that every sampler discovers replicas the same way. A sampler asks when it needs
the answer (an iteration starting, ``len``, ``state_dict``), not when it is built:
a sampler built before ``torch.distributed.init_process_group`` (at module level
under ``torchrun``, in a Lightning module's ``__init__``) still splits over the
group started later. Under a launcher that has set ``WORLD_SIZE > 1`` but before a
process group exists, the question is an error that says what to do, never a
silent single process.
"""

from __future__ import annotations

import operator
import os

__all__ = [
    "check_replicas",
    "launcher_world_size",
    "process_group_started",
    "ranks_of_sampler",
    "resolve_replicas",
]


def _from_torch_distributed() -> tuple[int, int] | None:
    try:
        import torch.distributed as dist
    except ImportError:  # torch built without distributed support
        return None
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return None


def process_group_started() -> bool:
    """Whether a ``torch.distributed`` process group is initialised (its ranks hold from then on).

    >>> process_group_started()
    False
    """
    return _from_torch_distributed() is not None


def launcher_world_size() -> int:
    """``WORLD_SIZE`` as a launcher (``torchrun``, ``accelerate launch``, Lightning) set
    it for this process; 1 when it is unset or not an integer.

    >>> launcher_world_size() >= 1
    True
    """
    try:
        return max(int(os.environ.get("WORLD_SIZE", "1")), 1)
    except ValueError:  # not ours to judge: torch.distributed reports it when it starts
        return 1


def check_replicas(num_replicas: int | None, rank: int | None) -> tuple[int | None, int | None]:
    """Explicit ``num_replicas`` / ``rank`` checked as far as they are given (``None``: to discover).

    >>> check_replicas(4, None)
    (4, None)
    """
    if num_replicas is not None:
        num_replicas = operator.index(num_replicas)
        if num_replicas < 1:
            raise ValueError(f"num_replicas should be a positive integer, but got {num_replicas}")
    if rank is not None:
        rank = operator.index(rank)
        if num_replicas is not None and not 0 <= rank < num_replicas:
            raise ValueError(
                f"rank should be in [0, {num_replicas - 1}] for num_replicas={num_replicas}, but got {rank}"
            )
        if rank < 0:
            raise ValueError(f"rank should be a non-negative integer, but got {rank}")
    return num_replicas, rank


def resolve_replicas(num_replicas: int | None = None, rank: int | None = None) -> tuple[int, int]:
    """``(num_replicas, rank)`` for a sampler, now.

    Values given explicitly win; a missing one comes from an initialised
    ``torch.distributed`` process group; without one the answer is ``(1, 0)``,
    unless a launcher has set ``WORLD_SIZE > 1``: then the process group is still
    to come, and this raises a ``RuntimeError`` that says how to fix it.

    >>> resolve_replicas(4, 1)
    (4, 1)
    >>> resolve_replicas()          # no process group initialised, no launcher
    (1, 0)
    """
    num_replicas, rank = check_replicas(num_replicas, rank)
    if num_replicas is None or rank is None:
        found = _from_torch_distributed()
        if found is None:
            world = launcher_world_size()
            if world > 1:
                raise RuntimeError(
                    f"WORLD_SIZE={world} in the environment, but torch.distributed is not initialised, so "
                    "this process cannot know its rank: call torch.distributed.init_process_group() (or let "
                    "the framework start it) before iterating the sampler or taking its len() or "
                    "state_dict(), or pass num_replicas= and rank= explicitly"
                )
            found = (1, 0)
        num_replicas = found[0] if num_replicas is None else num_replicas
        rank = found[1] if rank is None else rank
    if not 0 <= rank < num_replicas:
        raise ValueError(
            f"rank should be in [0, {num_replicas - 1}] for num_replicas={num_replicas}, but got {rank}"
        )
    return num_replicas, rank


def ranks_of_sampler(
    sampler, num_replicas: int | None, rank: int | None, num_samples: int, owner: str
) -> tuple[int, int]:
    """``(num_replicas, rank)`` that a framework's distributed ``sampler`` carries.

    Frameworks that shard a loader rebuild its batch sampler around their own
    distributed sampler (Lightning: ``type(batch_sampler)(..., sampler=DistributedSampler(...))``).
    A dyntile sampler orders its own batches, so it takes only the ranks from it:
    ``sampler`` needs integer ``num_replicas`` and ``rank`` (as torch's
    ``DistributedSampler`` has), agreeing with any given explicitly, and its
    dataset, if sized, must have ``num_samples`` items. ``owner`` names the
    sampler class in errors.

    >>> from types import SimpleNamespace
    >>> ranks_of_sampler(SimpleNamespace(num_replicas=2, rank=1), None, None, 10, "BucketBatchSampler")
    (2, 1)
    """
    found = getattr(sampler, "num_replicas", None), getattr(sampler, "rank", None)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in found):
        raise TypeError(
            f"{owner} orders its own batches: sampler= takes a distributed sampler, whose num_replicas "
            f"and rank it uses (as torch's DistributedSampler has them), but got "
            f"{type(sampler).__name__}; pass num_replicas= and rank= instead, or nothing (they come "
            f"from torch.distributed)"
        )
    for name, given, theirs in (("num_replicas", num_replicas, found[0]), ("rank", rank, found[1])):
        if given is not None and operator.index(given) != theirs:
            raise ValueError(
                f"{owner} was given {name}={given}, but its sampler= ({type(sampler).__name__}) has "
                f"{name}={theirs}"
            )
    dataset = getattr(sampler, "dataset", None)
    try:
        size = len(dataset) if dataset is not None else None
    except TypeError:  # an unsized dataset: nothing to compare
        size = None
    if size is not None and size != num_samples:
        raise ValueError(
            f"{owner} has lengths for {num_samples} samples, but the dataset of its sampler= "
            f"({type(sampler).__name__}) has {size}: give one length per item of that dataset"
        )
    return resolve_replicas(*found)
