/* gemm_ukernel.h: the micro-kernel dispatch table, indexed by ISA.
 *
 * dt_gemm_ukernel_f32[isa] / dt_gemm_ukernel_f64[isa] point at the micro-kernel
 * of that ISA (NULL where this build or architecture has none); the register
 * block each one computes is dt_gemm_blocking[isa][dtype].mr x .nr.
 * dt_gemm_best_isa() picks the widest ISA the running CPU supports.
 */
#ifndef DYNTILE_GEMM_UKERNEL_H
#define DYNTILE_GEMM_UKERNEL_H

#include <stdint.h>
#include "dyntile_simd.h"
#include "gemm_blocking.h"
#include "gemm_ukernel_ref.h"
#include "gemm_ukernel_avx2.h"
#include "gemm_ukernel_avx512.h"

typedef void (*dt_ukernel_f32_t)(int64_t kc, const float *a, const float *b, float *c,
                                 int64_t rs_c, int64_t cs_c, int beta);
typedef void (*dt_ukernel_f64_t)(int64_t kc, const double *a, const double *b, double *c,
                                 int64_t rs_c, int64_t cs_c, int beta);

#if DT_HAVE_X86
static const dt_ukernel_f32_t dt_gemm_ukernel_f32[DT_ISA_COUNT] = {
    dt_ukernel_ref_4x8_f32, dt_ukernel_avx2_6x16_f32, dt_ukernel_avx512_14x32_f32};
static const dt_ukernel_f64_t dt_gemm_ukernel_f64[DT_ISA_COUNT] = {
    dt_ukernel_ref_4x4_f64, dt_ukernel_avx2_6x8_f64, dt_ukernel_avx512_14x16_f64};
#else
static const dt_ukernel_f32_t dt_gemm_ukernel_f32[DT_ISA_COUNT] = {dt_ukernel_ref_4x8_f32, 0, 0};
static const dt_ukernel_f64_t dt_gemm_ukernel_f64[DT_ISA_COUNT] = {dt_ukernel_ref_4x4_f64, 0, 0};
#endif

/* [isa][rows]: kernel computing only the first `rows` rows of the tile, straight into C,
   for the edge micro-panel of A (1 <= rows < MR); NULL: the macro-kernel runs the full
   kernel into a scratch tile instead */
#if DT_HAVE_X86
static const dt_ukernel_f32_t dt_gemm_ukernel_rows_f32[DT_ISA_COUNT][DT_GEMM_MR_MAX] = {
    [DT_ISA_AVX2] = {0, dt_ukernel_avx2_6x16_f32_rows1, dt_ukernel_avx2_6x16_f32_rows2,
                     dt_ukernel_avx2_6x16_f32_rows3, dt_ukernel_avx2_6x16_f32_rows4,
                     dt_ukernel_avx2_6x16_f32_rows5},
    [DT_ISA_AVX512] = {0, dt_ukernel_avx512_14x32_f32_rows1, dt_ukernel_avx512_14x32_f32_rows2,
                       dt_ukernel_avx512_14x32_f32_rows3, dt_ukernel_avx512_14x32_f32_rows4,
                       dt_ukernel_avx512_14x32_f32_rows5, dt_ukernel_avx512_14x32_f32_rows6,
                       dt_ukernel_avx512_14x32_f32_rows7, dt_ukernel_avx512_14x32_f32_rows8,
                       dt_ukernel_avx512_14x32_f32_rows9, dt_ukernel_avx512_14x32_f32_rows10,
                       dt_ukernel_avx512_14x32_f32_rows11, dt_ukernel_avx512_14x32_f32_rows12,
                       dt_ukernel_avx512_14x32_f32_rows13},
};
static const dt_ukernel_f64_t dt_gemm_ukernel_rows_f64[DT_ISA_COUNT][DT_GEMM_MR_MAX] = {
    [DT_ISA_AVX2] = {0, dt_ukernel_avx2_6x8_f64_rows1, dt_ukernel_avx2_6x8_f64_rows2,
                     dt_ukernel_avx2_6x8_f64_rows3, dt_ukernel_avx2_6x8_f64_rows4,
                     dt_ukernel_avx2_6x8_f64_rows5},
    [DT_ISA_AVX512] = {0, dt_ukernel_avx512_14x16_f64_rows1, dt_ukernel_avx512_14x16_f64_rows2,
                       dt_ukernel_avx512_14x16_f64_rows3, dt_ukernel_avx512_14x16_f64_rows4,
                       dt_ukernel_avx512_14x16_f64_rows5, dt_ukernel_avx512_14x16_f64_rows6,
                       dt_ukernel_avx512_14x16_f64_rows7, dt_ukernel_avx512_14x16_f64_rows8,
                       dt_ukernel_avx512_14x16_f64_rows9, dt_ukernel_avx512_14x16_f64_rows10,
                       dt_ukernel_avx512_14x16_f64_rows11, dt_ukernel_avx512_14x16_f64_rows12,
                       dt_ukernel_avx512_14x16_f64_rows13},
};
#else
static const dt_ukernel_f32_t dt_gemm_ukernel_rows_f32[DT_ISA_COUNT][DT_GEMM_MR_MAX] = {{0}};
static const dt_ukernel_f64_t dt_gemm_ukernel_rows_f64[DT_ISA_COUNT][DT_GEMM_MR_MAX] = {{0}};
#endif

