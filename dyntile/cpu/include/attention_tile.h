/* attention_tile.h: the tile routines of varlen attention, for one element type and ISA.
 *
 * Included once per (type, ISA) by attention_isas.h with these macros set:
 *   REAL     float or double          IREAL   the signed integer of the same width
 *   VBYTES   bytes of one vector      SUF     a name suffix (f32_avx512, ...)
 *   MR       rows of a register tile: MR x 4 accumulators and a broadcast must fit the
 *            ISA's vector registers (4 with 32 of them, 3 with 16)
 *   TARGET   the function attribute that enables the ISA (empty for portable C)
 *   EXP_*    the constants of the vector exp (see vexp)
 * and VMAX, VMIN, VSET1 where the ISA has one instruction for them. It undefines the
 * ISA's macros (VBYTES, MR, SUF, TARGET, VMAX, VMIN, VSET1) at its end.
 *
 * Vectors are GCC vector extensions (vector_size), so one source compiles to AVX-512,
 * AVX2+FMA or plain SSE2/NEON code under the function's target attribute; nothing is
 * compiled with -march=native. Every routine is always_inline into the TARGET work-item
 * functions at the bottom, which are the only ones called across the ISA boundary.
 *
 * Tiles: BQ query rows by BK keys, BQ = BK = 4 vectors. Q, dO, K and V rows are copied
 * into thread-local buffers of DP = D rounded up to a vector (zero padded), and K and V
 * also transposed (KT, VT: D rows of BK), so every product is a broadcast-times-vector
 * FMA loop on 4 x 4 register tiles and no score matrix larger than BQ x BK exists.
 */

#define AT_CAT2(a, b) a##_##b
#define AT_CAT(a, b) AT_CAT2(a, b)
#define N_(x) AT_CAT(x, SUF)
#define LANES ((int)(VBYTES / sizeof(REAL)))
#define BT (4 * LANES)
#define AT_INLINE static inline __attribute__((always_inline)) TARGET

typedef REAL N_(vec) __attribute__((vector_size(VBYTES)));
typedef IREAL N_(ivec) __attribute__((vector_size(VBYTES)));
#define VEC N_(vec)
#define IVEC N_(ivec)

AT_INLINE VEC N_(vload)(const REAL *p) { VEC v; __builtin_memcpy(&v, p, sizeof v); return v; }
AT_INLINE void N_(vstore)(REAL *p, VEC v) { __builtin_memcpy(p, &v, sizeof v); }
/* every lane x: one broadcast through VSET1 where the ISA has it */
AT_INLINE VEC N_(vset)(REAL x)
{
#ifdef VSET1
    return (VEC)VSET1(x);
#else
    return (VEC){0} + x;
#endif
}
AT_INLINE VEC N_(vselect)(IVEC mask, VEC a, VEC b)
{
    return (VEC)(((IVEC)a & mask) | ((IVEC)b & ~mask));
}
/* lane-wise max and min: one instruction through VMAX/VMIN where the ISA has it; both
   return b when a lane of either is NaN (the x86 rule, kept by the portable select) */
AT_INLINE VEC N_(vmax)(VEC a, VEC b)
{
#ifdef VMAX
    return (VEC)VMAX(a, b);
#else
    return N_(vselect)(a > b, a, b);
#endif
}
AT_INLINE VEC N_(vmin)(VEC a, VEC b)
{
#ifdef VMIN
    return (VEC)VMIN(a, b);
#else
    return N_(vselect)(a < b, a, b);
#endif
}

/* 2^x for x <= 0: x = n + r with n = round(x) (the round-to-nearest magic constant) and
   |r| <= 1/2, 2^r by its Taylor polynomial, 2^n from its exponent bits; relative error
   near 1 ulp. Scores are kept in base 2 (Q is scaled by log2(e)), so this is the
   softmax's only transcendental. x is clamped at EXP_LO - 1, whose 2^n has exponent bits
   0: below EXP_LO - 1/2 (under the smallest normal), -inf included, 2^x is exactly 0, as
   exp(-inf) is in the reference. The clamp is max(bound, x), which returns x when x is
   NaN, so NaN propagates. */
