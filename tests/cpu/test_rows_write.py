"""The row writer (include/rows_write.h) through its Cython routes: pad_pointers (any
strides), pad_flat_rows and place_pieces, against NumPy, at every run length of fill
and copy on both sides of the inline-store and memset sizes, for each element width
and fills whose bytes differ (written as words) or repeat (a memset)."""

import numpy as np
import pytest

from dyntile.cpu.packed_rows import place_pieces
from dyntile.cpu.pad import pad_flat_rows, pad_pointers
from dyntile.fill import fill_bits
from reference import pad_reference

#: (dtype, fill): a fill of differing bytes per width, and one of one repeated byte
FILLS = [
    (np.uint8, 7),
    (np.int16, 0x1234),
    (np.int16, -1),
    (np.float32, 1.5),
    (np.int32, 0),
    (np.int64, -100),
    (np.float64, -0.25),
]
T = 70  # 70 elements: runs of 0..70 cross 8 and 64 bytes at every width


def _rows(dtype, step, rng):
    """Rows of every length 0..T (shuffled), each ``step`` elements apart in memory."""
    sizes = rng.permutation(T + 1)
    bases = [rng.integers(1, 100, max(n * abs(step), 1)).astype(dtype) for n in sizes]
    return [b[::step][: int(n)] for b, n in zip(bases, sizes)]


@pytest.mark.parametrize(("dtype", "fill"), FILLS)
@pytest.mark.parametrize("step", [1, 3, -2])
@pytest.mark.parametrize("left", [False, True])
def test_pad_pointers_writes_every_run_length(dtype, fill, step, left):
    rng = np.random.default_rng(abs(hash((np.dtype(dtype).str, fill, step, left))) % 2**32)
    rows = _rows(dtype, step, rng)
    out = np.empty((len(rows), T), dtype)
    pad_pointers(
        np.array([r.ctypes.data for r in rows], np.intp),
        np.array([[r.shape[0]] for r in rows], np.int64),
        np.array([[r.strides[0]] for r in rows], np.int64),
        out,
        fill_bits(fill, out.dtype),
        left,
    )
    np.testing.assert_array_equal(out, pad_reference(rows, (T,), fill, left, dtype))


@pytest.mark.parametrize(("dtype", "fill"), FILLS)
@pytest.mark.parametrize("left", [False, True])
@pytest.mark.parametrize("threads", [1, 2])
def test_pad_flat_rows_writes_every_run_length(dtype, fill, left, threads):
    rng = np.random.default_rng(abs(hash((np.dtype(dtype).str, fill, left))) % 2**32)
    rows = _rows(dtype, 1, rng)
    flat = np.concatenate(rows)
    out, lengths, longest, total = pad_flat_rows(
        flat.ctypes.data,
        flat.size,
        [len(r) for r in rows],
        flat.dtype,
        lambda n: n + 5,
        fill_bits(fill, flat.dtype),
        left,
        lambda nbytes: threads,
    )
    assert (longest, total) == (T, flat.size) and lengths.tolist() == [len(r) for r in rows]
    np.testing.assert_array_equal(out, pad_reference(rows, (T + 5,), fill, left, dtype))


@pytest.mark.parametrize(("dtype", "fill"), FILLS)
@pytest.mark.parametrize("step", [1, 3])
@pytest.mark.parametrize("row_elems", [1, 5])
def test_place_pieces_fills_and_copies_every_size(dtype, fill, step, row_elems):
    """Pieces of 0..T rows back to back, the last row of out left to the fill."""
    rng = np.random.default_rng(abs(hash((np.dtype(dtype).str, fill, step, row_elems))) % 2**32)
    sizes = rng.permutation(T + 1)
    bases = [rng.integers(1, 100, (n * step, row_elems)).astype(dtype) for n in sizes]
    samples = [b[::step] for b in bases]
    dst = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    rows = int(sizes.sum()) + 1
    for first in (False, True):
        out = np.empty((rows, row_elems), dtype)
        place_pieces(
            np.array([s.ctypes.data for s in samples], np.intp),
            np.array([step * row_elems * out.itemsize for _ in samples], np.int64),
            sizes.astype(np.int64),
            np.arange(len(samples), dtype=np.int64),
            np.zeros(len(samples), np.int64),
            sizes.astype(np.int64),
            dst,
            out.ctypes.data,
            rows,
            row_elems,
            out.itemsize,
            fill_bits(fill, out.dtype),
            first,
        )
        expect = np.full((rows, row_elems), fill, dtype)
        for s, d in zip(samples, dst):
            expect[d : d + len(s)] = s
            if first and len(s):
                expect[d] = fill
        np.testing.assert_array_equal(out, expect)
