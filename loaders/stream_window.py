"""``StreamWindows``: what the streaming packer and bucketer share.

A stream is planned *window by window*. A window is the samples carried over from
the window before (a bucket's unfinished batch) and then new samples of this
reader's part (:mod:`loaders.stream_source`) up to ``buffer_size`` in all; a
subclass plans it into batches (lists of samples) and names the samples it
carries on. So at most ``buffer_size`` samples are held, whatever the length of
the stream, and each window's batches are a pure function of its samples and a
key ``(seed, epoch, pass, reader, window start)``.

Cost balance between readers. Every rank (and every ``DataLoader`` worker of a
rank) is a *reader* of its own part of the source, and they do not talk, so each
arranges its batches by one rule that puts batches of comparable cost (the
planner's cost model) at the same step of every reader. With ``balance_steps=G``
(default 8), step ``s`` of a pass (counted from 0 in each reader) has *slot*
``s mod G``; a window whose first step is ``s0`` sorts its ``n`` batches by
decreasing cost and gives the costliest to its steps of slot 0 (in step order),
the next to its steps of slot 1, and so on: so the batch a reader takes at step
``s`` is in the ``(s mod G)``-th of ``G`` blocks of its window's batches sorted by
cost, whatever the windows before it held.

The guarantee: at every step of the first pass, the batches of all readers come
from the same block of their windows' cost order (the same quantile range);
readers whose parts come from one distribution (the round robin of samples over
readers gives that) then take batches of comparable cost, much closer than in an
order blind to cost (the test measures it), but not equal (each is its own
window's). Batch ``i`` of a rank with ``num_workers=W`` is step ``i div W`` of its
worker ``i mod W``, which has the same slot on every rank while every worker of
every rank still has batches (not in the epoch's tail, nor in a dry rank's repeats).
``balance_steps=1`` yields each window in decreasing cost.

Batches are taken in *chunks* of ``m`` consecutive batches of the current window.
With several ranks under a process group and ``num_workers=0``, ``m`` is agreed
between them at each chunk's start (:mod:`loaders.stream_ranks`) and each chunk is
taken in decreasing cost, so the costliest batches of all ranks share a step
exactly; otherwise a chunk is the rest of the window, in the order above.

Resume. The state is the position, never the samples: the epoch, the pass (0: the
data; 1, 2, ...: repeats that keep a dry rank in step), the window's start in this
reader's part, the positions of the carried samples, the chunk ``(k0, m)`` and how
many of its batches were taken. A resumed pass reads its part again from the start,
keeping the carried samples and skipping the rest up to the window's start, plans
the same window and takes up where the state left off: the batches that follow
are those of an uninterrupted run, index for index. A state from another
configuration (another buffer, seed, shapes, reader...) is refused, naming what
differs.
"""

from __future__ import annotations

import abc
import copy
import dataclasses
import operator
import warnings

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import get_worker_info

from dyntile.planning.packing_checks import check_budget

from .distributed import check_replicas
from .epoch_sampler import check_non_negative
from .stream_ranks import agree_steps, gather_counts
from .stream_source import StreamSource, process_ranks

__all__ = ["StreamWindows", "STATE_VERSION", "window_args"]

STATE_VERSION = 2

#: the arguments of :class:`StreamWindows` that its subclasses take as they are
WINDOW_ARGS = (
    "max_tokens",
    "buffer_size",
    "length",
    "seed",
    "shuffle",
    "drop_last",
    "source_shards",
    "num_replicas",
    "rank",
    "balance_steps",
)


def window_args(names: dict) -> dict:
    """The :data:`WINDOW_ARGS` among a subclass constructor's ``locals()``.

    >>> window_args(dict(max_tokens=64, buffer_size=8, length=None, seed=0, shuffle=True, drop_last=False,
    ...                  source_shards=None, num_replicas=None, rank=None, balance_steps=8))["buffer_size"]
    8
    """
    return {k: names[k] for k in WINDOW_ARGS}


@dataclasses.dataclass
class _Window:
    """One planned window: its samples, their positions in the reader's part and their
    lengths; its batches (window indices), their costs, the indices it carries on;
    where the next window starts; whether the pass ends with it."""

    samples: list
    positions: np.ndarray
    lengths: np.ndarray
    batches: list
    costs: np.ndarray
    carry: np.ndarray
    next_start: int
    last: bool


