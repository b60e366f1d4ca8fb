/* A small fixed pool of worker threads for data-parallel loops (the CPU backend's matmuls,
 * attention rows, experts). One loop at a time per pool: tp_for blocks until every index is
 * done. The caller's thread takes part, so a pool of 1 runs everything inline. */
#ifndef DI_THREADPOOL_H
#define DI_THREADPOOL_H

#include <stdint.h>

typedef struct threadpool threadpool_t;

/* fn handles indices [i0, i1); worker is in [0, tp_size) and tells which scratch to use. */
typedef void (*tp_fn)(void *ctx, int64_t i0, int64_t i1, int worker);

/* n_threads >= 1 (the caller counts as one). */
threadpool_t *tp_create(int n_threads);
void tp_free(threadpool_t *tp);
int tp_size(const threadpool_t *tp);

/* Splits [0, n) into at most tp_size contiguous ranges of at least `grain` indices and runs
 * fn on them in parallel. Results must not depend on the split (every index computed alone). */
void tp_for(threadpool_t *tp, int64_t n, int64_t grain, tp_fn fn, void *ctx);

/* The default thread count: $DI_THREADS if set (1..256), else the online CPUs. */
int tp_default_threads(void);

#endif
