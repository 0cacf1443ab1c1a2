/* gemm_ukernel_avx2.h: AVX2/FMA micro-kernels, 6x16 float32 and 6x8 float64.
 *
 * Same signature and meaning as the reference kernels (gemm_ukernel_ref.h). The
 * _rows<r> variants compute only the first r rows of the tile (the edge micro-panel
 * of A, still packed MR wide), straight into C.
 * Register tile: MR rows x two ymm vectors of B per p; 12 accumulators + 2 B
 * vectors + 1 broadcast of A = 15 of the 16 ymm registers.
 * C's rows are prefetched into L1 C_AHEAD steps before the end, not at the start:
 * in BLIS's loop order the B micro-panel fills most of L1, and C rows a power of two
 * apart share one L1 set, so lines fetched early are evicted (or evict B) before
 * use.
 */
#ifndef DYNTILE_GEMM_UKERNEL_AVX2_H
#define DYNTILE_GEMM_UKERNEL_AVX2_H

#include <stdint.h>
#include "dyntile_simd.h"
#include "gemm_blocking.h"

#if DT_HAVE_X86

/* V: vector type, W: lanes per vector, S: ps/pd intrinsic suffix */
#define DT_DEFINE_UKERNEL_AVX2(T, SUFFIX, ROWS_, MR_, NR_, V, W, S)                           \
DT_TARGET_AVX2 static void dt_ukernel_avx2_##SUFFIX(int64_t kc, const T *restrict a,    \
                                                    const T *restrict b, T *restrict c, \
                                                    int64_t rs_c, int64_t cs_c, int beta) \
{                                                                                       \
    enum { ROWS = ROWS_, MR = MR_, NR = NR_, C_AHEAD = 64 };                            \
    _Static_assert(ROWS <= MR, "an edge kernel computes at most MR rows");              \
    _Static_assert(NR == 2 * W, "AVX2 micro-kernel keeps two vectors of B per row");    \
    V c0[ROWS], c1[ROWS];                                                               \
    _Pragma("GCC unroll 16")                                                            \
    for (int i = 0; i < ROWS; i++) {                                                    \
        c0[i] = _mm256_setzero_##S();                                                   \
        c1[i] = _mm256_setzero_##S();                                                   \
    }                                                                                   \
    const int64_t p_fetch = kc > C_AHEAD ? kc - C_AHEAD : 0;                            \
    for (int half = 0; half < 2; half++) {   /* p < p_fetch, then fetch C, the rest */  \
        const int64_t p_end = half ? kc : p_fetch;                                      \
        if (half) {                                                                     \
            _Pragma("GCC unroll 16")                                                    \
            for (int i = 0; i < ROWS; i++)                                              \
                dt_prefetch_row_t0(c + i * rs_c, NR * (int)sizeof(T));                  \
        }                                                                               \
        _Pragma("GCC unroll 4")                                                         \
        for (int64_t p = half ? p_fetch : 0; p < p_end; p++) { /* c[i] += a[p, i] * b[p, :] */ \
            const V b0 = _mm256_loadu_##S(b), b1 = _mm256_loadu_##S(b + W);             \
            _Pragma("GCC unroll 16")                                                    \
            for (int i = 0; i < ROWS; i++) {                                            \
                const V ai = _mm256_set1_##S(a[i]);                                     \
                c0[i] = _mm256_fmadd_##S(ai, b0, c0[i]);                                \
                c1[i] = _mm256_fmadd_##S(ai, b1, c1[i]);                                \
            }                                                                           \
            a += MR;                                                                    \
            b += NR;                                                                    \
        }                                                                               \
    }                                                                                   \
    if (cs_c == 1) {                                                                    \
        _Pragma("GCC unroll 16")                                                        \
        for (int i = 0; i < ROWS; i++) {                                                \
            T *ci = c + i * rs_c;                                                       \
            if (beta) {                                                                 \
                c0[i] = _mm256_add_##S(c0[i], _mm256_loadu_##S(ci));                    \
                c1[i] = _mm256_add_##S(c1[i], _mm256_loadu_##S(ci + W));                \
            }                                                                           \
            _mm256_storeu_##S(ci, c0[i]);                                               \
            _mm256_storeu_##S(ci + W, c1[i]);                                           \
        }                                                                               \
    } else {                                                                            \
        T t[ROWS * NR];                                                                 \
        for (int i = 0; i < ROWS; i++) {                                                \
            _mm256_storeu_##S(t + i * NR, c0[i]);                                       \
            _mm256_storeu_##S(t + i * NR + W, c1[i]);                                   \
        }                                                                               \
        for (int i = 0; i < ROWS; i++)                                                  \
            for (int j = 0; j < NR; j++) {                                              \
                T *cij = c + i * rs_c + j * cs_c;                                       \
                *cij = beta ? *cij + t[i * NR + j] : t[i * NR + j];                     \
            }                                                                           \
    }                                                                                   \
}

DT_DEFINE_UKERNEL_AVX2(float, 6x16_f32, DT_AVX2_F32_MR, DT_AVX2_F32_MR, DT_AVX2_F32_NR, __m256, 8, ps)
DT_DEFINE_UKERNEL_AVX2(float, 6x16_f32_rows1, 1, DT_AVX2_F32_MR, DT_AVX2_F32_NR, __m256, 8, ps)
DT_DEFINE_UKERNEL_AVX2(float, 6x16_f32_rows2, 2, DT_AVX2_F32_MR, DT_AVX2_F32_NR, __m256, 8, ps)
DT_DEFINE_UKERNEL_AVX2(float, 6x16_f32_rows3, 3, DT_AVX2_F32_MR, DT_AVX2_F32_NR, __m256, 8, ps)
DT_DEFINE_UKERNEL_AVX2(float, 6x16_f32_rows4, 4, DT_AVX2_F32_MR, DT_AVX2_F32_NR, __m256, 8, ps)
DT_DEFINE_UKERNEL_AVX2(float, 6x16_f32_rows5, 5, DT_AVX2_F32_MR, DT_AVX2_F32_NR, __m256, 8, ps)
DT_DEFINE_UKERNEL_AVX2(double, 6x8_f64, DT_AVX2_F64_MR, DT_AVX2_F64_MR, DT_AVX2_F64_NR, __m256d, 4, pd)
DT_DEFINE_UKERNEL_AVX2(double, 6x8_f64_rows1, 1, DT_AVX2_F64_MR, DT_AVX2_F64_NR, __m256d, 4, pd)
DT_DEFINE_UKERNEL_AVX2(double, 6x8_f64_rows2, 2, DT_AVX2_F64_MR, DT_AVX2_F64_NR, __m256d, 4, pd)
DT_DEFINE_UKERNEL_AVX2(double, 6x8_f64_rows3, 3, DT_AVX2_F64_MR, DT_AVX2_F64_NR, __m256d, 4, pd)
DT_DEFINE_UKERNEL_AVX2(double, 6x8_f64_rows4, 4, DT_AVX2_F64_MR, DT_AVX2_F64_NR, __m256d, 4, pd)
DT_DEFINE_UKERNEL_AVX2(double, 6x8_f64_rows5, 5, DT_AVX2_F64_MR, DT_AVX2_F64_NR, __m256d, 4, pd)

#endif /* DT_HAVE_X86 */
#endif /* DYNTILE_GEMM_UKERNEL_AVX2_H */