AT_INLINE VEC N_(vexp2)(VEC x)
{
    const VEC magic = N_(vset)(EXP_MAGIC);
    x = N_(vmax)(N_(vset)(EXP_LO - 1), x);
    VEC y = x + magic;
    VEC r = x - (y - magic);
    VEC p = N_(vset)((REAL)EXP_C_LAST);
    EXP_POLY(p, r);
    IVEC e = ((IVEC)y - (IVEC)magic + EXP_BIAS) << EXP_SHIFT;
    return p * (VEC)e;
}

/* IVEC of lane indices j0, j0 + 1, ... */
AT_INLINE IVEC N_(lane_index)(int j0)
{
    IVEC v;
    for (int u = 0; u < LANES; u++) v[u] = (IREAL)(j0 + u);
    return v;
}

/* C[r][0..NV vectors) = sum_d A[r][d] * Bt[d][..] for R rows: one register tile */
AT_INLINE void N_(mk_nt)(REAL *restrict C, const REAL *restrict A, int lda, const REAL *restrict Bt,
                         int ldb, int D, const int R, const int NV)
{
    VEC c[4][4];
    for (int r = 0; r < R; r++)
        for (int v = 0; v < NV; v++) c[r][v] = N_(vset)(0);
    for (int d = 0; d < D; d++) {
        VEC b[4];
        for (int v = 0; v < NV; v++) b[v] = N_(vload)(Bt + (int64_t)d * ldb + v * LANES);
        for (int r = 0; r < R; r++) {
            VEC a = N_(vset)(A[(int64_t)r * lda + d]);
            for (int v = 0; v < NV; v++) c[r][v] += a * b[v];
        }
    }
    for (int r = 0; r < R; r++)
        for (int v = 0; v < NV; v++) N_(vstore)(C + (int64_t)r * BT + v * LANES, c[r][v]);
}

/* the vectors of columns a block of R rows from row i needs: row r uses columns
   < lim0 + r (all nv vectors when lim0 is past them) */
AT_INLINE int N_(block_vectors)(int nv, int lim0, int i, int R)
{
    int need = lim0 + i + R - 1;
    if (need >= nv * LANES) return nv;
    return need <= 0 ? 0 : (need + LANES - 1) / LANES;
}

#define AT_NT_ROWS(R)                                                                          \
    {                                                                                          \
        REAL *c_ = C + (int64_t)i * BT;                                                        \
        const REAL *a_ = A + (int64_t)i * lda;                                                 \
        switch (N_(block_vectors)(nv, lim0, i, R)) {                                           \
        case 0: break;                                                                         \
        case 1: N_(mk_nt)(c_, a_, lda, Bt, ldb, D, R, 1); break;                               \
        case 2: N_(mk_nt)(c_, a_, lda, Bt, ldb, D, R, 2); break;                               \
        case 3: N_(mk_nt)(c_, a_, lda, Bt, ldb, D, R, 3); break;                               \
        default: N_(mk_nt)(c_, a_, lda, Bt, ldb, D, R, 4); break;                              \
        }                                                                                      \
    }

/* BLOCK(R) over rows i = 0 .. nr - 1 in blocks of MR rows, then a block of the 1 to 3 rows
   left: R is a constant at each use, so every register tile is unrolled */
#define AT_ROW_BLOCKS(BLOCK)                                                                   \
    for (; i + MR <= nr; i += MR) BLOCK(MR)                                                    \
    switch (nr - i) {                                                                          \
    case 3: BLOCK(3) break;                                                                    \
    case 2: BLOCK(2) break;                                                                    \
    case 1: BLOCK(1) break;                                                                    \
    default: break;                                                                            \
    }

/* C (nr x BT) = A (nr x D, row stride lda) times Bt (D x nv vectors, row stride ldb);
   row r needs only its first lim0 + r columns (causal): the vectors past them are skipped
   and left unwritten */
AT_INLINE void N_(gemm_nt)(REAL *C, const REAL *A, int lda, const REAL *Bt, int ldb, int nr, int D, int nv,
                           int lim0)
{
    int i = 0;
    AT_ROW_BLOCKS(AT_NT_ROWS)
}

/* C[r][v..] += sum_{p in [p0, p1)} A[r][p] * B[p][v..] for R rows and NV vectors of columns;
   A[r][p] is A[r * lda + p * ldp] (ldp = 1: A as it lies; lda = 1: A transposed) */
