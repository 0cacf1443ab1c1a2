"""Non-finite inputs of the CUDA attention kernels (issue #33), on the simulator: one
NaN or inf in q, k or v gives what the float64 reference gives (per query, softmax
over the keys it sees, IEEE arithmetic), forward and backward; the other segment is
bit-identical to a run without it and padding stays 0. Also lse's gradient (dlse).

Simulator-sized: a segment of 7 tokens (several 4 x 2 forward and 2 x 4 backward tiles,
the bad value at token 3 so earlier queries do not see it under ``causal``) and one of
3, padding between and after; D = 3 (one chunk) and 9 (two, float32)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.reference import assert_ieee_equal, attention_ieee_reference

pytestmark = pytest.mark.usefixtures("cuda_device")

STARTS, LENGTHS, N = np.array([0, 8]), np.array([7, 3]), 12  # tokens 7 and 11 pad
TOL = {np.float32: 2e-5, np.float64: 1e-11}


def run(cuda, q, k, v, dout, dlse, causal, scale):
    from dyntile.cuda.attention import varlen_attention_backward, varlen_attention_forward

    dq_, dk_, dv_, do_ = (cuda.to_device(x) for x in (q, k, v, dout))
    out, lse = varlen_attention_forward(dq_, dk_, dv_, STARTS, LENGTHS, causal=causal, scale=scale)
    dl = None if dlse is None else cuda.to_device(dlse)
    grads = varlen_attention_backward(
        do_, dq_, dk_, dv_, out, lse, STARTS, LENGTHS, causal=causal, scale=scale, dlse=dl
    )
    return [a.copy_to_host() for a in (out, lse, *grads)]


@pytest.mark.parametrize(
    "which, value, causal, D, dtype",
    [
        ("q", np.nan, True, 3, np.float64),
        ("k", np.inf, True, 9, np.float32),
        ("k", -np.inf, False, 3, np.float64),
        ("v", np.nan, True, 3, np.float64),
        ("v", -np.inf, False, 9, np.float32),
        ("q", np.inf, True, 3, np.float32),
    ],
)
def test_one_non_finite_value_propagates_as_the_reference(cuda_device, rng, which, value, causal, D, dtype):
    q, k, v, dout = ((0.7 * rng.standard_normal((N, 1, D))).astype(dtype) for _ in range(4))
    dlse = rng.standard_normal((N, 1)).astype(dtype) if which == "k" else None
    scale = D**-0.5
    clean = run(cuda_device, q, k, v, dout, dlse, causal, scale)
    {"q": q, "k": k, "v": v}[which][3, 0, 1] = value
    got = run(cuda_device, q, k, v, dout, dlse, causal, scale)
    want = attention_ieee_reference(q, k, v, STARTS, LENGTHS, causal, scale, dout, dlse)
    for name, a, b, c in zip(("out", "lse", "dq", "dk", "dv"), got, want, clean):
        assert_ieee_equal(a, b, TOL[dtype], name)
        np.testing.assert_array_equal(a[7:], c[7:], err_msg=f"{name} outside the bad value's segment")
        assert not a[[7, 11]].any(), f"{name} on padding"
    assert not all(np.isfinite(a).all() for a in got)  # the value reached some output at all


def test_lse_gradient_matches_the_cpu_kernels(cuda_device, rng):
    from dyntile.cpu import attention as cpu

    q, k, v, dout = (rng.standard_normal((N, 2, 4)) for _ in range(4))
    dlse = rng.standard_normal((N, 2))
    got = run(cuda_device, q, k, v, dout, dlse, True, 0.5)
    out, lse = cpu.forward(q, k, v, STARTS, LENGTHS, True, 0.5, 1)
    want = cpu.backward(dout, q, k, v, out, lse, STARTS, LENGTHS, True, 0.5, 1, dlse)
    for name, a, b in zip(("dq", "dk", "dv"), got[2:], want):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-11, err_msg=name)
    assert np.abs(got[2] - run(cuda_device, q, k, v, dout, None, True, 0.5)[2]).max() > 1e-3
