/* attention.h: exact softmax attention inside segments of a token stream (varlen).
 *
 * q is [N, H, D] and k, v are [N, Hkv, D] (token and head strides given, D contiguous),
 * H a multiple of Hkv: query head h reads key/value head h / (H / Hkv) (grouped-query
 * attention; Hkv = H is multi-head). Segment s is the tokens starts[s] .. starts[s] +
 * lens[s] - 1 of the stream (segments disjoint). A token attends to the tokens of its own
 * segment (with causal, to those not after it). The forward pass writes out [N, H, D]
 * and the log-sum-exp lse [N, H] of every segment token; the backward pass recomputes the
 * probabilities from lse (flash-attention 2) and writes dq [N, H, D] and dk, dv
 * [N, Hkv, D], each the sum over the group's query heads. Tokens in no segment are never
 * written (the caller zeroes them).
 *
 * Non-finite inputs give what softmax(scale Q K^T) V per query over the keys it sees
 * gives in IEEE arithmetic: a NaN or inf reaches exactly the queries (and through them
 * the gradients) that see it, and never a query that does not (see gemm_acc's exact).
 *
 * Work is split into items (a segment, a head and a tile of queries or keys), sorted by
 * their cost (query-key pairs they visit), largest first, and taken by OpenMP threads
 * dynamically: the balance follows the cost, not the count, and a row of many short
 * segments is one call. A backward item owns what it writes, so no two threads add
 * into one value: a segment short enough is one item (dq, dk and dv in one pass), a long
 * one is split into key-tile items (dk, dv) and query-tile items (dq), which visit its
 * pairs twice but keep every thread busy. An item that writes dk and dv runs every query
 * head of its key/value head's group in turn, adding into what the first wrote: one
 * writer for each value, in a fixed order.
 */
#ifndef DYNTILE_ATTENTION_H
#define DYNTILE_ATTENTION_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dyntile_simd.h"

/* vectors cross no call boundary (every tile routine is always_inline): no ABI to keep */
#pragma GCC diagnostic ignored "-Wpsabi"

typedef struct {
    int64_t H, Hkv, D;                                /* query heads, key/value heads, head dim */
    const void *q, *k, *v, *o, *dout, *lse_in;       /* o, dout, lse_in: backward only */
    const void *dlse;                                 /* backward: lse's gradient [N, H], or NULL */
    int64_t sq_t, sq_h, sk_t, sk_h, sv_t, sv_h, so_t, so_h, sd_t, sd_h;
    void *out, *lse, *dq, *dk, *dv;                   /* contiguous [N, H or Hkv, D] and [N, H] */
    const int64_t *starts, *lens;
    int64_t S;
    int causal;
    double scale;
} dt_attn_args;

/* ---- the tile routines, one instantiation per element type and ISA */

#define AT_LOG2E 1.4426950408889634
#define AT_LN2 0.69314718055994531

/* 2^r = e^(r ln 2) on |r| <= 1/2: its Taylor terms (ln 2)^k / k!, Horner from the last;
   float64 takes 6 more terms before float32's (its last term, EXP_C_LAST, starts p) */
#define EXP_POLY_F32(p, r) \
    p = p * r + (REAL)0.0013333558146428441; \
    p = p * r + (REAL)0.009618129107628477; \
    p = p * r + (REAL)0.055504108664821576; \
    p = p * r + (REAL)0.2402265069591007; \
    p = p * r + (REAL)0.6931471805599453; \
    p = p * r + (REAL)1.0;
#define EXP_POLY_F64(p, r) \
    p = p * r + (REAL)4.44553827187081e-10; \
    p = p * r + (REAL)7.054911620801121e-09; \
    p = p * r + (REAL)1.0178086009239696e-07; \
    p = p * r + (REAL)1.3215486790144305e-06; \
    p = p * r + (REAL)1.5252733804059838e-05; \
    p = p * r + (REAL)0.00015403530393381606; \
    EXP_POLY_F32(p, r)

#define REAL float
#define IREAL int32_t
#define EXP_LO -126.0f
#define EXP_MAGIC 12582912.0f
#define EXP_C_LAST 0.00015403530393381606
#define EXP_POLY EXP_POLY_F32
#define EXP_BIAS 127
#define EXP_SHIFT 23
#define AT_TYPE f32
#define AT_PX ps
#include "attention_isas.h"   /* undefines the type's macros */

#define REAL double
#define IREAL int64_t
#define EXP_LO -1022.0
#define EXP_MAGIC 6755399441055744.0
#define EXP_C_LAST 2.5678435993488196e-11
#define EXP_POLY EXP_POLY_F64
#define EXP_BIAS 1023
#define EXP_SHIFT 52
#define AT_TYPE f64
#define AT_PX pd
#include "attention_isas.h"   /* undefines the type's macros */

