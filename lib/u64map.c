#include "u64map.h"
#include "util.h"

#include <stdlib.h>

static size_t slot_of(const u64map_t *m, uint64_t key)
{
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    return (size_t)key & (m->cap - 1);
}

static size_t find(const u64map_t *m, uint64_t key)
{
    size_t i = slot_of(m, key);
    while (m->values[i] && m->keys[i] != key) i = (i + 1) & (m->cap - 1);
    return i;
}

void *u64map_get(const u64map_t *m, uint64_t key)
{
    if (!m->cap) return NULL;
    return m->values[find(m, key)];
}

static void grow(u64map_t *m)
{
    u64map_t bigger = {.cap = m->cap ? m->cap * 2 : 64};
    bigger.keys = xcalloc(bigger.cap, sizeof *bigger.keys);
    bigger.values = xcalloc(bigger.cap, sizeof *bigger.values);
    for (size_t i = 0; i < m->cap; i++)
        if (m->values[i]) u64map_put(&bigger, m->keys[i], m->values[i]);
    free(m->keys);
    free(m->values);
    *m = bigger;
}

void u64map_put(u64map_t *m, uint64_t key, void *value)
{
    if ((m->count + 1) * 4 > m->cap * 3) grow(m);
    size_t i = find(m, key);
    if (!m->values[i]) m->count++;
    m->keys[i] = key;
    m->values[i] = value;
}

void *u64map_remove(u64map_t *m, uint64_t key)
{
    if (!m->cap) return NULL;
    size_t i = find(m, key);
    void *value = m->values[i];
    if (!value) return NULL;
    m->values[i] = NULL;
    m->count--;
    /* Re-insert the rest of the probe run so lookups never stop at the hole. */
    for (size_t j = (i + 1) & (m->cap - 1); m->values[j]; j = (j + 1) & (m->cap - 1)) {
        uint64_t k = m->keys[j];
        void *v = m->values[j];
        m->values[j] = NULL;
        m->count--;
        u64map_put(m, k, v);
    }
    return value;
}

void u64map_free(u64map_t *m)
{
    free(m->keys);
    free(m->values);
    *m = (u64map_t){0};
}