typedef void (*dt_ukernel_cols_f32_t)(int64_t kc, const float *a, const float *b, float *c,
                                      int64_t rs_c, int cols, int beta);
typedef void (*dt_ukernel_cols_f64_t)(int64_t kc, const double *a, const double *b, double *c,
                                      int64_t rs_c, int cols, int beta);

/* [isa][rows][nv - 1]: kernel computing the first `rows` rows (1 <= rows <= MR) and the
   first `cols` columns (0 < cols < NR) of the tile straight into a row-major C, for the
   edge micro-panel of B; nv = 1 when cols <= NR / 2 (one vector of B per p), else 2.
   NULL: the macro-kernel runs the full kernel into a scratch tile instead */
#if DT_HAVE_X86
static const dt_ukernel_cols_f32_t dt_gemm_ukernel_cols_f32[DT_ISA_COUNT][DT_GEMM_MR_MAX + 1][2] = {
    [DT_ISA_AVX512] = {
        [1] = {dt_ukernel_avx512_cols_f32_v1_r1, dt_ukernel_avx512_cols_f32_v2_r1},
        [2] = {dt_ukernel_avx512_cols_f32_v1_r2, dt_ukernel_avx512_cols_f32_v2_r2},
        [3] = {dt_ukernel_avx512_cols_f32_v1_r3, dt_ukernel_avx512_cols_f32_v2_r3},
        [4] = {dt_ukernel_avx512_cols_f32_v1_r4, dt_ukernel_avx512_cols_f32_v2_r4},
        [5] = {dt_ukernel_avx512_cols_f32_v1_r5, dt_ukernel_avx512_cols_f32_v2_r5},
        [6] = {dt_ukernel_avx512_cols_f32_v1_r6, dt_ukernel_avx512_cols_f32_v2_r6},
        [7] = {dt_ukernel_avx512_cols_f32_v1_r7, dt_ukernel_avx512_cols_f32_v2_r7},
        [8] = {dt_ukernel_avx512_cols_f32_v1_r8, dt_ukernel_avx512_cols_f32_v2_r8},
        [9] = {dt_ukernel_avx512_cols_f32_v1_r9, dt_ukernel_avx512_cols_f32_v2_r9},
        [10] = {dt_ukernel_avx512_cols_f32_v1_r10, dt_ukernel_avx512_cols_f32_v2_r10},
        [11] = {dt_ukernel_avx512_cols_f32_v1_r11, dt_ukernel_avx512_cols_f32_v2_r11},
        [12] = {dt_ukernel_avx512_cols_f32_v1_r12, dt_ukernel_avx512_cols_f32_v2_r12},
        [13] = {dt_ukernel_avx512_cols_f32_v1_r13, dt_ukernel_avx512_cols_f32_v2_r13},
        [14] = {dt_ukernel_avx512_cols_f32_v1_r14, dt_ukernel_avx512_cols_f32_v2_r14},
    },
};
static const dt_ukernel_cols_f64_t dt_gemm_ukernel_cols_f64[DT_ISA_COUNT][DT_GEMM_MR_MAX + 1][2] = {
    [DT_ISA_AVX512] = {
        [1] = {dt_ukernel_avx512_cols_f64_v1_r1, dt_ukernel_avx512_cols_f64_v2_r1},
        [2] = {dt_ukernel_avx512_cols_f64_v1_r2, dt_ukernel_avx512_cols_f64_v2_r2},
        [3] = {dt_ukernel_avx512_cols_f64_v1_r3, dt_ukernel_avx512_cols_f64_v2_r3},
        [4] = {dt_ukernel_avx512_cols_f64_v1_r4, dt_ukernel_avx512_cols_f64_v2_r4},
        [5] = {dt_ukernel_avx512_cols_f64_v1_r5, dt_ukernel_avx512_cols_f64_v2_r5},
        [6] = {dt_ukernel_avx512_cols_f64_v1_r6, dt_ukernel_avx512_cols_f64_v2_r6},
        [7] = {dt_ukernel_avx512_cols_f64_v1_r7, dt_ukernel_avx512_cols_f64_v2_r7},
        [8] = {dt_ukernel_avx512_cols_f64_v1_r8, dt_ukernel_avx512_cols_f64_v2_r8},
        [9] = {dt_ukernel_avx512_cols_f64_v1_r9, dt_ukernel_avx512_cols_f64_v2_r9},
        [10] = {dt_ukernel_avx512_cols_f64_v1_r10, dt_ukernel_avx512_cols_f64_v2_r10},
        [11] = {dt_ukernel_avx512_cols_f64_v1_r11, dt_ukernel_avx512_cols_f64_v2_r11},
        [12] = {dt_ukernel_avx512_cols_f64_v1_r12, dt_ukernel_avx512_cols_f64_v2_r12},
        [13] = {dt_ukernel_avx512_cols_f64_v1_r13, dt_ukernel_avx512_cols_f64_v2_r13},
        [14] = {dt_ukernel_avx512_cols_f64_v1_r14, dt_ukernel_avx512_cols_f64_v2_r14},
    },
};
#else
static const dt_ukernel_cols_f32_t dt_gemm_ukernel_cols_f32[DT_ISA_COUNT][DT_GEMM_MR_MAX + 1][2] = {{{0}}};
static const dt_ukernel_cols_f64_t dt_gemm_ukernel_cols_f64[DT_ISA_COUNT][DT_GEMM_MR_MAX + 1][2] = {{{0}}};
#endif

