/* gemm_gemv.h: matrix-vector products, the m == 1 / n == 1 case of GEMM.
 *
 * y[i] = sum_j mat[i*rs + j*cs] * v[j*incv] for 0 <= i < p, y contiguous. A vector
 * product reads the matrix once and is memory-bound: packing it for the micro-kernel
 * (and padding one column to NR) would cost more than it saves. The same plain C is
 * compiled once per ISA (target attributes) and auto-vectorised; `omp simd` lets the
 * compiler reorder the dot-product sums.
 *   cs == 1 (rows contiguous): four dot products at a time;
 *   rs == 1 (columns contiguous): y += column * v[j], four columns at a time;
 *   otherwise: strided dot products.
 */
#ifndef DYNTILE_GEMM_GEMV_H
#define DYNTILE_GEMM_GEMV_H

#include <stdint.h>
#include "dyntile_simd.h"
#include "gemm_blocking.h"

#define DT_DEFINE_GEMV(ATTR, ISA, T, SUFFIX)                                             \
ATTR static void dt_gemv_##ISA##_##SUFFIX(int64_t p, int64_t q, const T *mat, int64_t rs,  \
                                          int64_t cs, const T *v, int64_t incv, T *y)      \
{                                                                                          \
    int64_t i = 0, j = 0;                                                                  \
    if (cs == 1 && incv == 1) {                                                            \
        for (; i + 4 <= p; i += 4) {                                                       \
            const T *r0 = mat + i * rs, *r1 = r0 + rs, *r2 = r1 + rs, *r3 = r2 + rs;       \
            T s0 = 0, s1 = 0, s2 = 0, s3 = 0;                                              \
            _Pragma("omp simd reduction(+:s0,s1,s2,s3)")                                   \
            for (j = 0; j < q; j++) {                                                      \
                s0 += r0[j] * v[j];                                                        \
                s1 += r1[j] * v[j];                                                        \
                s2 += r2[j] * v[j];                                                        \
                s3 += r3[j] * v[j];                                                        \
            }                                                                              \
            y[i] = s0; y[i + 1] = s1; y[i + 2] = s2; y[i + 3] = s3;                        \
        }                                                                                  \
        for (; i < p; i++) {                                                               \
            const T *r0 = mat + i * rs;                                                    \
            T s0 = 0;                                                                      \
            _Pragma("omp simd reduction(+:s0)")                                            \
            for (j = 0; j < q; j++) s0 += r0[j] * v[j];                                    \
            y[i] = s0;                                                                     \
        }                                                                                  \
    } else if (rs == 1) {                                                                  \
        for (i = 0; i < p; i++) y[i] = 0;                                                  \
        for (; j + 4 <= q; j += 4) {                                                       \
            const T *c0 = mat + j * cs, *c1 = c0 + cs, *c2 = c1 + cs, *c3 = c2 + cs;       \
            const T v0 = v[j * incv], v1 = v[(j + 1) * incv];                              \
            const T v2 = v[(j + 2) * incv], v3 = v[(j + 3) * incv];                        \
            _Pragma("omp simd")                                                            \
            for (i = 0; i < p; i++)                                                        \
                y[i] += (c0[i] * v0 + c1[i] * v1) + (c2[i] * v2 + c3[i] * v3);             \
        }                                                                                  \
        for (; j < q; j++) {                                                               \
            const T *c0 = mat + j * cs, v0 = v[j * incv];                                  \
            _Pragma("omp simd")                                                            \
            for (i = 0; i < p; i++) y[i] += c0[i] * v0;                                    \
        }                                                                                  \
    } else {                                                                               \
        for (i = 0; i < p; i++) {                                                          \
            T s0 = 0;                                                                      \
            _Pragma("omp simd reduction(+:s0)")                                            \
            for (j = 0; j < q; j++) s0 += mat[i * rs + j * cs] * v[j * incv];              \
            y[i] = s0;                                                                     \
        }                                                                                  \
    }                                                                                      \
}

DT_DEFINE_GEMV(, ref, float, f32)
DT_DEFINE_GEMV(, ref, double, f64)
#if DT_HAVE_X86
DT_DEFINE_GEMV(DT_TARGET_AVX2, avx2, float, f32)
DT_DEFINE_GEMV(DT_TARGET_AVX2, avx2, double, f64)
DT_DEFINE_GEMV(DT_TARGET_AVX512, avx512, float, f32)
DT_DEFINE_GEMV(DT_TARGET_AVX512, avx512, double, f64)
#endif

typedef void (*dt_gemv_f32_t)(int64_t p, int64_t q, const float *mat, int64_t rs, int64_t cs,
                              const float *v, int64_t incv, float *y);
typedef void (*dt_gemv_f64_t)(int64_t p, int64_t q, const double *mat, int64_t rs, int64_t cs,
                              const double *v, int64_t incv, double *y);

#if DT_HAVE_X86
static const dt_gemv_f32_t dt_gemv_f32[DT_ISA_COUNT] = {dt_gemv_ref_f32, dt_gemv_avx2_f32, dt_gemv_avx512_f32};
static const dt_gemv_f64_t dt_gemv_f64[DT_ISA_COUNT] = {dt_gemv_ref_f64, dt_gemv_avx2_f64, dt_gemv_avx512_f64};
#else
static const dt_gemv_f32_t dt_gemv_f32[DT_ISA_COUNT] = {dt_gemv_ref_f32, dt_gemv_ref_f32, dt_gemv_ref_f32};
static const dt_gemv_f64_t dt_gemv_f64[DT_ISA_COUNT] = {dt_gemv_ref_f64, dt_gemv_ref_f64, dt_gemv_ref_f64};
#endif

#endif /* DYNTILE_GEMM_GEMV_H */
