#include "device.h"
#include "backend_cpu.h"
#include "backend_cuda.h"
#include "util.h"

#include <stdio.h>
#include <string.h>

backend_t *device_open(const char *device, int threads, char *err, size_t errlen) {
    if (!strcmp(device, "cpu")) return backend_cpu_create(threads);
    int64_t n = 0;
    if (!strcmp(device, "cuda") || (!strncmp(device, "cuda:", 5) && parse_i64(device + 5, 0, 1023, &n))) {
        char why[256];
        backend_t *bk = backend_cuda_create((int)n, why, sizeof why);
        if (!bk) snprintf(err, errlen, "--device %s: %s", device, why);
        return bk;
    }
    snprintf(err, errlen, "--device %s: expected cpu or cuda:N", device);
    return NULL;
}
