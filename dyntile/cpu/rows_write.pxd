# The row writer of every padded and packed batch (include/rows_write.h): Cython's view
# of it. Widths are 1, 2, 4 or 8 bytes; a constant width keeps only that width's loop.
from libc.stdint cimport int64_t, intptr_t, uint64_t


cdef extern from "rows_write.h" nogil:
    void dt_row_fill(char* dst, int64_t n, uint64_t bits, int64_t width)
    void dt_row_pad(char* dst, const char* src, int64_t n, int64_t stride, int64_t T, int left,
                    uint64_t bits, int64_t width)
    void dt_rows_place(char* out, int64_t out_elems, int64_t row_elems, uint64_t bits, const intptr_t* ptrs,
                       const int64_t* strides, const int64_t* index, const int64_t* starts,
                       const int64_t* sizes, const int64_t* dst, int64_t P, int fill_first, int fill_out,
                       int64_t width)
