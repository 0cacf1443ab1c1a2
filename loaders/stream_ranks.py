"""Keeping the ranks of a stream in step: how many steps every rank takes next.

Each rank streams its own part of the data, so ranks run dry at different steps. At
every *sync point* each rank says how many batches it holds ready (the rest of its
current window) and whether its real data has run out; :func:`agree_steps` turns
those into one decision that every rank computes alike from the same gathered
numbers (one ``all_gather`` of three ints per rank):

* while no rank is dry, every rank takes ``m`` steps, ``m`` = the fewest batches
  any rank holds, before the next sync point; those ``m`` batches are ordered by
  cost on every rank, so the heaviest batches of all ranks share a step;
* once a rank is dry: with ``drop_last=False`` the others go on, the dry ranks
  repeating batches from the start of their part (a second sync point asks how many
  repeats they hold ready), until every rank is dry; with ``drop_last=True`` every
  rank stops at that step and the batches the others still held are dropped. Both
  are counted in the loader's ``report`` and warned about.

A rank that runs dry never waits alone in a collective: every rank reaches every
sync point, because every rank takes the same ``m`` steps between two of them.

``DataLoader`` workers cannot reach the process group, so with ``num_workers > 0``
the main process agrees instead: :class:`RanksInStep` wraps the loader and asks
every step; the costs of a step's batches are then balanced by the rule every
worker of every rank follows alone (*Cost balance* in :mod:`loaders.stream_window`).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist

__all__ = ["gather_counts", "Decision", "agree_steps", "rank0_value", "RanksInStep"]


def gather_counts(values, world: int) -> np.ndarray:
    """int64 ``(world, k)``: every rank's ``values`` (``k`` ints each), in rank order."""
    device = "cpu"
    if dist.get_backend() == "nccl":  # NCCL moves CUDA tensors only
        device = torch.device("cuda", torch.cuda.current_device())
    mine = torch.tensor([int(v) for v in values], dtype=torch.int64, device=device)
    out = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(out, mine)
    return torch.stack(out).cpu().numpy()


class Decision:
    """What every rank does until the next sync point: ``steps`` (0: the epoch ends),
    and whether dry ranks must now ready repeats (``need_repeats``)."""

    __slots__ = ("steps", "need_repeats", "dry_ranks")

    def __init__(self, steps: int, need_repeats: bool, dry_ranks: tuple):
        self.steps, self.need_repeats, self.dry_ranks = steps, need_repeats, dry_ranks

    def __repr__(self) -> str:
        return f"Decision(steps={self.steps}, need_repeats={self.need_repeats}, dry_ranks={self.dry_ranks})"


def agree_steps(counts: np.ndarray, drop_last: bool) -> Decision:
    """The decision from the gathered ``counts`` ``(world, 2 or 3)``: per rank, batches ready,
    whether it is dry (its real data ran out; a dry rank's ready batches are repeats), and
    whether it has nothing to repeat (an empty part: ``RuntimeError`` on every rank).

    >>> agree_steps(np.array([[5, 0], [3, 0]]), drop_last=False)
    Decision(steps=3, need_repeats=False, dry_ranks=())
    >>> agree_steps(np.array([[5, 0], [0, 1]]), drop_last=False)
    Decision(steps=0, need_repeats=True, dry_ranks=(1,))
    >>> agree_steps(np.array([[5, 0], [0, 1]]), drop_last=True)
    Decision(steps=0, need_repeats=False, dry_ranks=(1,))
    """
    ready, dry = counts[:, 0], counts[:, 1].astype(bool)
    dry_ranks = tuple(int(r) for r in np.flatnonzero(dry))
    if dry.all() or (dry.any() and drop_last):
        return Decision(0, False, dry_ranks)
    if counts.shape[1] > 2 and counts[:, 2].any():
        empty = [int(r) for r in np.flatnonzero(counts[:, 2])]
        raise RuntimeError(
            f"rank(s) {empty} read no sample at all, so they cannot repeat batches to stay in step "
            "with the others (drop_last=False): give every rank data, or pass drop_last=True"
        )
    if (ready[dry] == 0).any():  # dry ranks must first ready repeats, then everyone asks again
        return Decision(0, True, dry_ranks)
    return Decision(int(ready.min()), False, dry_ranks)


