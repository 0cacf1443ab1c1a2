"""dyntile.varlen_attention against a float64 per-segment reference: both layouts, the
CPU kernels on every ISA this CPU runs, the torch op (autograd, opcheck, torch.compile)."""

import numpy as np
import pytest

import dyntile as dt
from dyntile.attention import segments
from dyntile.cpu import attention as kernel
from tests.reference import attention_grad_reference, attention_reference

torch = pytest.importorskip("torch")

ISAS = [
    isa
    for isa in ("ref", "avx2", "avx512")
    if isa == "ref" or kernel.isa() in ("avx2", "avx512") and (isa == "avx2" or kernel.isa() == "avx512")
]


@pytest.fixture(params=ISAS)
def isa(request):
    kernel.set_isa(request.param)
    yield request.param
    kernel.set_isa(None)


def ragged_stream(rng, lengths, heads, dim, dtype, gap=2):
    """q, k, v [N, H, D] holding segments of ``lengths`` with ``gap`` padding tokens after each."""
    starts = np.cumsum([0] + [n + gap for n in lengths[:-1]]).astype(np.int64)
    total = int(starts[-1] + lengths[-1] + gap) if lengths else gap
    qkv = [rng.standard_normal((total, heads, dim)).astype(dtype) for _ in range(3)]
    return qkv, starts, np.array(lengths, np.int64)


def tolerance(dtype):
    return 1e-12 if dtype == np.float64 else 2e-5


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("dim", [16, 32, 64, 33])
def test_kernels_match_reference_on_ragged_segments(isa, causal, dtype, dim):
    rng = np.random.default_rng(dim)
    lengths = [0, 1, 2, 63, 64, 65, 257, 5]
    (q, k, v), starts, lens = ragged_stream(rng, lengths, 3, dim, dtype)
    scale = 1 / np.sqrt(dim)
    for threads in (1, 2):
        out, lse = kernel.forward(q, k, v, starts, lens, causal, scale, threads)
        ref, ref_lse = attention_reference(q, k, v, starts, lens, causal, scale)
        np.testing.assert_allclose(out, ref, atol=tolerance(dtype))
        np.testing.assert_allclose(lse, ref_lse, atol=10 * tolerance(dtype))
        dout = rng.standard_normal(q.shape).astype(dtype)
        grads = kernel.backward(dout, q, k, v, out, lse, starts, lens, causal, scale, threads)
        for got, want in zip(grads, attention_grad_reference(q, k, v, starts, lens, causal, scale, dout)):
            np.testing.assert_allclose(got, want, atol=10 * tolerance(dtype))


@pytest.mark.parametrize("dim", [32, 64])
def test_one_long_segment_split_over_threads(dim):
    """A segment long enough to be split into key-tile and query-tile items."""
    rng = np.random.default_rng(1)
    (q, k, v), starts, lens = ragged_stream(rng, [700, 3], 1, dim, np.float64, gap=0)
    out, lse = kernel.forward(q, k, v, starts, lens, True, 0.3, 2)
    dout = rng.standard_normal(q.shape)
    grads = kernel.backward(dout, q, k, v, out, lse, starts, lens, True, 0.3, 2)
    for got, want in zip(grads, attention_grad_reference(q, k, v, starts, lens, True, 0.3, dout)):
        np.testing.assert_allclose(got, want, atol=1e-11)


def packed_rows(rng, B, T, lengths_per_row):
    seg = np.zeros((B, T), np.int64)
    for b, lens in enumerate(lengths_per_row):
        pos = 0
        for i, n in enumerate(lens):
            seg[b, pos : pos + n] = i + 1
            pos += n
    return seg


@pytest.mark.parametrize("causal", [True, False])
def test_segment_ids_layout_on_numpy(causal):
    rng = np.random.default_rng(2)
    seg = packed_rows(rng, 2, 70, [[1, 2, 63], [70]])
    q, k, v = (rng.standard_normal((2, 70, 2, 24)) for _ in range(3))
    out = dt.varlen_attention(q, k, v, segment_ids=seg, causal=causal)
    starts, lens = segments.from_segment_ids(seg)
    ref, _ = attention_reference(*(x.reshape(140, 2, 24) for x in (q, k, v)), starts, lens, causal, 24**-0.5)
    np.testing.assert_allclose(out, ref.reshape(out.shape), atol=1e-12)
    assert (out[0, 66:] == 0).all()  # padding after the last segment