/* ---- ISA choice (once) and the routines it selects */

enum { DT_ATTN_REF = 0, DT_ATTN_AVX2 = 1, DT_ATTN_AVX512 = 2 };

static int dt_attn_isa = -1;

/* the widest ISA this CPU runs */
static inline int dt_attn_cpu_isa(void)
{
    return dt_cpu_has_avx512() ? DT_ATTN_AVX512 : dt_cpu_has_avx2_fma() ? DT_ATTN_AVX2 : DT_ATTN_REF;
}

/* the ISA in use: the CPU's, or a narrower one set for tests (dt_attn_set_isa) */
static inline int dt_attn_best_isa(void)
{
    if (dt_attn_isa < 0) dt_attn_isa = dt_attn_cpu_isa();
    return dt_attn_isa;
}

/* use `isa` from now on (-1: the CPU's); 0 on success, -1 when the CPU lacks it */
static inline int dt_attn_set_isa(int isa)
{
    if (isa > dt_attn_cpu_isa()) return -1;
    dt_attn_isa = isa < 0 ? dt_attn_cpu_isa() : isa;
    return 0;
}

typedef void (*dt_attn_fwd_fn)(const dt_attn_args *, void *, int64_t, int64_t, int64_t, int64_t, int64_t);
typedef void (*dt_attn_bwd_fn)(const dt_attn_args *, void *, int64_t, int64_t, int64_t, int64_t, int64_t,
                               int64_t, int64_t, int64_t, int, int);

typedef struct {
    dt_attn_fwd_fn fwd;
    dt_attn_bwd_fn bwd;
    int tile, elem;
} dt_attn_kernels;

static dt_attn_kernels dt_attn_pick(int isa, int f64)
{
    dt_attn_kernels k;
#define AT_PICK(suf, size)                                        \
    k.fwd = fwd_item_##suf;                                       \
    k.bwd = bwd_item_##suf;                                       \
    k.tile = tile_##suf();                                        \
    k.elem = size;
#if DT_HAVE_X86
    if (isa == DT_ATTN_AVX512) {
        if (f64) { AT_PICK(f64_avx512, 8) } else { AT_PICK(f32_avx512, 4) }
        return k;
    }
    if (isa == DT_ATTN_AVX2) {
        if (f64) { AT_PICK(f64_avx2, 8) } else { AT_PICK(f32_avx2, 4) }
        return k;
    }
#endif
    if (f64) { AT_PICK(f64_ref, 8) } else { AT_PICK(f32_ref, 4) }
#undef AT_PICK
    (void)isa;
    return k;
}

/* ---- sizes: counts and costs in int64, never wrapping */

/* a + b and a * b of non-negative counts, INT64_MAX when the result would pass it */
static inline int64_t dt_attn_add(int64_t a, int64_t b)
{
    int64_t r;
    return __builtin_add_overflow(a, b, &r) ? INT64_MAX : r;
}
static inline int64_t dt_attn_mul(int64_t a, int64_t b)
{
    int64_t r;
    return __builtin_mul_overflow(a, b, &r) ? INT64_MAX : r;
}

/* The longest segment and the widest head the tile routines' int indices hold. */
#define DT_ATTN_MAX_ROWS ((int64_t)1 << 30)
#define DT_ATTN_MAX_DIM ((int64_t)1 << 24)

/* 0 when every size is one the kernels hold, -2 otherwise (before any allocation) */
static int dt_attn_check_sizes(const dt_attn_args *a)
{
    if (a->H < 0 || a->D < 0 || a->D > DT_ATTN_MAX_DIM || a->S < 0) return -2;
    if (a->H > 0 && (a->Hkv < 1 || a->H % a->Hkv)) return -2;
    for (int64_t s = 0; s < a->S; s++)
        if (a->lens[s] < 0 || a->lens[s] > DT_ATTN_MAX_ROWS || a->starts[s] < 0) return -2;
    return 0;
}

/* ---- work items */

/* heads [head, head + nh) of segment seg: one query head, or (an item writing dk, dv)
   the query heads of one key/value head's group */
typedef struct {
    int64_t cost, seg, head, nh, ka, kb, qa, qb;
    int dkdv, dq;
} dt_attn_item;

static int dt_attn_by_cost(const void *x, const void *y)
{
    const dt_attn_item *a = (const dt_attn_item *)x, *b = (const dt_attn_item *)y;
    if (a->cost != b->cost) return a->cost < b->cost ? 1 : -1;
    if (a->seg != b->seg) return a->seg < b->seg ? -1 : 1;      /* a fixed order: same work each run */
    if (a->head != b->head) return a->head < b->head ? -1 : 1;
    return a->ka + a->qa < b->ka + b->qa ? -1 : (a->ka + a->qa > b->ka + b->qa);
}

