"""Non-finite inputs of varlen attention (issue #33): a NaN or inf in q, k or v gives
what the plain float64 reference gives (tests.reference.attention_ieee_reference: per
query, softmax over the keys it sees, IEEE arithmetic), forward and backward, on every
ISA this CPU runs; every other segment is bit-identical to a run without it, and
padding stays 0."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dyntile as dt
from dyntile.cpu import attention as kernel
from tests.reference import assert_ieee_equal, attention_ieee_reference

torch = pytest.importorskip("torch")

ISAS = [
    isa
    for isa in ("ref", "avx2", "avx512")
    if isa == "ref" or kernel.isa() in ("avx2", "avx512") and (isa == "avx2" or kernel.isa() == "avx512")
]
BAD = [np.nan, np.inf, -np.inf]
TOL = {np.float32: 2e-3, np.float64: 1e-9}


def layout(lengths, gaps):
    """(starts, lengths, N): segments of ``lengths``, each after ``gaps[i]`` padding tokens."""
    starts, pos = [], 0
    for n, g in zip(lengths, gaps):
        starts.append(pos + g)
        pos += g + n
    return np.array(starts, np.int64), np.array(lengths, np.int64), pos + gaps[-1]


def run(q, k, v, dout, dlse, starts, lens, causal, scale):
    out, lse = kernel.forward(q, k, v, starts, lens, causal, scale, 2)
    grads = kernel.backward(dout, q, k, v, out, lse, starts, lens, causal, scale, 2, dlse)
    return [out, lse, *grads]


@pytest.mark.parametrize("isa", ISAS)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_one_non_finite_value_propagates_as_the_reference(isa, data):
    # segments up to 2-3 tiles of every ISA's widest (64 float32 keys on AVX-512)
    lengths = data.draw(st.lists(st.integers(0, 150), min_size=1, max_size=3), label="lengths")
    gaps = data.draw(st.lists(st.integers(0, 3), min_size=len(lengths) + 1, max_size=len(lengths) + 1))
    starts, lens, N = layout(lengths, gaps)
    if N == 0:
        return
    dtype = data.draw(st.sampled_from([np.float32, np.float64]), label="dtype")
    causal = data.draw(st.booleans(), label="causal")
    H, D = data.draw(st.integers(1, 2), label="H"), data.draw(st.integers(1, 20), label="D")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    q, k, v, dout = (rng.standard_normal((N, H, D)).astype(dtype) for _ in range(4))
    dlse = rng.standard_normal((N, H)).astype(dtype) if data.draw(st.booleans(), label="dlse") else None
    which = data.draw(st.sampled_from("qkv"), label="in")
    where = (data.draw(st.integers(0, N - 1), label="token"), rng.integers(H), rng.integers(D))
    value = data.draw(st.sampled_from(BAD), label="value")
    scale = D**-0.5
    kernel.set_isa(isa)
    try:
        clean = run(q, k, v, dout, dlse, starts, lens, causal, scale)
        {"q": q, "k": k, "v": v}[which][where] = value
        got = run(q, k, v, dout, dlse, starts, lens, causal, scale)
    finally:
        kernel.set_isa(None)
    want = attention_ieee_reference(q, k, v, starts, lens, causal, scale, dout, dlse)
    hit = np.zeros(N, bool)  # the tokens of the segment holding the bad value
    for s0, n in zip(starts, lens):
        if s0 <= where[0] < s0 + n:
            hit[s0 : s0 + n] = True
    for name, a, b, c in zip(("out", "lse", "dq", "dk", "dv"), got, want, clean):
        assert_ieee_equal(a, b, TOL[dtype], name)
        np.testing.assert_array_equal(a[~hit], c[~hit], err_msg=f"{name} outside the bad value's segment")


@pytest.mark.parametrize("isa", ISAS)
def test_a_hidden_future_value_reaches_no_earlier_query(isa):
    """Causal: a NaN in v, k or q of the last token of a long segment (many tiles)
    leaves every earlier query's output and dq finite, the reference's."""
    rng = np.random.default_rng(0)
    N, H, D = 140, 1, 8
    starts, lens = np.array([0]), np.array([N])
    q, k, v, dout = (rng.standard_normal((N, H, D)) for _ in range(4))
    kernel.set_isa(isa)
    try:
        for x in (q, k, v):
            x[-1, 0, 3] = np.nan
            got = run(q, k, v, dout, None, starts, lens, True, 0.3)
            x[-1, 0, 3] = 0.5
            assert np.isfinite(got[0][:-1]).all() and np.isfinite(got[2][:-1]).all()
            assert np.isnan(got[0][-1, 0, 3])
    finally:
        kernel.set_isa(None)


def test_issue_example_nan_query_row():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 8, 1, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    seg = torch.tensor([[1, 1, 1, 1, 2, 2, 2, 2]])
    clean = dt.varlen_attention(q, k, v, segment_ids=seg)
    bad = q.detach().clone()
    bad[0, 3] = float("nan")
    bad.requires_grad_()
    out = dt.varlen_attention(bad, k, v, segment_ids=seg)
    assert out[0, 3].isnan().all()
    torch.testing.assert_close(out[0, :3], clean[0, :3], rtol=0, atol=0)
    torch.testing.assert_close(out[0, 4:], clean[0, 4:], rtol=0, atol=0)
    dq, dk, dv = torch.autograd.grad(out.sum(), (bad, k, v))
    assert dq[0, 3].isnan().all() and not dq[0, :3].isnan().any() and not dq[0, 4:].isnan().any()
    assert dk[0, :4].isnan().all() and not dk[0, 4:].isnan().any()


def test_inf_key_masks_the_queries_it_scores_minus_inf():
    """k[j] = +inf in one dim: a query whose q[d] < 0 scores key j -inf and attends to
    the others (finite); one with q[d] > 0 scores +inf, and inf - inf is NaN."""
    q = np.array([[1.0], [-1.0], [-2.0], [3.0]])[:, None, :]
    k = np.ones((4, 1, 1))
    v = np.arange(4.0)[:, None, None]
    k[0, 0, 0] = np.inf
    out = dt.varlen_attention(q, k, v, cu_seqlens=np.array([0, 4]), causal=False)[:, 0, 0]
    assert np.isnan(out[0]) and np.isnan(out[3])
    np.testing.assert_allclose(out[1:3], [2.0, 2.0])  # keys 1, 2, 3 with equal scores
