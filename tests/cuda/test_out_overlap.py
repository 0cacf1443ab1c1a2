"""``out=`` that overlaps an input in device memory is refused by every CUDA entry
(the kernels read their inputs while they write ``out``), as on the host; disjoint
views of one buffer are taken."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.usefixtures("cuda_device")


def test_tile_and_untile_refuse_out_over_the_input(cuda_device):
    from dyntile.cuda import tile_into, untile_from

    buf = cuda_device.to_device(np.zeros((2, 4, 4), np.float32))
    tiles = buf.reshape(2, 1, 1, 4, 4)
    with pytest.raises(ValueError, match="out overlaps an input in device memory"):
        tile_into(buf[0], (4, 4), 0.0, out=tiles[0])  # the same 16 floats
    with pytest.raises(ValueError, match="out overlaps an input"):
        untile_from(tiles[0], (4, 4), out=buf[0])
    tile_into(buf[0], (4, 4), 0.0, out=tiles[1])  # the other half: taken


def test_pad_and_matmul_refuse_out_over_an_input(cuda_device):
    from dyntile.cuda import matmul, pad_into

    buf = cuda_device.to_device(np.ones((3, 4), np.float32))
    with pytest.raises(ValueError, match="out overlaps an input in device memory"):
        pad_into([buf[0, :2], buf[1, :3]], (2, 4), np.float32, 0.0, False, out=buf[1:])
    a = cuda_device.to_device(np.ones((4, 4), np.float32))
    with pytest.raises(ValueError, match="out overlaps an input"):
        matmul(a, a, out=a)


def test_disjoint_views_of_one_buffer_are_taken(cuda_device):
    from dyntile.cuda import matmul, pad_into

    buf = cuda_device.to_device(np.arange(24, dtype=np.float32).reshape(6, 4))
    pad_into([buf[0, :2], buf[1, :3]], (2, 4), np.float32, -1.0, False, out=buf[4:])
    np.testing.assert_array_equal(buf.copy_to_host()[4:], [[0, 1, -1, -1], [4, 5, 6, -1]])
    host = np.arange(16, dtype=np.float32).reshape(4, 4)
    stack = cuda_device.to_device(np.stack([host, np.zeros((4, 4), np.float32)]))
    matmul(stack[0], stack[0], out=stack[1])
    np.testing.assert_allclose(stack.copy_to_host()[1], host @ host)
