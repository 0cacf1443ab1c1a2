"""Slow, obviously correct references the fast paths are tested against."""
import numpy as np


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
            blk = x[..., gi * tm:(gi + 1) * tm, gj * tn:(gj + 1) * tn]
            out[..., gi, gj, :blk.shape[-2], :blk.shape[-1]] = blk
    return out
