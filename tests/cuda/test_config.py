"""Block-size table, launch configurations, lazy import and dispatch (no kernels run)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dyntile.cuda.config import (
    ATTENTION_BLOCKING,
    COPY_BLOCK,
    GEMM_BLOCKING,
    SHARED_MEMORY_LIMIT,
    AttentionBlocking,
    GemmBlocking,
    attention_blocking,
    gemm_blocking,
)
from dyntile.cuda.launch import MAX_GRID_YZ, attention_items, copy_launch, gemm_launch
from dyntile.dispatch import backend_of


@pytest.mark.parametrize("profile", sorted(GEMM_BLOCKING))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_blocking_table_is_consistent(profile, dtype):
    blk = gemm_blocking(dtype, profile).check()
    assert blk.bm % blk.tm == 0 and blk.bn % blk.tn == 0
    assert blk.nthreads <= 1024
    assert (blk.bm * blk.bk) % blk.nthreads == 0 and (blk.bk * blk.bn) % blk.nthreads == 0


def test_gpu_blocking_is_the_serious_one():
    blk = gemm_blocking("float32", "gpu")
    assert (blk.bm, blk.bn, blk.tm, blk.tn) == (128, 128, 8, 8)
    assert blk.threads == (16, 16)
    itemsize = 4
    smem = 2 * blk.bk * (blk.bm + blk.pad + blk.bn + blk.pad) * itemsize
    assert smem <= 48 * 1024  # static shared memory limit


@pytest.mark.parametrize(
    "bad, match",
    [
        (GemmBlocking(128, 128, 8, 7, 8, 4), "multiples"),
        (GemmBlocking(256, 256, 8, 4, 4, 0), "1024"),
        (GemmBlocking(16, 16, 3, 2, 2, 0), "split evenly"),
        (GemmBlocking(16, 16, 4, 2, 2, -1), "pad"),
    ],
)
def test_blocking_check_rejects(bad, match):
    with pytest.raises(ValueError, match=match):
        bad.check()


def test_gemm_blocking_unknown_dtype():
    with pytest.raises(TypeError, match="float16"):
        gemm_blocking("float16", "gpu")


def test_copy_blocks_fit_a_block():
    for bx, by in COPY_BLOCK.values():
        assert 1 <= bx * by <= 1024


@pytest.mark.parametrize("batch, m, n", [(1, 1, 1), (3, 33, 17), (2, 128, 129), (5, 300, 7)])
def test_gemm_launch_covers_the_output(batch, m, n):
    blk = GemmBlocking(8, 8, 4, 2, 2, 1)
    ((z0, grid, block),) = gemm_launch(batch, m, n, blk)
    assert z0 == 0 and block == (4, 4)
    assert grid[0] * blk.bn >= n > (grid[0] - 1) * blk.bn
    assert grid[1] * blk.bm >= m > (grid[1] - 1) * blk.bm
    assert grid[2] == batch


def test_gemm_launch_chunks_large_batches():
    launches = gemm_launch(2 * MAX_GRID_YZ + 5, 4, 4, GemmBlocking(8, 8, 4, 2, 2, 1))
    assert [z0 for z0, _, _ in launches] == [0, MAX_GRID_YZ, 2 * MAX_GRID_YZ]
    assert sum(g[2] for _, g, _ in launches) == 2 * MAX_GRID_YZ + 5


@pytest.mark.parametrize("shape", [(0, 3, 3), (2, 0, 3), (2, 3, 0)])
def test_empty_launches(shape):
    assert gemm_launch(*shape, GemmBlocking(8, 8, 4, 2, 2, 1)) == []
    assert copy_launch(*shape, (4, 2)) is None


def test_copy_launch_clips_grid():
    grid, block = copy_launch(100000, 400000, 5, (128, 4))
    assert block == (128, 4) and grid == (1, MAX_GRID_YZ, MAX_GRID_YZ)


@pytest.mark.parametrize("profile", sorted(ATTENTION_BLOCKING))
@pytest.mark.parametrize("backward", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_attention_blocking_table_is_consistent(profile, backward, dtype):
    itemsize = np.dtype(dtype).itemsize
    blk = attention_blocking(dtype, backward, profile).check(itemsize, backward, SHARED_MEMORY_LIMIT)
    assert blk.tm * blk.nty == blk.bm and blk.tn * blk.ntx == blk.bn and blk.dj * blk.ntx == blk.dc
    if profile == "gpu":
        assert blk.nthreads >= 128 and blk.bm >= 32 and blk.dc >= 32


def test_attention_shared_bytes_match_the_kernels_arrays():
    blk = AttentionBlocking(bm=64, bn=32, dc=64, ntx=16, nty=16, pad=1)
    # forward: Q^T (64 x 65), K/V^T (64 x 33), P (64 x 33), row partials (64 x 16)
    assert blk.shared_bytes(4, backward=False) == 4 * (64 * 65 + 64 * 33 + 64 * 33 + 64 * 16)
    # backward: K^T, V^T (64 x 65), Q^T, dO^T (64 x 33), P^T, dS^T (64 x 33)
    assert blk.shared_bytes(4, backward=True) == 4 * (2 * 64 * 65 + 2 * 64 * 33 + 2 * 64 * 33)


@pytest.mark.parametrize(
    "bad, match",
    [
        (AttentionBlocking(64, 32, 64, 16, 12, 1), "multiple"),
        (AttentionBlocking(64, 30, 64, 16, 16, 1), "multiple"),
        (AttentionBlocking(64, 64, 64, 32, 64, 1), "1024"),
        (AttentionBlocking(4, 2, 2, 2, 4, 1), "split evenly"),
        (AttentionBlocking(64, 32, 64, 16, 16, -1), "pad"),
        (AttentionBlocking(128, 64, 128, 16, 16, 1), "shared memory"),
    ],
)
def test_attention_blocking_check_rejects(bad, match):
    with pytest.raises(ValueError, match=match):
        bad.check(4, True, SHARED_MEMORY_LIMIT)


def _steps(length, r0, rows, cols, causal, keys_are_rows):
    """Brute force: the column tiles holding a pair the tile's rows attend (or are attended by)."""
    tiles = set()
    for r in range(r0, min(length, r0 + rows)):
        for c in range(length):
            if not causal or (r <= c if keys_are_rows else c <= r):
                tiles.add(c // cols)
    return len(tiles)


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 23), max_size=6),
    rows=st.integers(1, 5),
    cols=st.integers(1, 5),
    causal=st.booleans(),
    keys_are_rows=st.booleans(),
)
def test_attention_items_cover_each_segment_once_heaviest_first(lengths, rows, cols, causal, keys_are_rows):
    lengths = np.array(lengths, np.int64)
    starts = np.cumsum(lengths + 2) - lengths - 2  # two padding tokens before each segment
    items = attention_items(starts, lengths, rows, cols, causal, keys_are_rows)
    assert items.dtype == np.int64 and items.shape == (int((-(-lengths // rows)).sum()), 3)
    seen = {(int(s), int(n)): [] for s, n in zip(starts, lengths) if n}
    for s, n, r0 in items.tolist():
        seen[(s, n)].append(r0)
    for (_, n), r0s in seen.items():
        assert sorted(r0s) == list(range(0, n, rows))
    steps = [_steps(n, r0, rows, cols, causal, keys_are_rows) for _, n, r0 in items.tolist()]
    assert steps == sorted(steps, reverse=True)
    for (_, n, r0), k in zip(items.tolist(), steps):  # the kernels walk exactly these column tiles
        first = r0 // cols if causal and keys_are_rows else 0
        last = min(n, r0 + rows) if causal and not keys_are_rows else n
        assert -(-last // cols) - first == k


class _FakeDeviceArray:
    """Exposes the CUDA array interface the way CuPy or a device buffer does."""

    shape, dtype = (3,), "float32"

    @property
    def __cuda_array_interface__(self):
        return {"shape": (3,), "typestr": "<f4", "data": (0, False), "version": 3}


def test_dispatch_routes_the_cuda_interface():
    import numpy as np

    assert backend_of([_FakeDeviceArray(), _FakeDeviceArray()]) == "cuda"
    with pytest.raises(TypeError, match="arrays\\[1\\]"):
        backend_of([_FakeDeviceArray(), np.zeros(3)])


def test_dispatch_routes_simulator_arrays_only_under_the_simulator():
    r = _run(
        """
        from numba import cuda
        import numpy as np
        from dyntile.dispatch import backend_of
        print(backend_of([cuda.to_device(np.zeros(3))]), type(cuda.to_device(np.zeros(3))).__name__)

        class Marked:                 # a simulator-like array while the simulator is off
            __cuda_ndarray__ = True
        print(backend_of([Marked()]))
    """,
        NUMBA_ENABLE_CUDASIM="1",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["cuda", "FakeCUDAArray", "cuda"]
    r = _run("""
        import numba.cuda
        from dyntile.dispatch import backend_of

        class Marked:
            __cuda_ndarray__ = True
        print(backend_of([Marked()]))
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "cpu"


def _run(code: str, **env):
    import os

    environ = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    environ.update(env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=environ,
        timeout=120,
    )


def test_import_is_free_of_numba_and_torch():
    r = _run("""
        import sys, numpy, dyntile, dyntile.cuda, dyntile.dispatch
        dir(dyntile.cuda)
        from dyntile.cuda import config, launch
        dyntile.dispatch.backend_of([numpy.zeros(3), [1.0]])     # dispatch looks numba up, never imports it
        print(sorted(m for m in ("numba", "torch") if m in sys.modules))
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_clear_error_without_numba():
    r = _run("""
        import sys
        sys.modules["numba"] = None          # as if numba were not installed
        import dyntile.cuda
        try:
            dyntile.cuda.pad_into
        except ImportError as e:
            print("ERR", e)
    """)
    assert r.returncode == 0, r.stderr
    assert "ERR" in r.stdout and "numba-cuda" in r.stdout
