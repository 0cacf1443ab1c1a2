# Element-width types shared by the copy kernels (pad, tile): every fixed-width dtype
# moves as raw bits of 1, 2, 4 or 8 bytes, so one specialisation serves many dtypes.
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memset

ctypedef fused elem_t:
    uint8_t
    uint16_t
    uint32_t
    uint64_t


cdef inline void fill_n(elem_t* dst, Py_ssize_t n, elem_t value) noexcept nogil:
    """dst[0:n] = value (memset when the bit pattern is zero)."""
    cdef Py_ssize_t j
    if value == 0:
        memset(dst, 0, n * sizeof(elem_t))
    else:
        for j in range(n):
            dst[j] = value