def rank0_value(value, shards_by_rank: bool):
    """``value`` as rank 0 has it, when ranks may differ (a source split by rank probes
    different samples on each rank) and a process group is running; else ``value``."""
    if not (shards_by_rank and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


class RanksInStep:
    """Every rank takes the same steps over a ``DataLoader`` whose ranks yield different counts.

    For streaming loaders with ``num_workers > 0`` on several ranks: the workers cannot
    reach the process group, so the main process agrees instead, one ``all_gather``
    of two ints a step: while every rank has a batch, each yields its own; when some
    have run out, ``drop_last=False`` lets the others go on while the dry ranks yield
    their last batch again, ``drop_last=True`` stops every rank (the batches the others
    had are dropped). :attr:`report` counts both (a warning says so too). Alone, or
    without a process group, it passes the loader's batches through.

    Resume (``state_dict``/``load_state_dict``, over torchdata's ``StatefulDataLoader``)
    is exact at every step, the tail included: the state is the loader's state and
    the counts of :attr:`report`; once the rank's loader has run dry, the loader's state
    is the one taken before its last batch (kept at every step, while that batch
    could be the last), so a resume takes that batch once more from the loader and
    repeats it where the uninterrupted run did. After a resumed epoch the loader starts
    the next one as usual.

    >>> list(RanksInStep([1, 2, 3]))
    [1, 2, 3]
    """

    def __init__(self, loader, *, drop_last: bool = False):
        self.loader, self.drop_last = loader, bool(drop_last)
        self.report: dict = self._counts()
        self._before_last = None  # the loader's state before its last batch, while the rank is dry
        self._resume: dict | None = None
        dataset = getattr(loader, "dataset", None)
        if hasattr(dataset, "ranks_agreed"):  # a streaming loader: its workers need not warn
            dataset.ranks_agreed = True

    @staticmethod
    def _counts() -> dict:
        return {"steps": 0, "repeated_batches": 0, "dropped_batches": 0}

    def __iter__(self):
        sync = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
        stateful = sync and hasattr(self.loader, "state_dict")
        resume, self._resume = self._resume, None
        self.report = report = dict(resume["report"]) if resume else self._counts()
        it, last, dry = iter(self.loader), None, False
        if resume and resume["dry"]:  # resumed in the tail: the last batch once more, then repeats
            self._before_last = resume["loader"]
            last, dry = next(it), True
            if next(it, None) is not None:  # the loader ends after it, as when the state was saved
                raise RuntimeError(
                    "the loader yields batches after the last one of the state it resumed from: "
                    "resume with the loader (and data) the state was saved with"
                )
        while True:
            before = self.loader.state_dict() if stateful and not dry else None
            try:
                batch, have = next(it), True
            except StopIteration:
                batch, have = None, False
            if not sync:
                if not have:
                    break
                report["steps"] += 1
                yield batch
                continue
            if have:
                held = before
            elif not dry:
                dry, self._before_last = True, held if last is not None else None
            flags = gather_counts([have, last is not None or have], dist.get_world_size())
            if flags[:, 0].all() or (flags[:, 0].any() and not self.drop_last):
                if not flags[:, 1].all():
                    raise RuntimeError(
                        f"rank(s) {np.flatnonzero(flags[:, 1] == 0).tolist()} have no batch at all, so "
                        "they cannot repeat one to stay in step with the others: give every rank data, "
                        "or drop_last=True"
                    )
                if not have:
                    batch = last
                    report["repeated_batches"] += 1
                last = batch
                report["steps"] += 1
                yield batch
                continue
            report["dropped_batches"] += int(have)
            break
        self._before_last = None
        if sync:
            self._warn()

    def _warn(self) -> None:
        import warnings

        r = self.report
        if r["repeated_batches"] or r["dropped_batches"]:
            what = (
                f"repeated its last batch {r['repeated_batches']} times"
                if r["repeated_batches"]
                else "stopped with batches left (drop_last=True)"
            )
            warnings.warn(
                f"rank {dist.get_rank()} {what} so that every rank takes {r['steps']} steps",
                RuntimeWarning,
                stacklevel=3,
            )

    def state_dict(self) -> dict:
        """``{"loader": ..., "ranks_in_step": {...}}``: the loader's state (before its last
        batch while this rank is dry) and where this wrapper stands."""
        dry = self._before_last is not None
        return {
            "loader": self._before_last if dry else self.loader.state_dict(),
            "ranks_in_step": {"dry": dry, "report": dict(self.report)},
        }

    def load_state_dict(self, state: dict) -> None:
        """Resume from :meth:`state_dict`; the next iteration takes up where it was taken."""
        if not isinstance(state, dict) or "ranks_in_step" not in state or "loader" not in state:
            raise ValueError(
                "state should be a RanksInStep state_dict ({'loader': ..., 'ranks_in_step': ...}), "
                f"but got {sorted(state) if isinstance(state, dict) else state!r}"
            )
        self.loader.load_state_dict(state["loader"])
        mine = state["ranks_in_step"]
        self._resume = {"dry": bool(mine["dry"]), "loader": state["loader"], "report": dict(mine["report"])}
