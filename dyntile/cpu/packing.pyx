# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Best-fit bin packing over integer capacities: the tight loop behind
:func:`dyntile.planning.packing.pack_lengths`.

``best_fit(size, open_cap, n_full, max_cap)`` places items, in the given order,
into rows ("bins") of integer capacity. Each item goes to the open bin whose
remaining capacity is the *smallest* one that still holds it (best fit); ties go
to the bin that reached that capacity last (LIFO). When no bin holds it, the item
opens a new bin of capacity ``open_cap[i]``. Bins are numbered in creation order
and never close, so an item opens a new bin only when no earlier bin had room for
it: the property that lets a next-fit scan of the rows recover them exactly.

Remaining capacities live in a segment tree of counts over the values
``0..max_cap`` (``find_first_ge`` is O(log max_cap)), with one LIFO stack of bins
per capacity value: O(n log max_cap) for n items. Validation (sizes within
capacities, non-negative) is the caller's job.
"""
cimport numpy as cnp
from libc.stdint cimport int32_t, int64_t

import numpy as np

cnp.import_array()


cdef inline Py_ssize_t find_first_ge(int64_t[::1] tree, Py_ssize_t leaves, Py_ssize_t x) noexcept nogil:
    """Smallest capacity ``c >= x`` with ``tree[leaves + c] > 0``, or -1."""
    cdef Py_ssize_t k = leaves + x
    if tree[k] > 0:
        return x
    # climb: invariant -- every leaf in [x, end of k's range] is empty
    while True:
        if k == 1:
            return -1
        if (k & 1) == 0 and tree[k + 1] > 0:
            k = k + 1
            break
        k >>= 1
    # descend to the leftmost non-empty leaf of k
    while k < leaves:
        k = 2 * k
        if tree[k] == 0:
            k += 1
    return k - leaves


cdef inline void tree_add(int64_t[::1] tree, Py_ssize_t leaves, Py_ssize_t c, int64_t delta) noexcept nogil:
    cdef Py_ssize_t k = leaves + c
    while k >= 1:
        tree[k] += delta
        k >>= 1


def best_fit(const int64_t[::1] size, const int64_t[::1] open_cap, const int64_t[::1] n_full, int64_t max_cap):
    """Best-fit placement of items in order.

    ``size[i]``: tokens item ``i`` takes in its (last) bin; ``open_cap[i]``: capacity
    of the bin it opens when no open bin holds it (``size[i] <= open_cap[i] <= max_cap``);
    ``n_full[i] > 0`` marks a long sample split into chunks: it first fills
    ``n_full[i]`` new bins of capacity ``open_cap[i]`` completely (kept out of the
    search: nothing else goes there), then always opens one more bin for its last
    ``size[i]`` tokens, which takes other items afterwards like any bin.

    Returns ``(item_bin, bin_cap)``: int64 ``(n,)`` the bin of each item's last
    piece, and int64 ``(nbins,)`` the capacity of each bin, bins in creation order.
    """
    cdef Py_ssize_t n = size.shape[0], i, j, c, rem
    cdef Py_ssize_t leaves = 1
    cdef int64_t s, b, nb = 0, total_bins = n
    for i in range(n):
        total_bins += n_full[i]
    while leaves < max_cap + 1:
        leaves <<= 1
    tree_arr = np.zeros(2 * leaves, dtype=np.int64)
    head_arr = np.full(max_cap + 1, -1, dtype=np.int64)
    nxt_arr = np.full(max(total_bins, 1), -1, dtype=np.int64)
    cap_arr = np.zeros(max(total_bins, 1), dtype=np.int64)
    item_bin_arr = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] tree = tree_arr
    cdef int64_t[::1] head = head_arr
    cdef int64_t[::1] nxt = nxt_arr
    cdef int64_t[::1] bin_cap = cap_arr
    cdef int64_t[::1] item_bin = item_bin_arr
    with nogil:
        for i in range(n):
            s = size[i]
            if n_full[i] == 0:
                c = find_first_ge(tree, leaves, s)
                if c >= 0:
                    # pop the last bin that reached capacity c, push it at c - s
                    b = head[c]
                    head[c] = nxt[b]
                    tree_add(tree, leaves, c, -1)
                    rem = c - s
                    nxt[b] = head[rem]
                    head[rem] = b
                    tree_add(tree, leaves, rem, 1)
                    item_bin[i] = b
                    continue
            else:
                for j in range(n_full[i]):
                    bin_cap[nb] = open_cap[i]
                    nb += 1
            # open a new bin; loop invariant: no bin created so far had room for item i
            b = nb
            nb += 1
            bin_cap[b] = open_cap[i]
            rem = open_cap[i] - s
            nxt[b] = head[rem]
            head[rem] = b
            tree_add(tree, leaves, rem, 1)
            item_bin[i] = b
    return item_bin_arr, cap_arr[:nb].copy()


def group_by_bin(const int64_t[::1] item_bin, int64_t nbins):
    """Stable counting sort: item ids ordered by bin, placement order kept within a bin.

    Same result as ``np.argsort(item_bin, kind="stable")`` in O(n + nbins).
    """
    cdef Py_ssize_t n = item_bin.shape[0], i
    start_arr = np.zeros(nbins + 1, dtype=np.int64)
    out_arr = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] start = start_arr
    cdef int64_t[::1] out = out_arr
    with nogil:
        for i in range(n):
            start[item_bin[i] + 1] += 1
        for i in range(nbins):
            start[i + 1] += start[i]
        # loop invariant: start[b] = next free slot of bin b
        for i in range(n):
            out[start[item_bin[i]]] = i
            start[item_bin[i]] += 1
    return out_arr


def next_fit(const int64_t[::1] size, int64_t T):
    """``(rows, offsets, n_rows)`` of items placed in order into rows of ``T``: an item
    joins the current row when it fits, else opens the next one (every size <= T;
    the caller checks)."""
    cdef Py_ssize_t n = size.shape[0], i
    cdef int64_t row = -1, used = T + 1
    rows_arr = np.empty(n, dtype=np.int64)
    offs_arr = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] rows = rows_arr
    cdef int64_t[::1] offs = offs_arr
    with nogil:
        # loop invariant: used = tokens in row `row` so far (T + 1 before the first row)
        for i in range(n):
            if used + size[i] > T:
                row += 1
                used = 0
            rows[i] = row
            offs[i] = used
            used += size[i]
    return rows_arr, offs_arr, row + 1
