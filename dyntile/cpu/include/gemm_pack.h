/* gemm_pack.h: SIMD packing of one MR-row micro-panel of a row-major A.
 *
 * Packing A interleaves MR rows k-major (ap[p*mr + i] = a[i*rs_a + p*cs_a]): for a
 * row-major A that is a transpose. Rows past mr_cur come out zero, so the edge panel
 * is padded in the same pass.
 *   AVX2 (MR = 6, cs_a == 1): 8 (float32) / 4 (float64) columns of the six rows per
 *   step, transposed in registers (the scalar loop, an element at a time, is a
 *   visible share of a large product when the rows stream from memory).
 *   AVX-512: contiguous rows (cs_a == 1) go through in-register 16x16 (float32) /
 *   8x8 (float64) transposes; other strides through masked gathers (int32 offsets
 *   i*rs_a). The caller checks |rs_a| * mr < 2^31 and mr <= 16.
 */
#ifndef DYNTILE_GEMM_PACK_H
#define DYNTILE_GEMM_PACK_H

#include <stdint.h>
#include <string.h>
#include "dyntile_simd.h"
#include "gemm_blocking.h"

/* prefetch (for reading) every cache line of the `bytes` bytes at p: packing reads B's
   rows a page or more apart, which the hardware prefetchers do not follow */
static inline void dt_prefetch_lines(const void *p, int64_t bytes)
{
#if defined(__GNUC__) || defined(__clang__)
    const char *q = (const char *)p, *last = q + bytes - 1;
    for (; q <= last; q += 64) __builtin_prefetch(q);
    __builtin_prefetch(last);
#else
    (void)p; (void)bytes;
#endif
}

/* Pack n_full NR-wide micro-panels of B whose rows are contiguous, row by row:
   panel q, row p (width bytes) <- b + p * rs_bytes + q * width, the panels kc * width
   bytes apart; each row's `fetch` bytes are prefetched `ahead` rows early. Widths of
   64 and 128 bytes (NR of every ISA's table) are fixed-size copies the compiler
   inlines: a memcpy call per 64 bytes is a visible share of a small product. */
static void dt_pack_b_rows(int64_t kc, int64_t n_full, const char *b, int64_t rs_bytes, int64_t width,
                           char *bp, int64_t fetch, int64_t ahead)
{
    const int64_t panel = kc * width;
    for (int64_t p = 0; p < kc; p++) {
        const char *src = b + p * rs_bytes;
        char *dst = bp + p * width;
        if (p + ahead < kc) dt_prefetch_lines(src + ahead * rs_bytes, fetch);
        if (width == 64)
            for (int64_t q = 0; q < n_full; q++) memcpy(dst + q * panel, src + q * 64, 64);
        else if (width == 128)
            for (int64_t q = 0; q < n_full; q++) memcpy(dst + q * panel, src + q * 128, 128);
        else
            for (int64_t q = 0; q < n_full; q++) memcpy(dst + q * panel, src + q * width, (size_t)width);
    }
}

#if DT_HAVE_X86
/* Six rows of 8 floats -> 8 columns of 6 at ap + p*6; rows past mr_cur are zero.
   The first two steps of the 8x8 unpack/shuffle transpose give each column's rows
   0..3 and 4..5 as 128- and 64-bit pieces, stored without touching the next column. */
_Static_assert(DT_AVX2_F32_MR == 6 && DT_AVX2_F64_MR == 6, "the AVX2 A-packing writes 6-row panels");

