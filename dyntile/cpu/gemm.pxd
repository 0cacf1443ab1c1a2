# Declarations of the C side of the GEMM kernel (dyntile/cpu/include/gemm_*.h).
from libc.stdint cimport int64_t

cdef extern from "gemm_ukernel.h" nogil:
    enum:
        DT_ISA_REF
        DT_ISA_AVX2
        DT_ISA_AVX512
        DT_ISA_COUNT
        DT_F32
        DT_F64
        DT_DTYPE_COUNT
        DT_GEMM_MR_MAX
        DT_GEMM_NR_MAX

    ctypedef struct dt_gemm_blocksizes:
        int mr, nr, mc, kc, nc, jr_outer

    const dt_gemm_blocksizes dt_gemm_blocking[DT_ISA_COUNT][DT_DTYPE_COUNT]
    const dt_gemm_blocksizes dt_gemm_blocking_avx512_zen4[DT_DTYPE_COUNT]
    int dt_cpu_is_zen4()

    ctypedef void (*dt_ukernel_f32_t)(int64_t kc, const float *a, const float *b, float *c,
                                      int64_t rs_c, int64_t cs_c, int beta) noexcept nogil
    ctypedef void (*dt_ukernel_f64_t)(int64_t kc, const double *a, const double *b, double *c,
                                      int64_t rs_c, int64_t cs_c, int beta) noexcept nogil
    const dt_ukernel_f32_t dt_gemm_ukernel_f32[DT_ISA_COUNT]
    const dt_ukernel_f64_t dt_gemm_ukernel_f64[DT_ISA_COUNT]
    const dt_ukernel_f32_t dt_gemm_ukernel_rows_f32[DT_ISA_COUNT][DT_GEMM_MR_MAX]
    const dt_ukernel_f64_t dt_gemm_ukernel_rows_f64[DT_ISA_COUNT][DT_GEMM_MR_MAX]
    ctypedef void (*dt_ukernel_cols_f32_t)(int64_t kc, const float *a, const float *b, float *c,
                                           int64_t rs_c, int cols, int beta) noexcept nogil
    ctypedef void (*dt_ukernel_cols_f64_t)(int64_t kc, const double *a, const double *b, double *c,
                                           int64_t rs_c, int cols, int beta) noexcept nogil
    const dt_ukernel_cols_f32_t dt_gemm_ukernel_cols_f32[DT_ISA_COUNT][DT_GEMM_MR_MAX + 1][2]
    const dt_ukernel_cols_f64_t dt_gemm_ukernel_cols_f64[DT_ISA_COUNT][DT_GEMM_MR_MAX + 1][2]
    ctypedef void (*dt_ukernel_direct_f32_t)(int64_t kc, const float *a, int64_t rs_a, const float *b,
                                             int64_t rs_b, float *c, int64_t rs_c, int cols) noexcept nogil
    ctypedef void (*dt_ukernel_direct_f64_t)(int64_t kc, const double *a, int64_t rs_a, const double *b,
                                             int64_t rs_b, double *c, int64_t rs_c, int cols) noexcept nogil
    const dt_ukernel_direct_f32_t dt_gemm_ukernel_direct_f32[DT_ISA_COUNT][DT_GEMM_MR_MAX + 1]
    const dt_ukernel_direct_f64_t dt_gemm_ukernel_direct_f64[DT_ISA_COUNT][DT_GEMM_MR_MAX + 1]

    int dt_gemm_isa_supported(int isa)
    int dt_gemm_best_isa()

cdef extern from "gemm_pack.h" nogil:
    void dt_prefetch_lines(const void *p, int64_t bytes)
    void dt_pack_b_rows(int64_t kc, int64_t n_full, const char *b, int64_t rs_bytes, int64_t width,
                        char *bp, int64_t fetch, int64_t ahead)
    void dt_pack_a_panel_avx512_f32(int64_t mr_cur, int64_t kc, const float *a, int64_t rs_a,
                                    int64_t cs_a, int mr, float *ap)
    void dt_pack_a_panel_avx512_f64(int64_t mr_cur, int64_t kc, const double *a, int64_t rs_a,
                                    int64_t cs_a, int mr, double *ap)
    void dt_pack_a_panel_avx2_f32(int64_t mr_cur, int64_t kc, const float *a, int64_t rs_a,
                                  float *ap)
    void dt_pack_a_panel_avx2_f64(int64_t mr_cur, int64_t kc, const double *a, int64_t rs_a,
                                  double *ap)

cdef extern from "gemm_gemv.h" nogil:
    ctypedef void (*dt_gemv_f32_t)(int64_t p, int64_t q, const float *mat, int64_t rs,
                                   int64_t cs, const float *v, int64_t incv, float *y) noexcept nogil
    ctypedef void (*dt_gemv_f64_t)(int64_t p, int64_t q, const double *mat, int64_t rs,
                                   int64_t cs, const double *v, int64_t incv, double *y) noexcept nogil
    const dt_gemv_f32_t dt_gemv_f32[DT_ISA_COUNT]
    const dt_gemv_f64_t dt_gemv_f64[DT_ISA_COUNT]

cdef extern from "gemm_omp.h" nogil:
    int dt_omp_team_size()
    void dt_omp_barrier()
    int64_t dt_omp_fetch_inc(int64_t *counter)


# One GEMM problem as the five loops see it: C[m, n] (+)= A[m, k] @ B[k, n], element strides.
cdef struct gemm_problem:
    int64_t m, n, k
    int64_t rs_a, cs_a, rs_b, cs_b, rs_c, cs_c
    int isa
    dt_gemm_blocksizes bs
