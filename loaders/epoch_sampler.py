"""``EpochBatchSampler``: what every dyntile batch sampler shares.

A subclass builds each epoch's batches as a pure function of its data, ``seed``,
``epoch`` and ``num_replicas`` (method :meth:`batches`); this base class turns that
into the ``batch_sampler`` protocol: each iteration a pass over the epoch from its
start (as torch's samplers do), ``set_epoch``, and ``state_dict``/``load_state_dict``
that resume mid-epoch by rebuilding the epoch's list and skipping by slicing
(nothing is replayed). A pass that stops early is not continued by the next one:
a ``DataLoader`` with workers draws batches ahead of the loop, so the sampler's own
count would skip batches the loop never saw.
"""
from __future__ import annotations

import abc
import hashlib
import operator
from typing import Iterator

import numpy as np
import torch.utils.data

from .distributed import check_replicas, process_group_started, ranks_of_sampler, resolve_replicas

__all__ = ["EpochBatchSampler", "check_non_negative", "layout_digest"]

STATE_KEYS = ("epoch", "seed", "batches_yielded", "num_replicas", "num_samples")


def layout_digest(*parts) -> str:
    """A short digest of what fixes an epoch's batches (arrays by their bytes, the
    rest by ``repr``): a state saved for one layout is refused by another."""
    h = hashlib.sha1()
    for part in parts:
        if isinstance(part, np.ndarray):         # arrays: little-endian int64, the same on every machine
            h.update(np.ascontiguousarray(part, "<i8").tobytes())
        else:                                    # NumPy scalars as Python numbers: repr differs across versions
            h.update(repr(_plain(part)).encode())
    return h.hexdigest()[:16]


def _plain(value):
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value.item() if isinstance(value, np.generic) else value


def check_non_negative(value, name: str) -> int:
    """A seed or an epoch (``name``) as a non-negative ``int``."""
    s = operator.index(value)
    if s < 0:
        raise ValueError(f"{name} should be a non-negative integer, but got {s}")
    return s


class EpochBatchSampler(torch.utils.data.Sampler, abc.ABC):
    """Base of the deterministic, resumable, rank-aware batch samplers.

    Subclasses set up their data, call ``super().__init__`` and define
    ``batches(epoch) -> list[list[int]]`` (this rank's batches) and ``__len__``.
    ``num_replicas``/``rank``: explicit values, else those of ``sampler`` (a
    framework's distributed sampler, see :func:`loaders.distributed.ranks_of_sampler`),
    else ``torch.distributed``'s when they are needed.
    """

    def __init__(self, num_samples: int, *, shuffle: bool, seed: int, num_replicas: int | None,
                 rank: int | None, sampler=None):
        self.shuffle = bool(shuffle)
        self.seed = check_non_negative(seed, "seed")
        self.num_samples = int(num_samples)
        if sampler is not None:
            num_replicas, rank = ranks_of_sampler(sampler, num_replicas, rank, self.num_samples, type(self).__name__)
        self._given = check_replicas(num_replicas, rank)
        self._replicas = self._given if None not in self._given else None     # explicit: fixed; else discovered
        self.epoch = 0
        self._yielded = 0
        self._loaded = False
        self.layout: str | None = None    # subclasses: layout_digest() of what fixes the batches

    # ---- ranks

    def replicas(self) -> tuple[int, int]:
        """``(num_replicas, rank)`` now: the explicit ones, else ``torch.distributed``'s
        once a process group is up (kept from then on), else one process; under a
        launcher's ``WORLD_SIZE > 1`` with no process group yet, a ``RuntimeError``
        with the fix (see :func:`loaders.distributed.resolve_replicas`)."""
        if self._replicas is not None:
            return self._replicas
        found = resolve_replicas(*self._given)
        if process_group_started():
            self._replicas = found
        return found

    @property
    def num_replicas(self) -> int:
        """Ranks the epoch is split over (see :meth:`replicas`)."""
        return self.replicas()[0]

    @property
    def rank(self) -> int:
        """This process's rank (see :meth:`replicas`)."""
        return self.replicas()[1]

    @abc.abstractmethod
    def batches(self, epoch: int) -> list[list[int]]:
        """This rank's batches of ``epoch``, in order (a pure function of the sampler's
        data, ``seed``, ``epoch`` and ``num_replicas``)."""

    @abc.abstractmethod
    def __len__(self) -> int:
        """Batches of the current epoch on this rank."""

    # ---- Sampler protocol

    def __iter__(self) -> Iterator[list[int]]:
        batches = self.batches(self.epoch)
        # a loaded state continues where it was saved (even at the epoch's end: an
        # empty pass); any other iteration is a whole pass over the epoch
        start = self._yielded if self._loaded else 0
        self._loaded = False
        self._yielded = start
        for batch in batches[start:]:
            self._yielded += 1
            yield batch

    def set_epoch(self, epoch: int) -> None:
        """Use ``epoch`` (a non-negative integer) next; a new epoch drops a loaded
        position, the same epoch keeps it."""
        epoch = check_non_negative(epoch, "epoch")
        if epoch != self.epoch:
            self._yielded = 0
            self._loaded = False
        self.epoch = epoch

    # ---- checkpointing

    def state_dict(self, batches_done: int | None = None) -> dict:
        """Position in the epoch: ``epoch``, ``seed``, ``batches_yielded`` (and checks).

        A ``DataLoader`` with workers draws batches ahead of the training loop;
        pass ``batches_done`` (batches the loop consumed this epoch) to save that
        position instead of the sampler's own count.
        """
        done = self._yielded if batches_done is None else operator.index(batches_done)
        if not 0 <= done <= len(self):
            raise ValueError(f"batches_done should be in [0, {len(self)}], but got {done}")
        state = {"epoch": self.epoch, "seed": self.seed, "batches_yielded": done,
                 "num_replicas": self.num_replicas, "num_samples": self.num_samples}
        if self.layout is not None:
            state["layout"] = self.layout
        return state

    def load_state_dict(self, state: dict) -> None:
        """Resume from :meth:`state_dict`: the next iteration continues where it stopped."""
        missing = [k for k in STATE_KEYS if k not in state]
        if missing:
            raise KeyError(f"sampler state is missing keys {missing}; expected the keys of state_dict(): {STATE_KEYS}")
        for key, mine in (("num_replicas", self.num_replicas), ("num_samples", self.num_samples)):
            if state[key] != mine:
                raise ValueError(f"sampler state was saved with {key}={state[key]}, but this sampler has {key}={mine}; "
                                 f"the epoch's batches would differ")
        if state.get("layout", self.layout) != self.layout:      # states from before layouts: not checked
            raise ValueError(f"sampler state was saved for another batch layout ({state['layout']}, this sampler: "
                             f"{self.layout}): its lengths, plan, budget, shuffle or drop_last differ, so the "
                             f"epoch's batches would differ")
        seed, epoch = check_non_negative(state["seed"], "seed"), check_non_negative(state["epoch"], "epoch")
        done = operator.index(state["batches_yielded"])
        old = self.seed, self.epoch
        self.seed, self.epoch = seed, epoch          # len() may depend on them (packing)
        if not 0 <= done <= len(self):
            self.seed, self.epoch = old
            raise ValueError(f"batches_yielded should be in [0, {len(self)}], but got {done}")
        self._yielded = done
        self._loaded = True
