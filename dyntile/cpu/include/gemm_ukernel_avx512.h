/* gemm_ukernel_avx512.h: AVX-512 micro-kernels, 14x32 float32 and 14x16 float64.
 *
 * Same signature and meaning as the reference kernels (gemm_ukernel_ref.h). The
 * _rows<r> variants compute only the first r rows of the tile (the edge micro-panel
 * of A, still packed MR wide), straight into C.
 * Register tile: MR rows x two zmm vectors of B per p; 28 accumulators + 2 B
 * vectors + A broadcast from memory = 30 of the 32 zmm registers.
 * The B micro-panel streams from L2 (A's stays in L1): each p prefetches B's row
 * B_AHEAD steps on into L1, running on into the next micro-panel at the end, so
 * the first rows of the next micro-panel are in L1 when it starts.
 */
#ifndef DYNTILE_GEMM_UKERNEL_AVX512_H
#define DYNTILE_GEMM_UKERNEL_AVX512_H

#include <stdint.h>
#include "dyntile_simd.h"
#include "gemm_blocking.h"

#if DT_HAVE_X86

/* V: vector type, W: lanes per vector, S: ps/pd intrinsic suffix */
#define DT_DEFINE_UKERNEL_AVX512(T, SUFFIX, ROWS_, MR_, NR_, V, W, S)                           \
DT_TARGET_AVX512 static void dt_ukernel_avx512_##SUFFIX(int64_t kc, const T *restrict a, \
                                                    const T *restrict b, T *restrict c, \
                                                    int64_t rs_c, int64_t cs_c, int beta) \
{                                                                                       \
    enum { ROWS = ROWS_, MR = MR_, NR = NR_, B_AHEAD = 8 };                             \
    _Static_assert(ROWS <= MR, "an edge kernel computes at most MR rows");              \
    _Static_assert(NR == 2 * W, "AVX-512 micro-kernel keeps two vectors of B per row"); \
    V c0[ROWS], c1[ROWS];                                                               \
    _Pragma("GCC unroll 16")                                                            \
    for (int i = 0; i < ROWS; i++) {                                                    \
        c0[i] = _mm512_setzero_##S();                                                   \
        c1[i] = _mm512_setzero_##S();                                                   \
        dt_prefetch_row_t0(c + i * rs_c, NR * (int)sizeof(T));                          \
    }                                                                                   \
    _Pragma("GCC unroll 4")                                                             \
    for (int64_t p = 0; p < kc; p++) {   /* c[i] += a[p, i] * b[p, :] */                \
        _mm_prefetch((const char *)(b + B_AHEAD * NR), _MM_HINT_T0);                     \
        _mm_prefetch((const char *)(b + B_AHEAD * NR + W), _MM_HINT_T0);                 \
        const V b0 = _mm512_loadu_##S(b), b1 = _mm512_loadu_##S(b + W);                 \
        _Pragma("GCC unroll 16")                                                        \
        for (int i = 0; i < ROWS; i++) {                                                \
            const V ai = _mm512_set1_##S(a[i]);                                         \
            c0[i] = _mm512_fmadd_##S(ai, b0, c0[i]);                                    \
            c1[i] = _mm512_fmadd_##S(ai, b1, c1[i]);                                    \
        }                                                                               \
        a += MR;                                                                        \
        b += NR;                                                                        \
    }                                                                                   \
    if (cs_c == 1) {                                                                    \
        _Pragma("GCC unroll 16")                                                        \
        for (int i = 0; i < ROWS; i++) {                                                \
            T *ci = c + i * rs_c;                                                       \
            if (beta) {                                                                 \
                c0[i] = _mm512_add_##S(c0[i], _mm512_loadu_##S(ci));                    \
                c1[i] = _mm512_add_##S(c1[i], _mm512_loadu_##S(ci + W));                \
            }                                                                           \
            _mm512_storeu_##S(ci, c0[i]);                                               \
            _mm512_storeu_##S(ci + W, c1[i]);                                           \
        }                                                                               \
    } else {                                                                            \
        T t[ROWS * NR];                                                                 \
        for (int i = 0; i < ROWS; i++) {                                                \
            _mm512_storeu_##S(t + i * NR, c0[i]);                                       \
            _mm512_storeu_##S(t + i * NR + W, c1[i]);                                   \
        }                                                                               \
        for (int i = 0; i < ROWS; i++)                                                  \
            for (int j = 0; j < NR; j++) {                                              \
                T *cij = c + i * rs_c + j * cs_c;                                       \
                *cij = beta ? *cij + t[i * NR + j] : t[i * NR + j];                     \
            }                                                                           \
    }                                                                                   \
}

