/* gemm_blocking.h: the one table of GEMM block sizes, per ISA and dtype.
 *
 * Register block MR x NR: the C tile one micro-kernel call keeps in registers; the
 * micro-kernel broadcasts A (MR values per p) and loads B in vectors (NR per p).
 * Cache blocks (BLIS names): MC x KC is the packed block of A a thread packs, KC x NC
 * the packed block of B the team shares; KC is the most: the driver splits k into
 * equal blocks of at most KC (no short last block), and n likewise by NC.
 * Loop order of the macro-kernel, with the cache each block is sized for:
 *   jr_outer = 1, BLIS's order: the 2nd loop (jr) walks B's NR micro-panels, each
 *     KC x NR micro-panel stays in L1 while the 1st loop (ir) streams the MC x KC
 *     block of A from L2; the KC x NC block of B (1.5 MiB) lives in L3. Needs only
 *     a small L2: the AVX2 rows. NC keeps B's block at 1.5 MiB (NC = 1024 float32,
 *     512 float64) rather than one that packs A only once: an L3 shared with other
 *     tenants holds the smaller block, and packing A once per NC columns costs less
 *     than missing L3.
 *   jr_outer = 0: the 2nd loop walks A's MR micro-panels, each MR x KC micro-panel
 *     stays in L1 while the 1st loop streams the KC x NC block of B from L2. Every
 *     NC columns repack A, but B's block needs a large L2 (2 MiB): the AVX-512 rows,
 *     whose CPUs have one.
 * KC = 384 on AVX2 (a 24 KiB B micro-panel; fewer passes over C than KC = 256).
 * float64 AVX-512 takes a deep KC (its A micro-panel, 35 KiB, leaves L1 little
 * room for the B stream) because every KC block is one more pass over C in L3.
 * MC is a multiple of MR and NC of NR (tests/cpu/test_gemm_blocking.py checks it).
 * The sizes are tuned with asv_benches/gemm_compare.py (the README's Benchmarks
 * section says on which CPUs); AMD Zen 4 has AVX-512 rows of its own
 * (dt_gemm_blocking_avx512_zen4, below).
 * Kernels read MR/NR from the DT_*_MR/NR macros below and nothing else.
 */
#ifndef DYNTILE_GEMM_BLOCKING_H
#define DYNTILE_GEMM_BLOCKING_H

enum { DT_ISA_REF = 0, DT_ISA_AVX2 = 1, DT_ISA_AVX512 = 2, DT_ISA_COUNT = 3 };
enum { DT_F32 = 0, DT_F64 = 1, DT_DTYPE_COUNT = 2 };

typedef struct {
    int mr, nr;       /* register block */
    int mc, kc, nc;   /* cache blocks   */
    int jr_outer;     /* macro-kernel loop order: 1 BLIS's (B micro-panel in L1), 0 A's in L1 */
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

/* [isa][dtype] = {MR, NR, MC, KC, NC, jr_outer} */
static const dt_gemm_blocksizes dt_gemm_blocking[DT_ISA_COUNT][DT_DTYPE_COUNT] = {
    [DT_ISA_REF] = {
        [DT_F32] = {DT_REF_F32_MR, DT_REF_F32_NR, 128, 256, 1024, 0},
        [DT_F64] = {DT_REF_F64_MR, DT_REF_F64_NR, 128, 256, 512, 0},
    },
    [DT_ISA_AVX2] = {
        [DT_F32] = {DT_AVX2_F32_MR, DT_AVX2_F32_NR, 144, 384, 1024, 1},
        [DT_F64] = {DT_AVX2_F64_MR, DT_AVX2_F64_NR, 72, 384, 512, 1},
    },
    [DT_ISA_AVX512] = {
        [DT_F32] = {DT_AVX512_F32_MR, DT_AVX512_F32_NR, 336, 256, 1024, 0},
        [DT_F64] = {DT_AVX512_F64_MR, DT_AVX512_F64_NR, 168, 320, 512, 0},
    },
};

/* AVX-512 rows for AMD Zen 4 (dt_cpu_is_zen4()), same register blocks and loop order.
 * Zen 4 runs a 512-bit FMA on both of its 256-bit units: the micro-kernel asks half
 * the operand bandwidth per cycle that it asks of a CPU with 512-bit units, so A's
 * micro-panel (14 x KC: 56 KiB float32 at KC = 1024) streams well from L2 and B's
 * block from L3, and a deep KC wins: one pass over C (re-read from L3 or memory) per
 * 1024 of k instead of per 256-320, and packing and the micro-kernel's prologue
 * amortised over more flops. MC keeps A's block (MC x KC: 672 KiB) in 3/4 of Zen 4's 1 MiB L2. */
static const dt_gemm_blocksizes dt_gemm_blocking_avx512_zen4[DT_DTYPE_COUNT] = {
    [DT_F32] = {DT_AVX512_F32_MR, DT_AVX512_F32_NR, 168, 1024, 1024, 0},
    [DT_F64] = {DT_AVX512_F64_MR, DT_AVX512_F64_NR, 84, 1024, 512, 0},
};

#endif /* DYNTILE_GEMM_BLOCKING_H */