def test_layouts_agree_and_views_work():
    rng = np.random.default_rng(3)
    seg = packed_rows(rng, 3, 40, [[5, 20], [40], [1, 1, 30]])
    base = rng.standard_normal((3, 40, 2, 3, 16)).astype(np.float32)
    q, k, v = base[..., 0, :], base[..., 1, :], base[..., 2, :]  # non-contiguous views
    a = dt.varlen_attention(q, k, v, segment_ids=seg)
    starts, lens = segments.from_segment_ids(seg)
    cu = np.array([0] + list(np.cumsum(lens)))
    flat = [
        np.concatenate([x.reshape(120, 2, 16)[s : s + n] for s, n in zip(starts, lens)]) for x in (q, k, v)
    ]
    b = dt.varlen_attention(*flat, cu_seqlens=cu)
    real = np.concatenate([a.reshape(120, 2, 16)[s : s + n] for s, n in zip(starts, lens)])
    np.testing.assert_allclose(real, b, atol=1e-6)
    assert a.dtype == np.float32


def test_zero_size_and_float16():
    q = np.zeros((0, 2, 8), np.float32)
    assert dt.varlen_attention(q, q, q, cu_seqlens=np.array([0])).shape == (0, 2, 8)
    rng = np.random.default_rng(4)
    x = rng.standard_normal((6, 1, 4)).astype(np.float16)
    out = dt.varlen_attention(x, x, x, cu_seqlens=np.array([0, 6]))
    ref, _ = attention_reference(x, x, x, [0], [6], True, 0.5)
    assert out.dtype == np.float16
    np.testing.assert_allclose(out, ref, atol=2e-3)


# ---------------------------------------------------------------------- torch


def dense_reference(q, k, v, seg, causal=True):
    """The block-diagonal masked attention a model without varlen attention runs."""
    T = seg.shape[1]
    mask = (seg[:, :, None] == seg[:, None, :]) & (seg[:, :, None] != 0)
    if causal:
        mask = mask & torch.ones(T, T, dtype=torch.bool).tril()
    s = torch.einsum("bihd,bjhd->bhij", q, k) / q.shape[-1] ** 0.5
    p = torch.softmax(s.masked_fill(~mask[:, None], -float("inf")), -1).nan_to_num(0)
    return torch.einsum("bhij,bjhd->bihd", p, v)


@pytest.mark.parametrize("causal", [True, False])
def test_torch_forward_and_gradients(causal):
    rng = np.random.default_rng(5)
    seg = torch.from_numpy(packed_rows(rng, 2, 80, [[1, 2, 63, 10], [65]])).int()
    q, k, v = (torch.randn(2, 80, 2, 16, dtype=torch.float64, requires_grad=True) for _ in range(3))
    out = dt.varlen_attention(q, k, v, segment_ids=seg, causal=causal)
    got = assert_value_and_gradients_match(out, dense_reference(q, k, v, seg, causal), (q, k, v), 1e-12)
    assert (got[0][0, 76:] == 0).all()  # padding gets zero gradients


def assert_value_and_gradients_match(out, ref, inputs, atol):
    """``out`` equal to ``ref``, and the gradients of ``sum(out * g)`` to those of
    ``sum(ref * g)`` for a random ``g``, over ``inputs``; returns ``out``'s gradients."""
    torch.testing.assert_close(out, ref, atol=atol, rtol=0)
    g = torch.randn_like(out)
    got = torch.autograd.grad((out * g).sum(), inputs)
    want = torch.autograd.grad((ref * g).sum(), inputs)
    for name, a, b in zip("qkv", got, want):
        assert a.shape == b.shape, f"d{name}"
        torch.testing.assert_close(a, b, atol=atol, rtol=0, msg=f"d{name}")
    return got


def test_torch_gradcheck_tiny():
    seg = torch.tensor([[1, 1, 1, 2, 2, 0, 3, 3]])
    inputs = [torch.randn(1, 8, 2, 3, dtype=torch.float64, requires_grad=True) for _ in range(3)]
    assert torch.autograd.gradcheck(lambda q, k, v: dt.varlen_attention(q, k, v, segment_ids=seg), inputs)
    cu = torch.tensor([0, 2, 7])
    flat = [x.detach().reshape(8, 2, 3).requires_grad_() for x in inputs]
    assert torch.autograd.gradcheck(
        lambda q, k, v: dt.varlen_attention(q, k, v, cu_seqlens=cu, causal=False), flat
    )


def test_torch_bfloat16_computes_in_float32():
    q = torch.randn(10, 2, 8)
    cu = torch.tensor([0, 4, 10])
    out = dt.varlen_attention(q.bfloat16(), q.bfloat16(), q.bfloat16(), cu_seqlens=cu)
    ref = dt.varlen_attention(q.bfloat16().float(), q.bfloat16().float(), q.bfloat16().float(), cu_seqlens=cu)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), ref, atol=1e-2, rtol=1e-2)