AT_INLINE void N_(mk_acc)(REAL *restrict C, int ldc, const REAL *restrict A, int lda, int ldp,
                          const REAL *restrict B, int ldb, int p0, int p1, const int R, const int NV)
{
    VEC c[4][4];
    for (int r = 0; r < R; r++)
        for (int v = 0; v < NV; v++) c[r][v] = N_(vload)(C + (int64_t)r * ldc + v * LANES);
    for (int p = p0; p < p1; p++) {
        VEC b[4];
        for (int v = 0; v < NV; v++) b[v] = N_(vload)(B + (int64_t)p * ldb + v * LANES);
        for (int r = 0; r < R; r++) {
            VEC a = N_(vset)(A[(int64_t)r * lda + (int64_t)p * ldp]);
            for (int v = 0; v < NV; v++) c[r][v] += a * b[v];
        }
    }
    for (int r = 0; r < R; r++)
        for (int v = 0; v < NV; v++) N_(vstore)(C + (int64_t)r * ldc + v * LANES, c[r][v]);
}

#define AT_ACC_COLS(R)                                                                        \
    {                                                                                         \
        int p0_ = lo0 + i < 0 ? 0 : lo0 + i, p1_ = hi0 + i + R - 1;                           \
        if (p1_ > np) p1_ = np;                                                               \
        for (int v0 = 0; v0 < nvec && p0_ < p1_; v0 += 4) {                                   \
            REAL *c_ = C + (int64_t)i * ldc + v0 * LANES;                                     \
            const REAL *a_ = A + (int64_t)i * lda, *b_ = B + v0 * LANES;                      \
            switch (nvec - v0) {                                                              \
            case 1: N_(mk_acc)(c_, ldc, a_, lda, ldp, b_, ldb, p0_, p1_, R, 1); break;             \
            case 2: N_(mk_acc)(c_, ldc, a_, lda, ldp, b_, ldb, p0_, p1_, R, 2); break;             \
            case 3: N_(mk_acc)(c_, ldc, a_, lda, ldp, b_, ldb, p0_, p1_, R, 3); break;             \
            default: N_(mk_acc)(c_, ldc, a_, lda, ldp, b_, ldb, p0_, p1_, R, 4); break;            \
            }                                                                                 \
        }                                                                                     \
    }

/* C (nr x nvec vectors, row stride ldc) += A (nr x np, strides lda, ldp) times B (np x ..);
   row r takes the terms p in [lo0 + r, hi0 + r) only (A is zero outside: causal blocks),
   lo0 <= -nr and hi0 >= np when every term counts. A block of MR rows shares one range,
   the union of its rows', so a row may add 0 * B[p] for a p outside its own: exact
   while B is finite. With `exact` (B may hold inf or NaN, where 0 * B[p] is NaN) each
   row takes its own range only. */
AT_INLINE void N_(gemm_acc)(REAL *C, int ldc, const REAL *A, int lda, int ldp, const REAL *B, int ldb,
                            int nr, int np, int nvec, int lo0, int hi0, int exact)
{
    int i = 0;
    if (exact) {
        for (; i < nr; i++) AT_ACC_COLS(1)
        return;
    }
    AT_ROW_BLOCKS(AT_ACC_COLS)
}

/* rows [t0, t0 + n) of head h of X (token stride st, head stride sh) into dst (n x DP),
   times mul, zero padded past D; returns whether a value loaded is inf or NaN */
AT_INLINE int N_(load_rows)(REAL *dst, int DP, const REAL *X, int64_t st, int64_t sh,
                            int64_t t0, int64_t n, int64_t h, int D, REAL mul)
{
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        const REAL *x = X + (t0 + i) * st + h * sh;
        REAL *o = dst + i * DP;
        for (int d = 0; d < D; d++) {
            const REAL y = x[d] * mul;
            o[d] = y;
            bad |= y - y != 0;   /* NaN for inf and NaN only */
        }
        for (int d = D; d < DP; d++) o[d] = 0;
    }
    return bad;
}

/* the same rows transposed: dst[d][i] (D rows of ldd), zero for i in [n, ldd) */
AT_INLINE void N_(load_cols)(REAL *dst, int64_t ldd, const REAL *X, int64_t st, int64_t sh, int64_t t0,
                             int64_t n, int64_t h, int D)
{
    for (int d = 0; d < D; d++)
        for (int64_t i = n; i < ldd; i++) dst[d * ldd + i] = 0;
    for (int64_t i = 0; i < n; i++) {
        const REAL *x = X + (t0 + i) * st + h * sh;
        for (int d = 0; d < D; d++) dst[d * ldd + i] = x[d];
    }
}

