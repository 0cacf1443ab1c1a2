/* gemm_omp.h: the OpenMP calls the GEMM driver makes inside its parallel region.
 *
 * Builds without OpenMP (e.g. Apple clang) get a team of one thread.
 */
#ifndef DYNTILE_GEMM_OMP_H
#define DYNTILE_GEMM_OMP_H

#include <stdint.h>

#ifdef _OPENMP
#include <omp.h>
/* threads in the current team (1 outside a parallel region) */
static inline int dt_omp_team_size(void) { return omp_get_num_threads(); }
/* wait for the whole team: packed B is shared, so it is complete before use and
   kept until every thread is done with it */
static inline void dt_omp_barrier(void)
{
    _Pragma("omp barrier")
}
/* *counter += 1, returning the old value, atomically: threads claim work items */
static inline int64_t dt_omp_fetch_inc(int64_t *counter)
{
    int64_t old;
    _Pragma("omp atomic capture")
    old = (*counter)++;
    return old;
}
#else
static inline int dt_omp_team_size(void) { return 1; }
static inline void dt_omp_barrier(void) {}
static inline int64_t dt_omp_fetch_inc(int64_t *counter) { return (*counter)++; }
#endif

#endif /* DYNTILE_GEMM_OMP_H */
