/* gemm_ukernel_ref.h: plain-C reference micro-kernels (portable builds, tests).
 *
 * Every micro-kernel of dyntile has this signature and meaning:
 *
 *     C[i*rs_c + j*cs_c] = (beta ? C[i*rs_c + j*cs_c] : 0) + sum_p a[p*MR + i] * b[p*NR + j]
 *
 * for the full MR x NR tile, 0 <= p < kc: `a` is a packed MR-row micro-panel of A
 * (k-major, MR values per p) and `b` a packed NR-column micro-panel of B (NR values
 * per p). With beta == 0 the old C is never read (it may hold NaN or garbage).
 */
#ifndef DYNTILE_GEMM_UKERNEL_REF_H
#define DYNTILE_GEMM_UKERNEL_REF_H

#include <stdint.h>
#include "gemm_blocking.h"

#define DT_DEFINE_UKERNEL_REF(T, SUFFIX, MR_, NR_)                                   \
static void dt_ukernel_ref_##SUFFIX(int64_t kc, const T *restrict a,                \
                                    const T *restrict b, T *restrict c,             \
                                    int64_t rs_c, int64_t cs_c, int beta)           \
{                                                                                    \
    enum { MR = MR_, NR = NR_ };                                                     \
    T ab[MR * NR];                                                                   \
    for (int ij = 0; ij < MR * NR; ij++) ab[ij] = 0;                                 \
    for (int64_t p = 0; p < kc; p++) {      /* rank-1 update of the MR x NR tile */  \
        for (int i = 0; i < MR; i++)                                                 \
            for (int j = 0; j < NR; j++)                                             \
                ab[i * NR + j] += a[i] * b[j];                                       \
        a += MR;                                                                     \
        b += NR;                                                                     \
    }                                                                                \
    for (int i = 0; i < MR; i++)                                                     \
        for (int j = 0; j < NR; j++) {                                               \
            T *cij = c + i * rs_c + j * cs_c;                                        \
            *cij = beta ? *cij + ab[i * NR + j] : ab[i * NR + j];                    \
        }                                                                            \
}

DT_DEFINE_UKERNEL_REF(float, 4x8_f32, DT_REF_F32_MR, DT_REF_F32_NR)
DT_DEFINE_UKERNEL_REF(double, 4x4_f64, DT_REF_F64_MR, DT_REF_F64_NR)

#endif /* DYNTILE_GEMM_UKERNEL_REF_H */