/* keys of row i (query q0 + i) that are allowed in a key tile starting at k0 with nk keys */
AT_INLINE int N_(allowed)(int causal, int64_t q0, int i, int64_t k0, int nk)
{
    if (!causal) return nk;
    int64_t lim = q0 + i - k0 + 1;
    return lim < 0 ? 0 : (lim < nk ? (int)lim : nk);
}

/* Thread-local buffers of one work item, over a segment of at most `rows` tokens
   (rounded up to tiles): see dt_attn_scratch_elems for the total. */
typedef struct {
    REAL *qs, *dos, *ks, *kt, *vt, *vs, *dq, *tile, *acc_k, *acc_v, *s, *p, *lse, *delta;
} N_(bufs);

AT_INLINE void N_(carve)(N_(bufs) *b, REAL *w, int DP, int64_t rows)
{
    int64_t seg = (rows + BT) * DP, tile = (int64_t)BT * DP;
    b->qs = w; b->dos = w + seg; b->ks = w + 2 * seg; b->kt = w + 3 * seg; b->vt = w + 4 * seg;
    b->vs = w + 5 * seg; b->dq = w + 6 * seg;
    w += 7 * seg;
    b->tile = w; b->acc_k = w + tile; b->acc_v = w + 2 * tile;
    w += 3 * tile;
    b->s = w; b->p = w + BT * BT;
    w += 2 * BT * BT;
    b->lse = w; b->delta = w + rows;
}

/* Forward of the query tiles [qa, qb) of one segment and query head h: K (transposed)
   and V of the keys they see, from h's key/value head, are laid out once, then each
   query tile runs an online softmax over the key tiles. */