class _Pass:
    """One pass over this reader's part, window by window, from a cursor (a state)."""

    def __init__(self, owner: StreamWindows, reader: tuple[int, int], cur: dict):
        self.owner, self.reader, self.cur = owner, reader, cur
        self._open()
        carry, start = cur["carry"], cur["start"]
        want = {p: i for i, p in enumerate(carry)}
        got: list = [None] * len(carry)
        lens = np.zeros(len(carry), np.int64)
        while self.part.pos < start:  # a resume: read up to the window, keeping its carried samples
            first = self.part.pos
            samples, lengths, ended = self.part.take(min(owner.buffer_size, start - first))
            if ended:
                raise ValueError(
                    f"the source has fewer samples ({self.part.pos}) than the state's position ({start}) "
                    "in this reader's part: it changed since the state was saved"
                )
            for p in [p for p in want if first <= p < self.part.pos]:
                got[want[p]], lens[want[p]] = samples[p - first], lengths[p - first]
        self.win = self._build(got, np.asarray(carry, np.int64), lens)

    def _open(self) -> None:
        self.part = self.owner._source.part(self.reader)

    def _build(self, samples: list, positions: np.ndarray, lengths: np.ndarray) -> _Window:
        owner, cur = self.owner, self.cur
        first = self.part.pos
        new_s, new_n, last = self.part.take(owner.buffer_size - len(samples))
        positions = np.concatenate((positions, np.arange(first, self.part.pos, dtype=np.int64)))
        lengths = np.concatenate((lengths, np.asarray(new_n, np.int64)))
        owner._check_window(lengths, positions)
        key = (cur["epoch"], cur["pass"], self.reader[0], cur["start"])
        batches, costs, carry = owner._plan_window(lengths, owner._window_seed(key), last)
        batches, costs = owner._balance(batches, costs, cur["first_step"])
        return _Window(samples + new_s, positions, lengths, batches, costs, carry, self.part.pos, last)

    def next_window(self) -> None:
        win, cur = self.win, self.cur
        cur["start"], cur["k0"] = win.next_start, 0
        cur["first_step"] += len(win.batches)
        cur["carry"] = win.positions[win.carry].tolist()
        kept = [win.samples[i] for i in win.carry.tolist()]
        win.samples.clear()  # let the rest go, in the order they were read, before the next window
        self.win = self._build(kept, win.positions[win.carry], win.lengths[win.carry])

    def start_pass(self, p: int) -> None:
        cur = self.cur
        cur["pass"], cur["start"], cur["carry"], cur["k0"], cur["first_step"] = p, 0, [], 0, 0
        self._open()
        self.win = self._build([], np.zeros(0, np.int64), np.zeros(0, np.int64))

    def ready(self) -> int:
        """Batches left in the window, moving to the next window when this one is done;
        0 when the pass is over."""
        cur = self.cur
        while cur["k0"] >= len(self.win.batches):
            if self.win.last:
                return 0
            self.next_window()
        return len(self.win.batches) - cur["k0"]

    def chunk(self, by_cost: bool) -> np.ndarray:
        """Window indices of the current chunk's batches: the costliest first (``by_cost``),
        else in the window's order."""
        k0, m = self.cur["k0"], self.cur["m"]
        if not by_cost:
            return np.arange(k0, k0 + m)
        costs = self.win.costs[k0 : k0 + m]
        return k0 + np.argsort(-costs, kind="stable")


