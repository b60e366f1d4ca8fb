/* A hash map from 64-bit keys to pointers (open addressing, linear probing). Stages key
 * their per-request state by seq, which is unique per origin even when ids repeat. */
#ifndef DI_U64MAP_H
#define DI_U64MAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t *keys;
    void **values;   /* NULL marks an empty slot, so values must not be NULL */
    size_t cap;      /* power of two */
    size_t count;
} u64map_t;

void *u64map_get(const u64map_t *m, uint64_t key);
void u64map_put(u64map_t *m, uint64_t key, void *value);
/* Removes key; returns its value or NULL. */
void *u64map_remove(u64map_t *m, uint64_t key);
void u64map_free(u64map_t *m);

/* Iterate: for (size_t i = 0; i < m.cap; i++) if (m.values[i]) ... */

#endif
