"""CUDA tile/untile against a NumPy reference, round trips, leading axes, fill, out=."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.usefixtures("cuda_device")


def reference_tile(x, tile, fill):
    tm, tn = tile
    *lead, M, N = x.shape
    gm, gn = -(-M // tm), -(-N // tn)
    padded = np.full((*lead, gm * tm, gn * tn), fill, x.dtype)
    padded[..., :M, :N] = x
    t = padded.reshape(*lead, gm, tm, gn, tn)
    return np.moveaxis(t, -3, -2).copy()


@pytest.mark.parametrize(
    "shape, tile", [((5, 7), (2, 4)), ((2, 9, 5), (4, 4)), ((2, 1, 3, 3), (3, 3)), ((1, 1), (2, 2))]
)
def test_tile_matches_reference_and_round_trips(cuda_device, rng, shape, tile):
    from dyntile.cuda import tile_into, untile_from

    x = rng.standard_normal(shape).astype(np.float32)
    t = tile_into(cuda_device.to_device(x), tile, -3.0)
    np.testing.assert_array_equal(t.copy_to_host(), reference_tile(x, tile, np.float32(-3.0)))
    back = untile_from(t, shape[-2:])
    np.testing.assert_array_equal(back.copy_to_host(), x)


def test_int_dtype_and_strided_input(cuda_device, rng):
    from dyntile.cuda import tile_into, untile_from

    base = rng.integers(0, 100, (3, 10, 12)).astype(np.int16)
    x = base[:, 1::2, ::3]  # (3, 5, 4), strided
    t = tile_into(cuda_device.to_device(base)[:, 1::2, ::3], (2, 3), 7)
    np.testing.assert_array_equal(t.copy_to_host(), reference_tile(x, (2, 3), 7))
    np.testing.assert_array_equal(untile_from(t, (5, 4)).copy_to_host(), x)


def test_out_arguments(cuda_device, rng):
    from dyntile.cuda import tile_into, untile_from

    x = rng.standard_normal((3, 5)).astype(np.float64)
    t_out = cuda_device.to_device(np.full((2, 2, 2, 4), np.nan))
    assert tile_into(cuda_device.to_device(x), (2, 4), 0.0, out=t_out) is t_out
    np.testing.assert_array_equal(t_out.copy_to_host(), reference_tile(x, (2, 4), 0.0))
    big = cuda_device.to_device(np.full((3, 10), np.nan))
    untile_from(t_out, (3, 5), out=big[:, ::2])
    host = big.copy_to_host()
    np.testing.assert_array_equal(host[:, ::2], x)
    assert np.isnan(host[:, 1::2]).all()


def test_zero_size(cuda_device):
    from dyntile.cuda import tile_into, untile_from

    t = tile_into(cuda_device.to_device(np.zeros((0, 5, 3), np.float32)), (2, 2), 0.0)
    assert t.shape == (0, 3, 2, 2, 2)
    assert untile_from(t, (5, 3)).shape == (0, 5, 3)


def test_errors(cuda_device):
    from dyntile.cuda import tile_into, untile_from

    with pytest.raises(ValueError, match="at least 2 dimensions"):
        tile_into(cuda_device.to_device(np.zeros(4, np.float32)), (2, 2), 0.0)
    t = cuda_device.to_device(np.zeros((3, 2, 2, 4), np.float32))
    with pytest.raises(ValueError, match="tile grid"):
        untile_from(t, (7, 8))
    x = cuda_device.to_device(np.zeros((4, 4), np.float32))
    with pytest.raises(ValueError, match="out should have shape"):
        tile_into(x, (2, 2), 0.0, out=cuda_device.device_array((2, 2, 2, 3), np.float32))
    with pytest.raises(TypeError, match="out should have dtype float32"):
        tile_into(x, (2, 2), 0.0, out=cuda_device.device_array((2, 2, 2, 2), np.float64))