def test_opcheck():
    for causal in (True, False):
        q, k, v = (torch.randn(20, 2, 5, requires_grad=True) for _ in range(3))
        torch.library.opcheck(
            torch.ops.dyntile.varlen_attention_fwd, (q, k, v, torch.tensor([0, 3, 3, 12, 20]), causal, 0.4)
        )
        seg = torch.tensor([[1, 1, 2, 2, 2, 0, 0, 0, 0, 0], [1] * 10])
        torch.library.opcheck(torch.ops.dyntile.varlen_attention_fwd, (q, k, v, seg, causal, 0.4))


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_once_for_every_segment_layout(backend):
    torch._dynamo.reset()
    stats = torch._dynamo.utils.counters["stats"]
    graphs = stats["unique_graphs"]
    lin = torch.nn.Linear(8, 24)

    def step(x, seg):
        q, k, v = lin(x).view(2, 16, 3, 2, 4).unbind(2)
        return dt.varlen_attention(q, k, v, segment_ids=seg).square().sum()

    compiled = torch.compile(step, backend=backend, fullgraph=True)
    x = torch.randn(2, 16, 8)
    for cut in (3, 9, 15):
        seg = torch.zeros(2, 16, dtype=torch.int64)
        seg[:, :cut], seg[:, cut:14] = 1, 2
        loss = compiled(x, seg)
        torch.testing.assert_close(loss, step(x, seg))
        loss.backward()
    assert stats["unique_graphs"] - graphs == 1


# ---------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "cu, match",
    [
        ([1, 4], "should start at 0"),
        ([0, 5, 3], r"non-decreasing, but cu_seqlens\[2\] = 3"),
        ([0, 11], "end at most at the 10 tokens"),
        ([0.0, 4.0], "should be integers"),
        ([[0, 4]], r"shape \(S \+ 1,\)"),
        # int64 differences wrap to 2**62, 2**62 - 1 and 6 here: compared, not differenced
        ([0, 2**62, 2**63 - 1, -(2**63) + 5], r"non-decreasing, but cu_seqlens\[3\]"),
    ],
)
def test_bad_cu_seqlens(cu, match):
    q = np.zeros((10, 1, 4), np.float32)
    with pytest.raises((ValueError, TypeError), match=match):
        dt.varlen_attention(q, q, q, cu_seqlens=np.array(cu))


def test_bad_segment_ids_and_shapes():
    q = np.zeros((2, 5, 1, 4))
    with pytest.raises(ValueError, match=r"segment_ids should have shape \[B, T\] = \(2, 5\)"):
        dt.varlen_attention(q, q, q, segment_ids=np.zeros((2, 4), int))
    with pytest.raises(ValueError, match=r"segment_ids\[0\] has segment 1 at positions 0 and 3"):
        dt.varlen_attention(q, q, q, segment_ids=np.array([[1, 1, 2, 1, 0], [1] * 5]))
    with pytest.raises(ValueError, match=r"should be >= 0"):
        dt.varlen_attention(q, q, q, segment_ids=np.array([[1, -1, 0, 0, 0], [1] * 5]))
    with pytest.raises(TypeError, match="segment_ids should be integers"):
        dt.varlen_attention(q, q, q, segment_ids=np.ones((2, 5)))
    with pytest.raises(ValueError, match="equal to q's but for the head count"):
        dt.varlen_attention(q, q[:, :, :, :2], q, segment_ids=np.ones((2, 5), int))
    with pytest.raises(ValueError, match=r"q should have shape \[total, H, D\]"):
        dt.varlen_attention(q, q, q, cu_seqlens=np.array([0, 2]))
    with pytest.raises(TypeError, match="exactly one of segment_ids"):
        dt.varlen_attention(q, q, q)
    with pytest.raises(TypeError, match="takes float32, float64"):
        dt.varlen_attention(q.astype(int), q.astype(int), q.astype(int), segment_ids=np.ones((2, 5), int))


def test_torch_device_and_dtype_mix():
    q = torch.zeros(6, 1, 4)
    with pytest.raises(ValueError, match="should be on one device, but got q on cpu, k on meta"):
        dt.varlen_attention(q, q.to("meta"), q, cu_seqlens=torch.tensor([0, 6]))
    with pytest.raises(TypeError, match="one dtype"):
        dt.varlen_attention(q, q.double(), q, cu_seqlens=torch.tensor([0, 6]))
    with pytest.raises(TypeError, match="every input as a tensor"):
        dt.varlen_attention(q, q, q, cu_seqlens=np.array([0, 6]))


