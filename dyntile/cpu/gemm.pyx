"""Cache-blocked GEMM, the BLIS/Goto design: ``C[m, n] = A[m, k] @ B[k, n]``.

The five loops around the micro-kernel, BLIS names::

    for jc in range(0, n, NC):                 # 5th loop: NC columns of B and C
        for pc in range(0, k, KC):             # 4th loop: KC-deep rank-kc update
            pack_b -> bp (KC x NC, NR-wide micro-panels; shared)
            for ic in range(0, m, MC):         # 3rd loop: MC rows of A and C
                pack_a -> ap (MC x KC, MR-tall micro-panels; per thread)
                macro_kernel:
                    for jr in range(0, nc_cur, NR):      # 2nd loop: B micro-panel in L1
                        for ir in range(0, mc_cur, MR):  # 1st loop: A micro-panels from L2
                            micro-kernel: MR x NR tile of C in registers

The micro-kernel broadcasts A and loads B in vectors (C is row-major in NumPy). The
table's ``jr_outer`` picks the macro-kernel's order per ISA: BLIS's (above; the
AVX2 rows, sized for a small L2) or the two inner loops swapped (the AVX-512 rows,
sized for a large L2): A's micro-panel stays in L1 and B's block streams from L2.

Vector products (m == 1 or n == 1) skip the five loops: ``gemv_one`` reads the
matrix once (``include/gemm_gemv.h``). Small row-major products (MR rows of A in L1,
B in L2; in a batch, at most ~1 Mflop each) skip packing: ``gemm_direct`` runs the
ISA's direct kernels (AVX-512) on A's and B's rows as they lie (BLIS's "sup" idea).

Block sizes and micro-kernels come from one table per ISA and dtype
(``include/gemm_blocking.h``, ``include/gemm_ukernel.h``), with AVX-512 cache blocks
of its own for AMD Zen 4 (:func:`cpu_tuning`); the ISA and the tuning are picked
once, at import, from a run-time CPU check (``_set_isa`` forces an ISA, and
``_set_cache_blocks`` other cache blocks, for tests and tuning sweeps).

Threads: one OpenMP parallel region per call, three ways to share the work:

- many small matrices in a batch: one matrix per thread;
- tall products (at least SLAB_ROWS rows per thread): row slabs. C's rows split into
  one or two slabs per thread, claimed from a shared counter; each slab is a whole
  one-thread product (its own packed B, no barrier). Packing B once per slab costs
  ~1/SLAB_ROWS of the flops, and no thread waits at a barrier for one that the host
  has descheduled, which is what a team does on a busy, shared machine;
- otherwise the team shares each matrix. Every thread walks the jc loop; the team
  packs up to KGROUP_MAX (4) KC blocks of B at once (threads claim groups of
  PACK_B_GROUP micro-panels from a shared counter), a barrier, then threads claim
  work items (an ic block through all those KC blocks, so each thread owns its rows
  of C) and pack A into their own buffers. Below SLAB_ROWS rows per thread, where a
  slab's own packing of B costs more than it saves, this keeps every core busy on short
  products.

Kernels take validated arrays: :func:`dyntile.linalg.matmul` checks shapes, dtypes,
strides and overlap, and chooses ``threads``; its common call (two 2-D float arrays)
is checked here, in C, by :func:`matmul_2d`, which hands anything else back.
"""
from cython.parallel cimport parallel, prange, threadid
from libc.stdint cimport int64_t, intptr_t, uintptr_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memset

cimport numpy as cnp
import numpy as np

cnp.import_array()

ctypedef fused floating:
    float
    double

cdef int _isa = dt_gemm_best_isa()
# CPUs with block sizes of their own (include/gemm_blocking.h); "generic": the table.
cdef dict _TUNINGS = {"generic": 0, "zen4": 1}
cdef int _tuning = 1 if dt_cpu_is_zen4() else 0
cdef dict _ISA_NAMES = {"ref": DT_ISA_REF, "avx2": DT_ISA_AVX2, "avx512": DT_ISA_AVX512}


cdef dt_gemm_blocksizes builtin_blocks(int tuning, int isa, int dtype) noexcept nogil:
    """The built-in block sizes of one (ISA, dtype) for a CPU tuning."""
    if tuning == 1 and isa == DT_ISA_AVX512:
        return dt_gemm_blocking_avx512_zen4[dtype]
    return dt_gemm_blocking[isa][dtype]


# The block sizes in use: this CPU's built-in ones, unless _set_cache_blocks changed them.
cdef dt_gemm_blocksizes _blocking[DT_ISA_COUNT][DT_DTYPE_COUNT]


cdef void reset_blocks() noexcept nogil:
    cdef int i, d
    for i in range(DT_ISA_COUNT):
        for d in range(DT_DTYPE_COUNT):
            _blocking[i][d] = builtin_blocks(_tuning, i, d)


reset_blocks()

# Per-matrix work (2*m*n*k flops) below which a batch runs one matrix per thread.
cdef int64_t SMALL_GEMM_FLOPS = 1 << 22
# Products whose A, B and C are row-major run without packing, on the ISA's direct
# kernels (where it has them; see gemm_direct), when MR rows of A fit in DIRECT_A_BYTES
# (L1), all of B in DIRECT_B_BYTES (L2) and the product is at most DIRECT_FLOPS.
cdef int64_t DIRECT_FLOPS = 1 << 27
cdef int64_t DIRECT_A_BYTES = 32 << 10
cdef int64_t DIRECT_B_BYTES = 512 << 10
# In a batch, only products of at most this many flops: a batch's operands stream
# from L3 and beyond, where the direct kernels' repeated reads of B cost more than
# packing, which reads each operand once.
cdef int64_t DIRECT_BATCH_FLOPS = 1 << 20
# KC blocks of B a team packs at once, and the most bytes such a group may take.
# Each ic block of a group re-reads the group's packed B from L3 once: 4 blocks
# keep that traffic small while a K of 1024 float32 still needs a single barrier.
cdef int64_t KGROUP_MAX = 4
cdef int64_t KGROUP_BYTES = 8 << 20
# B micro-panels packed per work item (threads claim groups of them), and how many
# rows ahead packing B prefetches its source.
cdef int64_t PACK_B_GROUP = 4
cdef int64_t PACK_B_AHEAD = 8
# A team splits the 3rd loop in at least this many ic blocks per thread (equal
# numbers of MR panels; more blocks adapt better to a core shared with another
# process, fewer re-read packed B less often).
cdef int64_t ITEMS_PER_THREAD = 4
# Row slabs: a product with at least SLAB_ROWS rows of C per thread runs as up to
# SLABS_PER_THREAD one-thread products per thread, on slabs of C's rows (two per
# thread adapt to a core shared with another process; more repack B more often).
cdef int64_t SLAB_ROWS = 384
cdef int64_t SLABS_PER_THREAD = 2


