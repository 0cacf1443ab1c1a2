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


def attention_reference(q, k, v, starts, lengths, causal, scale):
    """Segment attention in float64, one dense softmax(scale Q K^T) V per segment:
    ``(out [N, H, D], lse [N, H])``, zeros on tokens of no segment."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    out, lse = np.zeros(q.shape), np.zeros(q.shape[:2])
    for s0, n in zip(starts, lengths):
        if n == 0:
            continue
        sl = slice(s0, s0 + n)
        s = np.einsum("ihd,jhd->hij", q[sl], k[sl]) * scale
        if causal:
            s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
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
    for s0, n in zip(starts, lengths):
        if n == 0:
            continue
        sl = slice(s0, s0 + n)
        s = np.einsum("ihd,jhd->hij", q[sl], k[sl]) * scale
        if causal:
            s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        dv[sl] = np.einsum("hij,ihd->jhd", p, dout[sl])
        dp = np.einsum("ihd,jhd->hij", dout[sl], v[sl])
        ds = p * (dp - (dp * p).sum(-1, keepdims=True))
        dq[sl] = np.einsum("hij,jhd->ihd", ds, k[sl]) * scale
        dk[sl] = np.einsum("hij,ihd->jhd", ds, q[sl]) * scale
    return dq, dk, dv
