"""Small products on the direct kernels (no packing; ``gemm_direct``): against NumPy in
float64, at and past the MR x NR tile edges, in batches, on views, and with operands
that end at a guard page (the kernels' masked loads must not read past a row)."""

import ctypes
import mmap

import numpy as np
import pytest

import dyntile
from dyntile.cpu import gemm

pytestmark = pytest.mark.skipif(
    "avx512" not in gemm.available_isas(), reason="the direct kernels are AVX-512 only"
)
DTYPES = ["float32", "float64"]


@pytest.fixture(autouse=True)
def avx512():
    previous = gemm._set_isa("avx512")
    yield gemm.blocking_table()["avx512", "float32"]
    gemm._set_isa(previous)


def check(got, a, b, dtype):
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
    tol = 2e-5 if dtype == "float32" else 1e-12
    scale = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)) + 1
    assert np.all(np.abs(got - ref) <= tol * scale)


def rand(rng, shape, dtype):
    return rng.uniform(0.5, 1.5, shape).astype(dtype) * rng.choice([-1, 1], shape).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_tile_edges_match_numpy(dtype, avx512):
    rng = np.random.default_rng(5)
    mr, nr = avx512["mr"], gemm.blocking_table()["avx512", dtype]["nr"]
    for m in (2, mr - 1, mr, mr + 1, 3 * mr + 5):
        for n in (2, nr // 2, nr // 2 + 1, nr - 1, nr, 2 * nr + 3):
            for k in (1, 3, 64):
                a, b = rand(rng, (m, k), dtype), rand(rng, (k, n), dtype)
                check(dyntile.matmul(a, b, threads=1), a, b, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_direct_and_packed_agree(dtype):
    """The same products through both routes (direct on, then off)."""
    rng = np.random.default_rng(6)
    a, b = rand(rng, (37, 45), dtype), rand(rng, (45, 50), dtype)
    direct = dyntile.matmul(a, b, threads=1)
    previous = gemm._set_direct_flops(0)
    try:
        packed = dyntile.matmul(a, b, threads=1)
    finally:
        gemm._set_direct_flops(previous)
    check(direct, a, b, dtype)
    check(packed, a, b, dtype)
    np.testing.assert_allclose(direct, packed, rtol=1e-5 if dtype == "float32" else 1e-13)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("threads", [1, 2])
def test_batches_views_and_out(dtype, threads):
    rng = np.random.default_rng(7)
    a, b = rand(rng, (9, 20, 17), dtype), rand(rng, (9, 17, 33), dtype)
    check(dyntile.matmul(a, b, threads=threads), a, b, dtype)
    flipped = a[:, ::-1, :]  # negative row stride, rows still contiguous
    check(dyntile.matmul(flipped, b, threads=threads), flipped, b, dtype)
    wide = np.full((9, 20, 40), 7, dtype)  # C inside a wider array: its other columns stay
    dyntile.matmul(a, b, out=wide[:, :, 4:37], threads=threads)
    check(wide[:, :, 4:37], a, b, dtype)
    assert (wide[:, :, :4] == 7).all() and (wide[:, :, 37:] == 7).all()
    bc = rand(rng, (17, 33), dtype)  # broadcast B: every item reads the same rows
    check(dyntile.matmul(a, bc, threads=threads), a, bc, dtype)
    check(dyntile.matmul(a, bc[::-1], threads=threads), a, bc[::-1], dtype)  # B's rows flipped
    down = np.zeros((9, 20, 33), dtype)[:, ::-1, :]  # C's rows flipped
    dyntile.matmul(a, b, out=down, threads=threads)
    check(down, a, b, dtype)


def guarded(shape, dtype):
    """An array whose last element ends exactly at a page that cannot be read."""
    page = mmap.PAGESIZE
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    pages = -(-nbytes // page)
    buf = mmap.mmap(-1, (pages + 1) * page)
    base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    if libc.mprotect(base + pages * page, page, 0) != 0:
        pytest.skip("mprotect is not available")
    arr = np.frombuffer(buf, dtype, count=int(np.prod(shape)), offset=pages * page - nbytes).reshape(shape)
    return arr, buf


@pytest.mark.parametrize("dtype", DTYPES)
def test_operands_ending_at_a_guard_page(dtype):
    """B's last row and A's last row end at an unreadable page: a kernel that loads past
    column n or row k crashes here instead of passing."""
    rng = np.random.default_rng(8)
    for m, k, n in ((15, 7, 3), (5, 9, 17), (29, 31, 45)):
        a, abuf = guarded((m, k), dtype)
        b, bbuf = guarded((k, n), dtype)
        a[...] = rand(rng, (m, k), dtype)
        b[...] = rand(rng, (k, n), dtype)
        check(dyntile.matmul(a, b, threads=1), a, b, dtype)
        del a, b