# ----------------------------------------------------------------------------- packing

cdef inline int64_t split_lo(int64_t count, int64_t part, int64_t parts) noexcept nogil:
    """First item of part `part` when `count` items are split evenly in `parts`."""
    return (count * part) // parts


cdef inline int64_t iabs(int64_t x) noexcept nogil:
    return -x if x < 0 else x


cdef inline int64_t ceil_div(int64_t a, int64_t b) noexcept nogil:
    return (a + b - 1) // b


cdef inline int64_t balanced_block(int64_t size, int64_t block_max, int64_t unit) noexcept nogil:
    """Block that splits `size` into equal blocks of at most `block_max` (a multiple of
    `unit`), rounded up to a multiple of `unit`: no thin last block."""
    if size <= 0:
        return block_max
    return min(block_max, ceil_div(ceil_div(size, ceil_div(size, block_max)), unit) * unit)



cdef void pack_a(int isa, int64_t mc_cur, int64_t kc_cur, const floating *a, int64_t rs_a,
                 int64_t cs_a, int mr, floating *ap) noexcept nogil:
    """Pack the mc_cur x kc_cur block at ``a`` into MR-tall micro-panels, k-major.

    ap[(i // mr) * mr * kc_cur + p * mr + i % mr] = a[i * rs_a + p * cs_a];
    rows past mc_cur in the last micro-panel are zero.
    """
    cdef int64_t ip, i0, p, ir, mr_cur
    cdef const floating *a_row
    cdef floating *ap_p
    cdef bint row_major = iabs(cs_a) < iabs(rs_a)
    cdef bint gather = (isa == DT_ISA_AVX512 and row_major and mr <= 16
                        and iabs(rs_a) * mr < (<int64_t> 1 << 31))
    cdef bint avx2_rows = isa == DT_ISA_AVX2 and cs_a == 1 and mr == 6
    for ip in range(ceil_div(mc_cur, mr)):
        i0 = ip * mr
        mr_cur = min(mr, mc_cur - i0)
        if avx2_rows:                # contiguous rows: in-register transposes, zero padding included
            if floating is float:
                dt_pack_a_panel_avx2_f32(mr_cur, kc_cur, a + i0 * rs_a, rs_a, ap)
            else:
                dt_pack_a_panel_avx2_f64(mr_cur, kc_cur, a + i0 * rs_a, rs_a, ap)
            ap += mr * kc_cur
            continue
        if gather:                   # transpose by masked gathers, zero padding included
            if floating is float:
                dt_pack_a_panel_avx512_f32(mr_cur, kc_cur, a + i0 * rs_a, rs_a, cs_a, mr, ap)
            else:
                dt_pack_a_panel_avx512_f64(mr_cur, kc_cur, a + i0 * rs_a, rs_a, cs_a, mr, ap)
            ap += mr * kc_cur
            continue
        if row_major:                # read along rows
            for ir in range(mr_cur):
                a_row = a + (i0 + ir) * rs_a
                for p in range(kc_cur):
                    ap[p * mr + ir] = a_row[p * cs_a]
        else:                        # columns are contiguous: read down columns
            for p in range(kc_cur):
                ap_p = ap + p * mr
                for ir in range(mr_cur):
                    ap_p[ir] = a[(i0 + ir) * rs_a + p * cs_a]
        if mr_cur < mr:
            for p in range(kc_cur):
                for ir in range(mr_cur, mr):
                    ap[p * mr + ir] = 0
        ap += mr * kc_cur


cdef void pack_b_panel(int64_t kc_cur, int64_t nr_cur, const floating *b, int64_t rs_b,
                       int64_t cs_b, int nr, floating *bp) noexcept nogil:
    """Pack one kc_cur x nr_cur micro-panel of B, k-major and NR wide.

    bp[p * nr + j] = b[p * rs_b + j * cs_b]; columns past nr_cur are zero.
    """
    cdef int64_t p, j
    if cs_b == 1:
        for p in range(kc_cur):
            memcpy(bp + p * nr, b + p * rs_b, nr_cur * sizeof(floating))
    elif iabs(rs_b) < iabs(cs_b):      # columns are contiguous (transposed B)
        for j in range(nr_cur):
            for p in range(kc_cur):
                bp[p * nr + j] = b[j * cs_b + p * rs_b]
    else:
        for p in range(kc_cur):
            for j in range(nr_cur):
                bp[p * nr + j] = b[p * rs_b + j * cs_b]
    if nr_cur < nr:
        for p in range(kc_cur):
            for j in range(nr_cur, nr):
                bp[p * nr + j] = 0


cdef void pack_b_panels(int64_t kc_cur, int64_t cols, const floating *b, int64_t rs_b,
                        int64_t cs_b, int nr, floating *bp) noexcept nogil:
    """Pack the kc_cur x cols block at ``b`` into ceil(cols / nr) consecutive micro-panels.

    Contiguous rows are read once each across the panels (one run of cols values per
    p), fetched PACK_B_AHEAD rows ahead: the rows lie a page or more apart, where the
    hardware prefetchers do not look.
    """
    cdef int64_t q, n_full = cols // nr
    if cs_b == 1:
        dt_pack_b_rows(kc_cur, n_full, <const char *> b, rs_b * sizeof(floating), nr * sizeof(floating),
                       <char *> bp, cols * sizeof(floating), PACK_B_AHEAD)
        if cols > n_full * nr:
            pack_b_panel(kc_cur, cols - n_full * nr, b + n_full * nr, rs_b, cs_b, nr,
                         bp + n_full * nr * kc_cur)
        return
    for q in range(ceil_div(cols, nr)):
        pack_b_panel(kc_cur, min(<int64_t> nr, cols - q * nr), b + q * nr * cs_b, rs_b, cs_b, nr,
                     bp + q * nr * kc_cur)


# ------------------------------------------------------------------------ macro-kernel

