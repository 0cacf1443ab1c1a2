"""A fix to Numba's CUDA simulator that the kernels' results depend on.

The simulator runs each thread of a block as a Python thread and hands out a
``cuda.shared.array`` from a per-launch dict keyed by the calling source line: a
thread looks the key up and, on a miss, allocates an array and stores it. The look-up
and the store are not atomic, so when the interpreter switches threads between them,
two threads of a launch's first block both miss and each gets an array of its own.
Their "shared" tile is then private: whatever one thread stores the others never
see, and the block computes garbage while every ``syncthreads`` is in place. It
happens in a small fraction of launches, more often on a loaded machine, and looks
exactly like a missing barrier.

:func:`make_shared_allocation_atomic` makes a miss reserve its key: other threads
asking for that key wait until the array is stored, then all get that one array.
:mod:`.runtime` applies it when it loads numba with the simulator on. It changes
nothing on a real GPU.
"""

from __future__ import annotations

import threading

__all__ = ["OnceDict", "make_shared_allocation_atomic"]


class OnceDict(dict):
    """A dict whose ``get`` of a missing key reserves it for the calling thread.

    Other threads' ``get`` of a reserved key wait until that thread stores its value
    with ``d[key] = value``, then return that value; so of several threads that look
    up and fill in one key, exactly one fills it and all use its value. A reservation
    lapses when its thread ends without filling it (a failed allocation), so no one
    waits forever; the same thread asking again just gets ``default`` again.

    >>> d = OnceDict()
    >>> d.get("line 7") is None           # a miss: this caller now fills the key in
    True
    >>> d["line 7"] = "tile"; d.get("line 7")
    'tile'
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._filled = threading.Condition()
        self._reserved: dict = {}  # key -> the thread that fills it in

    def get(self, key, default=None):
        me = threading.current_thread()
        with self._filled:
            while key not in self:
                owner = self._reserved.get(key)
                if owner is None or owner is me or not owner.is_alive():
                    self._reserved[key] = me
                    return default
                self._filled.wait(0.05)  # the timeout re-checks that the owner still runs
            return self[key]

    def __setitem__(self, key, value):
        with self._filled:
            super().__setitem__(key, value)
            self._reserved.pop(key, None)
            self._filled.notify_all()


def make_shared_allocation_atomic() -> bool:
    """Make every later simulated launch hand all threads of a block one array per
    ``cuda.shared.array`` line (idempotent). ``False`` when this simulator does not
    keep its shared arrays the way the fix expects (nothing is changed then).

    >>> make_shared_allocation_atomic()
    True
    """
    from numba.cuda.simulator import kernelapi

    shared = kernelapi.FakeCUDAShared
    if getattr(shared, "_dyntile_atomic", False):
        return True
    try:
        probe = shared(0)
    except Exception:  # another simulator: leave it as it is
        return False
    if type(getattr(probe, "_allocations", None)) is not dict:
        return False
    init = shared.__init__

    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self._allocations = OnceDict(self._allocations)

    shared.__init__ = __init__
    shared._dyntile_atomic = True
    return True