DT_DEFINE_UKERNEL_AVX512(float, 14x32_f32, DT_AVX512_F32_MR, DT_AVX512_F32_MR, DT_AVX512_F32_NR, __m512, 16, ps)
DT_DEFINE_UKERNEL_AVX512(float, 14x32_f32_rows1, 1, DT_AVX512_F32_MR, DT_AVX512_F32_NR, __m512, 16, ps)
DT_DEFINE_UKERNEL_AVX512(float, 14x32_f32_rows2, 2, DT_AVX512_F32_MR, DT_AVX512_F32_NR, __m512, 16, ps)
DT_DEFINE_UKERNEL_AVX512(float, 14x32_f32_rows3, 3, DT_AVX512_F32_MR, DT_AVX512_F32_NR, __m512, 16, ps)
DT_DEFINE_UKERNEL_AVX512(float, 14x32_f32_rows4, 4, DT_AVX512_F32_MR, DT_AVX512_F32_NR, __m512, 16, ps)
DT_DEFINE_UKERNEL_AVX512(float, 14x32_f32_rows5, 5, DT_AVX512_F32_MR, DT_AVX512_F32_NR, __m512, 16, ps)
DT_DEFINE_UKERNEL_AVX512(float, 14x32_f32_rows6, 6, DT_AVX512_F32_MR, DT_AVX512_F32_NR, __m512, 16, ps)
DT_DEFINE_UKERNEL_AVX512(float, 14x32_f32_rows7, 7, DT_AVX512_F32_MR, DT_AVX512_F32_NR, __m512, 16, ps)
DT_DEFINE_UKERNEL_AVX512(float, 14x32_f32_rows8, 8, DT_AVX512_F32_MR, DT_AVX512_F32_NR, __m512, 16, ps)
DT_DEFINE_UKERNEL_AVX512(float, 14x32_f32_rows9, 9, DT_AVX512_F32_MR, DT_AVX512_F32_NR, __m512, 16, ps)
DT_DEFINE_UKERNEL_AVX512(float, 14x32_f32_rows10, 10, DT_AVX512_F32_MR, DT_AVX512_F32_NR, __m512, 16, ps)
DT_DEFINE_UKERNEL_AVX512(float, 14x32_f32_rows11, 11, DT_AVX512_F32_MR, DT_AVX512_F32_NR, __m512, 16, ps)
DT_DEFINE_UKERNEL_AVX512(float, 14x32_f32_rows12, 12, DT_AVX512_F32_MR, DT_AVX512_F32_NR, __m512, 16, ps)
DT_DEFINE_UKERNEL_AVX512(float, 14x32_f32_rows13, 13, DT_AVX512_F32_MR, DT_AVX512_F32_NR, __m512, 16, ps)
DT_DEFINE_UKERNEL_AVX512(double, 14x16_f64, DT_AVX512_F64_MR, DT_AVX512_F64_MR, DT_AVX512_F64_NR, __m512d, 8, pd)
DT_DEFINE_UKERNEL_AVX512(double, 14x16_f64_rows1, 1, DT_AVX512_F64_MR, DT_AVX512_F64_NR, __m512d, 8, pd)
DT_DEFINE_UKERNEL_AVX512(double, 14x16_f64_rows2, 2, DT_AVX512_F64_MR, DT_AVX512_F64_NR, __m512d, 8, pd)
DT_DEFINE_UKERNEL_AVX512(double, 14x16_f64_rows3, 3, DT_AVX512_F64_MR, DT_AVX512_F64_NR, __m512d, 8, pd)
DT_DEFINE_UKERNEL_AVX512(double, 14x16_f64_rows4, 4, DT_AVX512_F64_MR, DT_AVX512_F64_NR, __m512d, 8, pd)
DT_DEFINE_UKERNEL_AVX512(double, 14x16_f64_rows5, 5, DT_AVX512_F64_MR, DT_AVX512_F64_NR, __m512d, 8, pd)
DT_DEFINE_UKERNEL_AVX512(double, 14x16_f64_rows6, 6, DT_AVX512_F64_MR, DT_AVX512_F64_NR, __m512d, 8, pd)
DT_DEFINE_UKERNEL_AVX512(double, 14x16_f64_rows7, 7, DT_AVX512_F64_MR, DT_AVX512_F64_NR, __m512d, 8, pd)
DT_DEFINE_UKERNEL_AVX512(double, 14x16_f64_rows8, 8, DT_AVX512_F64_MR, DT_AVX512_F64_NR, __m512d, 8, pd)
DT_DEFINE_UKERNEL_AVX512(double, 14x16_f64_rows9, 9, DT_AVX512_F64_MR, DT_AVX512_F64_NR, __m512d, 8, pd)
DT_DEFINE_UKERNEL_AVX512(double, 14x16_f64_rows10, 10, DT_AVX512_F64_MR, DT_AVX512_F64_NR, __m512d, 8, pd)
DT_DEFINE_UKERNEL_AVX512(double, 14x16_f64_rows11, 11, DT_AVX512_F64_MR, DT_AVX512_F64_NR, __m512d, 8, pd)
DT_DEFINE_UKERNEL_AVX512(double, 14x16_f64_rows12, 12, DT_AVX512_F64_MR, DT_AVX512_F64_NR, __m512d, 8, pd)
DT_DEFINE_UKERNEL_AVX512(double, 14x16_f64_rows13, 13, DT_AVX512_F64_MR, DT_AVX512_F64_NR, __m512d, 8, pd)

