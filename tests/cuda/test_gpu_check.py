"""The GPU check script runs end to end on the simulator (``--tiny``)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "asv_benches" / "gpu_check.py"


def test_gpu_check_tiny_on_the_simulator():
    pytest.importorskip("numba")
    if not SCRIPT.exists():
        pytest.skip(f"{SCRIPT} is not in this checkout")
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    r = subprocess.run([sys.executable, str(SCRIPT), "--tiny"], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "FAIL" not in r.stdout
    assert "all checks passed" in r.stdout
    for part in ("matmul float64", "pad device 2-D", "tile/untile", "GEMM float32", "device-to-device copy"):
        assert part in r.stdout, part


def test_gpu_check_refuses_full_sizes_on_the_simulator():
    pytest.importorskip("numba")
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    r = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2 and "--tiny" in r.stdout
