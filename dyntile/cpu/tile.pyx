# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Tiled layout kernels: ``(B, M, N)`` <-> ``(B, gm, gn, tm, tn)``.

``tile_into`` reads ``x`` through any strides (negative ones included) and writes
the C-contiguous tiled buffer, filling the edge tiles past ``M``/``N``;
``untile_into`` reads a C-contiguous tiled buffer back into a C-contiguous
``(B, M, N)`` array. Elements are moved by width (1, 2, 4, 8 bytes: a fused type),
so every fixed-width dtype shares one specialisation per width.
"""
cimport numpy as cnp
from cython.parallel cimport prange
from libc.stdint cimport int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy, memset

from dyntile.cpu.elements cimport elem_t, fill_n

cnp.import_array()


cdef void _tile_panel(elem_t* out, const char* src, Py_ssize_t M, Py_ssize_t N,
                      Py_ssize_t sm, Py_ssize_t sn, Py_ssize_t gi, Py_ssize_t gn,
                      Py_ssize_t tm, Py_ssize_t tn, elem_t fill) noexcept nogil:
    """Write tile row ``gi`` (``gn`` tiles of ``tm x tn``) of one matrix."""
    cdef Py_ssize_t ii, gj, j, i, cnt
    cdef elem_t* dst
    cdef const char* row
    for gj in range(gn):
        for ii in range(tm):
            # invariant: dst is tile (gi, gj) row ii; out points at tile row gi
            dst = out + (gj * tm + ii) * tn
            i = gi * tm + ii
            if i >= M:
                fill_n(dst, tn, fill)
                continue
            cnt = N - gj * tn
            if cnt > tn:
                cnt = tn
            row = src + i * sm + gj * tn * sn
            if sn == <Py_ssize_t>sizeof(elem_t):
                memcpy(dst, row, cnt * sizeof(elem_t))
            else:
                for j in range(cnt):
                    dst[j] = (<const elem_t*>(row + j * sn))[0]
            if cnt < tn:
                fill_n(dst + cnt, tn - cnt, fill)


cdef void _tile_all(elem_t* out, const char* src, Py_ssize_t B, Py_ssize_t M, Py_ssize_t N,
                    Py_ssize_t sb, Py_ssize_t sm, Py_ssize_t sn, Py_ssize_t gm, Py_ssize_t gn,
                    Py_ssize_t tm, Py_ssize_t tn, elem_t fill, int num_threads) noexcept nogil:
    cdef Py_ssize_t p, b, gi, panel = gn * tm * tn
    if num_threads > 1:
        for p in prange(B * gm, num_threads=num_threads, schedule="static"):
            b = p // gm
            gi = p - b * gm
            _tile_panel(out + p * panel, src + b * sb, M, N, sm, sn, gi, gn, tm, tn, fill)
    else:
        for p in range(B * gm):
            b = p // gm
            gi = p - b * gm
            _tile_panel(out + p * panel, src + b * sb, M, N, sm, sn, gi, gn, tm, tn, fill)


def tile_into(cnp.ndarray x, cnp.ndarray out, unsigned long long fill_bits, int num_threads=1):
    """``x`` ``(B, M, N)`` any strides -> ``out`` C-contiguous ``(B, gm, gn, tm, tn)``."""
    if x.ndim != 3 or out.ndim != 5 or not cnp.PyArray_IS_C_CONTIGUOUS(out):    # before reading any shape
        raise ValueError("tile_into needs x (B, M, N) and a C-contiguous out (B, gm, gn, tm, tn)")
    cdef Py_ssize_t B = x.shape[0], M = x.shape[1], N = x.shape[2]
    cdef Py_ssize_t gm = out.shape[1], gn = out.shape[2], tm = out.shape[3], tn = out.shape[4]
    cdef Py_ssize_t sb = x.strides[0], sm = x.strides[1], sn = x.strides[2]
    cdef int width = cnp.PyArray_ITEMSIZE(out)
    cdef const char* src = <const char*>cnp.PyArray_DATA(x)
    cdef void* dst = cnp.PyArray_DATA(out)
    if out.shape[0] != B or gm * tm < M or gn * tn < N or cnp.PyArray_ITEMSIZE(x) != width:
        raise ValueError("tile_into: out does not match x")
    if out.size == 0:
        return out
    with nogil:
        if width == 1:
            _tile_all(<uint8_t*>dst, src, B, M, N, sb, sm, sn, gm, gn, tm, tn, <uint8_t>fill_bits, num_threads)
        elif width == 2:
            _tile_all(<uint16_t*>dst, src, B, M, N, sb, sm, sn, gm, gn, tm, tn, <uint16_t>fill_bits, num_threads)
        elif width == 4:
            _tile_all(<uint32_t*>dst, src, B, M, N, sb, sm, sn, gm, gn, tm, tn, <uint32_t>fill_bits, num_threads)
        elif width == 8:
            _tile_all(<uint64_t*>dst, src, B, M, N, sb, sm, sn, gm, gn, tm, tn, <uint64_t>fill_bits, num_threads)
        else:
            with gil:
                raise ValueError(f"tile kernel handles element widths 1, 2, 4, 8; got {width}")
    return out


cdef void _untile_all(char* out, const char* src, Py_ssize_t B, Py_ssize_t M, Py_ssize_t N,
                      Py_ssize_t gm, Py_ssize_t gn, Py_ssize_t tm, Py_ssize_t tn,
                      Py_ssize_t width, int num_threads) noexcept nogil:
    cdef Py_ssize_t r
    if num_threads > 1:
        for r in prange(B * M, num_threads=num_threads, schedule="static"):
            _untile_row(out, src, r, M, N, gm, gn, tm, tn, width)
    else:
        for r in range(B * M):
            _untile_row(out, src, r, M, N, gm, gn, tm, tn, width)


cdef inline void _untile_row(char* out, const char* src, Py_ssize_t r, Py_ssize_t M, Py_ssize_t N,
                             Py_ssize_t gm, Py_ssize_t gn, Py_ssize_t tm, Py_ssize_t tn,
                             Py_ssize_t width) noexcept nogil:
    # invariant: out row r (= b*M + i) gathers row ii of tiles (b, gi, 0..gn-1)
    cdef Py_ssize_t b = r // M, i = r - (r // M) * M
    cdef Py_ssize_t gi = i // tm, ii = i - (i // tm) * tm, gj, cnt
    cdef const char* t = src + (((b * gm + gi) * gn) * tm + ii) * tn * width
    cdef char* o = out + r * N * width
    for gj in range(gn):
        cnt = N - gj * tn
        if cnt > tn:
            cnt = tn
        memcpy(o + gj * tn * width, t + gj * tm * tn * width, cnt * width)


def untile_into(cnp.ndarray t, cnp.ndarray out, int num_threads=1):
    """``t`` C-contiguous ``(B, gm, gn, tm, tn)`` -> ``out`` C-contiguous ``(B, M, N)``."""
    if t.ndim != 5 or out.ndim != 3 or not cnp.PyArray_IS_C_CONTIGUOUS(t) or not cnp.PyArray_IS_C_CONTIGUOUS(out):
        raise ValueError("untile_into needs C-contiguous t (B, gm, gn, tm, tn) and out (B, M, N)")
    cdef Py_ssize_t B = out.shape[0], M = out.shape[1], N = out.shape[2]
    cdef Py_ssize_t gm = t.shape[1], gn = t.shape[2], tm = t.shape[3], tn = t.shape[4]
    cdef Py_ssize_t width = cnp.PyArray_ITEMSIZE(out)
    if t.shape[0] != B or gm * tm < M or gn * tn < N or cnp.PyArray_ITEMSIZE(t) != width:
        raise ValueError("untile_into: out does not match t")
    if out.size == 0:
        return out
    cdef const char* src = <const char*>cnp.PyArray_DATA(t)
    cdef char* dst = <char*>cnp.PyArray_DATA(out)
    with nogil:
        _untile_all(dst, src, B, M, N, gm, gn, tm, tn, width, num_threads)
    return out