static TARGET void N_(fwd_item)(const dt_attn_args *a, void *work_, int64_t rows, int64_t seg, int64_t h,
                                int64_t qa, int64_t qb)
{
    const int D = (int)a->D, DP = (D + LANES - 1) / LANES * LANES, nvd = DP / LANES;
    const int64_t L = a->lens[seg], base = a->starts[seg];
    const REAL *Q = (const REAL *)a->q, *K = (const REAL *)a->k, *V = (const REAL *)a->v;
    REAL *O = (REAL *)a->out, *LSE = (REAL *)a->lse;
    N_(bufs) b;
    N_(carve)(&b, (REAL *)work_, DP, rows);
    const int64_t qend = qb * BT < L ? qb * BT : L, keys = a->causal ? qend : L;
    const int64_t ldk = (keys + BT - 1) / BT * BT, hk = h / (a->H / a->Hkv);
    N_(load_cols)(b.kt, ldk, K, a->sk_t, a->sk_h, base, keys, hk, D);
    /* a non-finite value of V must not reach the queries that do not see it */
    const int exact = N_(load_rows)(b.vs, DP, V, a->sv_t, a->sv_h, base, keys, hk, D, 1);
    REAL m[BT], l[BT];
    REAL *ot = b.acc_k;
    for (int64_t qt = qa; qt < qb; qt++) {
        const int64_t q0 = qt * BT;
        const int nq = (int)(L - q0 < BT ? L - q0 : BT);
        N_(load_rows)(b.tile, DP, Q, a->sq_t, a->sq_h, base + q0, nq, h, D, (REAL)(a->scale * AT_LOG2E));
        for (int i = 0; i < nq; i++) { m[i] = -(REAL)INFINITY; l[i] = 0; }
        for (int64_t e = 0; e < (int64_t)nq * DP; e++) ot[e] = 0;
        const int64_t kend = a->causal ? q0 + nq : L;
        for (int64_t k0 = 0; k0 < kend; k0 += BT) {
            const int nk = (int)(kend - k0 < BT ? kend - k0 : BT), nv = (nk + LANES - 1) / LANES;
            const int lim0 = a->causal ? (int)(q0 - k0 + 1) : BT;
            N_(gemm_nt)(b.s, b.tile, DP, b.kt + k0, (int)ldk, nq, D, nv, lim0);
            for (int i = 0; i < nq; i++) {
                const int lim = N_(allowed)(a->causal, q0, i, k0, nk);
                REAL *si = b.s + (int64_t)i * BT;
                if (lim == 0) { for (int j = 0; j < nv * LANES; j++) si[j] = 0; continue; }
                const VEC ninf = N_(vset)(-(REAL)INFINITY);
                const IVEC limv = N_(lane_index)(0) * 0 + (IREAL)lim;
                const int nvi = (lim + LANES - 1) / LANES, full = lim == nvi * LANES;
                VEC mx = ninf;
                for (int v = 0; v < nvi; v++) {
                    VEC sv = N_(vload)(si + v * LANES);
                    if (!full) sv = N_(vselect)(N_(lane_index)(v * LANES) < limv, sv, ninf);
                    mx = N_(vmax)(mx, sv);
                }
                REAL mnew = m[i];
                for (int u = 0; u < LANES; u++) mnew = mx[u] > mnew ? mx[u] : mnew;
                const REAL alpha = m[i] == mnew ? 1 : m[i] == -(REAL)INFINITY ? 0 : (REAL)exp2((double)(m[i] - mnew));
                /* while every score so far is -inf, they weigh 0 against any later finite one
                   (exp(-inf - m)); a row of -inf only ends with l = 0. A NaN score does not
                   move the max (comparisons drop it) but makes its p, so l and O, NaN. */
                const VEC mv = N_(vset)(mnew == -(REAL)INFINITY ? 0 : mnew);
                VEC sum = N_(vset)(0);
                for (int v = 0; v < nvi; v++) {
                    VEC pv = N_(vexp2)(N_(vload)(si + v * LANES) - mv);
                    if (!full) pv = N_(vselect)(N_(lane_index)(v * LANES) < limv, pv, N_(vset)(0));
                    N_(vstore)(si + v * LANES, pv);
                    sum += pv;
                }
                for (int v = nvi; v < nv; v++) N_(vstore)(si + v * LANES, N_(vset)(0));
                REAL ps = 0;
                for (int u = 0; u < LANES; u++) ps += sum[u];
                l[i] = l[i] * alpha + ps;
                m[i] = mnew;
                if (alpha != 1) {
                    REAL *oi = ot + (int64_t)i * DP;
                    for (int d = 0; d < DP; d++) oi[d] *= alpha;
                }
            }
            N_(gemm_acc)(ot, DP, b.s, BT, 1, b.vs + k0 * DP, DP, nq, nk, nvd, -BT, lim0, exact);
        }
        for (int i = 0; i < nq; i++) {
            const int64_t t = base + q0 + i;
            REAL *o = O + (t * a->H + h) * D, *oi = ot + (int64_t)i * DP;
            /* l = 0: every score -inf, the reference's 0 / 0; l NaN: a NaN score */
            const REAL inv = l[i] == 0 ? (REAL)NAN : 1 / l[i];
            for (int d = 0; d < D; d++) o[d] = oi[d] * inv;
            LSE[t * a->H + h] = l[i] == 0 ? (REAL)NAN : (REAL)((m[i] + log2((double)l[i])) * AT_LN2);
        }
    }
}

/* Backward of query head h (key/value head hk) over key tiles [ka, kb) and query tiles
   [qa, qb) of one segment: see bwd_item. `first`: the group's first head, which lays out
   K and V (*exact_k: K holds inf or NaN) and writes dK, dV; a later head adds to them. */
