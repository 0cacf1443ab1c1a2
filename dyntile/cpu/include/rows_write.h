/* rows_write.h: the one writer of ragged rows into padded and packed batches.
 *
 * Every route that writes a batch (pad_batch's kernels in pad.pyx, PackedCollate's
 * pieces in packed_rows.pyx, DynTileCollate's native call in _torch_tensors.cpp)
 * copies rows of fixed-width elements here. An element moves as raw bits of 1, 2, 4
 * or 8 bytes, so one loop serves every dtype of that width; the fill value arrives as
 * the bit pattern of the value in the output dtype (its low `width` bytes count).
 *
 * The width picks a specialised loop once, outside the loops over elements: the
 * batch entries (dt_rows_pad, dt_rows_place) switch once per call; the per-row
 * entries (dt_row_fill, dt_row_copy, dt_row_pad, dt_row_frame) are always inlined,
 * so a caller that passes a constant width (a Cython fused specialisation's
 * sizeof) keeps only that width's loop. Plain C (static inline), read by C and C++.
 *
 * Nothing here validates: callers check lengths against widths and pointers against
 * their buffers before they write.
 */
#ifndef DYNTILE_ROWS_WRITE_H
#define DYNTILE_ROWS_WRITE_H

#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#if defined(_MSC_VER)
#define DT_ROWS_INLINE static __forceinline
#else
#define DT_ROWS_INLINE static inline __attribute__((always_inline))
#endif

/* p[0:len) = the 8-byte word `word`, repeated (len a multiple of the element width,
 * which divides 8, so the pattern stays in phase). A padded row's runs are mostly short
 * (a few elements of padding, a mask row of tens of bytes): those are stored inline, in
 * overlapping 8-byte words, where a memset call per run costs more than the stores; a
 * long run of one repeated byte is a memset. */
DT_ROWS_INLINE void dt_fill_word(char *p, uint64_t word, size_t len, size_t width)
{
    if (len >= 64 && word == 0x0101010101010101ull * (word & 0xff)) {
        memset(p, (int)(word & 0xff), len);
        return;
    }
#if defined(__SSE2__)
    if (len >= 16) { /* 16-byte stores: the torch extension builds at -O2, which leaves loops scalar */
        const __m128i v = _mm_set1_epi64x((long long)word);
        size_t i = 0;
        for (; i + 16 <= len; i += 16) _mm_storeu_si128((__m128i *)(p + i), v);
        if (i < len) _mm_storeu_si128((__m128i *)(p + len - 16), v); /* overlaps, in phase */
        return;
    }
#endif
    if (len >= 8) {
        const size_t words = len / 8;
        for (size_t i = 0; i < words; i++) memcpy(p + 8 * i, &word, 8);
        if (len % 8) memcpy(p + len - 8, &word, 8); /* overlaps the word before, in phase */
        return;
    }
    for (size_t i = 0; i < len; i += width) memcpy(p + i, &word, width); /* low bytes: one element */
}

/* p[0:len) = the byte c (a mask row, a byte-wide fill) */
DT_ROWS_INLINE void dt_fill_bytes(char *p, unsigned char c, size_t len)
{
    dt_fill_word(p, 0x0101010101010101ull * c, len, 1);
}

/* the fill's bit pattern in its low `width` bytes, repeated over 8 bytes */
DT_ROWS_INLINE uint64_t dt_fill_pattern(uint64_t bits, int64_t width)
{
    switch (width) {
    case 1: return 0x0101010101010101ull * (bits & 0xffull);
    case 2: return 0x0001000100010001ull * (bits & 0xffffull);
    case 4: return 0x0000000100000001ull * (bits & 0xffffffffull);
    default: return bits;
    }
}

/* n elements of `width` bytes at dst = the fill bits; dst may be null when n <= 0 */
DT_ROWS_INLINE void dt_row_fill(char *dst, int64_t n, uint64_t bits, int64_t width)
{
    if (n <= 0) return;
    dt_fill_word(dst, dt_fill_pattern(bits, width), (size_t)n * (size_t)width, (size_t)width);
}

/* strided gather of one row, one specialised loop per width */
#define DT_ROWS_GATHER(TYPE)                                                                     \
    for (int64_t j = 0; j < n; j++) memcpy((TYPE *)dst + j, src + j * stride, sizeof(TYPE))

/* dst[j] = the element at src + j * stride (bytes, any sign), j < n: one memcpy when the
 * source is contiguous */
