/* --device for the model stages: "cpu" (the exact fp32 backend, backend_cpu.h) or "cuda" /
 * "cuda:N" (backend_cuda.h; refused with the reason when the build or the machine has none). */
#ifndef DI_DEVICE_H
#define DI_DEVICE_H

#include "backend.h"

#include <stddef.h>

/* The backend for device with `threads` CPU threads (<= 0: the default). NULL with a one-line
 * reason in err for a device that is unknown or not built. */
backend_t *device_open(const char *device, int threads, char *err, size_t errlen);

#endif
