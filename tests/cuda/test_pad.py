"""CUDA ragged pad against a NumPy reference: host (one transfer) and device samples,
left/right, fill, 1-D/2-D/3-D, zero-size and strided samples, out=."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.usefixtures("cuda_device")


def reference(samples, out_shape, dtype, fill, left):
    out = np.full(out_shape, fill, dtype)
    for b, x in enumerate(samples):
        idx = tuple(slice(p - s, p) if left else slice(0, s) for s, p in zip(x.shape, out_shape[1:]))
        out[(b, *idx)] = x
    return out


def _samples(rng, shapes, dtype):
    if np.dtype(dtype).kind == "f":
        return [rng.standard_normal(s).astype(dtype) for s in shapes]
    return [rng.integers(1, 100, s).astype(dtype) for s in shapes]


@pytest.mark.parametrize("left", [False, True])
@pytest.mark.parametrize(
    "shapes, padded, dtype, fill",
    [
        ([(3,), (7,), (0,), (5,)], (8,), np.float32, -1.5),
        ([(2, 3), (3, 1), (1, 4)], (3, 5), np.int16, -7),
        ([(2, 3, 2), (1, 1, 3), (2, 2, 1)], (3, 3, 4), np.float64, np.nan),
        ([(2, 0), (0, 3)], (2, 4), np.int64, 9),
    ],
)
def test_host_samples(cuda_device, rng, shapes, padded, dtype, fill, left):
    from dyntile.cuda import pad_into

    xs = _samples(rng, shapes, dtype)
    out_shape = (len(xs), *padded)
    got = pad_into(xs, out_shape, dtype, fill, left).copy_to_host()
    np.testing.assert_array_equal(got, reference(xs, out_shape, dtype, fill, left))


@pytest.mark.parametrize("left", [False, True])
def test_device_samples(cuda_device, rng, left):
    from dyntile.cuda import pad_into

    xs = _samples(rng, [(2, 5), (4, 3), (1, 1)], np.float32)
    dev = [cuda_device.to_device(x) for x in xs]
    got = pad_into(dev, (3, 4, 8), np.float32, 3.25, left).copy_to_host()
    np.testing.assert_array_equal(got, reference(xs, (3, 4, 8), np.float32, 3.25, left))


def test_strided_samples(cuda_device, rng):
    from dyntile.cuda import pad_into

    base = rng.integers(0, 50, (6, 9)).astype(np.int32)
    host = [base[::2, 1::3], base[1:4, ::-2]]  # non-contiguous, negative strides
    dev = [cuda_device.to_device(base)[::2, 1::3], cuda_device.to_device(base)[1:4, :5]]
    expect_dev = [base[::2, 1::3], base[1:4, :5]]
    np.testing.assert_array_equal(
        pad_into(host, (2, 3, 6), np.int32, -1, False).copy_to_host(),
        reference(host, (2, 3, 6), np.int32, -1, False),
    )
    np.testing.assert_array_equal(
        pad_into(dev, (2, 3, 6), np.int32, -1, True).copy_to_host(),
        reference(expect_dev, (2, 3, 6), np.int32, -1, True),
    )


def test_host_samples_take_one_transfer(cuda_device, rng, monkeypatch):
    from dyntile.cuda import pad as pad_module

    calls = []
    real = pad_module.cuda.to_device
    monkeypatch.setattr(
        pad_module.cuda, "to_device", lambda *a, **k: calls.append(a[0].nbytes) or real(*a, **k)
    )
    xs = _samples(rng, [(5,), (2,), (8,), (1,)], np.float32)
    got = pad_module.pad_into(xs, (4, 8), np.float32, 0.0, False).copy_to_host()
    np.testing.assert_array_equal(got, reference(xs, (4, 8), np.float32, 0.0, False))
    assert len(calls) == 1, f"expected one host-to-device transfer, saw {len(calls)}"


def test_out_is_filled(cuda_device, rng):
    from dyntile.cuda import pad_into

    xs = _samples(rng, [(3, 2), (1, 4)], np.float32)
    out = cuda_device.to_device(np.full((2, 3, 4), np.nan, np.float32))
    assert pad_into(xs, (2, 3, 4), np.float32, 0.0, False, out=out) is out
    np.testing.assert_array_equal(out.copy_to_host(), reference(xs, (2, 3, 4), np.float32, 0.0, False))


def test_out_non_contiguous(cuda_device, rng):
    from dyntile.cuda import pad_into

    xs = _samples(rng, [(3,), (1,)], np.float32)
    big = cuda_device.to_device(np.full((2, 8), np.nan, np.float32))
    pad_into(xs, (2, 4), np.float32, -2.0, False, out=big[:, ::2])
    host = big.copy_to_host()
    np.testing.assert_array_equal(host[:, ::2], reference(xs, (2, 4), np.float32, -2.0, False))
    assert np.isnan(host[:, 1::2]).all()


def test_zero_size_output(cuda_device):
    from dyntile.cuda import pad_into

    assert pad_into([np.zeros((0, 3), np.float32)], (1, 0, 3), np.float32, 0.0, False).shape == (1, 0, 3)


@pytest.mark.parametrize(
    "samples, out_shape, dtype, exc, match",
    [
        ([np.zeros(5, np.float32)], (1, 4), np.float32, ValueError, "sample 0 of shape \\(5,\\)"),
        ([np.zeros((2, 2), np.float32)], (1, 4), np.float32, ValueError, "does not fit"),
        (
            [np.zeros(2, np.float32), np.zeros(2, np.int32)],
            (2, 4),
            np.float32,
            TypeError,
            "sample 1 has int32",
        ),
        ([np.zeros(2, np.float32)], (2, 4), np.float32, ValueError, "2 samples"),
    ],
)
def test_errors(cuda_device, samples, out_shape, dtype, exc, match):
    from dyntile.cuda import pad_into

    with pytest.raises(exc, match=match):
        pad_into(samples, out_shape, dtype, 0, False)


def test_mixed_host_and_device_samples(cuda_device):
    from dyntile.cuda import pad_into

    with pytest.raises(TypeError, match="sample 1"):
        pad_into(
            [cuda_device.to_device(np.zeros(2, np.float32)), np.zeros(2, np.float32)],
            (2, 4),
            np.float32,
            0,
            False,
        )


@settings(max_examples=8, deadline=None)
@given(data=st.data())
def test_property_matches_reference(cuda_device, data):
    from dyntile.cuda import pad_into

    nd = data.draw(st.integers(1, 3), label="ndim")
    batch = data.draw(st.integers(1, 3), label="batch")
    shapes = [tuple(data.draw(st.lists(st.integers(0, 4), min_size=nd, max_size=nd))) for _ in range(batch)]
    padded = tuple(max(s[a] for s in shapes) + data.draw(st.integers(0, 2)) for a in range(nd))
    left = data.draw(st.booleans(), label="left")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16), label="seed"))
    xs = [rng.integers(1, 1000, s).astype(np.int32) for s in shapes]
    got = pad_into(xs, (batch, *padded), np.int32, -5, left).copy_to_host()
    np.testing.assert_array_equal(got, reference(xs, (batch, *padded), np.int32, -5, left))
