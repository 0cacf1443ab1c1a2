"""The public API reaches the CUDA kernels: ``pad_batch(..., device="cuda")`` sends
host arrays through the one-transfer path (simulator arrays lack
``__cuda_array_interface__``, so device inputs are routed by the dispatch tests)."""
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
