/* gemm_pack.h: SIMD packing of one MR-row micro-panel of a row-major A.
 *
 * Packing A interleaves MR rows k-major (ap[p*mr + i] = a[i*rs_a + p*cs_a]): for a
 * row-major A that is a transpose. With AVX-512, contiguous rows (cs_a == 1) go
 * through in-register 16x16 (float32) / 8x8 (float64) transposes; other strides
 * through masked gathers (int32 offsets i*rs_a). Rows past mr_cur come out zero, so
 * the edge panel is padded in the same pass.
 * The caller checks |rs_a| * mr < 2^31 and mr <= 16.
 */
#ifndef DYNTILE_GEMM_PACK_H
#define DYNTILE_GEMM_PACK_H

#include <stdint.h>
#include "dyntile_simd.h"

#if DT_HAVE_X86
/* r[c] <- column c of the 16x16 matrix whose rows are r[0..15] */
DT_TARGET_AVX512 static inline void dt_transpose16x16_ps(__m512 r[16])
{
    __m512 t[16];
    for (int i = 0; i < 8; i++) {                 /* 2x2 blocks of 32-bit elements */
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {                 /* 4x4 blocks inside each 128-bit lane */
        r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[4 * i]), _mm512_castps_pd(t[4 * i + 2])));
        r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[4 * i]), _mm512_castps_pd(t[4 * i + 2])));
        r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[4 * i + 1]), _mm512_castps_pd(t[4 * i + 3])));
        r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[4 * i + 1]), _mm512_castps_pd(t[4 * i + 3])));
    }
    for (int j = 0; j < 4; j++) {                 /* move 128-bit lanes into place */
        t[j] = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x88);
        t[4 + j] = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xdd);
        t[8 + j] = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x88);
        t[12 + j] = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xdd);
    }
    for (int j = 0; j < 4; j++) {
        r[j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0x88);
        r[8 + j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0xdd);
        r[4 + j] = _mm512_shuffle_f32x4(t[4 + j], t[12 + j], 0x88);
        r[12 + j] = _mm512_shuffle_f32x4(t[4 + j], t[12 + j], 0xdd);
    }
}

/* r[c] <- column c of the 8x8 matrix whose rows are r[0..7] */
DT_TARGET_AVX512 static inline void dt_transpose8x8_pd(__m512d r[8])
{
    __m512d t[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm512_unpacklo_pd(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_pd(r[2 * i], r[2 * i + 1]);
    }
    for (int j = 0; j < 2; j++) {
        r[j] = _mm512_shuffle_f64x2(t[j], t[2 + j], 0x88);
        r[2 + j] = _mm512_shuffle_f64x2(t[j], t[2 + j], 0xdd);
        r[4 + j] = _mm512_shuffle_f64x2(t[4 + j], t[6 + j], 0x88);
        r[6 + j] = _mm512_shuffle_f64x2(t[4 + j], t[6 + j], 0xdd);
    }
    for (int j = 0; j < 2; j++) {
        t[j] = _mm512_shuffle_f64x2(r[j], r[4 + j], 0x88);
        t[4 + j] = _mm512_shuffle_f64x2(r[j], r[4 + j], 0xdd);
        t[2 + j] = _mm512_shuffle_f64x2(r[2 + j], r[6 + j], 0x88);
        t[6 + j] = _mm512_shuffle_f64x2(r[2 + j], r[6 + j], 0xdd);
    }
    for (int i = 0; i < 8; i++) r[i] = t[i];
}

DT_TARGET_AVX512 static void dt_pack_a_panel_avx512_f32(int64_t mr_cur, int64_t kc, const float *a,
                                                        int64_t rs_a, int64_t cs_a, int mr, float *ap)
{
    const __mmask16 store = (__mmask16)((1u << mr) - 1u);
    if (cs_a == 1) {                          /* 16 columns of the mr_cur rows at a time */
        __m512 r[16];
        for (int64_t p0 = 0; p0 < kc; p0 += 16) {
            const int64_t w = kc - p0 < 16 ? kc - p0 : 16;
            const __mmask16 cols = (__mmask16)((1u << w) - 1u);
            for (int i = 0; i < mr_cur; i++)   /* rows stream from L3/DRAM: fetch ahead */
                _mm_prefetch((const char *)(a + i * rs_a + p0 + 32), _MM_HINT_T0);
            for (int i = 0; i < 16; i++)
                r[i] = i < mr_cur ? _mm512_maskz_loadu_ps(cols, a + i * rs_a + p0) : _mm512_setzero_ps();
            dt_transpose16x16_ps(r);
            for (int64_t q = 0; q < w; q++)
                _mm512_mask_storeu_ps(ap + (p0 + q) * mr, store, r[q]);
        }
        return;
    }
    const __m512i offsets = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_set1_epi32((int)rs_a));
    const __mmask16 load = (__mmask16)((1u << mr_cur) - 1u);
    for (int64_t p = 0; p < kc; p++) {       /* ap[p, 0:mr] = a[0:mr_cur, p], zero below */
        const __m512 v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), load, offsets, a + p * cs_a, 4);
        _mm512_mask_storeu_ps(ap + p * mr, store, v);
    }
}

