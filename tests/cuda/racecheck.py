"""A shared-memory race checker for kernels run on Numba's CUDA simulator.

Inside :func:`racecheck`, every ``cuda.shared.array`` of a simulated launch records
each access with its thread and barrier epoch (how many ``syncthreads`` that thread
has passed). Two threads of a block touching one element in one epoch, at least one
of them writing, is a hazard (``RAW``, ``WAR``, ``WAW``: what a missing barrier
allows); so is reading an element no thread of the block wrote (``UNINIT``). A block
whose threads pass different numbers of barriers is divergent (a ``syncthreads`` in
a branch or loop whose trip count differs between threads). Like compute-sanitizer's
racecheck, it sees the accesses one run makes, not every possible interleaving, so it
finds a missing barrier on every run instead of on an unlucky one.
"""

from __future__ import annotations

import collections
import contextlib
import sys
import threading

import numpy as np


class Report:
    """What :func:`racecheck` saw: ``accesses`` (count), ``hazards`` (``Counter`` of
    ``(kind, array, site, other site)``) and ``divergent`` (``(kernel, barrier counts)``)."""

    def __init__(self):
        self.accesses = 0
        self.hazards: collections.Counter = collections.Counter()
        self.divergent: list = []

    def __repr__(self):
        top = ", ".join(f"{n} x {k}" for k, n in self.hazards.most_common(5))
        return (
            f"Report({self.accesses} accesses; hazards: {top or 'none'}; divergent blocks: {self.divergent})"
        )


def _site(frame) -> str:
    return f"{frame.f_code.co_name}:{frame.f_lineno}"


class _Tracked:
    """A shared array that records who touched each element in which epoch."""

    def __init__(self, array: np.ndarray, name: str, report: Report, lock: threading.Lock):
        self._a, self._name, self._report, self._lock = array, name, report, lock
        self._writes: dict = {}  # element -> (block, thread, epoch, site)
        self._reads: dict = {}  # element -> (block, epoch, {thread: site})
        self.shape, self.dtype, self.ndim = array.shape, array.dtype, array.ndim

    def _element(self, idx) -> tuple:
        idx = idx if isinstance(idx, tuple) else (idx,)
        if len(idx) != self._a.ndim or not all(isinstance(i, (int, np.integer)) for i in idx):
            raise TypeError(f"racecheck tracks element accesses of shared arrays only, but got index {idx!r}")
        return tuple(int(i) for i in idx)

    def _who(self):
        t = threading.current_thread()
        return tuple(t.blockIdx), t.thread_id, getattr(t, "_racecheck_epoch", 0)

    def __getitem__(self, idx):
        key, (block, tid, epoch), site = self._element(idx), self._who(), _site(sys._getframe(1))
        with self._lock:
            self._report.accesses += 1
            w = self._writes.get(key)
            if w is None or w[0] != block:
                self._report.hazards[("UNINIT", self._name, site, None)] += 1
            elif w[2] == epoch and w[1] != tid:
                self._report.hazards[("RAW", self._name, site, w[3])] += 1
            r = self._reads.get(key)
            if r is None or r[:2] != (block, epoch):
                r = self._reads[key] = (block, epoch, {})
            r[2][tid] = site
        return self._a[key]

    def __setitem__(self, idx, value):
        key, (block, tid, epoch), site = self._element(idx), self._who(), _site(sys._getframe(1))
        with self._lock:
            self._report.accesses += 1
            w = self._writes.get(key)
            if w is not None and w[0] == block and w[2] == epoch and w[1] != tid:
                self._report.hazards[("WAW", self._name, site, w[3])] += 1
            r = self._reads.get(key)
            if r is not None and r[:2] == (block, epoch):
                for other, other_site in r[2].items():
                    if other != tid:
                        self._report.hazards[("WAR", self._name, site, other_site)] += 1
            self._writes[key] = (block, tid, epoch, site)
        self._a[key] = value


@contextlib.contextmanager
def racecheck():
    """Check the shared-memory accesses of the simulated launches inside; yields a :class:`Report`."""
    from numba.cuda.simulator import kernel, kernelapi
    from numba.np import numpy_support

    report, lock = Report(), threading.Lock()
    saved = [
        (kernelapi.FakeCUDAShared, "array"),
        (kernel.BlockThread, "syncthreads"),
        (kernel.BlockThread, "run"),
        (kernel.BlockManager, "run"),
    ]
    saved = [(owner, name, getattr(owner, name)) for owner, name in saved]
    sync, thread_run, block_run = (f for _, _, f in saved[1:])

    def array(self, shape, dtype, alignment=None):
        if isinstance(dtype, kernelapi.types.Type):
            dtype = numpy_support.as_dtype(dtype)
        caller = sys._getframe(1)
        key = caller.f_code.co_filename, caller.f_lineno
        with lock:
            if key not in self._allocations:
                self._allocations[key] = _Tracked(np.zeros(shape, dtype), _site(caller), report, lock)
            return self._allocations[key]

    def syncthreads(self):
        self._racecheck_epoch = getattr(self, "_racecheck_epoch", 0) + 1
        return sync(self)

    def run_thread(self):
        try:
            thread_run(self)
        finally:
            with lock:
                self._manager.__dict__.setdefault("_racecheck_epochs", []).append(
                    getattr(self, "_racecheck_epoch", 0)
                )

    def run_block(self, grid_point, *args):
        block_run(self, grid_point, *args)
        counts = sorted(set(self.__dict__.pop("_racecheck_epochs", [])))
        if len(counts) > 1:
            report.divergent.append((getattr(self._f, "__name__", "?"), tuple(grid_point), tuple(counts)))

    kernelapi.FakeCUDAShared.array = array
    kernel.BlockThread.syncthreads = syncthreads
    kernel.BlockThread.run = run_thread
    kernel.BlockManager.run = run_block
    try:
        yield report
    finally:
        for owner, name, f in saved:
            setattr(owner, name, f)
