"""The public API reaches the CUDA kernels: ``pad_batch(..., device="cuda")`` sends
host arrays through the one-transfer path, and the simulator's device arrays (which
lack ``__cuda_array_interface__``) are routed to the kernels like real ones, so
``matmul``, ``pad_batch``, ``tile`` and ``untile`` on them return device arrays."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.usefixtures("cuda_device")


@pytest.mark.parametrize("side", ["right", "left"])
def test_pad_batch_device_cuda(cuda_device, rng, side):
    import dyntile

    xs = [rng.standard_normal((n, 3)).astype(np.float32) for n in (5, 2, 9)]
    batch, lengths = dyntile.pad_batch(xs, multiple=4, fill=-1.0, side=side, device="cuda")
    assert cuda_device.devicearray.is_cuda_ndarray(batch)
    ref, ref_lengths = dyntile.pad_batch(xs, multiple=4, fill=-1.0, side=side)
    np.testing.assert_array_equal(batch.copy_to_host(), ref)
    np.testing.assert_array_equal(np.asarray(lengths), np.asarray(ref_lengths))


def _device_result(cuda_device, x) -> np.ndarray:
    assert cuda_device.devicearray.is_cuda_ndarray(x), f"expected a device array, got {type(x).__name__}"
    return x.copy_to_host()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matmul_on_device_arrays(cuda_device, rng, dtype):
    import dyntile

    a = rng.standard_normal((2, 7, 5)).astype(dtype)
    b = rng.standard_normal((5, 9)).astype(dtype)
    got = _device_result(cuda_device, dyntile.matmul(cuda_device.to_device(a), cuda_device.to_device(b)))
    np.testing.assert_allclose(got, np.matmul(a, b), rtol=1e-5, atol=1e-5)
    out = cuda_device.to_device(np.full((2, 7, 9), np.nan, dtype))
    assert dyntile.matmul(cuda_device.to_device(a)[:, :, :], cuda_device.to_device(b), out=out) is out
    np.testing.assert_allclose(out.copy_to_host(), np.matmul(a, b), rtol=1e-5, atol=1e-5)


def test_matmul_refuses_a_device_host_mix(cuda_device, rng):
    import dyntile

    a = rng.standard_normal((3, 4)).astype(np.float32)
    with pytest.raises(TypeError, match="mix CUDA device and host arrays"):
        dyntile.matmul(cuda_device.to_device(a), a.T)


@pytest.mark.parametrize("side", ["right", "left"])
def test_pad_batch_on_device_arrays(cuda_device, rng, side):
    import dyntile

    xs = [rng.standard_normal((n, 2)).astype(np.float32) for n in (3, 0, 6)]
    batch, lengths = dyntile.pad_batch(
        [cuda_device.to_device(x) for x in xs], multiple=4, fill=2.5, side=side
    )
    ref, ref_lengths = dyntile.pad_batch(xs, multiple=4, fill=2.5, side=side)
    np.testing.assert_array_equal(_device_result(cuda_device, batch), ref)
    np.testing.assert_array_equal(np.asarray(lengths), np.asarray(ref_lengths))


def test_tile_and_untile_on_device_arrays(cuda_device, rng):
    import dyntile

    x = rng.standard_normal((2, 5, 7)).astype(np.float32)
    base = cuda_device.to_device(np.ascontiguousarray(np.swapaxes(x, 1, 2)))
    strided = base.transpose((0, 2, 1))  # (2, 5, 7), non-contiguous
    t = dyntile.tile(strided, (2, 4), fill=-1.0)
    np.testing.assert_array_equal(_device_result(cuda_device, t), dyntile.tile(x, (2, 4), fill=-1.0))
    back = dyntile.untile(t, (5, 7))
    np.testing.assert_array_equal(_device_result(cuda_device, back), x)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_varlen_attention_on_device_arrays(cuda_device, rng, dtype):
    """Both layouts, and a non-contiguous [B, T, H, D] view, against the CPU kernels."""
    import dyntile

    seg = np.array([[1, 1, 1, 2, 2, 2, 2, 0, 3, 3, 3, 3]])
    base = rng.standard_normal((1, 12, 2, 3, 5)).astype(dtype)
    q, k, v = (base[..., i, :] for i in range(3))
    want = dyntile.varlen_attention(q, k, v, segment_ids=seg)
    dev = cuda_device.to_device(base)
    got = dyntile.varlen_attention(
        *(dev[..., i, :] for i in range(3)), segment_ids=cuda_device.to_device(seg)
    )
    np.testing.assert_allclose(
        _device_result(cuda_device, got), want, atol=1e-5 if dtype == np.float32 else 1e-12
    )
    flat = [np.ascontiguousarray(x[0]) for x in (q, k, v)]
    cu = np.array([0, 3, 7, 12])
    got = dyntile.varlen_attention(
        *(cuda_device.to_device(x) for x in flat), cu_seqlens=cuda_device.to_device(cu)
    )
    np.testing.assert_allclose(
        _device_result(cuda_device, got),
        dyntile.varlen_attention(*flat, cu_seqlens=cu),
        atol=1e-5 if dtype == np.float32 else 1e-12,
    )