DT_TARGET_AVX2 static void dt_pack_a_panel_avx2_f32(int64_t mr_cur, int64_t kc, const float *a,
                                                    int64_t rs_a, float *ap)
{
    enum { MR = 6 };
    int64_t p0 = 0;
    for (; p0 + 8 <= kc; p0 += 8) {
        __m256 r[MR];
        for (int i = 0; i < MR; i++)
            r[i] = i < mr_cur ? _mm256_loadu_ps(a + i * rs_a + p0) : _mm256_setzero_ps();
        /* top[q]: rows 0..3 of column q (low 128 bits) and of column q + 4 (high) */
        const __m256 u0 = _mm256_unpacklo_ps(r[0], r[1]), u1 = _mm256_unpackhi_ps(r[0], r[1]);
        const __m256 u2 = _mm256_unpacklo_ps(r[2], r[3]), u3 = _mm256_unpackhi_ps(r[2], r[3]);
        const __m256 u4 = _mm256_unpacklo_ps(r[4], r[5]), u5 = _mm256_unpackhi_ps(r[4], r[5]);
        const __m256 s0 = _mm256_shuffle_ps(u0, u2, 0x44), s1 = _mm256_shuffle_ps(u0, u2, 0xee);
        const __m256 s2 = _mm256_shuffle_ps(u1, u3, 0x44), s3 = _mm256_shuffle_ps(u1, u3, 0xee);
        /* bot[q]: rows 4, 5 of column q (low 64 bits) and of column q + 4 (bits 128..191) */
        const __m256 top[4] = {s0, s1, s2, s3};
        const __m256 bot[4] = {u4, _mm256_shuffle_ps(u4, u4, 0xee), u5, _mm256_shuffle_ps(u5, u5, 0xee)};
        float *dst = ap + p0 * MR;
        for (int q = 0; q < 4; q++) {          /* column q and q + 4 */
            _mm_storeu_ps(dst + q * MR, _mm256_castps256_ps128(top[q]));
            _mm_storel_pi((__m64 *)(dst + q * MR + 4), _mm256_castps256_ps128(bot[q]));
            _mm_storeu_ps(dst + (q + 4) * MR, _mm256_extractf128_ps(top[q], 1));
            _mm_storel_pi((__m64 *)(dst + (q + 4) * MR + 4), _mm256_extractf128_ps(bot[q], 1));
        }
    }
    for (; p0 < kc; p0++)                      /* last kc % 8 columns */
        for (int i = 0; i < MR; i++)
            ap[p0 * MR + i] = i < mr_cur ? a[i * rs_a + p0] : 0.0f;
}

/* Six rows of 4 doubles -> 4 columns of 6: rows 0..3 by the 4x4 transpose, rows 4, 5
   as 128-bit pairs. */
DT_TARGET_AVX2 static void dt_pack_a_panel_avx2_f64(int64_t mr_cur, int64_t kc, const double *a,
                                                    int64_t rs_a, double *ap)
{
    enum { MR = 6 };
    int64_t p0 = 0;
    for (; p0 + 4 <= kc; p0 += 4) {
        __m256d r[MR];
        for (int i = 0; i < MR; i++)
            r[i] = i < mr_cur ? _mm256_loadu_pd(a + i * rs_a + p0) : _mm256_setzero_pd();
        const __m256d u0 = _mm256_unpacklo_pd(r[0], r[1]), u1 = _mm256_unpackhi_pd(r[0], r[1]);
        const __m256d u2 = _mm256_unpacklo_pd(r[2], r[3]), u3 = _mm256_unpackhi_pd(r[2], r[3]);
        const __m256d u4 = _mm256_unpacklo_pd(r[4], r[5]), u5 = _mm256_unpackhi_pd(r[4], r[5]);
        const __m256d top[4] = {_mm256_permute2f128_pd(u0, u2, 0x20), _mm256_permute2f128_pd(u1, u3, 0x20),
                                _mm256_permute2f128_pd(u0, u2, 0x31), _mm256_permute2f128_pd(u1, u3, 0x31)};
        const __m128d bot[4] = {_mm256_castpd256_pd128(u4), _mm256_castpd256_pd128(u5),
                                _mm256_extractf128_pd(u4, 1), _mm256_extractf128_pd(u5, 1)};
        double *dst = ap + p0 * MR;
        for (int q = 0; q < 4; q++) {
            _mm256_storeu_pd(dst + q * MR, top[q]);
            _mm_storeu_pd(dst + q * MR + 4, bot[q]);
        }
    }
    for (; p0 < kc; p0++)
        for (int i = 0; i < MR; i++)
            ap[p0 * MR + i] = i < mr_cur ? a[i * rs_a + p0] : 0.0;
}

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
static void dt_pack_a_panel_avx2_f32(int64_t mr_cur, int64_t kc, const float *a, int64_t rs_a, float *ap)
{ dt_pack_a_panel_avx512_f32(mr_cur, kc, a, rs_a, 1, 6, ap); }
static void dt_pack_a_panel_avx2_f64(int64_t mr_cur, int64_t kc, const double *a, int64_t rs_a, double *ap)
{ dt_pack_a_panel_avx512_f64(mr_cur, kc, a, rs_a, 1, 6, ap); }
#endif

#endif /* DYNTILE_GEMM_PACK_H */
