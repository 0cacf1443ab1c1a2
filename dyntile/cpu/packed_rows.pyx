# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Packed ``[B, T]`` rows from their pieces: the metadata pass and the token copy.

A packed batch is a list of *pieces* in row order (``pack_rows``): piece ``p`` is
``sizes[p]`` consecutive tokens of sample ``index[p]``, from its token
``starts[p]``, placed at slot ``offsets[p]`` of row ``rows[p]``.

* ``packed_layout`` writes ``position_ids``, ``segment_ids`` and ``cu_seqlens`` in
  one pass over the pieces;
* ``place_pieces`` fills one token key's output buffer and copies every piece into
  it, straight from the samples' memory (no concatenated copy in between), with the
  row writer of every padded and packed batch (``include/rows_write.h``).

Both take validated pieces except for the bounds ``place_pieces`` checks itself,
which cost one pass over the pieces and keep a wrong layout from writing outside
the buffer.
"""
cimport numpy as cnp
from libc.stdint cimport int32_t, int64_t, intptr_t

import numpy as np

from dyntile.cpu.rows_write cimport dt_rows_place

cnp.import_array()


def packed_layout(const int64_t[::1] rows, const int64_t[::1] offsets, const int64_t[::1] sizes,
                  const int64_t[::1] starts, int64_t B, int64_t T):
    """``(position_ids, segment_ids, cu_seqlens, max_seqlen)`` of a packed batch in one pass.

    Pieces come in row order, back to back from offset 0 in each row (the layout of
    ``pack_rows``); piece ``p`` covers slots ``offsets[p] ..`` of row ``rows[p]`` and
    continues its sample from position ``starts[p]``. ``position_ids`` int64 and
    ``segment_ids`` int32 ``(B, T)`` (the piece's number in its row, 1-based; 0 on
    padding); ``cu_seqlens`` int32: every piece's first slot of the flat ``[B * T]``
    stream, then each row's padding tail (a whole empty row is one), and ``B * T``.
    Validation (pieces inside their rows, in order) is the caller's job.
    """
    cdef Py_ssize_t P = rows.shape[0], p, j, r, nb = 0
    cdef int64_t slot, used, row_first, longest = 0
    position_arr = np.zeros((B, T), dtype=np.int64)
    segment_arr = np.zeros((B, T), dtype=np.int32)
    cu_arr = np.empty(P + B + 1, dtype=np.int32)
    cdef int64_t[:, ::1] position = position_arr
    cdef int32_t[:, ::1] segment = segment_arr
    cdef int32_t[::1] cu = cu_arr
    with nogil:
        p = 0
        for r in range(B):
            used = 0
            row_first = p
            # loop invariant: pieces before p lie in rows before r, or earlier in row r
            while p < P and rows[p] == r:
                slot = r * T + offsets[p]
                cu[nb] = <int32_t>slot
                nb += 1
                for j in range(sizes[p]):
                    position[r, offsets[p] + j] = starts[p] + j
                    segment[r, offsets[p] + j] = <int32_t>(p - row_first + 1)
                used = offsets[p] + sizes[p]
                p += 1
            if used < T:
                cu[nb] = <int32_t>(r * T + used)
                nb += 1
        cu[nb] = <int32_t>(B * T)
        nb += 1
        for j in range(1, nb):
            if cu[j] - cu[j - 1] > longest:
                longest = cu[j] - cu[j - 1]
    return position_arr, segment_arr, cu_arr[:nb].copy(), longest


def place_pieces(const intptr_t[::1] ptrs, const int64_t[::1] strides, const int64_t[::1] lengths,
                 const int64_t[::1] index, const int64_t[::1] starts, const int64_t[::1] sizes,
                 const int64_t[::1] dst, intptr_t out, Py_ssize_t out_rows, Py_ssize_t row_elems, int width,
                 unsigned long long fill_bits, bint fill_first=False, bint fill_out=True):
    """Fill the C-contiguous buffer at ``out`` (``out_rows`` rows of ``row_elems``
    elements of ``width`` bytes) with ``fill_bits``, then copy the pieces into it.

    Sample ``i`` has ``lengths[i]`` rows of ``row_elems`` contiguous elements at
    ``ptrs[i]``, ``strides[i]`` bytes apart (any positive step). Piece ``p`` is rows
    ``starts[p] ..`` of sample ``index[p]``, ``sizes[p]`` of them, written to out rows
    ``dst[p] ..``. With ``fill_first`` the first row of every non-empty piece is set
    back to the fill (a label key's boundary); ``fill_out=False`` leaves the buffer's
    other contents as they are (for a caller that fills it itself). ``ValueError`` when a piece reaches
    past its sample or past ``out``; the caller keeps the samples alive.
    """
    cdef Py_ssize_t P = index.shape[0], n = ptrs.shape[0], p
    if strides.shape[0] != n or lengths.shape[0] != n:
        raise ValueError(f"ptrs, strides and lengths should have one length, but got {n}, "
                         f"{strides.shape[0]} and {lengths.shape[0]}")
    if starts.shape[0] != P or sizes.shape[0] != P or dst.shape[0] != P:
        raise ValueError("index, starts, sizes and dst should have one length per piece")
    for p in range(P):
        if not (0 <= index[p] < n and 0 <= starts[p] and 0 <= sizes[p]
                and starts[p] + sizes[p] <= lengths[index[p]] and 0 <= dst[p] and dst[p] + sizes[p] <= out_rows):
            raise ValueError(f"piece {p} (sample {index[p]}, rows {starts[p]}..+{sizes[p]} to out row "
                             f"{dst[p]}) reaches past its sample or past the {out_rows} rows of out")
    cdef Py_ssize_t total = out_rows * row_elems
    cdef const intptr_t* src = &ptrs[0] if n else NULL
    cdef const int64_t* step = &strides[0] if n else NULL
    cdef const int64_t* pi = &index[0] if P else NULL
    cdef const int64_t* ps = &starts[0] if P else NULL
    cdef const int64_t* pn = &sizes[0] if P else NULL
    cdef const int64_t* pd = &dst[0] if P else NULL
    if width not in (1, 2, 4, 8):
        raise ValueError(f"place_pieces moves elements of 1, 2, 4 or 8 bytes, but got width {width}")
    with nogil:
        dt_rows_place(<char*>out, total, row_elems, fill_bits, src, step, pi, ps, pn, pd, P, fill_first, fill_out,
                      width)