cdef inline void ukernel(int isa, int64_t kc, const floating *a, const floating *b,
                         floating *c, int64_t rs_c, int64_t cs_c, int beta) noexcept nogil:
    if floating is float:
        dt_gemm_ukernel_f32[isa](kc, a, b, c, rs_c, cs_c, beta)
    else:
        dt_gemm_ukernel_f64[isa](kc, a, b, c, rs_c, cs_c, beta)


cdef inline bint ukernel_rows(int isa, int64_t rows, int64_t kc, const floating *a,
                              const floating *b, floating *c, int64_t rs_c, int64_t cs_c,
                              int beta) noexcept nogil:
    """The first `rows` rows of the tile, if this ISA has that edge kernel (else False)."""
    if floating is float:
        if dt_gemm_ukernel_rows_f32[isa][rows] == NULL:
            return False
        dt_gemm_ukernel_rows_f32[isa][rows](kc, a, b, c, rs_c, cs_c, beta)
    else:
        if dt_gemm_ukernel_rows_f64[isa][rows] == NULL:
            return False
        dt_gemm_ukernel_rows_f64[isa][rows](kc, a, b, c, rs_c, cs_c, beta)
    return True


cdef inline bint ukernel_cols(int isa, int64_t rows, int64_t cols, int nr, int64_t kc,
                              const floating *a, const floating *b, floating *c, int64_t rs_c,
                              int beta) noexcept nogil:
    """The first `rows` rows and `cols` columns of the tile into a row-major C, if this
    ISA has that edge kernel (else False)."""
    cdef int nv = 0 if 2 * cols <= nr else 1
    if floating is float:
        if dt_gemm_ukernel_cols_f32[isa][rows][nv] == NULL:
            return False
        dt_gemm_ukernel_cols_f32[isa][rows][nv](kc, a, b, c, rs_c, <int> cols, beta)
    else:
        if dt_gemm_ukernel_cols_f64[isa][rows][nv] == NULL:
            return False
        dt_gemm_ukernel_cols_f64[isa][rows][nv](kc, a, b, c, rs_c, <int> cols, beta)
    return True


cdef inline void c_tile(const gemm_problem *g, int64_t i, int64_t j, int64_t mr_cur,
                        int64_t nr_cur, int64_t kc_cur, const floating *ap, const floating *bp,
                        floating *c, int beta) noexcept nogil:
    """C[i:i+mr_cur, j:j+nr_cur] (+)= A micro-panel at row i @ B micro-panel at column j.

    Full MR x NR tiles go straight to C, and so do full-width tiles of the edge
    micro-panel of A where the ISA has a rows kernel, and the tiles of the edge
    micro-panel of B of a row-major C where it has a cols kernel (masked stores; half
    the FMAs for a panel at most NR / 2 wide); other edge tiles go through a scratch
    tile.
    """
    cdef floating ct[DT_GEMM_MR_MAX * DT_GEMM_NR_MAX]
    cdef int64_t ii, jj, rs_c = g.rs_c, cs_c = g.cs_c
    cdef int mr = g.bs.mr, nr = g.bs.nr
    cdef floating *c_ij = c + i * rs_c + j * cs_c
    if mr_cur == mr and nr_cur == nr:
        ukernel(g.isa, kc_cur, ap + i * kc_cur, bp + j * kc_cur, c_ij, rs_c, cs_c, beta)
    elif nr_cur == nr and ukernel_rows(g.isa, mr_cur, kc_cur, ap + i * kc_cur,
                                       bp + j * kc_cur, c_ij, rs_c, cs_c, beta):
        pass
    elif nr_cur < nr and cs_c == 1 and ukernel_cols(g.isa, mr_cur, nr_cur, nr, kc_cur, ap + i * kc_cur,
                                                    bp + j * kc_cur, c_ij, rs_c, beta):
        pass
    else:
        ukernel(g.isa, kc_cur, ap + i * kc_cur, bp + j * kc_cur, ct, nr, 1, 0)
        for ii in range(mr_cur):
            for jj in range(nr_cur):
                if beta:
                    c_ij[ii * rs_c + jj * cs_c] += ct[ii * nr + jj]
                else:
                    c_ij[ii * rs_c + jj * cs_c] = ct[ii * nr + jj]


cdef void macro_kernel(const gemm_problem *g, int64_t mc_cur, int64_t nc_cur, int64_t kc_cur,
                       int64_t jp_lo, int64_t jp_hi, const floating *ap, const floating *bp,
                       floating *c, int beta) noexcept nogil:
    """C[0:mc_cur, jp_lo*NR : jp_hi*NR] (+)= packed A block @ packed B micro-panels,
    in the loop order of the block-size table (``jr_outer``)."""
    cdef int mr = g.bs.mr, nr = g.bs.nr
    cdef int64_t jp, j, ip, i
    if g.bs.jr_outer:
        for jp in range(jp_lo, jp_hi):          # 2nd loop: one NR micro-panel of B (L1)
            j = jp * nr
            for ip in range(ceil_div(mc_cur, mr)):  # 1st loop: MR micro-panels of A (L2)
                i = ip * mr
                c_tile(g, i, j, min(mr, mc_cur - i), min(nr, nc_cur - j), kc_cur, ap, bp, c, beta)
    else:
        for ip in range(ceil_div(mc_cur, mr)):  # 2nd loop: one MR micro-panel of A (L1)
            i = ip * mr
            for jp in range(jp_lo, jp_hi):      # 1st loop: NR micro-panels of B (L2)
                j = jp * nr
                c_tile(g, i, j, min(mr, mc_cur - i), min(nr, nc_cur - j), kc_cur, ap, bp, c, beta)


# -------------------------------------------------------------------------- five loops