DT_TARGET_AVX512 static void dt_pack_a_panel_avx512_f64(int64_t mr_cur, int64_t kc, const double *a,
                                                        int64_t rs_a, int64_t cs_a, int mr, double *ap)
{
    const int64_t mr_hi = mr > 8 ? mr - 8 : 0, cur_hi = mr_cur > 8 ? mr_cur - 8 : 0;
    const __mmask8 load_lo = (__mmask8)((1u << (mr_cur < 8 ? mr_cur : 8)) - 1u);
    const __mmask8 load_hi = (__mmask8)((1u << cur_hi) - 1u);
    const __mmask8 store_lo = (__mmask8)((1u << (mr < 8 ? mr : 8)) - 1u);
    const __mmask8 store_hi = (__mmask8)((1u << mr_hi) - 1u);
    const double *a_hi = a + 8 * rs_a;
    if (cs_a == 1) {                          /* 8 columns, rows 0..7 then rows 8..15 */
        __m512d lo[8], hi[8];
        for (int64_t p0 = 0; p0 < kc; p0 += 8) {
            const int64_t w = kc - p0 < 8 ? kc - p0 : 8;
            const __mmask8 cols = (__mmask8)((1u << w) - 1u);
            for (int i = 0; i < mr_cur; i++)   /* rows stream from L3/DRAM: fetch ahead */
                _mm_prefetch((const char *)(a + i * rs_a + p0 + 16), _MM_HINT_T0);
            for (int i = 0; i < 8; i++) {
                lo[i] = i < mr_cur ? _mm512_maskz_loadu_pd(cols, a + i * rs_a + p0) : _mm512_setzero_pd();
                hi[i] = i + 8 < mr_cur ? _mm512_maskz_loadu_pd(cols, a_hi + i * rs_a + p0) : _mm512_setzero_pd();
            }
            dt_transpose8x8_pd(lo);
            if (mr_hi) dt_transpose8x8_pd(hi);
            for (int64_t q = 0; q < w; q++) {
                _mm512_mask_storeu_pd(ap + (p0 + q) * mr, store_lo, lo[q]);
                if (mr_hi) _mm512_mask_storeu_pd(ap + (p0 + q) * mr + 8, store_hi, hi[q]);
            }
        }
        return;
    }
    const __m256i offsets = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                               _mm256_set1_epi32((int)rs_a));
    for (int64_t p = 0; p < kc; p++) {       /* rows 0..7, then rows 8..mr-1 */
        const __m512d lo = _mm512_mask_i32gather_pd(_mm512_setzero_pd(), load_lo, offsets, a + p * cs_a, 8);
        _mm512_mask_storeu_pd(ap + p * mr, store_lo, lo);
        if (mr_hi) {
            const __m512d hi = _mm512_mask_i32gather_pd(_mm512_setzero_pd(), load_hi, offsets,
                                                        cur_hi ? a_hi + p * cs_a : a, 8);
            _mm512_mask_storeu_pd(ap + p * mr + 8, store_hi, hi);
        }
    }
}
#else
/* no AVX-512 on this architecture: never called (the ISA is never avx512), kept correct */
#define DT_DEFINE_PACK_A_SCALAR(T, SUFFIX)                                                   \
static void dt_pack_a_panel_avx512_##SUFFIX(int64_t mr_cur, int64_t kc, const T *a,          \
                                            int64_t rs_a, int64_t cs_a, int mr, T *ap)       \
{                                                                                            \
    for (int64_t p = 0; p < kc; p++)                                                         \
        for (int64_t i = 0; i < mr; i++)                                                     \
            ap[p * mr + i] = i < mr_cur ? a[i * rs_a + p * cs_a] : (T)0;                     \
}
DT_DEFINE_PACK_A_SCALAR(float, f32)
DT_DEFINE_PACK_A_SCALAR(double, f64)
#endif

#endif /* DYNTILE_GEMM_PACK_H */
