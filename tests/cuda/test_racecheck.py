"""The shared-memory race checker (tests/cuda/racecheck.py) finds what it should."""

from __future__ import annotations

import numpy as np
import pytest

from tests.cuda.racecheck import racecheck

cuda = pytest.importorskip("numba.cuda")  # the simulator swaps the module-global name ``cuda``


@pytest.fixture(autouse=True)
def _simulated(simulated):
    if not simulated:
        pytest.skip("the race checker instruments the CUDA simulator")


def make_rotate(barrier: bool):
    @cuda.jit
    def rotate(out):
        a = cuda.shared.array(4, np.float64)
        t = cuda.threadIdx.x
        a[t] = t
        if barrier:
            cuda.syncthreads()
        out[t] = a[(t + 1) % 4]
        if barrier:
            cuda.syncthreads()
        a[t] = 0  # a reload: others have read the old value

    return rotate


def test_a_correct_kernel_has_no_hazard():
    with racecheck() as report:
        make_rotate(barrier=True)[2, 4](np.zeros(4))
    assert report.accesses == 2 * 4 * 3 and not report.hazards and not report.divergent, report


def test_a_missing_barrier_is_found():
    with racecheck() as report:
        make_rotate(barrier=False)[1, 4](np.zeros(4))
    kinds = {k[0] for k in report.hazards}
    assert {"RAW", "WAR"} <= kinds, report
    assert all(k[1].startswith("rotate:") for k in report.hazards)


def test_an_unwritten_element_and_a_divergent_barrier_are_found():
    @cuda.jit
    def uneven(out):
        a = cuda.shared.array(8, np.float64)
        t = cuda.threadIdx.x
        a[t] = t
        for _ in range(t):  # thread t passes t barriers
            cuda.syncthreads()
        out[t] = a[t + 4]  # elements 4..7: never written

    with racecheck() as report:
        uneven[1, 4](np.zeros(4))
    assert [(k[0], n) for k, n in report.hazards.items()] == [("UNINIT", 4)], report
    assert report.divergent == [("uneven", (0, 0, 0), (0, 1, 2, 3))], report