AT_INLINE void N_(bwd_head)(const dt_attn_args *a, N_(bufs) b, int64_t seg, int64_t h, int64_t hk, int64_t ka,
                            int64_t kb, int64_t qa, int64_t qb, int with_dkdv, int with_dq, int first, int *exact_k)
{
    const int D = (int)a->D, DP = (D + LANES - 1) / LANES * LANES, nvd = DP / LANES;
    const int64_t L = a->lens[seg], base = a->starts[seg], H = a->H, Hkv = a->Hkv;
    const REAL *Q = (const REAL *)a->q, *K = (const REAL *)a->k, *V = (const REAL *)a->v;
    const REAL *O = (const REAL *)a->o, *DO = (const REAL *)a->dout, *LSE = (const REAL *)a->lse_in;
    const REAL *DLSE = (const REAL *)a->dlse;
    const REAL scale = (REAL)a->scale, scale2 = (REAL)(a->scale * AT_LOG2E);
    /* the queries [q_lo, q_hi) and keys [k_lo, k_hi) this item visits */
    const int64_t q_lo = a->causal && ka > qa ? ka * BT : qa * BT, q_hi = qb * BT < L ? qb * BT : L;
    const int64_t k_lo = ka * BT, k_hi = kb * BT < L ? kb * BT : L;
    const int64_t ldk = k_hi - k_lo + BT;
    /* exact: Q, dO or K (the right operands of the accumulations) holds inf or NaN, which
       must not reach the rows that do not see it */
    int exact = N_(load_rows)(b.qs, DP, Q, a->sq_t, a->sq_h, base + q_lo, q_hi - q_lo, h, D, scale2);
    exact |= N_(load_rows)(b.dos, DP, DO, a->sd_t, a->sd_h, base + q_lo, q_hi - q_lo, h, D, 1);
    for (int64_t t = q_lo; t < q_hi; t++) {
        const REAL *o = O + (base + t) * a->so_t + h * a->so_h, *g = b.dos + (t - q_lo) * DP;
        REAL acc = 0;
        for (int d = 0; d < D; d++) acc += o[d] * g[d];
        /* lse's own gradient: d lse / d s = P, so dS = P (dP - delta + dlse) */
        b.delta[t - q_lo] = DLSE ? acc - DLSE[(base + t) * H + h] : acc;
        b.lse[t - q_lo] = LSE[(base + t) * H + h] * (REAL)AT_LOG2E;
    }
    if (first) {
        N_(load_cols)(b.kt, ldk, K, a->sk_t, a->sk_h, base + k_lo, k_hi - k_lo, hk, D);
        N_(load_cols)(b.vt, ldk, V, a->sv_t, a->sv_h, base + k_lo, k_hi - k_lo, hk, D);
        *exact_k = with_dq && N_(load_rows)(b.ks, DP, K, a->sk_t, a->sk_h, base + k_lo, k_hi - k_lo, hk, D, 1);
    }
    exact |= *exact_k;
    if (with_dq)
        for (int64_t e = 0; e < (q_hi - qa * BT) * DP; e++) b.dq[e] = 0;
    for (int64_t kt = ka; kt < kb; kt++) {
        const int64_t k0 = kt * BT;
        const int nk = (int)(L - k0 < BT ? L - k0 : BT), nv = (nk + LANES - 1) / LANES;
        const REAL *ktile = b.kt + (k0 - k_lo), *vtile = b.vt + (k0 - k_lo);
        if (with_dkdv)
            for (int64_t e = 0; e < (int64_t)BT * DP; e++) b.acc_k[e] = b.acc_v[e] = 0;
        int64_t qfirst = qa;
        if (a->causal && qfirst < kt) qfirst = kt;   /* query tiles before the key tile see none of it */
        for (int64_t qt = qfirst; qt < qb; qt++) {
            const int64_t q0 = qt * BT;
            const int nq = (int)(L - q0 < BT ? L - q0 : BT);
            const int lim0 = a->causal ? (int)(q0 - k0 + 1) : BT;
            const REAL *qs = b.qs + (q0 - q_lo) * DP, *dos = b.dos + (q0 - q_lo) * DP;
            N_(gemm_nt)(b.s, qs, DP, ktile, (int)ldk, nq, D, nv, lim0);     /* S = scale2 Q K^T, base 2 */
            N_(gemm_nt)(b.p, dos, DP, vtile, (int)ldk, nq, D, nv, lim0);    /* dP = dO V^T */
            for (int i = 0; i < nq; i++) {
                const int lim = N_(allowed)(a->causal, q0, i, k0, nk);
                const IVEC limv = N_(lane_index)(0) * 0 + (IREAL)lim;
                const VEC lv = N_(vset)(b.lse[q0 - q_lo + i]), dl = N_(vset)(b.delta[q0 - q_lo + i]);
                REAL *si = b.s + (int64_t)i * BT, *dpi = b.p + (int64_t)i * BT;
                const int nvi = (lim + LANES - 1) / LANES, full = lim == nvi * LANES;
                for (int v = 0; v < nvi; v++) {
                    VEC pv = N_(vexp2)(N_(vload)(si + v * LANES) - lv);
                    VEC ds = pv * (N_(vload)(dpi + v * LANES) - dl);
                    if (!full) {   /* masked lanes are 0 exactly, even where dP or delta is NaN */
                        const IVEC in = N_(lane_index)(v * LANES) < limv;
                        pv = N_(vselect)(in, pv, N_(vset)(0));
                        ds = N_(vselect)(in, ds, N_(vset)(0));
                    }
                    N_(vstore)(si + v * LANES, pv);    /* P */
                    N_(vstore)(dpi + v * LANES, ds);   /* dS */
                }
                for (int v = nvi; v < nv; v++) {
                    N_(vstore)(si + v * LANES, N_(vset)(0));
                    N_(vstore)(dpi + v * LANES, N_(vset)(0));
                }
            }
            if (with_dkdv) {
                /* key j takes the queries i >= j - (q0 - k0) only (causal) */
                const int lo0 = a->causal ? (int)(k0 - q0) : -BT;
                N_(gemm_acc)(b.acc_v, DP, b.s, 1, BT, dos, DP, nk, nq, nvd, lo0, BT, exact);  /* dV += P^T dO */
                N_(gemm_acc)(b.acc_k, DP, b.p, 1, BT, qs, DP, nk, nq, nvd, lo0, BT, exact);   /* dK += dS^T (scale2 Q) */
            }
            if (with_dq)                                                             /* dQ += dS K */
                N_(gemm_acc)(b.dq + (q0 - qa * BT) * DP, DP, b.p, BT, 1, b.ks + (k0 - k_lo) * DP, DP, nq, nk, nvd,
                             -BT, lim0, exact);
        }
        if (with_dkdv) {
            REAL *DK = (REAL *)a->dk, *DV = (REAL *)a->dv;
            for (int j = 0; j < nk; j++) {
                const int64_t t = base + k0 + j;
                REAL *dk = DK + (t * Hkv + hk) * D, *dv = DV + (t * Hkv + hk) * D;
                const REAL *gk = b.acc_k + (int64_t)j * DP, *gv = b.acc_v + (int64_t)j * DP;
                /* scale2 = scale log2(e) */
                if (first)
                    for (int d = 0; d < D; d++) { dk[d] = gk[d] * (REAL)AT_LN2; dv[d] = gv[d]; }
                else
                    for (int d = 0; d < D; d++) { dk[d] += gk[d] * (REAL)AT_LN2; dv[d] += gv[d]; }
            }
        }
    }
    if (with_dq) {
        REAL *DQ = (REAL *)a->dq;
        for (int64_t t = qa * BT; t < q_hi; t++) {
            REAL *dq = DQ + ((base + t) * H + h) * D;
            const REAL *g = b.dq + (t - qa * BT) * DP;
            for (int d = 0; d < D; d++) dq[d] = g[d] * scale;
        }
    }
}

