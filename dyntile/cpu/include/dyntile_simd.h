/* dyntile_simd.h: which SIMD instruction sets this CPU runs, checked at run time.
 *
 * The extensions are compiled with -O3 only (never -march=native): SIMD code is
 * compiled per function with the DT_TARGET_* attributes below and called only after
 * dt_cpu_has_*() said yes, so one build runs on any x86-64 and, without the x86
 * paths, on any other architecture.
 */
#ifndef DYNTILE_SIMD_H
#define DYNTILE_SIMD_H

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define DT_HAVE_X86 1
#include <cpuid.h>
#include <immintrin.h>
#define DT_TARGET_AVX2 __attribute__((target("avx2,fma")))
#define DT_TARGET_AVX512 __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma")))

/* __builtin_cpu_supports also checks that the OS saves the wide registers (XCR0). */
static inline int dt_cpu_has_avx2_fma(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

static inline int dt_cpu_has_avx512(void)
{
    __builtin_cpu_init();
    return dt_cpu_has_avx2_fma() && __builtin_cpu_supports("avx512f")
        && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw")
        && __builtin_cpu_supports("avx512vl");
}
/* AMD Zen 4 (family 19h with AVX-512): it runs 512-bit instructions on 256-bit units,
   half the FMA rate per instruction of a 512-bit core, so its GEMM blocks differ
   (gemm_blocking.h). Zen 3, also family 19h, has no AVX-512. */
static inline int dt_cpu_is_zen4(void)
{
    unsigned int eax, ebx, ecx, edx, family;
    if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)
            || ebx != 0x68747541u || edx != 0x69746e65u || ecx != 0x444d4163u)  /* "AuthenticAMD" */
        return 0;
    __get_cpuid(1, &eax, &ebx, &ecx, &edx);
    family = (eax >> 8) & 0xf;
    if (family == 0xf)
        family += (eax >> 20) & 0xff;
    return family == 0x19 && dt_cpu_has_avx512();
}

/* prefetch (into L1) every cache line of the `bytes` bytes at p; unaligned rows of
   C (NumPy's are usually 16 bytes off a line) span one line more than bytes / 64 */
static inline void dt_prefetch_row_t0(const void *p, int bytes)
{
    const char *first = (const char *)p, *last = first + bytes - 1;
    for (const char *q = first; q <= last; q += 64) _mm_prefetch(q, _MM_HINT_T0);
    _mm_prefetch(last, _MM_HINT_T0);
}
#else
#define DT_HAVE_X86 0
static inline int dt_cpu_has_avx2_fma(void) { return 0; }
static inline int dt_cpu_has_avx512(void) { return 0; }
static inline int dt_cpu_is_zen4(void) { return 0; }
#endif

#endif /* DYNTILE_SIMD_H */