/* query-key pairs the queries [q0, q0 + nq) visit in a segment of L tokens */
static inline int64_t dt_attn_pairs_q(int64_t q0, int64_t nq, int64_t L, int causal)
{
    return causal ? dt_attn_add(dt_attn_mul(nq, q0), dt_attn_mul(nq, nq + 1) / 2) : dt_attn_mul(nq, L);
}

/* the scratch elements one thread needs for items over segments of at most `rows`
   tokens: 7 segment-long buffers and 3 tiles of BT x DP, 2 of BT x BT, lse and delta
   (rows and D within DT_ATTN_MAX_ROWS and DT_ATTN_MAX_DIM: no int64 overflow) */
static inline int64_t dt_attn_scratch_elems(int tile, int64_t D, int64_t rows)
{
    int64_t lanes = tile / 4, DP = (D + lanes - 1) / lanes * lanes;
    return 7 * (rows + tile) * DP + 3 * (int64_t)tile * DP + 3 * (int64_t)tile * tile + 2 * rows + 64;
}

/* The cost above which a segment is split into several items, so that no item holds up
   the others for long: a quarter of a thread's share in the forward pass, where a split
   costs only a reload of K and V; a whole share in the backward pass, where a split
   segment's pairs are visited twice (key-tile and query-tile items), so splitting pays
   only for an item that would otherwise outlast the other threads' work. */
static inline int64_t dt_attn_split_cost(const dt_attn_args *a, int tile, int threads, int backward)
{
    int64_t total = 0, floor = (int64_t)tile * tile;
    for (int64_t s = 0; s < a->S; s++)
        total = dt_attn_add(total, dt_attn_mul(dt_attn_pairs_q(0, a->lens[s], a->lens[s], a->causal), a->H));
    int64_t cut = threads == 1 ? INT64_MAX : total / (backward ? threads : 4 * threads);
    return cut < floor ? floor : cut;
}

/* Items of the forward pass: (segment, head, a run of query tiles of at most split_cost).
   Returns how many (-1: out of memory); *items malloc'd; *rows: the longest segment. */
static int64_t dt_attn_fwd_items(const dt_attn_args *a, int tile, int64_t split_cost, dt_attn_item **items,
                                 int64_t *rows)
{
    int64_t n = 0, cap = 0;
    *rows = 0;
    for (int64_t s = 0; s < a->S; s++) cap = dt_attn_add(cap, dt_attn_mul((a->lens[s] + tile - 1) / tile, a->H));
    if (cap > (int64_t)(SIZE_MAX / sizeof(dt_attn_item))) return -2;
    dt_attn_item *it = (dt_attn_item *)malloc((size_t)(cap ? cap : 1) * sizeof *it);
    if (!it) return -1;
    for (int64_t s = 0; s < a->S; s++) {
        int64_t L = a->lens[s], nt = (L + tile - 1) / tile;
        if (L > *rows) *rows = L;
        for (int64_t qa = 0; qa < nt;) {
            int64_t qb = qa + 1, cost = dt_attn_pairs_q(qa * tile, (qb * tile < L ? qb * tile : L) - qa * tile, L,
                                                       a->causal);
            while (qb < nt) {
                int64_t hi = (qb + 1) * tile < L ? (qb + 1) * tile : L;
                int64_t more = dt_attn_pairs_q(qa * tile, hi - qa * tile, L, a->causal);
                if (more > split_cost) break;
                cost = more;
                qb++;
            }
            for (int64_t h = 0; h < a->H; h++) {
                dt_attn_item x = {cost, s, h, 1, 0, 0, qa, qb, 0, 0};
                it[n++] = x;
            }
            qa = qb;
        }
    }
    qsort(it, (size_t)n, sizeof *it, dt_attn_by_cost);
    *items = it;
    return n;
}

/* Items of the backward pass: a segment of cost at most split_cost is one item per
   key/value head (dq, dk, dv of its group in one pass); a longer one an item per key
   tile and key/value head (dk, dv) and per query tile and query head (dq). *rows: the
   longest segment. */