typedef void (*dt_ukernel_direct_f32_t)(int64_t kc, const float *a, int64_t rs_a, const float *b,
                                        int64_t rs_b, float *c, int64_t rs_c, int cols);
typedef void (*dt_ukernel_direct_f64_t)(int64_t kc, const double *a, int64_t rs_a, const double *b,
                                        int64_t rs_b, double *c, int64_t rs_c, int cols);

/* [isa][rows]: kernel computing `rows` (1..MR) x `cols` (1..NR) of C = A @ B straight
   from row-major A and B, no packing (small products); NULL where the ISA has none */
#if DT_HAVE_X86
static const dt_ukernel_direct_f32_t dt_gemm_ukernel_direct_f32[DT_ISA_COUNT][DT_GEMM_MR_MAX + 1] = {
    [DT_ISA_AVX512] = {0, dt_ukernel_avx512_direct_f32_r1, dt_ukernel_avx512_direct_f32_r2,
                       dt_ukernel_avx512_direct_f32_r3, dt_ukernel_avx512_direct_f32_r4,
                       dt_ukernel_avx512_direct_f32_r5, dt_ukernel_avx512_direct_f32_r6,
                       dt_ukernel_avx512_direct_f32_r7, dt_ukernel_avx512_direct_f32_r8,
                       dt_ukernel_avx512_direct_f32_r9, dt_ukernel_avx512_direct_f32_r10,
                       dt_ukernel_avx512_direct_f32_r11, dt_ukernel_avx512_direct_f32_r12,
                       dt_ukernel_avx512_direct_f32_r13, dt_ukernel_avx512_direct_f32_r14},
};
static const dt_ukernel_direct_f64_t dt_gemm_ukernel_direct_f64[DT_ISA_COUNT][DT_GEMM_MR_MAX + 1] = {
    [DT_ISA_AVX512] = {0, dt_ukernel_avx512_direct_f64_r1, dt_ukernel_avx512_direct_f64_r2,
                       dt_ukernel_avx512_direct_f64_r3, dt_ukernel_avx512_direct_f64_r4,
                       dt_ukernel_avx512_direct_f64_r5, dt_ukernel_avx512_direct_f64_r6,
                       dt_ukernel_avx512_direct_f64_r7, dt_ukernel_avx512_direct_f64_r8,
                       dt_ukernel_avx512_direct_f64_r9, dt_ukernel_avx512_direct_f64_r10,
                       dt_ukernel_avx512_direct_f64_r11, dt_ukernel_avx512_direct_f64_r12,
                       dt_ukernel_avx512_direct_f64_r13, dt_ukernel_avx512_direct_f64_r14},
};
#else
static const dt_ukernel_direct_f32_t dt_gemm_ukernel_direct_f32[DT_ISA_COUNT][DT_GEMM_MR_MAX + 1] = {{0}};
static const dt_ukernel_direct_f64_t dt_gemm_ukernel_direct_f64[DT_ISA_COUNT][DT_GEMM_MR_MAX + 1] = {{0}};
#endif

/* 1 if the running CPU can execute the micro-kernels of `isa` (and they were built) */
static inline int dt_gemm_isa_supported(int isa)
{
    switch (isa) {
    case DT_ISA_REF: return 1;
    case DT_ISA_AVX2: return DT_HAVE_X86 && dt_cpu_has_avx2_fma();
    case DT_ISA_AVX512: return DT_HAVE_X86 && dt_cpu_has_avx512();
    default: return 0;
    }
}

static inline int dt_gemm_best_isa(void)
{
    for (int isa = DT_ISA_COUNT - 1; isa > DT_ISA_REF; isa--)
        if (dt_gemm_isa_supported(isa)) return isa;
    return DT_ISA_REF;
}

#endif /* DYNTILE_GEMM_UKERNEL_H */
