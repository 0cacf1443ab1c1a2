"""The packed-row kernels: place_pieces against a NumPy copy, piece by piece."""

import numpy as np
import pytest

from dyntile.cpu.packed_rows import place_pieces
from dyntile.fill import fill_bits


def pieces_of(lengths, T, rng):
    """Random pieces: each sample cut into up to 3 chunks placed at random free rows."""
    index, starts, sizes = [], [], []
    for i, n in enumerate(lengths):
        cuts = (
            np.sort(rng.choice(np.arange(1, n), size=min(2, max(n - 1, 0)), replace=False)) if n > 1 else []
        )
        bounds = [0, *cuts, n]
        for a, b in zip(bounds[:-1], bounds[1:]):
            index.append(i), starts.append(a), sizes.append(b - a)
    total = sum(sizes)
    order = rng.permutation(len(sizes))
    dst, at = np.zeros(len(sizes), np.int64), 0
    for p in order:  # back to back in a random order, so pieces never overlap
        dst[p], at = at, at + sizes[p]
    return [np.array(x, np.int64) for x in (index, starts, sizes)] + [dst], max(total, 1) + T


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.float32, np.int64])
@pytest.mark.parametrize("rest", [(), (3,), (0,)])
@pytest.mark.parametrize("step", [1, 2])
def test_place_pieces_matches_numpy(dtype, rest, step):
    rng = np.random.default_rng(hash((np.dtype(dtype).str, rest, step)) % 2**32)
    lengths = [5, 0, 1, 13, 7]
    bases = [rng.integers(0, 100, (n * step, *rest)).astype(dtype) for n in lengths]
    samples = [b[::step] for b in bases]  # step 2: rows strided in memory
    (index, starts, sizes, dst), rows = pieces_of(lengths, 4, rng)
    out = np.empty((rows, *rest), dtype)
    fill = 7
    first = rng.random() < 0.5
    ptrs = np.array([s.ctypes.data for s in samples], np.intp)
    strides = np.array(
        [s.strides[0] if s.shape[0] > 1 else s.itemsize * max(1, int(np.prod(rest))) * step for s in samples],
        np.int64,
    )
    place_pieces(
        ptrs,
        strides,
        np.array(lengths, np.int64),
        index,
        starts,
        sizes,
        dst,
        out.ctypes.data,
        rows,
        int(np.prod(rest)),
        out.itemsize,
        fill_bits(fill, out.dtype),
        first,
    )
    expect = np.full((rows, *rest), fill, dtype)
    for i, a, n, d in zip(index, starts, sizes, dst):
        expect[d : d + n] = samples[i][a : a + n]
        if first and n:
            expect[d] = fill
    np.testing.assert_array_equal(out, expect)


def test_place_pieces_refuses_pieces_outside_sample_or_out():
    x = np.arange(4, dtype=np.int64)
    out = np.zeros(6, np.int64)
    args = (np.array([x.ctypes.data], np.intp), np.array([8], np.int64), np.array([4], np.int64))
    one = lambda v: np.array([v], np.int64)  # noqa: E731
    with pytest.raises(ValueError, match="piece 0 .* reaches past"):
        place_pieces(*args, one(0), one(2), one(3), one(0), out.ctypes.data, 6, 1, 8, 0)  # past the sample
    with pytest.raises(ValueError, match="piece 0 .* reaches past"):
        place_pieces(*args, one(0), one(0), one(4), one(3), out.ctypes.data, 6, 1, 8, 0)  # past out
    with pytest.raises(ValueError, match="piece 0"):
        place_pieces(*args, one(1), one(0), one(1), one(0), out.ctypes.data, 6, 1, 8, 0)  # no such sample
    with pytest.raises(ValueError, match="elements of 1, 2, 4 or 8 bytes, but got width 16"):
        place_pieces(*args, one(0), one(0), one(1), one(0), out.ctypes.data, 6, 1, 16, 0)
    assert not out.any()  # nothing was written