/* Backward over key tiles [ka, kb) and query tiles [qa, qb) of one segment, for query
   heads [h0, h0 + nh) (nh > 1: the whole group of one key/value head). with_dkdv: dK and
   dV of those key tiles (complete when every query tile is visited), the heads' terms
   added in turn; with_dq: dQ of those query tiles (complete when every key tile is
   visited). The rows they read are laid out once (K and V once for all nh heads); P is
   recomputed from the LSE. */
static TARGET void N_(bwd_item)(const dt_attn_args *a, void *work_, int64_t rows, int64_t seg, int64_t h0,
                                int64_t nh, int64_t ka, int64_t kb, int64_t qa, int64_t qb, int with_dkdv,
                                int with_dq)
{
    const int DP = ((int)a->D + LANES - 1) / LANES * LANES;
    const int64_t hk = h0 / (a->H / a->Hkv);
    int exact_k = 0;
    N_(bufs) b;
    N_(carve)(&b, (REAL *)work_, DP, rows);
    if (nh == 1) {   /* one head: its own instance, with nothing to add to */
        N_(bwd_head)(a, b, seg, h0, hk, ka, kb, qa, qb, with_dkdv, with_dq, 1, &exact_k);
        return;
    }
    for (int64_t h = h0; h < h0 + nh; h++)
        N_(bwd_head)(a, b, seg, h, hk, ka, kb, qa, qb, with_dkdv, with_dq, h == h0, &exact_k);
}

static int N_(tile)(void) { return BT; }

#undef VEC
#undef IVEC
#undef BT
#undef LANES
#undef N_
#undef AT_CAT
#undef AT_CAT2
#undef AT_NT_ROWS
#undef AT_ACC_COLS
#undef AT_ROW_BLOCKS
#undef AT_INLINE
/* the ISA's macros, set by attention_isas.h for this instantiation */
#undef VBYTES
#undef MR
#undef SUF
#undef VMAX
#undef VMIN
#undef VSET1
#undef TARGET
