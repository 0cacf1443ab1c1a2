"""Grouped-query attention (k, v with Hkv heads, H a multiple of Hkv) against references
that repeat each key/value head for its query heads and sum their gradients back: the
CPU kernels on every ISA this CPU runs, the torch op against torch's sdpa in float64."""

import numpy as np
import pytest

import dyntile as dt
from dyntile.cpu import attention as kernel
from tests.api.test_attention import (
    ISAS,
    assert_value_and_gradients_match,
    packed_rows,
    ragged_stream,
    tolerance,
)
from tests.reference import attention_grad_reference, attention_reference

torch = pytest.importorskip("torch")

HEADS = 6


@pytest.fixture(params=ISAS)
def isa(request):
    kernel.set_isa(request.param)
    yield request.param
    kernel.set_isa(None)


def expanded_reference(q, k, v, starts, lens, causal, scale, dout):
    """``(out, lse, dq, dk, dv)`` of the float64 reference on K, V repeated per query
    head, the key/value gradients summed over each group."""
    group = q.shape[1] // k.shape[1]
    k_rep, v_rep = (np.repeat(x, group, axis=1) for x in (k, v))
    out, lse = attention_reference(q, k_rep, v_rep, starts, lens, causal, scale)
    dq, dk, dv = attention_grad_reference(q, k_rep, v_rep, starts, lens, causal, scale, dout)
    fold = (k.shape[0], k.shape[1], group, k.shape[2])
    return out, lse, dq, dk.reshape(fold).sum(2), dv.reshape(fold).sum(2)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("kv_heads", [1, 2, 3, HEADS])
@pytest.mark.parametrize("dtype, dim", [(np.float32, 33), (np.float64, 7)])
def test_kernels_match_the_expanded_reference(isa, causal, kv_heads, dtype, dim):
    rng = np.random.default_rng(kv_heads + dim)
    (q, _, _), starts, lens = ragged_stream(rng, [0, 1, 2, 63, 65, 130, 5], HEADS, dim, dtype)
    k, v = (rng.standard_normal((q.shape[0], kv_heads, dim)).astype(dtype) for _ in range(2))
    dout = rng.standard_normal(q.shape).astype(dtype)
    scale = 0.37
    want = expanded_reference(q, k, v, starts, lens, causal, scale, dout)
    for threads in (1, 2):
        out, lse = kernel.forward(q, k, v, starts, lens, causal, scale, threads)
        grads = kernel.backward(dout, q, k, v, out, lse, starts, lens, causal, scale, threads)
        for name, got, ref in zip(["out", "lse", "dq", "dk", "dv"], (out, lse, *grads), want):
            assert got.shape == ref.shape, name
            msg = f"{name}, {threads} threads"
            np.testing.assert_allclose(got, ref, atol=20 * tolerance(dtype), err_msg=msg)


@pytest.mark.parametrize("kv_heads", [1, 2])
def test_long_segment_split_into_key_and_query_items(kv_heads):
    """A segment long enough that the backward pass splits it: key-tile items that sum a
    group's heads, query-tile items per query head."""
    rng = np.random.default_rng(kv_heads)
    (q, _, _), starts, lens = ragged_stream(rng, [700, 3], 4, 16, np.float64, gap=1)
    k, v = (rng.standard_normal((q.shape[0], kv_heads, 16)) for _ in range(2))
    dout = rng.standard_normal(q.shape)
    out, lse = kernel.forward(q, k, v, starts, lens, True, 0.3, 2)
    grads = kernel.backward(dout, q, k, v, out, lse, starts, lens, True, 0.3, 2)
    want = expanded_reference(q, k, v, starts, lens, True, 0.3, dout)
    for got, ref in zip((out, lse, *grads), want):
        np.testing.assert_allclose(got, ref, atol=1e-10)


