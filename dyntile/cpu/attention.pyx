# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Varlen attention kernels: exact softmax attention inside segments of a token stream.

``forward(q, k, v, starts, lens, causal, scale, threads)`` and ``backward(...)`` run the
C kernels of ``include/attention.h`` (flash-attention-2 tiles, online softmax, OpenMP
over work items balanced by cost) on NumPy arrays the API layer has checked:
``q`` ``[N, H, D]`` and ``k, v`` ``[N, Hkv, D]`` (``H`` a multiple of ``Hkv``: query head
``h`` reads key/value head ``h // (H // Hkv)``), float32 or float64 of one dtype with a
contiguous last axis,
``starts``/``lens`` int64 ``(S,)`` disjoint segments inside ``[0, N)``. Outputs are new
C-contiguous arrays, zero on tokens of no segment. Non-finite inputs propagate as in
softmax(scale Q K^T) V per query over the keys it sees (see ``attention.h``).
"""
cimport numpy as cnp
from libc.stdint cimport int64_t

import numpy as np

cnp.import_array()


cdef extern from "attention.h" nogil:
    ctypedef struct dt_attn_args:
        int64_t H, Hkv, D
        const void *q
        const void *k
        const void *v
        const void *o
        const void *dout
        const void *lse_in
        const void *dlse
        int64_t sq_t, sq_h, sk_t, sk_h, sv_t, sv_h, so_t, so_h, sd_t, sd_h
        void *out
        void *lse
        void *dq
        void *dk
        void *dv
        const int64_t *starts
        const int64_t *lens
        int64_t S
        int causal
        double scale
    int dt_attn_forward(const dt_attn_args *a, int f64, int threads)
    int dt_attn_backward(const dt_attn_args *a, int f64, int threads)
    const char *dt_attn_isa_name()
    int dt_attn_set_isa(int isa)

_ISAS = {"ref": 0, "avx2": 1, "avx512": 2}


def isa() -> str:
    """The instruction set the kernels run: ``"avx512"``, ``"avx2"`` or ``"ref"`` (portable C)."""
    return dt_attn_isa_name().decode()


def set_isa(name) -> None:
    """Run the kernels on ``name`` (one of ``"ref"``, ``"avx2"``, ``"avx512"``; ``None``:
    the best this CPU has): for tests of every code path on one machine."""
    code = -1 if name is None else _ISAS.get(name)
    if code is None:
        raise ValueError(f"isa should be one of {sorted(_ISAS)} or None, but got {name!r}")
    if dt_attn_set_isa(code) != 0:
        raise ValueError(f"this CPU cannot run {name!r} kernels (best: {isa()!r})")


cdef void set_strides(int64_t *t, int64_t *h, cnp.ndarray x):
    t[0] = x.strides[0] // x.itemsize
    h[0] = x.strides[1] // x.itemsize


def _outputs(shapes, dtype, cnp.ndarray starts, cnp.ndarray lens):
    """New arrays of ``shapes`` (each ``(N, ...)``), zero on the tokens of no segment only:
    the kernels write every segment token, so zeroing those too would write them twice."""
    outs = [np.empty(shape, dtype) for shape in shapes]
    N = shapes[0][0]
    order = np.argsort(starts, kind="stable")
    ends = starts[order] + lens[order]
    gap_lo = np.concatenate(([0], ends))
    gap_hi = np.concatenate((starts[order], [N]))
    for lo, hi in zip(gap_lo.tolist(), gap_hi.tolist()):
        if hi > lo:
            for x in outs:
                x[lo:hi] = 0
    return outs


cdef check(int rc):
    if rc == -1:
        raise MemoryError("varlen attention: no memory for the kernels' tile buffers")
    if rc != 0:
        raise ValueError(
            "varlen attention: a size is past what the CPU kernels hold (segments of at most "
            "2**30 tokens, head dims of at most 2**24, item counts within int64)"
        )


cdef void set_segments(dt_attn_args *a, cnp.ndarray starts, cnp.ndarray lens):
    a.starts = <const int64_t *>cnp.PyArray_DATA(starts)
    a.lens = <const int64_t *>cnp.PyArray_DATA(lens)
    a.S = starts.shape[0]


def forward(cnp.ndarray q, cnp.ndarray k, cnp.ndarray v, cnp.ndarray starts, cnp.ndarray lens,
            bint causal, double scale, int threads):
    """``(out [N, H, D], lse [N, H])`` of segment attention; zero on padding tokens."""
    cdef dt_attn_args a
    cdef int f64 = q.dtype == np.float64
    cdef cnp.ndarray out, lse
    cdef int rc
    out, lse = _outputs([(q.shape[0], q.shape[1], q.shape[2]), (q.shape[0], q.shape[1])], q.dtype, starts, lens)
    a.H, a.Hkv, a.D = q.shape[1], k.shape[1], q.shape[2]
    a.q, a.k, a.v = cnp.PyArray_DATA(q), cnp.PyArray_DATA(k), cnp.PyArray_DATA(v)
    set_strides(&a.sq_t, &a.sq_h, q)
    set_strides(&a.sk_t, &a.sk_h, k)
    set_strides(&a.sv_t, &a.sv_h, v)
    a.out, a.lse = cnp.PyArray_DATA(out), cnp.PyArray_DATA(lse)
    set_segments(&a, starts, lens)
    a.causal, a.scale = causal, scale
    with nogil:
        rc = dt_attn_forward(&a, f64, threads)
    check(rc)
    return out, lse


def backward(cnp.ndarray dout, cnp.ndarray q, cnp.ndarray k, cnp.ndarray v, cnp.ndarray out,
             cnp.ndarray lse, cnp.ndarray starts, cnp.ndarray lens, bint causal, double scale, int threads,
             cnp.ndarray dlse=None):
    """``(dq [N, H, D], dk [N, Hkv, D], dv [N, Hkv, D])``: the gradients of ``sum(out * dout)`` (plus
    ``sum(lse * dlse)`` with ``dlse``, C-contiguous ``[N, H]`` of q's dtype); ``lse``
    (C-contiguous ``[N, H]``) is the forward pass's."""
    cdef dt_attn_args a
    cdef int f64 = q.dtype == np.float64
    shape = (q.shape[0], q.shape[1], q.shape[2])
    kv_shape = (k.shape[0], k.shape[1], k.shape[2])
    cdef cnp.ndarray dq, dk, dv
    cdef int rc
    dq, dk, dv = _outputs([shape, kv_shape, kv_shape], q.dtype, starts, lens)
    a.H, a.Hkv, a.D = q.shape[1], k.shape[1], q.shape[2]
    a.q, a.k, a.v = cnp.PyArray_DATA(q), cnp.PyArray_DATA(k), cnp.PyArray_DATA(v)
    a.o, a.dout, a.lse_in = cnp.PyArray_DATA(out), cnp.PyArray_DATA(dout), cnp.PyArray_DATA(lse)
    a.dlse = NULL if dlse is None else cnp.PyArray_DATA(dlse)
    set_strides(&a.sq_t, &a.sq_h, q)
    set_strides(&a.sk_t, &a.sk_h, k)
    set_strides(&a.sv_t, &a.sv_h, v)
    set_strides(&a.so_t, &a.so_h, out)
    set_strides(&a.sd_t, &a.sd_h, dout)
    a.dq, a.dk, a.dv = cnp.PyArray_DATA(dq), cnp.PyArray_DATA(dk), cnp.PyArray_DATA(dv)
    set_segments(&a, starts, lens)
    a.causal, a.scale = causal, scale
    with nogil:
        rc = dt_attn_backward(&a, f64, threads)
    check(rc)
    return dq, dk, dv