/* The prologue of the masked kernels below: lane masks m0, m1 for the first `cols`
 * (<= NR) columns of the tile (m1: the second vector's; 0 when cols <= W) and ROWS
 * pairs of zeroed accumulators c0, c1. */
#define DT_AVX512_MASKED_TILE(V, W, S, MASK)                                                  \
    const MASK m0 = (MASK)(cols >= W ? ~0u : (1u << cols) - 1);                              \
    const MASK m1 = (MASK)(cols >= NR ? ~0u : cols > W ? (1u << (cols - W)) - 1 : 0);        \
    V c0[ROWS], c1[ROWS];                                                                   \
    _Pragma("GCC unroll 16")                                                                \
    for (int i = 0; i < ROWS; i++) {                                                        \
        c0[i] = _mm512_setzero_##S();                                                       \
        c1[i] = _mm512_setzero_##S();                                                       \
    }

/* Edge tiles of the last micro-panel of B: the first ROWS rows and `cols` columns
 * (0 < cols < NR) of the tile, straight into C (row-major: cs_c == 1) with masked
 * loads and stores, no scratch tile. NV = 1 (cols <= W): one vector of B per p,
 * half the FMAs of the full kernel, so a thin last panel (n = 257: one column) costs
 * half a panel. B's micro-panel is still NR wide (zero past cols). */
