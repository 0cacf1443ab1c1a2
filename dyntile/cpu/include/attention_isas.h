/* attention_isas.h: the tile routines of one element type for every ISA.
 *
 * Included by attention.h once per element type, with the type's macros set (REAL,
 * IREAL, EXP_*: see attention_tile.h) and AT_TYPE (f32 or f64) and AT_PX (ps or pd,
 * the type's intrinsic suffix). Instantiates attention_tile.h for AVX-512 (MR = 4: 32
 * vector registers), AVX2+FMA and portable C (MR = 3: 16 registers), named
 * <routine>_<AT_TYPE>_<isa>. attention_tile.h undefines each ISA's macros after it;
 * this header undefines the type's macros (REAL, IREAL, EXP_*, AT_TYPE, AT_PX) at its end.
 */
#define AT_ISA_CAT2(a, b) a##_##b
#define AT_ISA_CAT3(a, b, c) a##_##b##_##c
#define AT_ISA_SUF(a, b) AT_ISA_CAT2(a, b)
#define AT_ISA_NAME(a, b, c) AT_ISA_CAT3(a, b, c)
#define AT_INTRIN(prefix, op) AT_ISA_NAME(prefix, op, AT_PX)

#if DT_HAVE_X86
#define VBYTES 64
#define MR 4
#define SUF AT_ISA_SUF(AT_TYPE, avx512)
#define VMAX AT_INTRIN(_mm512, max)
#define VMIN AT_INTRIN(_mm512, min)
#define VSET1 AT_INTRIN(_mm512, set1)
#define TARGET DT_TARGET_AVX512
#include "attention_tile.h"

#define VBYTES 32
#define MR 3
#define SUF AT_ISA_SUF(AT_TYPE, avx2)
#define VMAX AT_INTRIN(_mm256, max)
#define VMIN AT_INTRIN(_mm256, min)
#define VSET1 AT_INTRIN(_mm256, set1)
#define TARGET DT_TARGET_AVX2
#include "attention_tile.h"
#endif

#define VBYTES 16
#define MR 3
#define SUF AT_ISA_SUF(AT_TYPE, ref)
#if DT_HAVE_X86
#define VMAX AT_INTRIN(_mm, max)
#define VMIN AT_INTRIN(_mm, min)
#define VSET1 AT_INTRIN(_mm, set1)
#endif
#define TARGET
#include "attention_tile.h"

#undef AT_ISA_CAT2
#undef AT_ISA_CAT3
#undef AT_ISA_SUF
#undef AT_ISA_NAME
#undef AT_INTRIN
#undef AT_TYPE
#undef AT_PX
#undef REAL
#undef IREAL
#undef EXP_LO
#undef EXP_MAGIC
#undef EXP_C_LAST
#undef EXP_POLY
#undef EXP_BIAS
#undef EXP_SHIFT
