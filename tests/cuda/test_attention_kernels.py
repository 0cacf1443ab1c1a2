"""CUDA varlen attention against a float64 NumPy reference (per segment
``softmax(scale * Q K^T) V`` with the causal mask; gradients by the analytic
formulas, which are checked against finite differences here too).

Shapes are simulator-sized: segments of 0, 1, 2, 5 and 17 tokens in shuffled
order with padding between and after them, against the simulator's 4x2 (forward)
and 2x4 (backward) tiles; D = 16 (two head-dimension chunks) and 5 (one, the row
tile resident); non-contiguous inputs and outputs; given outputs poisoned with NaN.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.reference import attention_grad_reference, attention_reference

pytestmark = pytest.mark.usefixtures("cuda_device")

# segment (start, length): shuffled, padding at 2, 4, 12-13 and 31-33
STARTS = np.array([14, 0, 3, 5, 7])
LENGTHS = np.array([17, 2, 0, 1, 5])
N_TOKENS, HEADS = 34, 2
TOL = {np.float32: dict(rtol=2e-5, atol=2e-5), np.float64: dict(rtol=1e-11, atol=1e-11)}


def reference_forward(q, k, v, starts, lengths, causal, scale):
    """float64 ``(out, lse)``, zero on padding tokens (the suite's shared reference)."""
    return attention_reference(q, k, v, starts, lengths, causal, scale)


def reference_backward(dout, q, k, v, starts, lengths, causal, scale):
    """float64 gradients of ``sum(out * dout)`` by the analytic formulas."""
    return attention_grad_reference(q, k, v, starts, lengths, causal, scale, dout)


@pytest.mark.parametrize("causal", [False, True])
def test_reference_gradients_match_finite_differences(rng, causal):
    q, k, v, dout = (rng.standard_normal((7, 2, 3)) for _ in range(4))
    starts, lengths, scale = np.array([4, 0]), np.array([3, 3]), 0.7
    grads = reference_backward(dout, q, k, v, starts, lengths, causal, scale)
    eps = 1e-6
    for which, grad in enumerate(grads):
        numeric = np.zeros_like(grad)
        for idx in np.ndindex(grad.shape):
            args = [q.copy(), k.copy(), v.copy()]
            args[which][idx] += eps
            plus = (reference_forward(*args, starts, lengths, causal, scale)[0] * dout).sum()
            args[which][idx] -= 2 * eps
            minus = (reference_forward(*args, starts, lengths, causal, scale)[0] * dout).sum()
            numeric[idx] = (plus - minus) / (2 * eps)
        np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-7)


def _inputs(rng, D, dtype, count=3):
    return [(0.6 * rng.standard_normal((N_TOKENS, HEADS, D))).astype(dtype) for _ in range(count)]


def _poisoned(cuda, shape, dtype):
    return cuda.to_device(np.full(shape, np.nan, dtype))


def _padding_tokens():
    covered = np.zeros(N_TOKENS, bool)
    for s, n in zip(STARTS, LENGTHS):
        covered[s : s + n] = True
    return ~covered


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("D, dtype", [(16, np.float32), (5, np.float64)])
def test_forward_and_backward_match_the_reference(cuda_device, rng, causal, D, dtype):
    from dyntile.cuda.attention import varlen_attention_backward, varlen_attention_forward

    q, k, v, dout = _inputs(rng, D, dtype, 4)
    scale = 1 / np.sqrt(D)
    dq_, dk_, dv_, do_ = (cuda_device.to_device(x) for x in (q, k, v, dout))
    out = _poisoned(cuda_device, (N_TOKENS, HEADS, D), dtype)
    lse = _poisoned(cuda_device, (N_TOKENS, HEADS), dtype)
    got = varlen_attention_forward(
        dq_, dk_, dv_, STARTS, LENGTHS, causal=causal, scale=scale, out=out, lse=lse
    )
    assert got[0] is out and got[1] is lse
    ref_out, ref_lse = reference_forward(q, k, v, STARTS, LENGTHS, causal, scale)
    np.testing.assert_allclose(out.copy_to_host(), ref_out, **TOL[dtype])
    np.testing.assert_allclose(lse.copy_to_host(), ref_lse, **TOL[dtype])
    pad = _padding_tokens()
    assert not out.copy_to_host()[pad].any() and not lse.copy_to_host()[pad].any()

    grads = [_poisoned(cuda_device, (N_TOKENS, HEADS, D), dtype) for _ in range(3)]
    res = varlen_attention_backward(
        do_,
        dq_,
        dk_,
        dv_,
        out,
        lse,
        STARTS,
        LENGTHS,
        causal=causal,
        scale=scale,
        dq=grads[0],
        dk=grads[1],
        dv=grads[2],
    )
    assert all(r is g for r, g in zip(res, grads))
    for name, g, ref in zip("qkv", grads, reference_backward(dout, q, k, v, STARTS, LENGTHS, causal, scale)):
        np.testing.assert_allclose(g.copy_to_host(), ref, **TOL[dtype], err_msg=f"d{name}")
        assert not g.copy_to_host()[pad].any(), f"d{name} on padding tokens"


