# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Python lists of numbers -> one padded array, read straight from the list objects.

Tokenizers hand out token ids as Python lists of ints. Turning each list into an
array first (``numpy.asarray``, a call per list and a type check per element) costs
far more than the padding. :func:`pad_ints` reads lists of ints in one pass (and
:func:`concat_ints` puts them back to back, unpadded); :func:`scan` +
:func:`pad_into` handle bools, floats and mixes in two. Only *exact*
Python numbers qualify (no NumPy scalars, no int subclasses): anything else makes
them answer ``None`` and the caller takes its general, explaining path.
"""
cimport numpy as cnp
from cpython.float cimport PyFloat_AS_DOUBLE, PyFloat_CheckExact
from cpython.list cimport PyList_CheckExact, PyList_GET_ITEM, PyList_GET_SIZE
from cpython.long cimport PyLong_AsDouble, PyLong_Check, PyLong_CheckExact
from cpython.object cimport PyObject
from libc.stdint cimport int64_t, uint8_t, uint64_t

import numpy as np

from dyntile.cpu.elements cimport fill_n

cnp.import_array()

cdef extern from "Python.h":
    PyObject* Py_True
    PyObject* Py_False

cdef extern from "pylong_read.h" nogil:
    int dt_long_as_i64(PyObject* v, int64_t* out) noexcept
    Py_ssize_t dt_read_int_items(PyObject* const* items, Py_ssize_t n, int64_t* dst) noexcept
    PyObject* const* dt_list_items(PyObject* lst) noexcept

# kinds, in promotion order: every element bool -> bool; ints (and bools) -> int64;
# any float -> float64 (as numpy.asarray would choose)
DEF KIND_BOOL = 1
DEF KIND_INT = 2
DEF KIND_FLOAT = 3
KINDS = {KIND_BOOL: np.dtype(np.bool_), KIND_INT: np.dtype(np.int64), KIND_FLOAT: np.dtype(np.float64)}


def scan(list samples):
    """Lengths and element kind of ``samples``, a list of lists of Python numbers.

    Returns ``(lengths int64 (B,), dtype)``; ``dtype`` is bool, int64 or float64
    (empty lists carry no type; all empty: int64), or ``None`` when a sample is
    not a list or holds anything but exact ``int``/``float``/``bool`` objects.
    """
    cdef Py_ssize_t n = len(samples), i, j, m
    cdef int kind = KIND_BOOL, k
    cdef bint any_item = False
    cdef cnp.npy_intp dim = n
    lengths = cnp.PyArray_EMPTY(1, &dim, cnp.NPY_INT64, 0)
    cdef int64_t* lens = <int64_t*>cnp.PyArray_DATA(lengths)
    cdef PyObject* v
    for i in range(n):
        row = <object>PyList_GET_ITEM(samples, i)
        if not PyList_CheckExact(row):
            return lengths, None
        m = PyList_GET_SIZE(row)
        lens[i] = m
        any_item = any_item or m > 0
        for j in range(m):
            v = PyList_GET_ITEM(row, j)
            if v == Py_True or v == Py_False:
                k = KIND_BOOL
            elif PyLong_CheckExact(<object>v):
                k = KIND_INT
            elif PyFloat_CheckExact(<object>v):
                k = KIND_FLOAT
            else:
                return lengths, None
            if k > kind:
                kind = k
    return lengths, KINDS[kind if any_item else KIND_INT]


def pad_into(list samples, cnp.ndarray out, unsigned long long fill_bits, bint left):
    """Write ``samples`` (checked by :func:`scan`) into the C-contiguous ``(B, T)``
    ``out`` of bool, int64 or float64, each row padded with the fill's bit pattern.

    Returns -1, or the first sample holding an int that ``out`` cannot store
    exactly (outside int64, or rounded in float64): nothing is cut or rounded, the
    caller decides.
    """
    if cnp.PyArray_NDIM(out) != 2 or not cnp.PyArray_IS_C_CONTIGUOUS(out) or cnp.PyArray_DIMS(out)[0] != len(samples):
        raise ValueError("out should be a C-contiguous (B, T) array")      # before reading T
    cdef Py_ssize_t n = len(samples), T = cnp.PyArray_DIMS(out)[1], i, j, m, lo
    cdef int64_t iv
    cdef double d
    cdef int width = cnp.PyArray_ITEMSIZE(out), typenum = cnp.PyArray_TYPE(out)
    cdef char* base = <char*>cnp.PyArray_DATA(out)
    cdef PyObject* v
    cdef list row
    if typenum not in (cnp.NPY_BOOL, cnp.NPY_INT64, cnp.NPY_FLOAT64):
        raise TypeError(f"out should be bool, int64 or float64, not {out.dtype}")
    for i in range(n):
        obj = <object>PyList_GET_ITEM(samples, i)
        if not PyList_CheckExact(obj):
            raise TypeError(f"sample {i} should be a list (checked by scan)")
        row = <list>obj
        m = PyList_GET_SIZE(row)
        if m > T:
            raise ValueError(f"sample {i} has {m} elements, more than out's {T} columns")
        lo = T - m if left else 0
        if width == 1:
            fill_n(<uint8_t*>base, T, <uint8_t>fill_bits)
            for j in range(m):
                (<uint8_t*>base)[lo + j] = PyList_GET_ITEM(row, j) == Py_True
        else:
            fill_n(<uint64_t*>base, lo, fill_bits)
            fill_n(<uint64_t*>base + lo + m, T - lo - m, fill_bits)
            for j in range(m):
                v = PyList_GET_ITEM(row, j)
                # ints (bools included) convert without running Python code, which could
                # change the lists under this loop; anything else: scan was not obeyed
                if PyFloat_CheckExact(<object>v) and typenum == cnp.NPY_FLOAT64:
                    (<double*>base)[lo + j] = PyFloat_AS_DOUBLE(<object>v)
                elif not PyLong_Check(<object>v):
                    raise TypeError(f"sample {i} holds a {type(<object>v).__name__} (checked by scan)")
                elif typenum == cnp.NPY_INT64:
                    if not dt_long_as_i64(v, <int64_t*>base + lo + j):
                        return i
                elif dt_long_as_i64(v, &iv):
                    if not _exact_in_double(iv):      # 2**53 + 1 would round: the caller decides
                        return i
                    (<double*>base)[lo + j] = <double>iv
                else:
                    try:
                        d = PyLong_AsDouble(<object>v)
                    except OverflowError:
                        return i
                    if int(d) != <object>v:
                        return i
                    (<double*>base)[lo + j] = d
        base += T * width
    return -1


cdef inline bint _exact_in_double(int64_t v) noexcept nogil:
    """True if the int64 ``v`` converts to float64 without rounding."""
    cdef double d = <double>v
    cdef int64_t exact = 9007199254740992        # 2**53: every int up to it is a double
    return (-exact <= v and v <= exact) or (d < 9.223372036854775808e18 and <int64_t>d == v)


cdef object _list_lengths(list samples, Py_ssize_t* longest, Py_ssize_t* total):
    """int64 ``(B,)`` sizes of ``samples`` (and their maximum and sum), or ``None``
    if one is not an exact list."""
    cdef Py_ssize_t n = len(samples), i
    cdef cnp.npy_intp dim = n
    lengths = cnp.PyArray_EMPTY(1, &dim, cnp.NPY_INT64, 0)
    cdef int64_t* lens = <int64_t*>cnp.PyArray_DATA(lengths)
    longest[0] = total[0] = 0
    for i in range(n):
        obj = <object>PyList_GET_ITEM(samples, i)
        if not PyList_CheckExact(obj):
            return None
        lens[i] = PyList_GET_SIZE(obj)
        longest[0] = max(longest[0], lens[i])
        total[0] += lens[i]
    return lengths


cdef inline list _unchanged_row(list samples, Py_ssize_t i, int64_t size):
    """Sample ``i``, checked again after Python code ran (an allocation, ``size_of``):
    another thread or a finalizer may have replaced or resized it."""
    obj = <object>PyList_GET_ITEM(samples, i)
    if not PyList_CheckExact(obj) or PyList_GET_SIZE(obj) != size:
        raise RuntimeError(f"sample {i} changed while being read")
    return <list>obj


cdef inline bint _read_ints(list row, Py_ssize_t m, int64_t* dst) noexcept:
    """``dst[:m]`` = the exact Python ints of ``row``; False at the first other element
    (a bool, a float, an int outside int64...). Runs no Python code; small ints are
    read from the int objects inline (``pylong_read.h``)."""
    return dt_read_int_items(dt_list_items(<PyObject*>row), m, dst) == m


def pad_ints(list samples, size_of, unsigned long long fill_bits, bint left):
    """One pass for the common case, lists of exact Python ints (token ids): returns
    ``(out int64 (B, T), lengths int64 (B,), longest, total)`` with
    ``T = size_of(longest)`` and ``total`` the sum of the lengths, or
    ``None`` as soon as an element is anything else (a bool, a float, an int outside
    int64, another type) or a sample is not a list: the caller then :func:`scan`\\ s.
    """
    cdef Py_ssize_t n = len(samples), i, m, lo, T, maxlen, total
    cdef cnp.npy_intp dims[2]
    cdef list row
    lengths = _list_lengths(samples, &maxlen, &total)
    if lengths is None:
        return None
    cdef int64_t* lens = <int64_t*>cnp.PyArray_DATA(lengths)
    dims[0] = n
    T = size_of(maxlen)
    if T < maxlen:
        raise ValueError(f"padded length {T} is shorter than the longest sample ({maxlen})")
    dims[1] = T
    out = cnp.PyArray_EMPTY(2, dims, cnp.NPY_INT64, 0)
    cdef int64_t* dst = <int64_t*>cnp.PyArray_DATA(out)
    if PyList_GET_SIZE(samples) != n:    # size_of ran Python code: another thread may have changed the lists
        raise RuntimeError("the list of samples changed while being read")
    for i in range(n):
        row = _unchanged_row(samples, i, lens[i])
        m = lens[i]
        lo = T - m if left else 0
        fill_n(<uint64_t*>dst, lo, fill_bits)
        fill_n(<uint64_t*>dst + lo + m, T - lo - m, fill_bits)
        if not _read_ints(row, m, dst + lo):
            return None
        dst += T
    return out, lengths, maxlen, total


def concat_ints(list samples):
    """Lists of exact Python ints, back to back: ``(values int64 (N,), lengths int64 (B,))``
    in one pass, or ``None`` as soon as a sample is not a list or an element is
    anything else (a bool, a float, an int outside int64, another type).
    """
    cdef Py_ssize_t n = len(samples), i, longest, total
    cdef cnp.npy_intp dim
    cdef list row
    lengths = _list_lengths(samples, &longest, &total)
    if lengths is None:
        return None
    cdef int64_t* lens = <int64_t*>cnp.PyArray_DATA(lengths)
    dim = total
    values = cnp.PyArray_EMPTY(1, &dim, cnp.NPY_INT64, 0)
    cdef int64_t* dst = <int64_t*>cnp.PyArray_DATA(values)
    if PyList_GET_SIZE(samples) != n:    # allocating may run a collection (finalizers): re-check
        raise RuntimeError("the list of samples changed while being read")
    for i in range(n):
        row = _unchanged_row(samples, i, lens[i])
        if not _read_ints(row, lens[i], dst):
            return None
        dst += lens[i]
    return values, lengths
