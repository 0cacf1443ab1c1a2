"""CUDA tests run on Numba's CUDA simulator unless NUMBA_ENABLE_CUDASIM is set to 0.

The repository's conftest.py sets the variable before anything imports numba; if
numba was imported first without it, the kernel tests skip with that reason. Sizes
are small: every simulated thread is a Python thread. While a test runs on the
simulator, the interpreter switches threads every 10 us instead of every 5 ms: the
simulator's block manager polls its threads in a loop, so each ``syncthreads`` would
otherwise wait out a switch interval.
"""

from __future__ import annotations

import os
import sys
import time

import pytest


def _cuda_status() -> str | None:
    """``None`` when kernels can run here, else the reason they cannot."""
    try:
        from numba import cuda
    except ImportError:
        return "numba / numba-cuda is not installed"
    wanted = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")
    if wanted and not cuda.config.ENABLE_CUDASIM:
        return "numba was imported before tests/cuda/conftest.py could turn the CUDA simulator on"
    if not cuda.is_available():
        return "no CUDA device and the simulator is off"
    return None


@pytest.fixture(scope="session")
def cuda_device():
    """numba.cuda, or skip with the reason kernels cannot run here."""
    reason = _cuda_status()
    if reason is not None:
        pytest.skip(reason)
    from numba import cuda

    return cuda


@pytest.fixture(scope="session")
def simulated(cuda_device) -> bool:
    return bool(cuda_device.config.ENABLE_CUDASIM)


@pytest.fixture(autouse=True)
def _quick_thread_switches():
    if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") in ("", "0"):
        yield
        return
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


@pytest.fixture
def slow_shared_allocation(simulated, monkeypatch):
    """The simulator's ``cuda.shared.array`` made to sleep between looking its array
    up and storing a new one, so that every thread of a launch's first block is inside
    that window at once: without :mod:`dyntile.cuda.simulator`'s fix each would get a
    "shared" array of its own on every launch, not on a rare unlucky one. Yields the
    number of sleeps so far (a list of one count), so a test can check the window opened."""
    if not simulated:
        pytest.skip("the shared-allocation window exists only in the CUDA simulator")
    import numpy as np
    from numba.cuda.simulator import kernelapi

    import dyntile.cuda.runtime  # noqa: F401  (applies the fix, as any kernel call does)

    allocate = kernelapi.FakeCUDAShared.array.__code__
    sleeps = [0]

    class SlowEmpty:
        def __getattr__(self, name):
            return getattr(np, name)

        @staticmethod
        def empty(*args, **kwargs):
            if sys._getframe(1).f_code is allocate:
                sleeps[0] += 1
                time.sleep(0.002)
            return np.empty(*args, **kwargs)

    monkeypatch.setattr(kernelapi, "np", SlowEmpty())
    yield sleeps


@pytest.fixture
def rng():
    import numpy as np

    return np.random.default_rng(20261129)


def pytest_report_header(config):
    mode = "simulator" if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0") else "device"
    loaded = "numba loaded" if "numba" in sys.modules else "numba not loaded yet"
    return f"dyntile cuda tests: {mode} ({loaded})"