class StreamWindows(torch.utils.data.IterableDataset, abc.ABC):
    """Base of the streaming loaders: a torch ``IterableDataset`` of batches (lists of samples).

    Subclasses call ``super().__init__`` and define :meth:`_plan_window`,
    :meth:`_check_window` and :meth:`_config`. :meth:`set_epoch` before each
    epoch; :meth:`state_dict`/:meth:`load_state_dict` (torchdata's ``Stateful``); after a
    pass, :attr:`report` counts its steps, the repeated batches and dropped samples.
    """

    def __init__(
        self,
        source,
        *,
        max_tokens: int,
        buffer_size: int,
        length=None,
        seed: int = 0,
        shuffle: bool = True,
        drop_last: bool = False,
        source_shards=None,
        num_replicas: int | None = None,
        rank: int | None = None,
        balance_steps: int = 8,
        exact: bool = True,
    ):
        self._source = StreamSource(source, length=length, source_shards=source_shards, exact=exact)
        self.max_tokens = check_budget(max_tokens, None)
        if isinstance(buffer_size, bool):
            raise TypeError(f"buffer_size should be a positive integer, but got {buffer_size!r}")
        self.buffer_size = operator.index(buffer_size)
        if self.buffer_size < 1:
            raise ValueError(f"buffer_size should be a positive integer, but got {self.buffer_size}")
        self.seed = check_non_negative(seed, "seed")
        self.shuffle, self.drop_last = bool(shuffle), bool(drop_last)
        self.num_replicas, self.rank = check_replicas(num_replicas, rank)
        if isinstance(balance_steps, bool) or operator.index(balance_steps) < 1:
            raise ValueError(f"balance_steps should be a positive integer, but got {balance_steps!r}")
        self.balance_steps = operator.index(balance_steps)
        self.epoch = 0
        self._pending: dict | None = None  # a loaded state, for the next pass
        self._live: dict | None = None  # the cursor of the running pass
        self.report: dict = {}
        self.ranks_agreed = False  # set by loaders.RanksInStep, which keeps the ranks in step itself

    # ---- what a subclass defines

    def _config(self) -> dict:
        """Named values that fix the batches: a state saved under others is refused."""
        return {k: getattr(self, k) for k in ("buffer_size", "seed", "shuffle", "balance_steps")}

    def _check_window(self, lengths: np.ndarray, positions: np.ndarray) -> None:
        """Raise for a sample no batch can hold (``positions``: where each lies in the part)."""

    @abc.abstractmethod
    def _plan_window(self, lengths: np.ndarray, seed: int, last: bool):
        """``(batches, costs, carry)``: lists (or int arrays) of window indices, one per batch; float
        ``(batches,)``; the indices carried to the next window (none when ``last``)."""

    def _balance(self, batches: list, costs: np.ndarray, first_step: int) -> tuple[list, np.ndarray]:
        """A planned window's ``batches`` and ``costs`` in the order of the module docstring
        (*Cost balance*), for a window whose first step in the pass is ``first_step``."""
        n = len(batches)
        slot = (first_step + np.arange(n)) % self.balance_steps
        order = np.empty(n, np.int64)
        order[np.argsort(slot, kind="stable")] = np.argsort(-costs, kind="stable")
        return [batches[k] for k in order.tolist()], costs[order]

    # ---- epochs and state

    def set_epoch(self, epoch: int) -> None:
        """Plan the next pass as epoch ``epoch`` (a loaded state's epoch wins for the pass it resumes)."""
        self.epoch = check_non_negative(epoch, "epoch")

    def _window_seed(self, key: tuple) -> int:
        return int(np.random.SeedSequence([self.seed, *key]).generate_state(1, np.uint32)[0])

    def _fresh(self) -> dict:
        return {
            "epoch": self.epoch,
            "pass": 0,
            "start": 0,
            "carry": [],
            "k0": 0,
            "m": 0,
            "j": 0,
            "steps": 0,
            "first_step": 0,
            "repeats": 0,
            "reader": None,
            "finished": False,
        }

    def state_dict(self) -> dict:
        """The position of the running pass (or of the next one): plain ints and lists,
        never samples; ``load_state_dict`` on a loader of the same configuration resumes it."""
        cur = self._live if self._live is not None else self._pending
        cur = self._fresh() if cur is None else cur
        return {"version": STATE_VERSION, "config": self._config(), "cursor": copy.deepcopy(cur)}

    def load_state_dict(self, state: dict) -> None:
        """Resume the pass ``state`` was taken in, from the batch after the last one taken.
        ``ValueError`` naming what differs for a state of another configuration."""
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION or "cursor" not in state:
            raise ValueError(
                f"state should be a {type(self).__name__} state_dict (version {STATE_VERSION}), "
                f"but got {state if not isinstance(state, dict) else sorted(state)!r}"
            )
        mine, theirs = self._config(), state.get("config", {})
        differ = [k for k in sorted(set(mine) | set(theirs)) if mine.get(k) != theirs.get(k)]
        if differ:
            said = ", ".join(f"{k}={theirs.get(k)!r} (this loader: {mine.get(k)!r})" for k in differ)
            raise ValueError(
                f"the state was saved by a {type(self).__name__} of another configuration: {said}"
            )
        cur = copy.deepcopy(state["cursor"])
        self._pending, self._live = cur, None
        if not cur["finished"]:
            self.epoch = cur["epoch"]

    def _claim(self, reader: tuple[int, int]) -> dict:
        cur, self._pending = self._pending, None
        if cur is None or cur["finished"]:
            cur = self._fresh()
        elif cur["reader"] is not None and tuple(cur["reader"]) != reader:
            raise ValueError(
                f"the state was saved by reader {cur['reader'][0]} of {cur['reader'][1]} (rank x worker), "
                f"but this is reader {reader[0]} of {reader[1]}: resume with the same ranks and num_workers"
            )
        cur["reader"] = list(reader)
        return cur

    # ---- iteration

    def __iter__(self):
        reader = self._source.reader(self.num_replicas, self.rank)
        R, r = process_ranks(self.num_replicas, self.rank)
        in_worker = get_worker_info() is not None
        sync = R > 1 and not in_worker and dist.is_available() and dist.is_initialized()
        if R > 1 and not sync and not self.ranks_agreed:
            warnings.warn(
                f"{type(self).__name__} on {R} ranks cannot agree on step counts here "
                f"({'in a DataLoader worker' if in_worker else 'torch.distributed is not initialised'}): "
                "ranks may take different numbers of steps: wrap the DataLoader in loaders.RanksInStep "
                "(or iterate with num_workers=0 under an initialised process group) to keep them in step",
                RuntimeWarning,
                stacklevel=2,
            )
        cur = self._claim(reader)
        self._live, self.report = cur, {}
        run = _Pass(self, reader, cur)
        while True:
            if cur["m"] == 0:
                m = self._agree(run, cur, R, sync)
                if m == 0:
                    break
                cur["m"], cur["j"] = m, 0
            order = run.chunk(sync).tolist()
            samples, batches = run.win.samples, run.win.batches
            while cur["j"] < cur["m"]:
                idx = batches[order[cur["j"]]]
                if type(idx) is not list:
                    idx = idx.tolist()
                # The window keeps its samples until it is done, then lets them go together in
                # the order they were read (next_window): the allocator then gives that memory
                # to the next window's samples in order, and a batch reads them closer together
                # than after freeing each batch's (scattered) samples. The window holds at most
                # buffer_size samples either way.
                batch = [samples[i] for i in idx]
                cur["j"] += 1
                cur["steps"] += 1
                cur["repeats"] += cur["pass"] > 0
                yield batch
            cur["k0"] += cur["m"]
            cur["m"] = cur["j"] = 0
        cur["finished"] = True
        self._finish(cur, r)

    def _agree(self, run: _Pass, cur: dict, R: int, sync: bool) -> int:
        """Steps to take before the next sync point (0: the pass ends)."""
        while True:
            ready = run.ready()
            dry = cur["pass"] > 0 or ready == 0
            if not sync:
                return ready if cur["pass"] == 0 else 0
            empty = dry and ready == 0 and cur["pass"] == 0 and run.win.next_start == 0 and not self.drop_last
            decision = agree_steps(gather_counts([ready, dry, empty], R), self.drop_last)
            if decision.steps:
                return decision.steps
            if not decision.need_repeats:
                if not dry:  # drop_last and another rank is dry: the rest of this part goes
                    left = run.win.batches[cur["k0"] :]
                    self.report["dropped_samples"] = int(sum(len(b) for b in left))
                    self.report["unread_source"] = not run.win.last
                return 0
            if dry and ready == 0:
                run.start_pass(cur["pass"] + 1)

    def _finish(self, cur: dict, rank: int) -> None:
        self.report.update(steps=cur["steps"], repeated_batches=cur["repeats"], epoch=cur["epoch"])
        if cur["repeats"]:
            warnings.warn(
                f"rank {rank} ran out of data first and repeated {cur['repeats']} of its "
                f"{cur['steps']} batches so that every rank takes the same steps (drop_last=False)",
                RuntimeWarning,
                stacklevel=3,
            )
        if self.report.get("dropped_samples") or self.report.get("unread_source"):
            warnings.warn(
                f"rank {rank} stopped when another rank ran out of data (drop_last=True): "
                f"{self.report.get('dropped_samples', 0)} samples of its planned batches dropped"
                + (", and the rest of its part left unread" if self.report.get("unread_source") else ""),
                RuntimeWarning,
                stacklevel=3,
            )
