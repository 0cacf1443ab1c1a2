"""``EpochBatchSampler``: what every dyntile batch sampler shares.

A subclass builds each epoch's batches as a pure function of its data, ``seed``,
``epoch`` and ``num_replicas`` (method :meth:`batches`); this base class turns that
into the ``batch_sampler`` protocol: each iteration a pass over the epoch from its
start (as torch's samplers do), ``set_epoch``, and ``state_dict``/``load_state_dict``
that resume mid-epoch by rebuilding the epoch's list and skipping by slicing
(nothing is replayed). A pass that stops early is not continued by the next one:
a ``DataLoader`` with workers draws batches ahead of the loop, so the sampler's own
count would skip batches the loop never saw.

The samplers subclass torch's ``BatchSampler``, so that frameworks treat them as
batch samplers: ``batch_size`` is ``None`` (batches vary in size, as a ``DataLoader``'s
own ``batch_size`` is ``None`` for a batch sampler), ``.sampler`` is a view of the
epoch's indices through which Lightning and accelerate call ``set_epoch``, and a
``sampler=`` argument takes the ranks of a framework's distributed sampler (Lightning
rebuilds batch samplers with one). Ranks are read when they are needed, not at
construction (:mod:`loaders.distributed`). A wrapper that would group the batches
again (torch's ``BatchSampler`` around one, as ``DataLoader(sampler=...)`` builds)
or deal them out to processes again (accelerate's ``BatchSamplerShard`` around a
sampler that already splits over ranks) is refused when it starts a pass, with the
fix: both would lose or scramble samples without an error.
"""

from __future__ import annotations

import abc
import hashlib
import operator
import sys
from collections.abc import Iterator

import numpy as np
import torch.utils.data

from .distributed import check_replicas, process_group_started, ranks_of_sampler, resolve_replicas

__all__ = ["EpochBatchSampler", "EpochIndices", "check_non_negative", "layout_digest"]

STATE_KEYS = ("epoch", "seed", "batches_yielded", "num_replicas", "num_samples")


def layout_digest(*parts) -> str:
    """A short digest of what fixes an epoch's batches (arrays by their bytes, the
    rest by ``repr``): a state saved for one layout is refused by another."""
    h = hashlib.sha1()
    for part in parts:
        if isinstance(part, np.ndarray):  # arrays: little-endian int64, the same on every machine
            h.update(np.ascontiguousarray(part, "<i8").tobytes())
        else:  # NumPy scalars as Python numbers: repr differs across versions
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


