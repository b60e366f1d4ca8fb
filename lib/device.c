#include "device.h"
#include "backend_cpu.h"

#include <stdio.h>
#include <string.h>

backend_t *device_open(const char *device, int threads, char *err, size_t errlen) {
    if (!strcmp(device, "cpu")) return backend_cpu_create(threads);
    if (!strncmp(device, "cuda", 4))
        snprintf(err, errlen, "--device %s: the CUDA backend is not built yet (issue 5); use --device cpu", device);
    else
        snprintf(err, errlen, "--device %s: expected cpu or cuda:N", device);
    return NULL;
}