#define DT_DEFINE_UKERNEL_AVX512_COLS(T, SUFFIX, ROWS_, MR_, NR_, NV_, V, W, S, MASK)             \
DT_TARGET_AVX512 static void dt_ukernel_avx512_cols_##SUFFIX(int64_t kc, const T *restrict a,   \
                                                    const T *restrict b, T *restrict c,     \
                                                    int64_t rs_c, int cols, int beta)       \
{                                                                                           \
    enum { ROWS = ROWS_, MR = MR_, NR = NR_, NV = NV_, B_AHEAD = 8 };                       \
    _Static_assert(ROWS <= MR && NR == 2 * W && (NV == 1 || NV == 2), "an edge tile of the kernel"); \
    DT_AVX512_MASKED_TILE(V, W, S, MASK)                                                    \
    _Pragma("GCC unroll 4")                                                                 \
    for (int64_t p = 0; p < kc; p++) {                                                      \
        _mm_prefetch((const char *)(b + B_AHEAD * NR), _MM_HINT_T0);                        \
        const V b0 = _mm512_loadu_##S(b);                                                   \
        const V b1 = NV == 2 ? _mm512_loadu_##S(b + W) : b0;                                \
        _Pragma("GCC unroll 16")                                                            \
        for (int i = 0; i < ROWS; i++) {                                                    \
            const V ai = _mm512_set1_##S(a[i]);                                             \
            c0[i] = _mm512_fmadd_##S(ai, b0, c0[i]);                                        \
            if (NV == 2) c1[i] = _mm512_fmadd_##S(ai, b1, c1[i]);                           \
        }                                                                                   \
        a += MR;                                                                            \
        b += NR;                                                                            \
    }                                                                                       \
    _Pragma("GCC unroll 16")                                                                \
    for (int i = 0; i < ROWS; i++) {                                                        \
        T *ci = c + i * rs_c;                                                               \
        if (beta) c0[i] = _mm512_add_##S(c0[i], _mm512_maskz_loadu_##S(m0, ci));            \
        _mm512_mask_storeu_##S(ci, m0, c0[i]);                                              \
        if (NV == 2) {                                                                      \
            if (beta) c1[i] = _mm512_add_##S(c1[i], _mm512_maskz_loadu_##S(m1, ci + W));    \
            _mm512_mask_storeu_##S(ci + W, m1, c1[i]);                                      \
        }                                                                                   \
    }                                                                                       \
}

