#include "origin.h"

#include <stdlib.h>
#include <string.h>

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

int64_t origin_find(const origin_t *o, const char *id)
{
    uintptr_t v = (uintptr_t)u64map_get(&o->by_hash, fnv1a(id));
    return v && !strcmp(o->ids[v - 1], id) ? (int64_t)(v - 1) : -1;
}

uint64_t origin_add(origin_t *o, const char *id)
{
    o->ids = xrealloc(o->ids, (o->n + 1) * sizeof *o->ids);
    o->ids[o->n] = xstrdup(id ? id : "");
    /* On a (64-bit) hash collision the later id is simply not indexed. */
    if (id && !u64map_get(&o->by_hash, fnv1a(id))) u64map_put(&o->by_hash, fnv1a(id), (void *)(uintptr_t)(o->n + 1));
    return o->n++;
}

ledger_t origin_ledger(const origin_t *o, const char *stage)
{
    return (ledger_t){.heard = true, .origin = (char *)ledger_instance_id(stage), .announced = o->n,
                      .ids = o->ids, .n_ids = o->n};
}

void origin_free(origin_t *o)
{
    for (uint64_t i = 0; i < o->n; i++) free(o->ids[i]);
    free(o->ids);
    u64map_free(&o->by_hash);
    *o = (origin_t){0};
}
