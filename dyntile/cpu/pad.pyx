# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Ragged -> padded copy kernel.

``pad_into(samples, out, fill_bits, left, num_threads)`` copies each NumPy array
``samples[b]`` (any strides, negative ones included) into the C-contiguous slab
``out[b]`` and writes the fill value everywhere else, in one pass over ``out``.
The copy is typed by element *width* only (1, 2, 4 or 8 bytes, a fused type), so
one specialisation serves bool/int8/uint8, float16/int16, float32/int32 and
float64/int64; the fill arrives as the raw bit pattern of the value in the
output dtype. Each row is written by ``include/rows_write.h``, the one row writer of
every padded and packed batch. Validation (ranks, dtypes, shapes <= out) is the
caller's job, except for the cheap checks in ``describe`` that decide the fast path.
"""
cimport numpy as cnp
from cython.parallel cimport prange
from cpython.list cimport PyList_GET_ITEM
from cpython.ref cimport Py_INCREF
from libc.stdint cimport int64_t, intptr_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memset

import numpy as np

from dyntile.cpu.elements cimport elem_t
from dyntile.cpu.rows_write cimport dt_row_fill, dt_row_pad

cdef extern from "numpy/arrayobject.h":
    object PyArray_Empty(int nd, cnp.npy_intp* dims, cnp.dtype descr, int fortran)   # steals descr

cnp.import_array()

DEF MAX_NDIM = 32


def describe(list samples):
    """Inspect a list of arrays without touching their data.

    Returns ``(shapes, dtype, bad)``: ``shapes`` int64 ``(B, ndim)``; ``dtype`` the
    common dtype or ``None`` if the dtypes differ; ``bad`` = -1 when every item is
    an ``ndarray`` of the first item's rank, else the index of the first item that
    is not (the caller then takes its slow, explaining path).

    Dtypes are compared as dtype objects, not type numbers: datetimes of two units,
    or records of two layouts, share a type number but not their values' meaning.
    """
    cdef Py_ssize_t n = len(samples), i, k
    cdef int nd
    cdef cnp.ndarray a
    cdef cnp.PyArray_Descr* d0
    cdef cnp.PyArray_Descr* d
    cdef bint same_dtype = True
    if n == 0 or type(samples[0]) is not np.ndarray:
        return None, None, 0
    a = <cnp.ndarray>samples[0]
    nd = cnp.PyArray_NDIM(a)
    d0 = cnp.PyArray_DESCR(a)
    shapes = np.empty((n, nd), dtype=np.int64)
    cdef int64_t[:, ::1] sh = shapes
    for i in range(n):
        obj = samples[i]
        if type(obj) is not np.ndarray:
            return shapes, None, i
        a = <cnp.ndarray>obj
        if cnp.PyArray_NDIM(a) != nd or not cnp.PyArray_ISNOTSWAPPED(a):
            return shapes, None, i
        d = cnp.PyArray_DESCR(a)
        # one descriptor object is the common case (builtin dtypes are singletons)
        if same_dtype and d != d0 and not cnp.PyArray_EquivTypes(<cnp.dtype>d, <cnp.dtype>d0):
            same_dtype = False
        for k in range(nd):
            sh[i, k] = cnp.PyArray_DIMS(a)[k]
    return shapes, (samples[0].dtype if same_dtype else None), -1


cdef void _pad_one(elem_t* dst, const char* src, int nd, const int64_t* out_shape,
                   const int64_t* shape, const int64_t* strides, bint left,
                   elem_t fill) noexcept nogil:
    """Write one padded sample slab ``dst`` (C-contiguous, ``out_shape``)."""
    cdef int64_t S[MAX_NDIM]
    cdef int64_t s[MAX_NDIM]
    cdef int64_t st[MAX_NDIM]
    cdef int64_t off[MAX_NDIM]
    cdef int64_t idx[MAX_NDIM]
    cdef int k, m, last
    cdef int64_t row, nrows, inner, pos
    cdef bint inside
    cdef const char* p
    # Collapse trailing axes that are not padded and contiguous in the source, so an
    # image (H, W, C) copies rows of W*C elements instead of rows of C.
    m = 0
    for k in range(nd):
        S[m] = out_shape[k]
        s[m] = shape[k]
        st[m] = strides[k]
        # merge when this axis is unpadded and the source is contiguous across the two
        # axes: the outer axis may be padded, its rows are then whole data blocks.
        if m > 0 and s[m] == S[m] and st[m - 1] == s[m] * st[m]:
            S[m - 1] *= S[m]
            s[m - 1] *= s[m]
            st[m - 1] = st[m]
        else:
            m += 1
    nd = m
    if nd == 0:
        return
    last = nd - 1
    for k in range(nd):
        off[k] = (S[k] - s[k]) if left else 0
        idx[k] = 0
    inner = S[last]
    nrows = 1
    for k in range(last):
        nrows *= S[k]
    for row in range(nrows):
        inside = True
        p = src
        for k in range(last):
            pos = idx[k] - off[k]
            if pos < 0 or pos >= s[k]:
                inside = False
                break
            p += pos * st[k]
        if inside:
            dt_row_pad(<char*>dst, p, s[last], st[last], inner, left, <uint64_t>fill, sizeof(elem_t))
        else:
            dt_row_fill(<char*>dst, inner, <uint64_t>fill, sizeof(elem_t))
        dst += inner
        # odometer over the outer axes
        k = last - 1
        while k >= 0:
            idx[k] += 1
            if idx[k] < S[k]:
                break
            idx[k] = 0
            k -= 1


cdef void _pad_all(elem_t* out, Py_ssize_t slab, int nd, const int64_t[:, ::1] shapes,
                   const int64_t[:, ::1] strides, const Py_ssize_t[::1] ptrs,
                   const int64_t* out_shape, bint left, elem_t fill, int num_threads) noexcept nogil:
    cdef Py_ssize_t b, n = shapes.shape[0]
    if num_threads > 1:
        for b in prange(n, num_threads=num_threads, schedule="static"):
            _pad_one(out + b * slab, <const char*>ptrs[b], nd, out_shape,
                     &shapes[b, 0], &strides[b, 0], left, fill)
    else:
        for b in range(n):
            _pad_one(out + b * slab, <const char*>ptrs[b], nd, out_shape,
                     &shapes[b, 0], &strides[b, 0], left, fill)


def describe_tensors(list samples, tensor_type):
    """Inspect a list of CPU torch tensors (no torch import: the caller passes
    ``torch.Tensor``).

    Returns ``(shapes, strides, ptrs, dtype, bad)``: int64 ``(B, ndim)`` sizes and byte
    strides, data pointers, the first tensor's torch dtype, and ``bad`` = -1 when
    every item is a dense CPU tensor of that rank and dtype (not complex, not a
    negative view, with memory behind its elements), else the index of the first
    item that is not (CUDA, meta and other devices included).
    """
    cdef Py_ssize_t n = len(samples), i, k, width
    cdef int nd
    if n == 0 or not isinstance(samples[0], tensor_type):
        return None, None, None, None, 0
    t0 = samples[0]
    dtype0 = t0.dtype
    if dtype0.is_complex:
        return None, None, None, dtype0, 0
    nd = t0.dim()
    width = t0.element_size()
    shapes = np.empty((n, nd), dtype=np.int64)
    strides = np.empty((n, nd), dtype=np.int64)
    ptrs = np.empty(n, dtype=np.intp)
    cdef int64_t[:, ::1] sh = shapes
    cdef int64_t[:, ::1] st = strides
    cdef Py_ssize_t[::1] pt = ptrs
    for i in range(n):
        t = samples[i]
        if not isinstance(t, tensor_type) or t.dtype is not dtype0 or not t.is_cpu or t.is_neg():
            return shapes, strides, ptrs, dtype0, i     # a negative view: its memory holds -x
        size = t.shape
        try:  # sparse, nested and mkldnn layouts have no strides or data pointer
            stride = t.stride()
            pt[i] = t.data_ptr()
        except RuntimeError:
            return shapes, strides, ptrs, dtype0, i
        if pt[i] == 0 and t.numel() != 0:              # no memory behind it (a zero tensor)
            return shapes, strides, ptrs, dtype0, i
        if len(size) != nd:
            return shapes, strides, ptrs, dtype0, i
        for k in range(nd):
            sh[i, k] = size[k]
            st[i, k] = stride[k] * width
    return shapes, strides, ptrs, dtype0, -1


def pad_into(list samples, cnp.ndarray out, unsigned long long fill_bits, bint left, int num_threads=1):
    """Copy ``samples`` (ndarrays of ``out``'s dtype and rank ``out.ndim - 1``) into ``out``.

    ``out``: C-contiguous ``(B, *S)`` with every sample shape ``<= S`` (checked by the
    caller); ``fill_bits``: the fill value's bit pattern in ``out.dtype``.
    """
    cdef Py_ssize_t n = len(samples), i, k
    cdef int nd = cnp.PyArray_NDIM(out) - 1
    cdef int width = cnp.PyArray_ITEMSIZE(out)
    cdef cnp.ndarray a
    shapes_a = np.empty((n, max(nd, 1)), dtype=np.int64)
    strides_a = np.empty((n, max(nd, 1)), dtype=np.int64)
    ptrs_a = np.empty(n, dtype=np.intp)
    cdef int64_t[:, ::1] shapes = shapes_a
    cdef int64_t[:, ::1] strides = strides_a
    cdef Py_ssize_t[::1] ptrs = ptrs_a
    for i in range(n):
        a = <cnp.ndarray?>samples[i]
        if cnp.PyArray_NDIM(a) != nd or cnp.PyArray_ITEMSIZE(a) != width:
            raise ValueError(f"sample {i} does not match out (rank {nd}, itemsize {width})")
        ptrs[i] = <Py_ssize_t>cnp.PyArray_DATA(a)
        for k in range(nd):
            shapes[i, k] = cnp.PyArray_DIMS(a)[k]
            strides[i, k] = cnp.PyArray_STRIDES(a)[k]
    return pad_pointers(ptrs_a, shapes_a, strides_a, out, fill_bits, left, num_threads)


def reaching(cnp.ndarray out, const Py_ssize_t[::1] ptrs, const int64_t[:, ::1] shapes,
             const int64_t[:, ::1] strides, Py_ssize_t width):
    """Indices of the samples (``describe_tensors``' pointers, sizes and byte strides,
    elements of ``width`` bytes) whose bytes reach into the byte range of ``out``: the
    only ones an overlap check needs to look at (a list, usually empty)."""
    cdef Py_ssize_t n = ptrs.shape[0], nd = shapes.shape[1], i, k
    cdef intptr_t base = <intptr_t>cnp.PyArray_DATA(out), lo = base, hi = base, s_lo, s_hi, span
    cdef bint empty = cnp.PyArray_SIZE(out) == 0
    for k in range(cnp.PyArray_NDIM(out)):
        span = (cnp.PyArray_DIMS(out)[k] - 1) * cnp.PyArray_STRIDES(out)[k]
        if span < 0:
            lo += span
        else:
            hi += span
    hi += cnp.PyArray_ITEMSIZE(out)
    hits = []
    if empty:
        return hits
    for i in range(n):
        s_lo = s_hi = ptrs[i]
        for k in range(nd):
            if shapes[i, k] == 0:
                break
            span = (shapes[i, k] - 1) * strides[i, k]
            if span < 0:
                s_lo += span
            else:
                s_hi += span
        else:
            if s_lo < hi and s_hi + width > lo:
                hits.append(i)
    return hits


def pad_pointers(const Py_ssize_t[::1] ptrs, const int64_t[:, ::1] shapes, const int64_t[:, ::1] strides,
                 cnp.ndarray out, unsigned long long fill_bits, bint left, int num_threads=1):
    """Core entry: sample ``b`` is ``shapes[b]`` elements at address ``ptrs[b]`` with byte
    ``strides[b]``, of ``out``'s element width; the caller keeps the owners alive."""
    cdef Py_ssize_t n = ptrs.shape[0], i, k
    cdef int nd = cnp.PyArray_NDIM(out) - 1
    cdef int width = cnp.PyArray_ITEMSIZE(out)
    cdef int64_t out_shape[MAX_NDIM]
    cdef Py_ssize_t slab = 1
    if nd < 0:
        raise ValueError("pad kernel needs an out of shape (B, *sample shape), but got a 0-d out")
    if nd + 1 > MAX_NDIM:
        raise ValueError(f"pad kernel supports up to {MAX_NDIM - 1} sample dimensions, got {nd}")
    if (shapes.shape[0] != n or strides.shape[0] != n or shapes.shape[1] != nd
            or strides.shape[1] != nd):
        raise ValueError(f"pad kernel needs shapes and strides of shape ({n}, {nd}), but got "
                         f"({shapes.shape[0]}, {shapes.shape[1]}) and ({strides.shape[0]}, {strides.shape[1]})")
    if cnp.PyArray_DIMS(out)[0] != n:
        raise ValueError(f"out has {cnp.PyArray_DIMS(out)[0]} rows for {n} samples")
    if not cnp.PyArray_IS_C_CONTIGUOUS(out):
        raise ValueError("pad kernel needs a C-contiguous out")
    for k in range(nd):
        out_shape[k] = cnp.PyArray_DIMS(out)[k + 1]
        slab *= out_shape[k]
    for i in range(n):
        for k in range(nd):
            if shapes[i, k] > out_shape[k]:
                raise ValueError(f"sample {i} is larger than out along axis {k}")
    if n == 0 or slab == 0:
        return out
    cdef void* base = cnp.PyArray_DATA(out)
    with nogil:
        if width == 1:
            _pad_all(<uint8_t*>base, slab, nd, shapes, strides, ptrs, out_shape, left, <uint8_t>fill_bits, num_threads)
        elif width == 2:
            _pad_all(<uint16_t*>base, slab, nd, shapes, strides, ptrs, out_shape, left, <uint16_t>fill_bits, num_threads)
        elif width == 4:
            _pad_all(<uint32_t*>base, slab, nd, shapes, strides, ptrs, out_shape, left, <uint32_t>fill_bits, num_threads)
        elif width == 8:
            _pad_all(<uint64_t*>base, slab, nd, shapes, strides, ptrs, out_shape, left, <uint64_t>fill_bits, num_threads)
        else:
            with gil:
                raise ValueError(f"pad kernel handles element widths 1, 2, 4, 8; got {width}")
    return out


cdef void _pad_rows(elem_t* out, Py_ssize_t T, Py_ssize_t n, const int64_t* lens, const int64_t* starts,
                    const char* flat, bint left, elem_t fill, int num_threads) noexcept nogil:
    """Row ``b`` of ``out`` from the ``lens[b]`` elements at element ``starts[b]`` of ``flat``."""
    cdef Py_ssize_t b
    if num_threads > 1:
        for b in prange(n, num_threads=num_threads, schedule="static"):
            dt_row_pad(<char*>(out + b * T), flat + starts[b] * sizeof(elem_t), lens[b], sizeof(elem_t), T, left,
                       <uint64_t>fill, sizeof(elem_t))
    else:
        for b in range(n):
            dt_row_pad(<char*>(out + b * T), flat + starts[b] * sizeof(elem_t), lens[b], sizeof(elem_t), T, left,
                       <uint64_t>fill, sizeof(elem_t))


def pad_flat_rows(intptr_t flat, Py_ssize_t flat_size, list lengths, cnp.dtype dtype, size_of,
                  unsigned long long fill_bits, bint left, threads_for):
    """Pad B rows stored back to back in one contiguous buffer (e.g. ``torch.cat`` of
    the samples) into a new ``(B, T)`` array of ``dtype``.

    ``flat``: address of ``flat_size`` elements of ``dtype``; ``lengths``: B Python
    ints summing to ``flat_size``; ``size_of(max_len)`` -> ``T`` (may raise);
    ``threads_for(nbytes)`` -> kernel threads. Returns ``(out, lengths int64 (B,),
    longest, total)``.
    """
    cdef Py_ssize_t n = len(lengths), i
    cdef int64_t maxlen = 0, total = 0, T
    cdef int width = dtype.itemsize
    cdef cnp.npy_intp dims[2]
    dims[0] = n
    lengths_a = cnp.PyArray_EMPTY(1, dims, cnp.NPY_INT64, 0)
    cdef int64_t* lens = <int64_t*>cnp.PyArray_DATA(lengths_a)
    cdef int64_t* starts = <int64_t*>malloc((n + 1) * sizeof(int64_t))
    if starts == NULL:
        raise MemoryError()
    try:
        for i in range(n):
            lens[i] = <object>PyList_GET_ITEM(lengths, i)
            if lens[i] < 0:
                raise ValueError(f"lengths[{i}] is negative ({lens[i]})")
            starts[i] = total
            total += lens[i]
            if lens[i] > maxlen:
                maxlen = lens[i]
        if total != flat_size:
            raise ValueError(f"lengths sum to {total}, but the buffer holds {flat_size} elements")
        T = size_of(maxlen)
        if T < maxlen:
            raise ValueError(f"padded length {T} is shorter than the longest sample ({maxlen})")
        dims[1] = T
        Py_INCREF(dtype)                         # PyArray_Empty steals it; the dtype, not its
        out = PyArray_Empty(2, dims, dtype, 0)    # number: datetimes keep their unit
        if n and T:
            _pad_rows_any(cnp.PyArray_DATA(out), T, n, lens, starts, <const char*>flat, left, fill_bits, width,
                          threads_for(n * T * width))
        return out, lengths_a, maxlen, total
    finally:
        free(starts)


cdef int _pad_rows_any(void* out, Py_ssize_t T, Py_ssize_t n, const int64_t* lens, const int64_t* starts,
                       const char* flat, bint left, unsigned long long fill_bits, int width, int num_threads) except -1:
    """:func:`_pad_rows` for an element width of 1, 2, 4 or 8 bytes."""
    if width not in (1, 2, 4, 8):
        raise ValueError(f"pad kernel handles element widths 1, 2, 4, 8; got {width}")
    with nogil:
        if width == 1:
            _pad_rows(<uint8_t*>out, T, n, lens, starts, flat, left, <uint8_t>fill_bits, num_threads)
        elif width == 2:
            _pad_rows(<uint16_t*>out, T, n, lens, starts, flat, left, <uint16_t>fill_bits, num_threads)
        elif width == 4:
            _pad_rows(<uint32_t*>out, T, n, lens, starts, flat, left, <uint32_t>fill_bits, num_threads)
        else:
            _pad_rows(<uint64_t*>out, T, n, lens, starts, flat, left, <uint64_t>fill_bits, num_threads)
    return 0


def mask_rows(cnp.ndarray lengths, Py_ssize_t T, bint left):
    """``(B, T)`` bool mask of the int64 C-contiguous ``lengths`` ``(B,)``: true on the
    first ``lengths[b]`` positions of row ``b`` (the last ones if ``left``), two
    ``memset`` calls per row. Raises ``ValueError`` naming the first length outside
    ``[0, T]``. (Plain ndarray arguments: acquiring a typed memoryview costs as much
    as the whole mask of a batch.)"""
    if cnp.PyArray_TYPE(lengths) != cnp.NPY_INT64 or lengths.ndim != 1 \
            or not cnp.PyArray_IS_C_CONTIGUOUS(lengths):
        raise TypeError("mask_rows needs C-contiguous int64 lengths of shape (B,)")
    cdef Py_ssize_t b, n, B = lengths.shape[0], bad = -1
    cdef const int64_t* lens = <const int64_t*>cnp.PyArray_DATA(lengths)
    cdef cnp.npy_intp dims[2]
    dims[0], dims[1] = B, T
    out = cnp.PyArray_EMPTY(2, dims, cnp.NPY_BOOL, 0)
    cdef uint8_t* row = <uint8_t*>cnp.PyArray_DATA(out)
    with nogil:
        for b in range(B):
            if lens[b] < 0 or lens[b] > T:
                bad = b
                break
        if bad < 0:
            for b in range(B):
                n = lens[b]
                if left:
                    memset(row, 0, T - n)
                    memset(row + (T - n), 1, n)
                else:
                    memset(row, 1, n)
                    memset(row + n, 0, T - n)
                row += T
    if bad >= 0:
        raise ValueError(f"lengths[{bad}] has size {lens[bad]} along axis 0, outside 0..{T}")
    return out
