"""The fix to the CUDA simulator's shared-array allocation (dyntile.cuda.simulator).

Without it, threads of a launch's first block that look a ``cuda.shared.array`` up
at the same moment each get an array of their own: a block computes garbage in a
small fraction of launches. The ``slow_shared_allocation`` fixture holds every
thread inside that window, so the old simulator fails these tests on every run.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from dyntile.cuda.simulator import OnceDict

cuda = pytest.importorskip("numba.cuda")  # the simulator swaps the module-global name ``cuda``


def test_once_dict_has_one_filler_per_key():
    d, got = OnceDict(), []
    start = threading.Barrier(8)

    def fill(i):
        start.wait()
        value = d.get("key")
        if value is None:
            threading.Event().wait(0.01)  # others look the key up meanwhile
            value = d["key"] = f"thread {i}"
        got.append(value)

    threads = [threading.Thread(target=fill, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert len(got) == 8 and len(set(got)) == 1 and d == {"key": got[0]}


def test_once_dict_reservation_lapses_with_its_thread():
    d = OnceDict()
    assert d.get("key", 3) == 3 and d.get("key") is None  # the same thread may ask again
    d["key"] = 1
    assert d.get("key") == 1
    gone = threading.Thread(target=d.get, args=("lost",))  # reserves "lost", ends unfilled
    gone.start()
    gone.join()
    assert d.get("lost", "mine") == "mine"


def test_threads_of_a_block_share_its_arrays(slow_shared_allocation):
    @cuda.jit
    def rotate(out):
        a = cuda.shared.array(8, np.float64)
        b = cuda.shared.array(8, np.float64)
        t = cuda.threadIdx.x
        a[t] = t
        b[t] = 10 * t
        cuda.syncthreads()
        out[cuda.blockIdx.x, t] = a[(t + 1) % 8] + b[(t + 3) % 8]

    want = np.arange(1, 9) % 8 + 10 * (np.arange(3, 11) % 8)
    for _ in range(3):
        out = np.zeros((2, 8))
        rotate[2, 8](out)
        np.testing.assert_array_equal(out, np.tile(want, (2, 1)))
    assert slow_shared_allocation[0] >= 2 * 3, "the fixture's window never opened"