def test_non_contiguous_operands_and_outputs(cuda_device, rng):
    """Inputs as views of ``[H, N, D]`` and ``[N, 2H, D]`` buffers, outputs into strided views."""
    from dyntile.cuda.attention import varlen_attention_backward, varlen_attention_forward

    D, dtype, scale, causal = 7, np.float64, 0.45, True
    starts, lengths = np.array([9, 0]), np.array([6, 7])  # token 7, 8 and 15 pad
    q, k, v, dout = (rng.standard_normal((16, 2, D)) for _ in range(4))
    q_dev = cuda_device.to_device(np.ascontiguousarray(q.transpose(1, 0, 2))).transpose((1, 0, 2))
    wide = np.zeros((16, 4, D))
    wide[:, ::2], wide[:, 1::2] = k, v
    wide_dev = cuda_device.to_device(wide)
    k_dev, v_dev = wide_dev[:, ::2], wide_dev[:, 1::2]
    assert not (q_dev.is_c_contiguous() or k_dev.is_c_contiguous())
    big = cuda_device.to_device(np.full((16, 2, 2 * D), np.nan))
    out = big[:, :, ::2]
    lse_big = cuda_device.to_device(np.full((2, 16), np.nan))
    lse = lse_big.T
    varlen_attention_forward(
        q_dev, k_dev, v_dev, starts, lengths, causal=causal, scale=scale, out=out, lse=lse
    )
    ref_out, ref_lse = reference_forward(q, k, v, starts, lengths, causal, scale)
    np.testing.assert_allclose(big.copy_to_host()[:, :, ::2], ref_out, **TOL[dtype])
    assert np.isnan(big.copy_to_host()[:, :, 1::2]).all()
    np.testing.assert_allclose(lse_big.copy_to_host().T, ref_lse, **TOL[dtype])

    do_dev = cuda_device.to_device(np.ascontiguousarray(dout[::-1]))[::-1]  # negative strides
    dq, dk, dv = varlen_attention_backward(
        do_dev, q_dev, k_dev, v_dev, out, lse, starts, lengths, causal=causal, scale=scale
    )
    for name, g, ref in zip(
        "qkv", (dq, dk, dv), reference_backward(dout, q, k, v, starts, lengths, causal, scale)
    ):
        assert cuda_device.devicearray.is_cuda_ndarray(g) and g.dtype == dtype
        np.testing.assert_allclose(g.copy_to_host(), ref, **TOL[dtype], err_msg=f"d{name}")


def test_device_segments_and_fresh_outputs(cuda_device, rng):
    from dyntile.cuda.attention import varlen_attention_forward

    q = rng.standard_normal((5, 1, 3)).astype(np.float32)
    out, lse = varlen_attention_forward(
        *(cuda_device.to_device(q),) * 3,
        cuda_device.to_device(np.array([1])),
        cuda_device.to_device(np.array([3])),
        causal=False,
        scale=1.0,
    )
    assert cuda_device.devicearray.is_cuda_ndarray(out) and out.dtype == np.float32 and lse.shape == (5, 1)
    ref_out, ref_lse = reference_forward(q, q, q, [1], [3], False, 1.0)
    np.testing.assert_allclose(out.copy_to_host(), ref_out, **TOL[np.float32])
    np.testing.assert_allclose(lse.copy_to_host(), ref_lse, **TOL[np.float32])