/* DEF(T, NAME_rK, K, ...) for every row count K = 1..14 (MR of both AVX-512 kernels) */
#define DT_AVX512_FOR_ROWS(DEF, T, NAME, ...)                                                 \
    DEF(T, NAME##_r1, 1, __VA_ARGS__) DEF(T, NAME##_r2, 2, __VA_ARGS__)                      \
    DEF(T, NAME##_r3, 3, __VA_ARGS__) DEF(T, NAME##_r4, 4, __VA_ARGS__)                      \
    DEF(T, NAME##_r5, 5, __VA_ARGS__) DEF(T, NAME##_r6, 6, __VA_ARGS__)                      \
    DEF(T, NAME##_r7, 7, __VA_ARGS__) DEF(T, NAME##_r8, 8, __VA_ARGS__)                      \
    DEF(T, NAME##_r9, 9, __VA_ARGS__) DEF(T, NAME##_r10, 10, __VA_ARGS__)                    \
    DEF(T, NAME##_r11, 11, __VA_ARGS__) DEF(T, NAME##_r12, 12, __VA_ARGS__)                  \
    DEF(T, NAME##_r13, 13, __VA_ARGS__) DEF(T, NAME##_r14, 14, __VA_ARGS__)

_Static_assert(DT_AVX512_F32_MR == 14 && DT_AVX512_F64_MR == 14, "one cols kernel per row count");
DT_AVX512_FOR_ROWS(DT_DEFINE_UKERNEL_AVX512_COLS, float, f32_v1, DT_AVX512_F32_MR, DT_AVX512_F32_NR, 1, __m512, 16, ps, __mmask16)
DT_AVX512_FOR_ROWS(DT_DEFINE_UKERNEL_AVX512_COLS, float, f32_v2, DT_AVX512_F32_MR, DT_AVX512_F32_NR, 2, __m512, 16, ps, __mmask16)
DT_AVX512_FOR_ROWS(DT_DEFINE_UKERNEL_AVX512_COLS, double, f64_v1, DT_AVX512_F64_MR, DT_AVX512_F64_NR, 1, __m512d, 8, pd, __mmask8)
DT_AVX512_FOR_ROWS(DT_DEFINE_UKERNEL_AVX512_COLS, double, f64_v2, DT_AVX512_F64_MR, DT_AVX512_F64_NR, 2, __m512d, 8, pd, __mmask8)

/* Small products without packing: C[0:ROWS, 0:cols] = A[0:ROWS, 0:kc] @ B[0:kc, 0:cols]
 * read straight from row-major A (rows rs_a apart) and B (rows rs_b apart), written
 * to a row-major C with masked stores (0 < cols <= NR). B's rows are read with
 * masked loads, so nothing past column `cols` is touched. For products so small that
 * packing (a transpose of A, a copy of B) costs a quarter of the time: each A row is
 * read along k from L1, one broadcast an element, as the packed kernel reads its
 * micro-panel. */
#define DT_DEFINE_UKERNEL_AVX512_DIRECT(T, SUFFIX, ROWS_, NR_, V, W, S, MASK)                    \
DT_TARGET_AVX512 static void dt_ukernel_avx512_direct_##SUFFIX(                            \
    int64_t kc, const T *restrict a, int64_t rs_a, const T *restrict b, int64_t rs_b,      \
    T *restrict c, int64_t rs_c, int cols)                                                  \
{                                                                                           \
    enum { ROWS = ROWS_, NR = NR_ };                                                        \
    _Static_assert(ROWS <= 16 && NR == 2 * W, "a tile of the AVX-512 kernel");             \
    DT_AVX512_MASKED_TILE(V, W, S, MASK)                                                    \
    const int two = cols > W;                                                               \
    if (two) {                                                                              \
        for (int64_t p = 0; p < kc; p++, b += rs_b) {                                       \
            const V b0 = _mm512_maskz_loadu_##S(m0, b), b1 = _mm512_maskz_loadu_##S(m1, b + W); \
            _Pragma("GCC unroll 16")                                                        \
            for (int i = 0; i < ROWS; i++) {                                                \
                const V ai = _mm512_set1_##S(a[i * rs_a + p]);                              \
                c0[i] = _mm512_fmadd_##S(ai, b0, c0[i]);                                    \
                c1[i] = _mm512_fmadd_##S(ai, b1, c1[i]);                                    \
            }                                                                               \
        }                                                                                   \
    } else {                                                                                \
        for (int64_t p = 0; p < kc; p++, b += rs_b) {                                       \
            const V b0 = _mm512_maskz_loadu_##S(m0, b);                                     \
            _Pragma("GCC unroll 16")                                                        \
            for (int i = 0; i < ROWS; i++)                                                  \
                c0[i] = _mm512_fmadd_##S(_mm512_set1_##S(a[i * rs_a + p]), b0, c0[i]);      \
        }                                                                                   \
    }                                                                                       \
    _Pragma("GCC unroll 16")                                                                \
    for (int i = 0; i < ROWS; i++) {                                                        \
        _mm512_mask_storeu_##S(c + i * rs_c, m0, c0[i]);                                    \
        if (two) _mm512_mask_storeu_##S(c + i * rs_c + W, m1, c1[i]);                       \
    }                                                                                       \
}

DT_AVX512_FOR_ROWS(DT_DEFINE_UKERNEL_AVX512_DIRECT, float, f32, DT_AVX512_F32_NR, __m512, 16, ps, __mmask16)
DT_AVX512_FOR_ROWS(DT_DEFINE_UKERNEL_AVX512_DIRECT, double, f64, DT_AVX512_F64_NR, __m512d, 8, pd, __mmask8)

#endif /* DT_HAVE_X86 */
#endif /* DYNTILE_GEMM_UKERNEL_AVX512_H */