def test_numpy_route_takes_strided_head_groups():
    """k, v as views into one [N, 2, Hkv, D] buffer (strided heads), the [B, T, H, D] layout."""
    rng = np.random.default_rng(3)
    seg = packed_rows(rng, 2, 37, [[5, 30, 2], [37]])
    q = rng.standard_normal((2, 37, 4, 9))
    kv = rng.standard_normal((2, 37, 2, 2, 9))
    k, v = kv[:, :, 0], kv[:, :, 1]
    out = dt.varlen_attention(q, k, v, segment_ids=seg, causal=True)
    starts, lens = dt.attention.segment_table(seg, True, 74)
    flat = [x.reshape(74, x.shape[2], 9) for x in (q, k, v)]
    ref = expanded_reference(*flat, starts, lens, True, 1 / 3, np.zeros((74, 4, 9)))[0]
    np.testing.assert_allclose(out.reshape(74, 4, 9), ref, atol=1e-12)


def sdpa_reference(q, k, v, seg, causal):
    """torch sdpa per row on K, V repeated per query head (repeat_interleave), the mask
    of each token's own segment; padding rows 0. Shapes [B, T, heads, D]."""
    group = q.shape[2] // k.shape[2]
    k, v = (x.repeat_interleave(group, dim=2) for x in (k, v))
    same = (seg[:, :, None] == seg[:, None, :]) & (seg[:, :, None] > 0)
    if causal:
        same = same & torch.ones(seg.shape[1], seg.shape[1], dtype=torch.bool).tril()
    diag = torch.eye(seg.shape[1], dtype=torch.bool)
    mask = same | diag  # padding rows see themselves only: finite, then zeroed
    out = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask[:, None]
    ).transpose(1, 2)
    return out * (seg > 0)[:, :, None, None]


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("kv_heads", [1, 2, HEADS])
def test_torch_gradients_match_sdpa_with_repeated_heads(causal, kv_heads):
    rng = np.random.default_rng(kv_heads)
    seg = torch.from_numpy(packed_rows(rng, 2, 41, [[1, 3, 30, 4], [17, 20]])).int()
    q = torch.randn(2, 41, HEADS, 5, dtype=torch.float64, requires_grad=True)
    k, v = (torch.randn(2, 41, kv_heads, 5, dtype=torch.float64, requires_grad=True) for _ in range(2))
    out = dt.varlen_attention(q, k, v, segment_ids=seg, causal=causal)
    assert_value_and_gradients_match(out, sdpa_reference(q, k, v, seg, causal), (q, k, v), 1e-12)


def test_torch_gradcheck_and_opcheck_with_head_groups():
    cu = torch.tensor([0, 3, 3, 9])
    q = torch.randn(10, 4, 3, dtype=torch.float64, requires_grad=True)
    k, v = (torch.randn(10, 2, 3, dtype=torch.float64, requires_grad=True) for _ in range(2))
    assert torch.autograd.gradcheck(lambda q, k, v: dt.varlen_attention(q, k, v, cu_seqlens=cu), (q, k, v))
    torch.library.opcheck(torch.ops.dyntile.varlen_attention_fwd, (q, k, v, cu, True, 0.4))


@pytest.mark.parametrize(
    "q_heads, k_shape, v_shape, match",
    [
        (4, (7, 3, 5), (7, 3, 5), r"q's 4 heads should be a multiple of k and v's 3 heads"),
        (4, (7, 0, 5), (7, 0, 5), r"q's 4 heads should be a multiple of k and v's 0 heads"),
        (4, (7, 2, 5), (7, 1, 5), r"k and v should have one shape"),
        (4, (7, 2, 6), (7, 2, 6), r"equal to q's but for the head count"),
        (2, (7, 4, 5), (7, 4, 5), r"q's 2 heads should be a multiple of k and v's 4 heads"),
    ],
)
def test_head_counts_that_do_not_group_are_refused(q_heads, k_shape, v_shape, match):
    cu = np.array([0, 7])
    q = np.zeros((7, q_heads, 5), np.float32)
    k, v = np.zeros(k_shape, np.float32), np.zeros(v_shape, np.float32)
    with pytest.raises(ValueError, match=match):
        dt.varlen_attention(q, k, v, cu_seqlens=cu)
    with pytest.raises(ValueError, match=match):
        dt.varlen_attention(*(torch.from_numpy(x) for x in (q, k, v)), cu_seqlens=torch.from_numpy(cu))