def test_kernels_refuse_sizes_past_their_arithmetic():
    """The C side checks sizes before it allocates: a segment of 2**40 tokens (past the
    int indices of the tiles) is refused, never a wrapped allocation."""
    q = np.zeros((6, 1, 4), np.float32)
    for starts, lens in (([0], [2**40]), ([0, 3], [3, 2**62])):
        with pytest.raises(ValueError, match="past what the CPU kernels hold"):
            kernel.forward(q, q, q, np.array(starts, np.int64), np.array(lens, np.int64), True, 1.0, 1)


@pytest.mark.parametrize("causal", [True, False])
def test_lse_gradient_gradcheck(causal):
    """lse is differentiable: its gradient adds P * dlse to dS (issue #36, 5)."""
    seg = torch.tensor([[1, 1, 1, 2, 2, 0, 3, 3, 3, 3]])
    cu = torch.tensor([0, 4, 4, 9])
    for index in (seg, cu):
        inputs = [torch.randn(10, 2, 3, dtype=torch.float64, requires_grad=True) for _ in range(3)]

        def lse(q, k, v, index=index):
            return torch.ops.dyntile.varlen_attention_fwd(q, k, v, index, causal, 0.6)[1]

        def both(q, k, v, index=index):
            out, lse = torch.ops.dyntile.varlen_attention_fwd(q, k, v, index, causal, 0.6)
            return out.sum(-1) * lse

        assert torch.autograd.gradcheck(lse, inputs)
        assert torch.autograd.gradcheck(both, inputs)


def test_lse_gradient_is_not_zero():
    q, k, v = (torch.randn(6, 1, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    _, lse = torch.ops.dyntile.varlen_attention_fwd(q, k, v, torch.tensor([0, 6]), True, 0.5)
    dq, dk, dv = torch.autograd.grad(lse.sum(), (q, k, v))
    assert dq.abs().sum() > 0 and dk.abs().sum() > 0
    assert not dv.any()  # lse does not depend on v


def test_zero_heads_give_an_empty_result():
    seg = np.array([[1, 1, 2, 0]])
    x = np.zeros((1, 4, 0, 3), np.float32)
    assert dt.varlen_attention(x, x, x, segment_ids=seg).shape == (1, 4, 0, 3)
    t = torch.zeros(1, 4, 0, 3, requires_grad=True)
    out = dt.varlen_attention(t, t, t, segment_ids=torch.from_numpy(seg))
    assert out.shape == (1, 4, 0, 3)
    out.sum().backward()
    assert t.grad.shape == (1, 4, 0, 3)
    flat = torch.zeros(4, 0, 3)
    assert dt.varlen_attention(flat, flat, flat, cu_seqlens=torch.tensor([0, 2, 4])).shape == (4, 0, 3)
    with pytest.raises(ValueError, match="non-decreasing"):  # the segments are still checked
        dt.varlen_attention(flat, flat, flat, cu_seqlens=torch.tensor([0, 3, 2]))


def test_meta_tensors_give_meta_results():
    m = torch.zeros(2, 5, 2, 4, device="meta")
    seg = torch.ones(2, 5, dtype=torch.int64, device="meta")
    out = dt.varlen_attention(m, m, m, segment_ids=seg)
    assert out.device.type == "meta" and out.shape == (2, 5, 2, 4)
    with pytest.raises(TypeError, match="scale should be a number, but got a meta tensor"):
        dt.varlen_attention(m, m, m, segment_ids=seg, scale=torch.tensor(0.5, device="meta"))


def test_quantized_tensors_are_refused_clearly():
    x = torch.randn(1, 4, 1, 2)
    seg = torch.tensor([[1, 1, 2, 2]])
    qx = torch.quantize_per_tensor(x, 0.1, 0, torch.qint8)
    with pytest.raises(TypeError, match=r"quantized dtype torch.qint8; dequantize q, k and v"):
        dt.varlen_attention(qx, qx, qx, segment_ids=seg)
    qseg = torch.quantize_per_tensor(seg.float(), 1.0, 0, torch.qint8)
    with pytest.raises(TypeError, match=r"segment_ids should be a tensor of plain integers.*int_repr"):
        dt.varlen_attention(x, x, x, segment_ids=qseg)


def test_double_backward_raises_naming_it():
    q = torch.randn(1, 4, 1, 2, dtype=torch.float64, requires_grad=True)
    out = dt.varlen_attention(q, q, q, segment_ids=torch.tensor([[1, 1, 1, 0]]))
    (g,) = torch.autograd.grad(out.square().sum(), q, create_graph=True)
    with pytest.raises(RuntimeError, match="does not support double backward"):
        g.sum().backward()