class EpochBatchSampler(torch.utils.data.BatchSampler, abc.ABC):
    """Base of the deterministic, resumable, rank-aware batch samplers.

    Subclasses set up their data, call ``super().__init__`` and define
    ``batches(epoch) -> list[list[int]]`` (this rank's batches) and ``__len__``.
    ``num_replicas``/``rank``: explicit values, else those of ``sampler`` (a
    framework's distributed sampler, see :func:`loaders.distributed.ranks_of_sampler`),
    else ``torch.distributed``'s when they are needed.

    >>> class Pairs(EpochBatchSampler):
    ...     def __init__(self, n):
    ...         super().__init__(n, shuffle=False, seed=0, num_replicas=1, rank=0)
    ...     def batches(self, epoch):
    ...         return [list(range(i, min(i + 2, self.num_samples))) for i in range(0, self.num_samples, 2)]
    ...     def __len__(self):
    ...         return len(self.batches(self.epoch))
    >>> list(Pairs(5))
    [[0, 1], [2, 3], [4]]
    """

    batch_size = None  # batches vary in size; frameworks read None as "the batch sampler decides"
    drop_last = False

    def __new__(cls, *args, **kwargs):
        # a sampler where the lengths belong: a framework rebuilding this as torch's
        # BatchSampler(sampler, batch_size, drop_last) to shard it (Lightning does, for a
        # batch sampler built outside its train_dataloader hook)
        if args and isinstance(args[0], torch.utils.data.Sampler):
            raise TypeError(
                f"{cls.__name__} got a {type(args[0]).__name__} where its lengths belong: a framework is "
                "rebuilding it as torch's BatchSampler(sampler, batch_size, drop_last) to shard it over "
                "ranks, but it already splits its batches over ranks. In Lightning, build the sampler inside "
                "train_dataloader() (Lightning then hands it its ranks through sampler=) or set "
                "Trainer(use_distributed_sampler=False)"
            )
        return super().__new__(cls)

    def __init__(
        self,
        num_samples: int,
        *,
        shuffle: bool,
        seed: int,
        num_replicas: int | None,
        rank: int | None,
        sampler=None,
    ):
        self.shuffle = bool(shuffle)
        self.seed = check_non_negative(seed, "seed")
        self.num_samples = int(num_samples)
        if sampler is not None:
            num_replicas, rank = ranks_of_sampler(
                sampler, num_replicas, rank, self.num_samples, type(self).__name__
            )
        self._given = check_replicas(num_replicas, rank)
        self._replicas = self._given if None not in self._given else None  # explicit: fixed; else discovered
        self.epoch = 0
        self._yielded = 0
        self._loaded = False
        self._start = 0  # where the current pass started
        self._received: int | None = None  # batches of this pass a draw-ahead wrapper handed on
        self.layout: str | None = None  # subclasses: layout_digest() of what fixes the batches

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

    @property
    def sampler(self) -> EpochIndices:
        """This rank's indices of the current epoch, batch after batch, as the sampler
        a torch ``BatchSampler`` draws from; its ``set_epoch`` is this sampler's
        (Lightning calls ``loader.batch_sampler.sampler.set_epoch``)."""
        return EpochIndices(self)

    @abc.abstractmethod
    def batches(self, epoch: int) -> list[list[int]]:
        """This rank's batches of ``epoch``, in order (a pure function of the sampler's
        data, ``seed``, ``epoch`` and ``num_replicas``)."""

    @abc.abstractmethod
    def __len__(self) -> int:
        """Batches of the current epoch on this rank."""

    def batches_in_epoch(self, epoch: int) -> int:
        """Batches of ``epoch`` on this rank (``len()`` is the current epoch's); the
        sampler's epoch and position do not change."""
        return len(self.batches(check_non_negative(epoch, "epoch")))

    # ---- Sampler protocol

    def __iter__(self) -> Iterator[list[int]]:
        _refuse_rewrapping(self, sys._getframe(1))
        return self._pass()

    def _pass(self) -> Iterator[list[int]]:
        batches = self.batches(self.epoch)
        # a loaded state continues where it was saved (even at the epoch's end: an
        # empty pass); any other iteration is a whole pass over the epoch
        start = self._yielded if self._loaded else 0
        self._loaded = False
        self._yielded = self._start = start
        self._received = None
        for batch in batches[start:]:
            self._yielded += 1
            yield batch

    def set_epoch(self, epoch: int) -> None:
        """Use ``epoch`` (a non-negative integer) next; a new epoch drops a loaded
        position, the same epoch keeps it. Call it before every epoch (torch's
        ``DistributedSampler`` needs the same); the frameworks do, through the loader
        or :attr:`sampler` (see the docs' "Training frameworks" guide)."""
        epoch = check_non_negative(epoch, "epoch")
        if epoch != self.epoch:
            self._yielded = 0
            self._loaded = False
            self._received = None
        self.epoch = epoch

    def note_received(self, batches: int) -> None:
        """A wrapper that draws batches ahead of the loop (accelerate's prepared loader)
        reports how many of this pass's batches the loop has received: :meth:`state_dict`
        then saves that position, not the sampler's own count."""
        self._received = self._start + operator.index(batches)

    # ---- checkpointing

    def state_dict(self, batches_done: int | None = None) -> dict:
        """Position in the epoch: ``epoch``, ``seed``, ``batches_yielded`` (and checks).

        A ``DataLoader`` with workers draws batches ahead of the training loop;
        pass ``batches_done`` (batches the loop consumed this epoch) to save that
        position instead of the sampler's own count (a loader prepared by
        :func:`loaders.integrations.accelerate.prepare_data_loader` reports it itself,
        see :meth:`note_received`).
        """
        if batches_done is not None:
            done = operator.index(batches_done)
        else:
            done = self._yielded if self._received is None else self._received
        if not 0 <= done <= len(self):
            raise ValueError(f"batches_done should be in [0, {len(self)}], but got {done}")
        state = {
            "epoch": self.epoch,
            "seed": self.seed,
            "batches_yielded": done,
            "num_replicas": self.num_replicas,
            "num_samples": self.num_samples,
        }
        if self.layout is not None:
            state["layout"] = self.layout
        return state

    def load_state_dict(self, state: dict) -> None:
        """Resume from :meth:`state_dict`: the next iteration continues where it stopped."""
        missing = [k for k in STATE_KEYS if k not in state]
        if missing:
            raise KeyError(
                f"sampler state is missing keys {missing}; expected the keys of state_dict(): {STATE_KEYS}"
            )
        for key, mine in (("num_replicas", self.num_replicas), ("num_samples", self.num_samples)):
            if state[key] != mine:
                raise ValueError(
                    f"sampler state was saved with {key}={state[key]}, but this sampler has {key}={mine}; "
                    f"the epoch's batches would differ"
                )
        if state.get("layout", self.layout) != self.layout:  # states from before layouts: not checked
            raise ValueError(
                f"sampler state was saved for another batch layout ({state['layout']}, this sampler: "
                f"{self.layout}): its lengths, plan, budget, shuffle or drop_last differ, so the "
                f"epoch's batches would differ"
            )
        seed, epoch = check_non_negative(state["seed"], "seed"), check_non_negative(state["epoch"], "epoch")
        done = operator.index(state["batches_yielded"])
        old = self.seed, self.epoch
        self.seed, self.epoch = seed, epoch  # len() may depend on them (packing)
        if not 0 <= done <= len(self):
            self.seed, self.epoch = old
            raise ValueError(f"batches_yielded should be in [0, {len(self)}], but got {done}")
        self._yielded = done
        self._loaded = True
        self._received = None


