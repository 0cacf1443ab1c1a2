/* gemm_blocking.h: the one table of GEMM block sizes, per ISA and dtype.
 *
 * Register block MR x NR: the C tile one micro-kernel call keeps in registers; the
 * micro-kernel broadcasts A (MR values per p) and loads B in vectors (NR per p).
 * Cache blocks (BLIS names): the MR x KC micro-panel of packed A stays in L1 while
 * the macro-kernel sweeps it over the KC x NC packed block of B, which stays in L2;
 * the MC x KC packed block of A is the unit a thread packs (L2/L3).
 * KC is the most: the driver splits k into equal blocks of at most KC (no short last
 * block). float64 AVX-512 takes a deep KC (its A micro-panel, 35 KiB, leaves L1 little
 * room for the B stream) because every KC block is one more pass over C in L3.
 * MC is a multiple of MR and NC of NR (tests/cpu/test_gemm_blocking.py checks it).
 * Tuned with asv_benches/gemm_compare.py on a 2-core Xeon (48 KiB L1d, 2 MiB L2).
 * Kernels read MR/NR from the DT_*_MR/NR macros below and nothing else.
 */
#ifndef DYNTILE_GEMM_BLOCKING_H
#define DYNTILE_GEMM_BLOCKING_H

enum { DT_ISA_REF = 0, DT_ISA_AVX2 = 1, DT_ISA_AVX512 = 2, DT_ISA_COUNT = 3 };
enum { DT_F32 = 0, DT_F64 = 1, DT_DTYPE_COUNT = 2 };

typedef struct {
    int mr, nr;       /* register block */
    int mc, kc, nc;   /* cache blocks   */
} dt_gemm_blocksizes;

/* register blocks (used by the micro-kernels) */
#define DT_REF_F32_MR 4
#define DT_REF_F32_NR 8
#define DT_REF_F64_MR 4
#define DT_REF_F64_NR 4
#define DT_AVX2_F32_MR 6
#define DT_AVX2_F32_NR 16
#define DT_AVX2_F64_MR 6
#define DT_AVX2_F64_NR 8
#define DT_AVX512_F32_MR 14
#define DT_AVX512_F32_NR 32
#define DT_AVX512_F64_MR 14
#define DT_AVX512_F64_NR 16

/* largest register block over the table: size of the edge-tile scratch */
#define DT_GEMM_MR_MAX 16
#define DT_GEMM_NR_MAX 32

/* [isa][dtype] = {MR, NR, MC, KC, NC} */
static const dt_gemm_blocksizes dt_gemm_blocking[DT_ISA_COUNT][DT_DTYPE_COUNT] = {
    [DT_ISA_REF] = {
        [DT_F32] = {DT_REF_F32_MR, DT_REF_F32_NR, 128, 256, 1024},
        [DT_F64] = {DT_REF_F64_MR, DT_REF_F64_NR, 128, 256, 512},
    },
    [DT_ISA_AVX2] = {
        [DT_F32] = {DT_AVX2_F32_MR, DT_AVX2_F32_NR, 144, 256, 1024},
        [DT_F64] = {DT_AVX2_F64_MR, DT_AVX2_F64_NR, 144, 256, 512},
    },
    [DT_ISA_AVX512] = {
        [DT_F32] = {DT_AVX512_F32_MR, DT_AVX512_F32_NR, 336, 256, 1024},
        [DT_F64] = {DT_AVX512_F64_MR, DT_AVX512_F64_NR, 168, 320, 512},
    },
};

#endif /* DYNTILE_GEMM_BLOCKING_H */