@pytest.mark.parametrize("starts, lengths, N", [([], [], 4), ([0, 2], [0, 0], 3), ([], [], 0)])
def test_no_attended_token(cuda_device, starts, lengths, N):
    """No segment, only empty ones, no token: zeros everywhere (poisoned outputs overwritten)."""
    from dyntile.cuda.attention import varlen_attention_backward, varlen_attention_forward

    x = cuda_device.to_device(np.ones((N, 2, 3), np.float32))
    st, ln = np.array(starts, np.int64), np.array(lengths, np.int64)
    out, lse = _poisoned(cuda_device, (N, 2, 3), np.float32), _poisoned(cuda_device, (N, 2), np.float32)
    varlen_attention_forward(x, x, x, st, ln, causal=True, scale=1.0, out=out, lse=lse)
    grads = varlen_attention_backward(x, x, x, x, out, lse, st, ln, causal=True, scale=1.0)
    for a in (out, lse, *grads):
        assert not a.copy_to_host().any()


def test_errors(cuda_device):
    from dyntile.cuda.attention import varlen_attention_backward, varlen_attention_forward

    x = cuda_device.to_device(np.zeros((6, 2, 4), np.float32))
    st, ln = np.array([0, 3]), np.array([3, 3])

    def fwd(*args, **kw):
        a = dict(zip(("q", "k", "v", "starts", "lengths"), (x, x, x, st, ln)))
        a.update(dict(zip(("q", "k", "v", "starts", "lengths"), args)))
        return varlen_attention_forward(
            a["q"], a["k"], a["v"], a["starts"], a["lengths"], causal=True, scale=1.0, **kw
        )

    cases = [
        (
            (x, cuda_device.to_device(np.zeros((6, 2, 5), np.float32))),
            {},
            ValueError,
            "equal to q's but for the head count",
        ),
        (
            (x, x, cuda_device.to_device(np.zeros((6, 2, 4)))),
            {},
            TypeError,
            "v should have q's dtype float32",
        ),
        ((cuda_device.to_device(np.zeros((6, 2, 4), np.int32)),), {}, TypeError, "float32 or float64"),
        ((cuda_device.to_device(np.zeros((6, 8), np.float32)),) * 3, {}, ValueError, "shape \\[N, H, D\\]"),
        ((np.zeros((6, 2, 4), np.float32),), {}, TypeError, "q should be a CUDA device array"),
        ((x, x, x, np.array([0, 2])), {}, ValueError, "disjoint, but token 2 lies in 2"),
        ((x, x, x, np.array([0, 4])), {}, ValueError, "segment 1 \\(tokens 4 .. 6\\) lies outside the 6"),
        ((x, x, x, st, np.array([3, -1])), {}, ValueError, "lengths\\[1\\]=-1"),
        # st + ln wraps in int64 to a negative end: checked without the sum
        (
            (x, x, x, st, np.array([3, 2**63 - 2])),
            {},
            ValueError,
            "segment 1 \\(tokens 3 .. 9223372036854775808\\) lies outside the 6",
        ),
        ((x, x, x, st, np.array([3])), {}, ValueError, "one size"),
        ((x, x, x, np.array([0.0, 3.0])), {}, TypeError, "starts should be a 1-D integer array"),
        ((), {"out": x}, ValueError, "out overlaps an input"),
        (
            (),
            {"lse": cuda_device.device_array((6, 3), np.float32)},
            ValueError,
            "lse should have shape \\(6, 2\\)",
        ),
    ]
    for args, kw, exc, match in cases:
        with pytest.raises(exc, match=match):
            fwd(*args, **kw)
    buf = cuda_device.device_array((6, 2, 4), np.float32)
    with pytest.raises(ValueError, match="out and lse overlap"):
        fwd(out=buf, lse=buf[:, :, 0])
    with pytest.raises(TypeError, match="scale should be a real number"):
        varlen_attention_forward(x, x, x, st, ln, causal=True, scale="1")
    lse = cuda_device.device_array((6, 2), np.float32)
    with pytest.raises(ValueError, match="lse should have shape"):
        varlen_attention_backward(x, x, x, x, x, lse[:5], st, ln, causal=True, scale=1.0)
    with pytest.raises(ValueError, match="dq and dv overlap"):
        varlen_attention_backward(x, x, x, x, x, lse, st, ln, causal=True, scale=1.0, dq=buf, dv=buf)


