/* The CPU backend: exact fp32 reference implementation of backend.h, threaded with a small
 * pthread pool over rows, heads, weight tiles and experts. */
#ifndef DI_BACKEND_CPU_H
#define DI_BACKEND_CPU_H

#include "backend.h"

/* threads <= 0: tp_default_threads(). Free with bk->destroy(bk). */
backend_t *backend_cpu_create(int threads);

#endif
