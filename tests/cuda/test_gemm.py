"""CUDA matmul against numpy.matmul (simulator-sized shapes: edge tiles of the
simulator blocking, batched and broadcast, 1-D, empty, strided, out=)."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.usefixtures("cuda_device")

TOL = {np.float32: dict(rtol=2e-5, atol=2e-5), np.float64: dict(rtol=1e-12, atol=1e-12)}


def _check(cuda, rng, a_shape, b_shape, dtype=np.float32):
    from dyntile.cuda import matmul

    a = rng.standard_normal(a_shape).astype(dtype)
    b = rng.standard_normal(b_shape).astype(dtype)
    c = matmul(cuda.to_device(a), cuda.to_device(b))
    expected = np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(dtype)
    got = c.copy_to_host()
    assert got.shape == expected.shape and got.dtype == dtype
    np.testing.assert_allclose(got, expected, **TOL[dtype])


@pytest.mark.parametrize("m, k, n", [(33, 17, 29), (1, 1, 1), (8, 4, 8), (9, 5, 7), (16, 9, 3)])
def test_float32_edge_tiles(cuda_device, rng, m, k, n):
    _check(cuda_device, rng, (m, k), (k, n))


def test_float64(cuda_device, rng):
    _check(cuda_device, rng, (11, 7), (7, 9), np.float64)


@pytest.mark.parametrize(
    "a_shape, b_shape",
    [
        ((3, 5, 6), (3, 6, 4)),  # batched
        ((2, 1, 5, 3), (4, 3, 6)),  # broadcast batch axes
        ((5, 3), (2, 3, 4)),  # matrix against a stack
        ((6,), (2, 6, 3)),  # 1-D a
        ((2, 4, 6), (6,)),  # 1-D b
        ((7,), (7,)),  # dot product
    ],
)
def test_batched_and_broadcast(cuda_device, rng, a_shape, b_shape):
    _check(cuda_device, rng, a_shape, b_shape)


@pytest.mark.parametrize(
    "a_shape, b_shape", [((0, 3), (3, 4)), ((2, 3), (3, 0)), ((3, 0), (0, 4)), ((0, 2, 3), (3, 2))]
)
def test_empty(cuda_device, rng, a_shape, b_shape):
    _check(cuda_device, rng, a_shape, b_shape)


def test_strided_operands_and_out(cuda_device, rng):
    from dyntile.cuda import matmul

    a = rng.standard_normal((9, 14)).astype(np.float32)
    b = rng.standard_normal((11, 5)).astype(np.float32)
    da = cuda_device.to_device(a)[:, ::2]  # (9, 7), strided
    db = cuda_device.to_device(b)[3:10]  # (7, 5), offset rows
    out = cuda_device.to_device(np.full((9, 5), np.nan, np.float32))
    res = matmul(da, db, out=out)
    assert res is out
    np.testing.assert_allclose(out.copy_to_host(), a[:, ::2] @ b[3:10], **TOL[np.float32])


def test_out_non_contiguous(cuda_device, rng):
    from dyntile.cuda import matmul

    a = rng.standard_normal((2, 3, 4)).astype(np.float32)
    b = rng.standard_normal((2, 4, 5)).astype(np.float32)
    big = cuda_device.to_device(np.full((2, 3, 10), np.nan, np.float32))
    matmul(cuda_device.to_device(a), cuda_device.to_device(b), out=big[:, :, ::2])
    host = big.copy_to_host()
    np.testing.assert_allclose(host[:, :, ::2], a @ b, **TOL[np.float32])
    assert np.isnan(host[:, :, 1::2]).all()  # nothing written between the strided columns


@pytest.mark.parametrize(
    "a_shape, b_shape, match",
    [
        ((3, 4), (5, 6), "not aligned"),
        ((2, 3, 4), (3, 4, 5), "do not broadcast"),
        ((), (3,), "operand 0"),
    ],
)
def test_shape_errors(cuda_device, a_shape, b_shape, match):
    from dyntile.cuda import matmul

    a = cuda_device.to_device(np.ones(a_shape, np.float32))
    b = cuda_device.to_device(np.ones(b_shape, np.float32))
    with pytest.raises(ValueError, match=match):
        matmul(a, b)


def test_dtype_errors(cuda_device):
    from dyntile.cuda import matmul

    f32 = cuda_device.to_device(np.ones((2, 2), np.float32))
    with pytest.raises(TypeError, match="float64"):
        matmul(f32, cuda_device.to_device(np.ones((2, 2), np.float64)))
    with pytest.raises(TypeError, match="int32"):
        matmul(
            cuda_device.to_device(np.ones((2, 2), np.int32)), cuda_device.to_device(np.ones((2, 2), np.int32))
        )
    with pytest.raises(TypeError, match="device array"):
        matmul(np.ones((2, 2), np.float32), f32)


def test_out_errors(cuda_device):
    from dyntile.cuda import matmul

    a = cuda_device.to_device(np.ones((2, 3), np.float32))
    with pytest.raises(ValueError, match=r"\(2, 2\)"):
        matmul(
            a,
            cuda_device.to_device(np.ones((3, 2), np.float32)),
            out=cuda_device.device_array((2, 3), np.float32),
        )