cdef inline int64_t row_slabs(int64_t m, int threads) noexcept nogil:
    """Slabs of C's `m` rows a team of `threads` splits one product into (a multiple
    of `threads`, each at least SLAB_ROWS rows), or 0: the team shares the product."""
    if threads < 2 or m < threads * SLAB_ROWS:
        return 0
    return min(m // SLAB_ROWS, SLABS_PER_THREAD * threads) // threads * threads


cdef void gemm_row_slabs(const gemm_problem *g, const floating *a, const floating *b,
                         floating *c, const int64_t *a_off, const int64_t *b_off,
                         const int64_t *c_off, int64_t nbatch, int64_t n_slabs, floating *bp,
                         floating *ap, int64_t *counter) noexcept nogil:
    """Every product of the batch in `n_slabs` slabs of rows (equal numbers of MR
    panels), run by one thread of a team: it claims (product, slab) items from the
    shared `counter` and runs each as a one-thread product with its own `bp` and `ap`."""
    cdef gemm_problem slab = g[0]
    cdef int64_t m_panels = ceil_div(g.m, g.bs.mr), w, bi, s, r0
    w = dt_omp_fetch_inc(counter)
    while w < nbatch * n_slabs:
        bi = w // n_slabs
        s = w - bi * n_slabs
        r0 = split_lo(m_panels, s, n_slabs) * g.bs.mr
        slab.m = min(split_lo(m_panels, s + 1, n_slabs) * g.bs.mr, g.m) - r0
        gemm_blocked(&slab, a + a_off[bi] + r0 * g.rs_a, b + b_off[bi],
                     c + c_off[bi] + r0 * g.rs_c, bp, ap, NULL, 1, 0, 1)
        w = dt_omp_fetch_inc(counter)


cdef inline int64_t claim(int64_t *counter, int nt) noexcept nogil:
    """Next work item from `counter`: atomically for a team, plainly for one thread."""
    if nt > 1:
        return dt_omp_fetch_inc(counter)
    counter[0] += 1
    return counter[0] - 1


cdef void gemm_blocked(const gemm_problem *g, const floating *a, const floating *b,
                       floating *c, floating *bp, floating *ap, int64_t *counters,
                       int64_t kgroup, int tid, int nt) noexcept nogil:
    """C = A @ B for one matrix, run by every thread `tid` of a team of `nt`.

    `bp` (packed B, `kgroup` KC blocks deep) and `counters` (two zeros) are shared by
    the team; `ap` (packed A) is this thread's own. Loop order: jc (5th loop) ->
    a group of up to `kgroup` KC blocks of B packed together (4th loop) -> work
    items: an ic block of at most MC rows (3rd loop; blocks hold equal numbers of
    MR panels), or a slice of the jr loop when m is small -> each KC block of the
    group: pack A, macro-kernel. With kgroup == 1 this is BLIS's
    order; a team packs several KC blocks at once so that each thread owns its rows
    of C across them: one barrier per group instead of two per KC block.
    Threads claim groups of B micro-panels to pack, then items, from the counters (not
    a fixed split) so both cores stay busy when one is shared with another process;
    every C tile is still computed by one thread in one order, whatever the schedule.
    """
    cdef int mr = g.bs.mr, nr = g.bs.nr
    cdef int64_t m = g.m, n = g.n, k = g.k, kc = g.bs.kc
    cdef int64_t m_panels = ceil_div(m, mr), n_pb = ceil_div(k, kc)
    cdef int64_t n_ic, n_jrs, n_items, n_panels, n_groups, n_pack, bp_stride
    cdef int64_t jb, jc, pg, pb, pb_lo, pb_hi, pc, ic, nc_cur, kc_cur, mc_cur
    cdef int64_t q, qq, w, ib, js, key, last_key = -1
    cdef int64_t own[2]
    if nt == 1:                                           # ic blocks of at most MC rows
        counters = own
        counters[0] = counters[1] = 0
        n_ic = ceil_div(m_panels * mr, g.bs.mc)
        n_jrs = 1
    elif m_panels >= 2 * nt:                              # ic blocks, a few per thread
        n_ic = max(ceil_div(m_panels * mr, g.bs.mc), ITEMS_PER_THREAD * nt)
        n_ic = min(m_panels, ceil_div(n_ic, nt) * nt)    # a multiple of the team
        n_jrs = 1
    else:                                                 # few rows: slice the jr loop
        n_ic = ceil_div(m_panels * mr, g.bs.mc)
        n_jrs = 4 * nt
    n_items = n_ic * n_jrs
    for jb in range(ceil_div(n, g.bs.nc)):                # 5th loop
        jc = jb * g.bs.nc
        nc_cur = min(<int64_t> g.bs.nc, n - jc)
        n_panels = ceil_div(nc_cur, nr)
        bp_stride = n_panels * nr * kc                    # one packed KC block of B
        for pg in range(ceil_div(n_pb, kgroup)):          # 4th loop, kgroup blocks at a time
            pb_lo = pg * kgroup
            pb_hi = min(n_pb, pb_lo + kgroup)
            n_groups = ceil_div(n_panels, PACK_B_GROUP)
            n_pack = (pb_hi - pb_lo) * n_groups
            q = claim(&counters[0], nt)
            while q < n_pack:                             # pack B, a group of micro-panels at a time
                pb = pb_lo + q // n_groups
                qq = (q - (pb - pb_lo) * n_groups) * PACK_B_GROUP   # first micro-panel
                pc = pb * kc
                kc_cur = min(kc, k - pc)
                pack_b_panels(kc_cur, min(PACK_B_GROUP * nr, nc_cur - qq * nr),
                              b + pc * g.rs_b + (jc + qq * nr) * g.cs_b, g.rs_b, g.cs_b, nr,
                              bp + (pb - pb_lo) * bp_stride + qq * nr * kc_cur)
                q = claim(&counters[0], nt)
            if nt > 1:
                dt_omp_barrier()                          # bp complete, B claims over
            if tid == 0:
                counters[0] = 0
            w = claim(&counters[1], nt)
            while w < n_items:                            # 3rd loop, item by item
                ib = w // n_jrs                           # MR panels split evenly in n_ic
                js = w - ib * n_jrs
                ic = split_lo(m_panels, ib, n_ic) * mr
                mc_cur = min(split_lo(m_panels, ib + 1, n_ic) * mr, m) - ic
                for pb in range(pb_lo, pb_hi):
                    pc = pb * kc
                    kc_cur = min(kc, k - pc)
                    key = ib * n_pb + pb                  # A block in ap (same for every jc)
                    if key != last_key:
                        pack_a(g.isa, mc_cur, kc_cur, a + ic * g.rs_a + pc * g.cs_a,
                               g.rs_a, g.cs_a, mr, ap)
                        last_key = key
                    macro_kernel(g, mc_cur, nc_cur, kc_cur,
                                 split_lo(n_panels, js, n_jrs), split_lo(n_panels, js + 1, n_jrs),
                                 ap, bp + (pb - pb_lo) * bp_stride,
                                 c + ic * g.rs_c + jc * g.cs_c, pb > 0)
                w = claim(&counters[1], nt)
            if nt > 1:
                dt_omp_barrier()                          # everyone done with bp
            if tid == 0:
                counters[1] = 0


cdef void gemv_one(const gemm_problem *g, const floating *a, const floating *b, floating *c,
                   floating *scratch) noexcept nogil:
    """C = A @ B when m == 1 or n == 1: one matrix-vector product, no packing.

    n == 1: y[i] = A[i, :] . B[:, 0]; m == 1: y[j] = B[:, j] . A[0, :] (B read as
    its transpose). `y` is C itself when that row/column is contiguous, else `scratch`.
    """
    cdef int64_t i, p, incy
    cdef floating *y
    if g.n == 1:
        p, incy = g.m, g.rs_c
    else:
        p, incy = g.n, g.cs_c
    y = c if incy == 1 else scratch
    if floating is float:
        if g.n == 1:
            dt_gemv_f32[g.isa](g.m, g.k, a, g.rs_a, g.cs_a, b, g.rs_b, y)
        else:
            dt_gemv_f32[g.isa](g.n, g.k, b, g.cs_b, g.rs_b, a, g.cs_a, y)
    else:
        if g.n == 1:
            dt_gemv_f64[g.isa](g.m, g.k, a, g.rs_a, g.cs_a, b, g.rs_b, y)
        else:
            dt_gemv_f64[g.isa](g.n, g.k, b, g.cs_b, g.rs_b, a, g.cs_a, y)
    if y != c:
        for i in range(p):
            c[i * incy] = y[i]


cdef int gemv_batched(const gemm_problem *g, floating *a, floating *b, floating *c,
                      const int64_t[::1] a_off, const int64_t[::1] b_off,
                      const int64_t[::1] c_off, int threads) except -1:
    """C[i] = A[i] @ B[i] for m == 1 or n == 1; batch items split over threads."""
    cdef int64_t nbatch = a_off.shape[0], bi, p = max(g.m, g.n)
    cdef int tid
    cdef floating *scratch
    threads = max(1, min(<int64_t> threads, nbatch))
    scratch = <floating *> malloc(threads * p * sizeof(floating))
    if scratch == NULL:
        raise MemoryError("dyntile.matmul: could not allocate the GEMV scratch vector")
    try:
        with nogil:
            if threads == 1:
                for bi in range(nbatch):
                    gemv_one(g, a + a_off[bi], b + b_off[bi], c + c_off[bi], scratch)
            else:
                with parallel(num_threads=threads):
                    tid = threadid()
                    for bi in prange(nbatch, schedule="static"):
                        gemv_one(g, a + a_off[bi], b + b_off[bi], c + c_off[bi],
                                 scratch + tid * p)
    finally:
        free(scratch)
    return 0


cdef inline bint direct_ok(const gemm_problem *g, floating *dummy) noexcept nogil:
    """Whether one product of ``g`` runs on the direct kernels: small, row-major A, B
    and C, and an ISA that has them (``dummy`` only picks the dtype)."""
    if (g.cs_a != 1 or g.cs_b != 1 or g.cs_c != 1 or 2 * g.m * g.n * g.k > DIRECT_FLOPS
            or g.bs.mr * g.k * <int64_t> sizeof(floating) > DIRECT_A_BYTES
            or g.k * g.n * <int64_t> sizeof(floating) > DIRECT_B_BYTES):
        return False
    if floating is float:
        return dt_gemm_ukernel_direct_f32[g.isa][1] != NULL
    else:
        return dt_gemm_ukernel_direct_f64[g.isa][1] != NULL


cdef void gemm_direct(const gemm_problem *g, const floating *a, const floating *b,
                      floating *c) noexcept nogil:
    """C = A @ B for a small product (:func:`direct_ok`), no packing: each MR x NR tile
    of C from A's rows and B's rows as they lie (whole k at once; A's MR rows stay in
    L1 while the tiles of their row of C go by, B stays in L2). On such products
    packing A and B is a large share of the work; once A's rows outgrow L1 or B
    outgrows L2 the packed kernels win, which is what :func:`direct_ok` checks."""
    cdef int mr = g.bs.mr, nr = g.bs.nr
    cdef int64_t ip, jp, i, j, rows
    cdef int cols
    for ip in range(ceil_div(g.m, mr)):
        i = ip * mr
        rows = min(<int64_t> mr, g.m - i)
        for jp in range(ceil_div(g.n, nr)):
            j = jp * nr
            cols = <int> min(<int64_t> nr, g.n - j)
            if floating is float:
                dt_gemm_ukernel_direct_f32[g.isa][rows](g.k, a + i * g.rs_a, g.rs_a, b + j, g.rs_b,
                                                        c + i * g.rs_c + j, g.rs_c, cols)
            else:
                dt_gemm_ukernel_direct_f64[g.isa][rows](g.k, a + i * g.rs_a, g.rs_a, b + j, g.rs_b,
                                                        c + i * g.rs_c + j, g.rs_c, cols)


cdef void zero_c(const gemm_problem *g, floating *c) noexcept nogil:
    """C = 0 (the k == 0 product)."""
    cdef int64_t i, j
    for i in range(g.m):
        for j in range(g.n):
            c[i * g.rs_c + j * g.cs_c] = 0


# ------------------------------------------------------------------------------ driver

cdef inline void *align64(void *p) noexcept nogil:
    return <void *> ((<uintptr_t> p + 63) & ~(<uintptr_t> 63))


cdef struct packing_sizes:
    int64_t ap, bp          # elements of one packed A block and of the packed B (group)
    int64_t kgroup          # KC blocks of B a team packs at once
    int64_t n_slabs         # row slabs of each product (0: the team shares it)
    int64_t b_copies        # packed Bs: one per thread unless the team shares one


cdef packing_sizes packing_plan(const gemm_problem *g, int threads, bint team,
                                int64_t itemsize) noexcept nogil:
    """How `threads` share products (`team`: not one whole matrix per thread), and
    the packing buffers that takes: a thread's MC x KC block of A, and the KC x NC
    block of B (a team's group of up to KGROUP_MAX of them, at most KGROUP_BYTES;
    one block, per thread, for one matrix per thread or row slabs)."""
    cdef packing_sizes ps
    cdef int64_t kc = min(<int64_t> g.bs.kc, g.k)
    cdef int64_t b_block = ceil_div(min(<int64_t> g.bs.nc, g.n), g.bs.nr) * g.bs.nr * kc
    ps.n_slabs = row_slabs(g.m, threads) if team else 0
    team = team and ps.n_slabs == 0
    ps.b_copies = 1 if team or threads < 2 else threads
    ps.kgroup = 1
    if threads > 1 and team:
        ps.kgroup = max(1, min(min(ceil_div(g.k, g.bs.kc), KGROUP_MAX),
                               KGROUP_BYTES // max(1, b_block * itemsize)))
    ps.ap = ceil_div(min(<int64_t> g.bs.mc, g.m), g.bs.mr) * g.bs.mr * kc
    ps.bp = ps.kgroup * b_block
    return ps


cdef int gemm_batched(const gemm_problem *g, floating *a, floating *b, floating *c,
                      const int64_t[::1] a_off, const int64_t[::1] b_off,
                      const int64_t[::1] c_off, int threads) except -1:
    """C[i] = A[i] @ B[i] for every batch item (element offsets from a, b, c)."""
    cdef int64_t nbatch = a_off.shape[0], bi
    cdef int64_t flops = 2 * g.m * g.n * g.k          # of one product
    cdef bint per_thread_items = threads > 1 and nbatch >= threads and flops < SMALL_GEMM_FLOPS
    cdef packing_sizes ps = packing_plan(g, threads, not per_thread_items, sizeof(floating))
    cdef int64_t kgroup = ps.kgroup
    cdef int64_t ap_size = ps.ap + 16, bp_size = ps.bp + 16
    cdef int tid, nt
    cdef int64_t counters[2]
    cdef void *raw
    cdef floating *buf

    if g.m == 0 or g.n == 0 or nbatch == 0:
        return 0
    if g.k == 0:
        with nogil:
            for bi in range(nbatch):
                zero_c(g, c + c_off[bi])
        return 0
    if g.m == 1 or g.n == 1:
        return gemv_batched(g, a, b, c, a_off, b_off, c_off, threads)
    threads = max(1, threads)
    if direct_ok(g, a) and (nbatch == 1 or flops <= DIRECT_BATCH_FLOPS) and (threads == 1 or per_thread_items):
        # small products, one thread each: no packing, no buffers
        with nogil:
            if threads == 1:
                for bi in range(nbatch):
                    gemm_direct(g, a + a_off[bi], b + b_off[bi], c + c_off[bi])
            else:
                for bi in prange(nbatch, num_threads=threads, schedule="static"):
                    gemm_direct(g, a + a_off[bi], b + b_off[bi], c + c_off[bi])
        return 0
    counters[0] = counters[1] = 0
    raw = malloc((threads * ap_size + ps.b_copies * bp_size)
                 * sizeof(floating) + 64)
    if raw == NULL:
        raise MemoryError("dyntile.matmul: could not allocate the GEMM packing buffers")
    buf = <floating *> align64(raw)
    try:
        with nogil:
            if threads == 1:
                for bi in range(nbatch):
                    gemm_blocked(g, a + a_off[bi], b + b_off[bi], c + c_off[bi],
                                 buf + ap_size, buf, NULL, 1, 0, 1)
            elif ps.n_slabs:                        # slabs of rows, a one-thread product each
                with parallel(num_threads=threads):
                    tid = threadid()
                    gemm_row_slabs(g, a, b, c, &a_off[0], &b_off[0], &c_off[0], nbatch, ps.n_slabs,
                                   buf + threads * ap_size + tid * bp_size, buf + tid * ap_size,
                                   &counters[0])
            elif per_thread_items:                  # one whole matrix per thread
                with parallel(num_threads=threads):
                    tid = threadid()
                    for bi in prange(nbatch, schedule="static"):
                        gemm_blocked(g, a + a_off[bi], b + b_off[bi], c + c_off[bi],
                                     buf + threads * ap_size + tid * bp_size,
                                     buf + tid * ap_size, NULL, 1, 0, 1)
            else:                                   # the team shares each matrix
                with parallel(num_threads=threads):
                    tid = threadid()
                    nt = dt_omp_team_size()
                    for bi in range(nbatch):
                        gemm_blocked(g, a + a_off[bi], b + b_off[bi], c + c_off[bi],
                                     buf + threads * ap_size, buf + tid * ap_size, counters,
                                     kgroup, tid, nt)
    finally:
        free(raw)
    return 0


cdef gemm_problem make_problem(int isa, int dtype, int64_t m, int64_t n, int64_t k,
                               int64_t rs_a, int64_t cs_a, int64_t rs_b, int64_t cs_b,
                               int64_t rs_c, int64_t cs_c) noexcept nogil:
    """One product's problem: shape, element strides, the ISA's blocking with KC and NC
    balanced (k and n split into equal blocks of at most KC / NC)."""
    cdef gemm_problem g
    g.m, g.n, g.k = m, n, k
    g.rs_a, g.cs_a, g.rs_b, g.cs_b, g.rs_c, g.cs_c = rs_a, cs_a, rs_b, cs_b, rs_c, cs_c
    g.isa = isa
    g.bs = _blocking[isa][dtype]
    g.bs.kc = <int> balanced_block(k, g.bs.kc, 1)
    g.bs.nc = <int> balanced_block(n, g.bs.nc, g.bs.nr)
    return g


cdef gemm_problem problem_of(int dtype, int64_t m, int64_t n, int64_t k, tuple a_strides,
                             tuple b_strides, tuple c_strides):
    """:func:`make_problem` for the current ISA from (row, column) stride tuples."""
    return make_problem(_isa, dtype, m, n, k, a_strides[0], a_strides[1], b_strides[0], b_strides[1],
                        c_strides[0], c_strides[1])


# ------------------------------------------------------------------ the 2-D fast entry

cdef const int64_t[::1] _NO_OFFSET = np.zeros(1, np.int64)


cdef inline bint kernel_layout(cnp.ndarray x, Py_ssize_t itemsize) noexcept:
    """Aligned, native byte order, both strides whole elements (any sign)."""
    cdef cnp.npy_intp *st = cnp.PyArray_STRIDES(x)
    return (cnp.PyArray_ISALIGNED(x) and cnp.PyArray_ISNOTSWAPPED(x)
            and st[0] % itemsize == 0 and st[1] % itemsize == 0)


cdef inline void byte_bounds(cnp.ndarray x, uintptr_t *lo, uintptr_t *hi) noexcept:
    """[lo, hi): the bytes a 2-D array's elements can touch."""
    cdef cnp.npy_intp *d = cnp.PyArray_DIMS(x)
    cdef cnp.npy_intp *st = cnp.PyArray_STRIDES(x)
    cdef intptr_t low = 0, high = cnp.PyArray_ITEMSIZE(x), span
    cdef int i
    for i in range(2):
        span = (d[i] - 1) * st[i]
        if span < 0:
            low += span
        else:
            high += span
    lo[0] = <uintptr_t> cnp.PyArray_DATA(x) + low
    hi[0] = <uintptr_t> cnp.PyArray_DATA(x) + high


cdef inline bint disjoint(cnp.ndarray x, cnp.ndarray y) noexcept:
    cdef uintptr_t xl, xh, yl, yh
    if cnp.PyArray_SIZE(x) == 0 or cnp.PyArray_SIZE(y) == 0:
        return True
    byte_bounds(x, &xl, &xh)
    byte_bounds(y, &yl, &yh)
    return xh <= yl or yh <= xl


def matmul_2d(a, b, out, int threads, int64_t parallel_flops, check_threads):
    """``a @ b`` for the common call, checked and run without Python-level work:
    two 2-D NumPy arrays of one dtype, float32 or float64, aligned, native byte order,
    element strides; ``out`` None or such an array of shape (m, n), writeable and
    with bounds disjoint from ``a`` and ``b``. Returns C, or ``None`` for any other
    call (:func:`dyntile.linalg.matmul`'s general path then takes, or explains, it).

    ``threads``: the caller's cap (0: none); a product of under ``parallel_flops``
    runs on one thread, larger ones ask ``check_threads(threads or None, flops)``.
    The checks are in C because, done in Python, they cost as much as a small product.
    """
    if type(a) is not np.ndarray or type(b) is not np.ndarray:
        return None
    cdef cnp.ndarray A = a, B = b, C
    if cnp.PyArray_NDIM(A) != 2 or cnp.PyArray_NDIM(B) != 2:
        return None
    cdef int typenum = cnp.PyArray_TYPE(A)
    if cnp.PyArray_TYPE(B) != typenum or (typenum != cnp.NPY_FLOAT32 and typenum != cnp.NPY_FLOAT64):
        return None
    cdef Py_ssize_t isz = cnp.PyArray_ITEMSIZE(A)
    cdef int64_t m = cnp.PyArray_DIM(A, 0), k = cnp.PyArray_DIM(A, 1), n = cnp.PyArray_DIM(B, 1)
    if cnp.PyArray_DIM(B, 0) != k or not kernel_layout(A, isz) or not kernel_layout(B, isz):
        return None
    cdef cnp.npy_intp dims[2]
    if out is None:
        dims[0], dims[1] = m, n
        C = cnp.PyArray_EMPTY(2, dims, typenum, 0)
    else:
        if type(out) is not np.ndarray:
            return None
        C = out
        if (cnp.PyArray_NDIM(C) != 2 or cnp.PyArray_TYPE(C) != typenum or cnp.PyArray_DIM(C, 0) != m
                or cnp.PyArray_DIM(C, 1) != n or not kernel_layout(C, isz) or not cnp.PyArray_ISWRITEABLE(C)
                or not disjoint(C, A) or not disjoint(C, B)):
            return None
    cdef int64_t flops = 2 * m * n * k
    cdef int nthreads = 1
    if flops >= parallel_flops:
        nthreads = check_threads(threads if threads > 0 else None, flops)
    cdef cnp.npy_intp *sa = cnp.PyArray_STRIDES(A)
    cdef cnp.npy_intp *sb = cnp.PyArray_STRIDES(B)
    cdef cnp.npy_intp *sc = cnp.PyArray_STRIDES(C)
    cdef gemm_problem g = make_problem(_isa, DT_F32 if typenum == cnp.NPY_FLOAT32 else DT_F64, m, n, k,
                                       sa[0] // isz, sa[1] // isz, sb[0] // isz, sb[1] // isz,
                                       sc[0] // isz, sc[1] // isz)
    if typenum == cnp.NPY_FLOAT32:
        gemm_batched(&g, <float *> cnp.PyArray_DATA(A), <float *> cnp.PyArray_DATA(B),
                     <float *> cnp.PyArray_DATA(C), _NO_OFFSET, _NO_OFFSET, _NO_OFFSET, nthreads)
    else:
        gemm_batched(&g, <double *> cnp.PyArray_DATA(A), <double *> cnp.PyArray_DATA(B),
                     <double *> cnp.PyArray_DATA(C), _NO_OFFSET, _NO_OFFSET, _NO_OFFSET, nthreads)
    return C


def sgemm(cnp.ndarray a, cnp.ndarray b, cnp.ndarray c, const int64_t[::1] a_off,
          const int64_t[::1] b_off, const int64_t[::1] c_off, int64_t m, int64_t n, int64_t k,
          tuple a_strides, tuple b_strides, tuple c_strides, int threads=1):
    """float32 batched GEMM on validated arrays: ``C[i] = A[i] @ B[i]``.

    Matrix i of A starts at element ``a_off[i]`` of ``a``'s data and has element
    strides ``a_strides = (rs_a, cs_a)`` (likewise B, C); C must not overlap A or B.
    """
    cdef gemm_problem g = problem_of(DT_F32, m, n, k, a_strides, b_strides, c_strides)
    gemm_batched(&g, <float *> cnp.PyArray_DATA(a), <float *> cnp.PyArray_DATA(b),
                 <float *> cnp.PyArray_DATA(c), a_off, b_off, c_off, threads)


def dgemm(cnp.ndarray a, cnp.ndarray b, cnp.ndarray c, const int64_t[::1] a_off,
          const int64_t[::1] b_off, const int64_t[::1] c_off, int64_t m, int64_t n, int64_t k,
          tuple a_strides, tuple b_strides, tuple c_strides, int threads=1):
    """float64 batched GEMM on validated arrays; see :func:`sgemm`."""
    cdef gemm_problem g = problem_of(DT_F64, m, n, k, a_strides, b_strides, c_strides)
    gemm_batched(&g, <double *> cnp.PyArray_DATA(a), <double *> cnp.PyArray_DATA(b),
                 <double *> cnp.PyArray_DATA(c), a_off, b_off, c_off, threads)


# ---------------------------------------------------------------------- ISA and tables

def isa() -> str:
    """Name of the micro-kernel ISA in use: ``"ref"``, ``"avx2"`` or ``"avx512"``."""
    for name, value in _ISA_NAMES.items():
        if value == _isa:
            return name


def available_isas() -> list:
    """ISAs this build can run on this CPU, narrowest first."""
    return [name for name, value in _ISA_NAMES.items() if dt_gemm_isa_supported(value)]


def _set_isa(str name):
    """Force the micro-kernel ISA (tests and benchmarks); returns the previous name.

    ``None``-like use: pass ``"best"`` to go back to the run-time choice.
    """
    global _isa
    previous = isa()
    if name == "best":
        _isa = dt_gemm_best_isa()
        return previous
    if name not in _ISA_NAMES:
        raise ValueError(f"unknown GEMM ISA {name!r}; expected one of {sorted(_ISA_NAMES)} or 'best'")
    if not dt_gemm_isa_supported(_ISA_NAMES[name]):
        raise ValueError(f"GEMM ISA {name!r} is not supported on this CPU or build; "
                         f"available: {available_isas()}")
    _isa = _ISA_NAMES[name]
    return previous


#: largest MR and NR of the table: the edge-tile scratch of the macro-kernel
REGISTER_BLOCK_MAX = (DT_GEMM_MR_MAX, DT_GEMM_NR_MAX)
#: a team packs at most this many KC blocks of B at once, in at most this many bytes
KGROUP_LIMITS = (KGROUP_MAX, KGROUP_BYTES)
#: a product with at least this many rows per thread runs in row slabs, at most this many per thread
ROW_SLABS = (SLAB_ROWS, SLABS_PER_THREAD)


def _set_direct_flops(int64_t flops) -> int:
    """Products of at most ``flops`` (row-major, on an ISA with direct kernels, A's MR
    rows in L1 and B in L2) run without packing; 0 sends every product through the
    packed kernels (tests, tuning). Returns the previous limit."""
    global DIRECT_FLOPS
    previous = DIRECT_FLOPS
    DIRECT_FLOPS = max(<int64_t> 0, flops)
    return previous


def row_slab_count(int64_t m, int threads) -> int:
    """Slabs of rows an (m x any) product splits into on ``threads`` threads (0: the
    team shares the product); a multiple of ``threads``."""
    return row_slabs(m, threads)


def cpu_tuning() -> str:
    """Which built-in block sizes this CPU runs with: ``"zen4"`` (AMD Zen 4's AVX-512
    rows) or ``"generic"``."""
    return "zen4" if _tuning == 1 else "generic"


def blocking_table(tuning=None) -> dict:
    """The block-size table: ``{(isa, dtype): {"mr", "nr", "mc", "kc", "nc", "jr_outer"}}``,
    the one in use, or with ``tuning`` (``"generic"``, ``"zen4"``) that CPU's built-in one."""
    cdef dt_gemm_blocksizes bs
    cdef int t = -1
    if tuning is not None:
        if tuning not in _TUNINGS:
            raise ValueError(f"unknown GEMM tuning {tuning!r}; expected one of {sorted(_TUNINGS)} or None")
        t = _TUNINGS[tuning]
    table = {}
    for name, value in _ISA_NAMES.items():
        for dtype, d in (("float32", DT_F32), ("float64", DT_F64)):
            bs = _blocking[value][d] if t < 0 else builtin_blocks(t, value, d)
            table[name, dtype] = {"mr": bs.mr, "nr": bs.nr, "mc": bs.mc, "kc": bs.kc, "nc": bs.nc,
                                  "jr_outer": bool(bs.jr_outer)}
    return table


def _set_cache_blocks(str isa_name, str dtype, mc=None, kc=None, nc=None, jr_outer=None) -> dict:
    """Change the cache blocks of one (ISA, dtype) entry of the table in use, for
    tuning sweeps and tests (:func:`_reset_cache_blocks` restores the built-in ones).
    Returns the entry as it was. MC must stay a multiple of MR, NC of NR."""
    if isa_name not in _ISA_NAMES or dtype not in ("float32", "float64"):
        raise ValueError(f"expected an ISA of {sorted(_ISA_NAMES)} and float32 or float64, "
                         f"but got {isa_name!r}, {dtype!r}")
    cdef int i = _ISA_NAMES[isa_name], d = DT_F32 if dtype == "float32" else DT_F64
    cdef dt_gemm_blocksizes bs = _blocking[i][d]
    old = {"mc": bs.mc, "kc": bs.kc, "nc": bs.nc, "jr_outer": bool(bs.jr_outer)}
    mc = bs.mc if mc is None else mc
    kc = bs.kc if kc is None else kc
    nc = bs.nc if nc is None else nc
    if mc <= 0 or kc <= 0 or nc <= 0 or mc % bs.mr or nc % bs.nr:
        raise ValueError(f"cache blocks should be positive with MC a multiple of {bs.mr} and NC "
                         f"of {bs.nr}, but got MC={mc}, KC={kc}, NC={nc}")
    bs.mc, bs.kc, bs.nc = mc, kc, nc
    if jr_outer is not None:
        bs.jr_outer = bool(jr_outer)
    _blocking[i][d] = bs
    return old


def _reset_cache_blocks() -> None:
    """Back to this CPU's built-in block sizes."""
    reset_blocks()


def packing_buffer_bytes(str dtype, int64_t m, int64_t n, int64_t k, int threads=1) -> int:
    """Bytes of packing buffers one (unbatched) product allocates, for the current ISA:
    ``threads`` packed A blocks (MC x KC) and the packed B: one KC x NC block per
    thread when the product runs in row slabs, else one (times the KC blocks a
    team packs at once)."""
    cdef bint f32 = dtype == "float32"
    cdef gemm_problem g = make_problem(_isa, DT_F32 if f32 else DT_F64, m, n, k, k, 1, n, 1, n, 1)
    cdef packing_sizes ps = packing_plan(&g, threads, True, 4 if f32 else 8)
    return (threads * ps.ap + ps.b_copies * ps.bp) * (4 if f32 else 8)


def block_sizes(str dtype, int64_t m, int64_t n, int64_t k) -> dict:
    """The block sizes one product of that shape runs with (current ISA): the table's,
    with KC and NC balanced (k and n split into equal blocks of at most KC / NC)."""
    cdef gemm_problem g = make_problem(_isa, DT_F32 if dtype == "float32" else DT_F64, m, n, k, k, 1, n, 1, n, 1)
    return {"mr": g.bs.mr, "nr": g.bs.nr, "mc": g.bs.mc, "kc": g.bs.kc, "nc": g.bs.nc,
            "jr_outer": bool(g.bs.jr_outer)}

