"""CUDA varlen attention with grouped key/value heads against the float64 reference on
K, V repeated per query head (gradients summed over each group). Simulator-sized:
4 query heads over 1 or 2 key/value heads, segments of 0, 1, 6 and 9 tokens."""

from __future__ import annotations

import numpy as np
import pytest

from tests.api.test_attention_gqa import expanded_reference

pytestmark = pytest.mark.usefixtures("cuda_device")

STARTS, LENGTHS = np.array([7, 0, 1, 17]), np.array([9, 1, 6, 0])  # token 16 pads
N_TOKENS, HEADS = 17, 4


@pytest.mark.parametrize("causal, kv_heads, D, dtype", [(True, 2, 5, np.float64), (False, 1, 16, np.float32)])
def test_forward_and_backward_with_head_groups(cuda_device, rng, causal, kv_heads, D, dtype):
    from dyntile.cuda.attention import varlen_attention_backward, varlen_attention_forward

    q, dout = (rng.standard_normal((N_TOKENS, HEADS, D)).astype(dtype) for _ in range(2))
    k, v = (rng.standard_normal((N_TOKENS, kv_heads, D)).astype(dtype) for _ in range(2))
    scale = 0.41
    dev = [cuda_device.to_device(x) for x in (q, k, v, dout)]
    out, lse = varlen_attention_forward(*dev[:3], STARTS, LENGTHS, causal=causal, scale=scale)
    grads = varlen_attention_backward(dev[3], *dev[:3], out, lse, STARTS, LENGTHS, causal=causal, scale=scale)
    want = expanded_reference(q, k, v, STARTS, LENGTHS, causal, scale, dout)
    tol = dict(rtol=1e-10, atol=1e-10) if dtype == np.float64 else dict(rtol=1e-4, atol=1e-4)
    for name, got, ref in zip(["out", "lse", "dq", "dk", "dv"], (out, lse, *grads), want):
        assert tuple(got.shape) == ref.shape, name
        np.testing.assert_allclose(got.copy_to_host(), ref, **tol, err_msg=name)


def test_head_counts_that_do_not_group_are_refused(cuda_device):
    from dyntile.cuda.attention import varlen_attention_forward

    q = cuda_device.to_device(np.zeros((4, 3, 2)))
    k = cuda_device.to_device(np.zeros((4, 2, 2)))
    with pytest.raises(ValueError, match="q's 3 heads should be a multiple of k and v's 2 heads"):
        varlen_attention_forward(q, k, k, np.array([0]), np.array([4]), causal=True, scale=1.0)