DT_ROWS_INLINE void dt_row_copy(char *dst, const char *src, int64_t n, int64_t stride, int64_t width)
{
    if (stride == width || n <= 1) {
        if (n > 0) memcpy(dst, src, (size_t)(n * width));
        return;
    }
    switch (width) {
    case 1: DT_ROWS_GATHER(uint8_t); break;
    case 2: DT_ROWS_GATHER(uint16_t); break;
    case 4: DT_ROWS_GATHER(uint32_t); break;
    default: DT_ROWS_GATHER(uint64_t); break;
    }
}

/* the fill around a hole of n elements in a row of T (at its end if left, else at its
 * start): the hole is written by the caller */
DT_ROWS_INLINE void dt_row_frame(char *dst, int64_t n, int64_t T, int left, uint64_t bits, int64_t width)
{
    const int64_t lo = left ? T - n : 0;
    dt_row_fill(dst, lo, bits, width);
    dt_row_fill(dst + (lo + n) * width, T - lo - n, bits, width);
}

/* one padded row of T elements: n of them from src (stride bytes apart), the rest fill */
DT_ROWS_INLINE void dt_row_pad(char *dst, const char *src, int64_t n, int64_t stride, int64_t T, int left,
                               uint64_t bits, int64_t width)
{
    const int64_t lo = left ? T - n : 0;
    dt_row_fill(dst, lo, bits, width);
    dt_row_copy(dst + lo * width, src, n, stride, width);
    dt_row_fill(dst + (lo + n) * width, T - lo - n, bits, width);
}

/* rows of row_elems contiguous elements, src rows `step` bytes apart, to rows back to
 * back at dst: one memcpy when the source rows are back to back too */
DT_ROWS_INLINE void dt_rows_copy(char *dst, const char *src, int64_t rows, int64_t row_elems, int64_t step,
                                 int64_t width)
{
    const int64_t row_bytes = row_elems * width;
    if (step == row_bytes) {
        if (rows > 0) memcpy(dst, src, (size_t)(rows * row_bytes));
    } else if (row_elems == 1) {
        dt_row_copy(dst, src, rows, step, width);
    } else {
        for (int64_t j = 0; j < rows; j++) memcpy(dst + j * row_bytes, src + j * step, (size_t)row_bytes);
    }
}

/* the statements after `width` once in a branch per width, with W that width as a constant */
#define DT_ROWS_EACH_WIDTH(width, ...)                                                           \
    switch (width) {                                                                             \
    case 1: { const int64_t W = 1; __VA_ARGS__ } break;                                          \
    case 2: { const int64_t W = 2; __VA_ARGS__ } break;                                          \
    case 4: { const int64_t W = 4; __VA_ARGS__ } break;                                          \
    default: { const int64_t W = 8; __VA_ARGS__ } break;                                         \
    }

/* B padded rows of T elements back to back at out: row i is the lens[i] elements at
 * ptrs[i], steps[i] bytes apart, at its row's end if left, else at its start */
static inline void dt_rows_pad(char *out, int64_t T, int64_t B, const int64_t *lens, const char *const *ptrs,
                               const int64_t *steps, int left, uint64_t bits, int64_t width)
{
    DT_ROWS_EACH_WIDTH(width,
        char *dst = out;
        for (int64_t i = 0; i < B; i++, dst += T * W)
            dt_row_pad(dst, ptrs[i], lens[i], steps[i], T, left, bits, W);
    )
}

/* Packed pieces: fill the out_elems elements at out (unless !fill_out), then copy piece p
 * (sizes[p] rows of row_elems elements from row starts[p] of sample index[p], whose rows
 * lie strides[index[p]] bytes apart from ptrs[index[p]]) to out rows dst[p] ..; with
 * fill_first the first row of every non-empty piece is set back to the fill. */
static inline void dt_rows_place(char *out, int64_t out_elems, int64_t row_elems, uint64_t bits,
                                 const intptr_t *ptrs, const int64_t *strides, const int64_t *index,
                                 const int64_t *starts, const int64_t *sizes, const int64_t *dst, int64_t P,
                                 int fill_first, int fill_out, int64_t width)
{
    DT_ROWS_EACH_WIDTH(width,
        const int64_t row_bytes = row_elems * W;
        if (fill_out) dt_row_fill(out, out_elems, bits, W);
        for (int64_t p = 0; p < P; p++) {
            const int64_t i = index[p];
            const char *src = (const char *)ptrs[i] + starts[p] * strides[i];
            dt_rows_copy(out + dst[p] * row_bytes, src, sizes[p], row_elems, strides[i], W);
            if (fill_first && sizes[p] > 0) dt_row_fill(out + dst[p] * row_bytes, row_elems, bits, W);
        }
    )
}

#endif /* DYNTILE_ROWS_WRITE_H */
