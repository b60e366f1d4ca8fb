/* FNV-1a, 64-bit: fingerprints and checksums (not for security). Chain calls by passing the
 * previous value; start from HASH64_INIT. */
#ifndef DI_HASH64_H
#define DI_HASH64_H

#include <stddef.h>
#include <stdint.h>

#define HASH64_INIT 0xcbf29ce484222325ull

static inline uint64_t hash64(uint64_t h, const void *data, size_t n) {
    const uint8_t *p = data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

#endif