class EpochIndices(torch.utils.data.Sampler):
    """The sample indices of a batch sampler's current epoch on this rank, batch after
    batch: the ``.sampler`` of a dyntile batch sampler, as torch's ``BatchSampler`` has
    one. Frameworks call ``set_epoch`` on it (it sets the batch sampler's epoch);
    iterating it does not move the batch sampler's position.

    >>> from loaders import BucketBatchSampler
    >>> s = BucketBatchSampler([3, 9, 4], batch_size=2, shuffle=False)
    >>> list(s.sampler), len(s.sampler)
    ([0, 2, 1], 3)
    >>> s.sampler.set_epoch(4); s.epoch
    4
    """

    def __init__(self, batch_sampler: EpochBatchSampler):
        self.batch_sampler = batch_sampler

    def __iter__(self) -> Iterator[int]:
        for batch in self.batch_sampler.batches(self.batch_sampler.epoch):
            yield from batch

    def __len__(self) -> int:
        return sum(map(len, self.batch_sampler.batches(self.batch_sampler.epoch)))

    def set_epoch(self, epoch: int) -> None:
        """The batch sampler's :meth:`~EpochBatchSampler.set_epoch`."""
        self.batch_sampler.set_epoch(epoch)


def _refuse_rewrapping(sampler: EpochBatchSampler, frame) -> None:
    """Refuse a torch ``BatchSampler`` that starts a pass over ``sampler`` to group its
    batches again, or to deal them out to processes when ``sampler`` already splits
    over ranks.

    Such a wrapper only iterates the sampler, so the frame that starts the pass (its
    ``self``) is the one place where it shows; without this check both lose or
    scramble samples silently.
    """
    holder = frame.f_locals.get("self") if frame is not None else None
    if holder is sampler or not isinstance(holder, torch.utils.data.BatchSampler):
        return
    name, wrapper = type(sampler).__name__, type(holder).__name__
    if getattr(holder, "sampler", None) is sampler:
        raise TypeError(
            f"{name} yields whole batches (lists of indices), but a {wrapper} is drawing from it as from an "
            "index sampler and would group its batches again: pass it as DataLoader(batch_sampler=...), not "
            "DataLoader(sampler=...). (Hugging Face's Trainer passes what _get_train_sampler returns as "
            "sampler=: use loaders.integrations.huggingface.DynTileTrainer.)"
        )
    processes = getattr(holder, "num_processes", None)
    if (
        getattr(holder, "batch_sampler", None) is sampler
        and isinstance(processes, int)
        and processes > 1
        and sampler.num_replicas > 1
    ):
        raise RuntimeError(
            f"{wrapper} deals the batches of this {name} out to {processes} processes, but the sampler "
            f"already gives each of its {sampler.num_replicas} ranks its own: every rank would see "
            f"1/{processes} of its share, and ranks would differ in shape at a step. Prepare the loader with "
            "loaders.integrations.accelerate.prepare_data_loader(accelerator, loader), which keeps its "
            "batches whole (under Hugging Face's Trainer: loaders.integrations.huggingface.DynTileTrainer)."
        )
