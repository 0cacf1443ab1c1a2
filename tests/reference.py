"""Slow, obviously correct references the fast paths are tested against."""

import numpy as np


def torch_real_dtypes() -> list:
    """The real torch dtypes the copy kernels move (bool, the ints, the floats; bfloat16
    as its bits), in one list for every test that sweeps them."""
    import torch

    return [
        torch.bool,
        torch.uint8,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.float16,
        torch.bfloat16,
        torch.float32,
        torch.float64,
    ]


def pad_reference(arrays, target, fill, left, dtype):
    """Pad each array into ``target`` (per-sample shape) with plain NumPy slicing."""
    out = np.full((len(arrays),) + tuple(target), fill, dtype=dtype)
    for b, a in enumerate(arrays):
        a = np.asarray(a)
        if left:
            idx = tuple(slice(T - s, T) for T, s in zip(target, a.shape))
        else:
            idx = tuple(slice(0, s) for s in a.shape)
        out[(b,) + idx] = a
    return out


def tile_reference(x, tm, tn, fill=0):
    """Tiled layout by explicit loops over tiles."""
    x = np.asarray(x)
    *lead, M, N = x.shape
    gm, gn = -(-M // tm), -(-N // tn)
    out = np.full(tuple(lead) + (gm, gn, tm, tn), fill, dtype=x.dtype)
    for gi in range(gm):
        for gj in range(gn):
            blk = x[..., gi * tm : (gi + 1) * tm, gj * tn : (gj + 1) * tn]
            out[..., gi, gj, : blk.shape[-2], : blk.shape[-1]] = blk
    return out


def _segment_scores(q, k, starts, lengths, causal, scale):
    """``(slice, scores [H, n, n])`` of every non-empty segment: ``scale Q K^T``, ``-inf``
    above the diagonal when ``causal``."""
    for s0, n in zip(starts, lengths):
        if n == 0:
            continue
        sl = slice(s0, s0 + n)
        s = np.einsum("ihd,jhd->hij", q[sl], k[sl]) * scale
        if causal:
            s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
        yield sl, s


def attention_reference(q, k, v, starts, lengths, causal, scale):
    """Segment attention in float64, one dense softmax(scale Q K^T) V per segment:
    ``(out [N, H, D], lse [N, H])``, zeros on tokens of no segment."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    out, lse = np.zeros(q.shape), np.zeros(q.shape[:2])
    for sl, s in _segment_scores(q, k, starts, lengths, causal, scale):
        m = s.max(-1, keepdims=True)
        p = np.exp(s - m)
        z = p.sum(-1, keepdims=True)
        out[sl] = np.einsum("hij,jhd->ihd", p / z, v[sl])
        lse[sl] = (m + np.log(z))[..., 0].T
    return out, lse


def attention_grad_reference(q, k, v, starts, lengths, causal, scale, dout):
    """``(dq, dk, dv)`` of ``sum(attention_reference(...)[0] * dout)`` by the analytic
    softmax gradient, in float64."""
    q, k, v, dout = (np.asarray(x, np.float64) for x in (q, k, v, dout))
    dq, dk, dv = np.zeros(q.shape), np.zeros(q.shape), np.zeros(q.shape)
    for sl, s in _segment_scores(q, k, starts, lengths, causal, scale):
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        dv[sl] = np.einsum("hij,ihd->jhd", p, dout[sl])
        dp = np.einsum("ihd,jhd->hij", dout[sl], v[sl])
        ds = p * (dp - (dp * p).sum(-1, keepdims=True))
        dq[sl] = np.einsum("hij,jhd->ihd", ds, k[sl]) * scale
        dk[sl] = np.einsum("hij,ihd->jhd", ds, q[sl]) * scale
    return dq, dk, dv


def attention_ieee_reference(q, k, v, starts, lengths, causal, scale, dout, dlse=None):
    """``[out, lse, dq, dk, dv]`` in float64 NumPy by torch autograd through plain ops:
    per segment, each query's ``softmax(scale q K^T) V`` over the keys it sees (earlier
    or equal with ``causal``), ``lse = m + log(sum(exp(s - m)))`` with ``m`` the row max;
    the gradients of ``sum(out * dout) (+ sum(lse * dlse))``. Zeros on tokens of no
    segment. A key a query does not see is selected away (``torch.where``), never
    multiplied by 0, so an inf or NaN in it cannot reach that query: IEEE arithmetic
    decides everything else (NaN or inf exactly where the math gives them)."""
    import torch

    t = [torch.tensor(np.asarray(x, np.float64), requires_grad=True) for x in (q, k, v)]
    N, H, D = t[0].shape
    outs, lses = torch.zeros(N, H, D, dtype=torch.float64), torch.zeros(N, H, dtype=torch.float64)
    for s0, n in zip(np.asarray(starts).tolist(), np.asarray(lengths).tolist()):
        if n == 0:
            continue
        qs, ks, vs = (x[s0 : s0 + n] for x in t)
        seen = torch.ones(n, n, dtype=torch.bool)
        if causal:
            seen = seen.tril()
        ks_i = torch.where(seen[:, :, None, None], ks[None], 0)  # [query, key, H, D]
        vs_i = torch.where(seen[:, :, None, None], vs[None], 0)
        s = torch.einsum("ihd,ijhd->ihj", qs, ks_i) * scale
        s = torch.where(seen[:, None, :], s, -torch.inf)
        p = torch.softmax(s, -1)
        m = s.detach().max(-1, keepdim=True).values
        lse = (m + torch.log(torch.exp(s - m).sum(-1, keepdim=True)))[..., 0]
        outs = outs.index_put((torch.arange(s0, s0 + n),), torch.einsum("ihj,ijhd->ihd", p, vs_i))
        lses = lses.index_put((torch.arange(s0, s0 + n),), lse)
    loss = (outs * torch.tensor(np.asarray(dout, np.float64))).sum()
    if dlse is not None:
        loss = loss + (lses * torch.tensor(np.asarray(dlse, np.float64))).sum()
    if loss.requires_grad:
        grads = torch.autograd.grad(loss, t, allow_unused=True, materialize_grads=True)
    else:  # no segment token
        grads = [torch.zeros_like(x) for x in t]
    return [x.detach().numpy() for x in (outs, lses, *grads)]


def assert_ieee_equal(got, want, tol, err_msg=""):
    """``got`` has NaN exactly where ``want`` has, the same infinities, and is within
    ``tol`` (absolute and relative) of ``want`` everywhere else."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{err_msg}: NaN positions")
    inf = np.isinf(want)
    np.testing.assert_array_equal(np.isinf(got), inf, err_msg=f"{err_msg}: inf positions")
    np.testing.assert_array_equal(got[inf], want[inf], err_msg=f"{err_msg}: inf signs")
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=tol, atol=tol, err_msg=err_msg)
