# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""One layer of the exact bucket-planning dynamic programme, in O(D).

:func:`dyntile.planning.buckets._optimal_boundaries` fills, for ``k`` buckets over
``D`` sorted distinct lengths ``v`` with cumulative weights ``W``::

    f[k][j] = c[j] * W[j+1] + min_{k-1 <= i <= j} (f[k-1][i-1] - c[j] * W[i])

For a start ``i`` the bracket is a line in ``x = c[j]`` (slope ``-W[i]``, intercept
``f[k-1][i-1]``). Starts join in order of falling slope and the queries ``c[j]``
rise, so the minimum is the lower envelope of the lines so far, kept as a deque
(the convex-hull trick): each line enters and leaves once.
"""
cimport numpy as cnp
from libc.stdint cimport int64_t

import numpy as np

cnp.import_array()


def dp_layer(const double[::1] prev, const double[::1] c, const double[::1] W, Py_ssize_t kk,
             double[::1] g, int64_t[::1] opt):
    """Fill ``g[j]`` (``f[kk][j]``) and ``opt[j]`` (the start of the last bucket) for
    ``kk - 1 <= j < D`` from ``prev`` (``f[kk-1]``); ``W`` has ``D + 1`` entries,
    non-decreasing, ``c`` increases, ``kk >= 2``."""
    cdef Py_ssize_t D = c.shape[0]
    if kk < 2 or W.shape[0] != D + 1 or prev.shape[0] != D or g.shape[0] != D or opt.shape[0] != D:
        raise ValueError("dp_layer: needs kk >= 2 and prev, g, opt of size D, W of size D + 1")
    cdef int64_t[::1] hull = np.empty(max(D, 1), np.int64)
    cdef Py_ssize_t head = 0, tail = 0, j, i, a, b
    cdef double x, bl, ml, ba, ma, bb, mb
    cdef bint add
    with nogil:
        for j in range(kk - 1, D):
            i = j                                   # the line of start i = j joins
            bl = prev[i - 1]
            ml = -W[i]
            add = True
            while tail > head:
                b = hull[tail - 1]
                bb = prev[b - 1]
                mb = -W[b]
                if mb == ml:                        # equal slopes (zero weights): the lower one stays
                    if bb <= bl:
                        add = False
                        break
                    tail -= 1
                    continue
                if tail - head < 2:
                    break
                a = hull[tail - 2]
                ba = prev[a - 1]
                ma = -W[a]
                # b leaves the envelope if the new line crosses a no later than b does
                if (bl - ba) * (ma - mb) <= (bb - ba) * (ma - ml):
                    tail -= 1
                else:
                    break
            if add:
                hull[tail] = i
                tail += 1
            x = c[j]
            while tail - head >= 2 and \
                    prev[hull[head + 1] - 1] - W[hull[head + 1]] * x < prev[hull[head] - 1] - W[hull[head]] * x:
                head += 1
            i = hull[head]
            g[j] = c[j] * W[j + 1] + (prev[i - 1] - W[i] * x)
            opt[j] = i
