/* pylong_read.h: rows of exact Python ints -> int64, without a call per element.
 *
 * PyLong_AsLongLongAndOverflow is an out-of-line call of a dozen branches per
 * element: most of the cost of turning a tokenizer's list of token ids into a row. Token ids are small ints, which CPython stores in one or two 30-bit
 * digits (3.11) or as a "compact" value (3.12+); those are read here inline, and
 * anything larger goes through the API call. Only exact ints (not bool, not
 * subclasses) are read, so no Python code runs.
 */
#ifndef DYNTILE_PYLONG_READ_H
#define DYNTILE_PYLONG_READ_H

#include <Python.h>
#include <stdint.h>

/* *out = v (an exact int); 0 if it does not fit int64 (v untouched, no error set) */
static inline int dt_long_as_i64(PyObject *v, int64_t *out)
{
#if PY_VERSION_HEX >= 0x030C0000
    if (PyUnstable_Long_IsCompact((PyLongObject *)v)) {
        *out = (int64_t)PyUnstable_Long_CompactValue((PyLongObject *)v);
        return 1;
    }
#elif PY_VERSION_HEX >= 0x030B0000 && PyLong_SHIFT == 30
    /* Py_SIZE is the signed digit count: -1, 0 and 1 (|v| < 2**30) are read without
       a branch on the sign (a switch here compiles to an indirect jump an element) */
    const Py_ssize_t size = Py_SIZE(v);
    const digit *d = ((PyLongObject *)v)->ob_digit;
    if ((size_t)(size + 1) <= 2) {
        *out = (int64_t)size * (int64_t)d[0];
        return 1;
    }
    if (size == 2 || size == -2) {
        int64_t x = (int64_t)d[0] | ((int64_t)d[1] << 30);
        *out = size > 0 ? x : -x;
        return 1;
    }
#endif
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow) return 0;
    *out = (int64_t)x;
    return 1;
}

/* dst[:n] = the exact Python ints items[:n] (a list's item array); returns n, or the
   index of the first element that is not an exact int or does not fit int64
   (no software prefetch of the int objects ahead: it slows this loop down) */
static inline Py_ssize_t dt_read_int_items(PyObject *const *items, Py_ssize_t n, int64_t *dst)
{
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *v = items[j];
        if (!PyLong_CheckExact(v) || !dt_long_as_i64(v, dst + j)) return j;
    }
    return n;
}

/* the item array of an exact list (valid until the list is resized) */
static inline PyObject *const *dt_list_items(PyObject *list)
{
    return (PyObject *const *)((PyListObject *)list)->ob_item;
}

#endif /* DYNTILE_PYLONG_READ_H */