static int64_t dt_attn_bwd_items(const dt_attn_args *a, int tile, int64_t split_cost, dt_attn_item **items,
                                 int64_t *rows)
{
    const int64_t G = a->H ? a->H / a->Hkv : 1, Hkv = a->H ? a->Hkv : 0;   /* query heads per kv head */
    int64_t n = 0;
    *rows = 0;
    for (int64_t s = 0; s < a->S; s++) {
        int64_t L = a->lens[s], nt = (L + tile - 1) / tile;
        if (L == 0) continue;
        int whole = dt_attn_mul(dt_attn_pairs_q(0, L, L, a->causal), G) <= split_cost || nt == 1;
        n = dt_attn_add(n, whole ? Hkv : dt_attn_mul(nt, dt_attn_add(Hkv, a->H)));
    }
    if (n > (int64_t)(SIZE_MAX / sizeof(dt_attn_item))) return -2;
    dt_attn_item *it = (dt_attn_item *)malloc((size_t)(n ? n : 1) * sizeof *it);
    if (!it) return -1;
    int64_t c = 0;
    for (int64_t s = 0; s < a->S; s++) {
        int64_t L = a->lens[s], nt = (L + tile - 1) / tile;
        int64_t whole = dt_attn_mul(dt_attn_pairs_q(0, L, L, a->causal), G);
        if (L == 0) continue;
        if (L > *rows) *rows = L;
        if (whole <= split_cost || nt == 1) {
            for (int64_t g = 0; g < Hkv; g++) {
                dt_attn_item x = {whole, s, g * G, G, 0, nt, 0, nt, 1, 1};
                it[c++] = x;
            }
            continue;
        }
        for (int64_t t = 0; t < nt; t++) {
            int64_t lo = t * tile, nn = L - lo < tile ? L - lo : tile;
            /* key tile t is seen by the queries from lo on (causal) or all, of G heads */
            int64_t kcost = dt_attn_mul(dt_attn_mul(nn, a->causal ? L - lo : L), G);
            for (int64_t g = 0; g < Hkv; g++) {
                dt_attn_item kx = {kcost, s, g * G, G, t, t + 1, 0, nt, 1, 0};
                it[c++] = kx;
            }
            for (int64_t h = 0; h < a->H; h++) {
                dt_attn_item qx = {dt_attn_pairs_q(lo, nn, L, a->causal), s, h, 1, 0,
                                   a->causal ? t + 1 : nt, t, t + 1, 0, 1};
                it[c++] = qx;
            }
        }
    }
    qsort(it, (size_t)n, sizeof *it, dt_attn_by_cost);
    *items = it;
    return n;
}

#ifdef _OPENMP
#include <omp.h>
#endif

/* Runs `n` items on `threads` threads, each with its own scratch of `bytes`; 0 on
   success, -1 when out of memory. */
static int dt_attn_run(const dt_attn_args *a, const dt_attn_kernels *kern, const dt_attn_item *items, int64_t n,
                       int64_t rows, size_t bytes, int threads, int backward)
{
    int failed = 0;
    if (threads < 1 || n < 2) threads = 1;
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        void *work = aligned_alloc(64, (bytes + 63) / 64 * 64);
        if (!work) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t i = 0; i < n; i++) {
            const dt_attn_item *x = &items[i];
            if (!work)
                continue;
            if (backward)
                kern->bwd(a, work, rows, x->seg, x->head, x->nh, x->ka, x->kb, x->qa, x->qb, x->dkdv, x->dq);
            else
                kern->fwd(a, work, rows, x->seg, x->head, x->qa, x->qb);
        }
        free(work);
    }
    return failed ? -1 : 0;
}

/* The forward pass (backward = 0) or the backward pass (a->o, a->dout, a->lse_in set):
   0, -1 when out of memory, -2 when a size is past what the kernels hold. */
static int dt_attn_pass(const dt_attn_args *a, int f64, int threads, int backward)
{
    if (dt_attn_check_sizes(a)) return -2;
    dt_attn_kernels kern = dt_attn_pick(dt_attn_best_isa(), f64);
    if (threads < 1) threads = 1;
    int64_t split = dt_attn_split_cost(a, kern.tile, threads, backward), rows;
    dt_attn_item *items;
    int64_t n = backward ? dt_attn_bwd_items(a, kern.tile, split, &items, &rows)
                         : dt_attn_fwd_items(a, kern.tile, split, &items, &rows);
    if (n < 0) return (int)n;
    rows = (rows + kern.tile - 1) / kern.tile * kern.tile;
    int64_t elems = dt_attn_scratch_elems(kern.tile, a->D, rows);
    if (elems > (int64_t)(SIZE_MAX / 2 / kern.elem)) {
        free(items);
        return -2;
    }
    size_t bytes = (size_t)elems * kern.elem;
    int rc = dt_attn_run(a, &kern, items, n, rows, bytes, threads, backward);
    free(items);
    return rc;
}

static int dt_attn_forward(const dt_attn_args *a, int f64, int threads) { return dt_attn_pass(a, f64, threads, 0); }
static int dt_attn_backward(const dt_attn_args *a, int f64, int threads) { return dt_attn_pass(a, f64, threads, 1); }

static inline const char *dt_attn_isa_name(void)
{
    int isa = dt_attn_best_isa();
    return isa == DT_ATTN_AVX512 ? "avx512" : isa == DT_ATTN_AVX2 ? "avx2" : "ref";
}

#endif /* DYNTILE_ATTENTION_H */