def test_empty_head_dimension(cuda_device):
    """D = 0: every score is 0, so lse is the log of the number of attended keys."""
    from dyntile.cuda.attention import varlen_attention_backward, varlen_attention_forward

    x = cuda_device.to_device(np.zeros((6, 2, 0), np.float64))
    st, ln = np.array([0, 3]), np.array([3, 2])
    out, lse = varlen_attention_forward(x, x, x, st, ln, causal=True, scale=1.0)
    assert out.shape == (6, 2, 0)
    np.testing.assert_allclose(
        lse.copy_to_host(),
        np.log([[1, 1], [2, 2], [3, 3], [1, 1], [2, 2], [1, 1]]) * np.array([1, 1, 1, 1, 1, 0])[:, None],
        rtol=1e-12,
    )
    assert [
        g.shape for g in varlen_attention_backward(x, x, x, x, out, lse, st, ln, causal=True, scale=1.0)
    ] == [(6, 2, 0)] * 3


@pytest.mark.parametrize("D, dtype, causal", [(16, np.float32, False), (5, np.float64, True)])
def test_runs_repeat_bit_for_bit(cuda_device, rng, slow_shared_allocation, D, dtype, causal):
    """Three forward and backward runs on one input give identical bits, the reference's
    values. Each launch has several tiles of the 17-token segment and several segments
    in flight, and every thread of its first block (the heaviest tile) allocates its
    shared tiles at once (``slow_shared_allocation``): the window in which the unfixed
    simulator hands threads private tiles (:mod:`dyntile.cuda.simulator`)."""
    from dyntile.cuda.attention import varlen_attention_backward, varlen_attention_forward

    q, k, v, dout = _inputs(rng, D, dtype, 4)
    scale = 1 / np.sqrt(D)
    dev = [cuda_device.to_device(x) for x in (q, k, v, dout)]
    ref = (
        *reference_forward(q, k, v, STARTS, LENGTHS, causal, scale),
        *reference_backward(dout, q, k, v, STARTS, LENGTHS, causal, scale),
    )
    runs = []
    for _ in range(3):
        out, lse = varlen_attention_forward(*dev[:3], STARTS, LENGTHS, causal=causal, scale=scale)
        grads = varlen_attention_backward(
            dev[3], *dev[:3], out, lse, STARTS, LENGTHS, causal=causal, scale=scale
        )
        runs.append([a.copy_to_host() for a in (out, lse, *grads)])
    for name, got, want in zip(("out", "lse", "dq", "dk", "dv"), runs[0], ref):
        np.testing.assert_allclose(got, want, **TOL[dtype], err_msg=name)
    for later in runs[1:]:
        for name, a, b in zip(("out", "lse", "dq", "dk", "dv"), runs[0], later):
            np.testing.assert_array_equal(a, b, err_msg=f"{name} differs between runs")
    assert slow_shared_allocation[0] > 0, "the fixture's window never opened"


@pytest.mark.parametrize("D, dtype, causal", [(9, np.float32, True), (3, np.float64, False)])
def test_every_shared_access_is_separated_by_a_barrier(cuda_device, simulated, rng, D, dtype, causal):
    """The forward, dQ and dK/dV kernels under the race checker: no two threads touch a
    shared element in one barrier epoch (one writing), none reads an unwritten one, and
    every thread of a block passes every barrier. Segments of 7 and 3 tokens give each
    kernel several tiles and steps per block; D = 9 walks two head-dimension chunks,
    D = 3 keeps the row tile resident."""
    if not simulated:
        pytest.skip("the race checker instruments the CUDA simulator")
    from dyntile.cuda.attention import varlen_attention_backward, varlen_attention_forward
    from tests.cuda.racecheck import racecheck

    starts, lengths = np.array([4, 0]), np.array([7, 3])  # token 3 and 11 pad
    x = rng.standard_normal((4, 12, 1, D)).astype(dtype)
    q, k, v, dout = (cuda_device.to_device(a) for a in x)
    with racecheck() as report:
        out, lse = varlen_attention_forward(q, k, v, starts, lengths, causal=causal, scale=0.5)
        grads = varlen_attention_backward(dout, q, k, v, out, lse, starts, lengths, causal=causal, scale=0.5)
    assert report.accesses > 0 and not report.hazards and not report.divergent, report
    ref = (
        *reference_forward(*x[:3], starts, lengths, causal, 0.5),
        *reference_backward(x[3], *x[:3], starts, lengths, causal, 0.5),
    )
    for name, got, want in zip(("out", "lse", "dq", "dk", "dv"), (out, lse, *grads), ref):
        np.testing.assert_allclose(got.copy_to_host(), want, **TOL[dtype], err_msg=name)
