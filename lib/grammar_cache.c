/* Compiled grammars by the hash of their constraint, so a schema that many requests share
 * is compiled once. Failures are remembered too: a bad schema sent a thousand times is
 * refused a thousand times for the price of one compile. Least recently used goes first. */
#include "grammar_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint64_t key;
    grammar_t *g;   /* NULL: the constraint failed with err */
    char *err;
    uint64_t used;
} entry_t;

struct grammar_cache {
    const grammar_vocab_t *vocab;
    bool with_masks;
    entry_t *e;
    uint32_t n, max;
    uint64_t clock;
};

grammar_cache_t *grammar_cache_new(const grammar_vocab_t *v, uint32_t max_entries, bool with_masks)
{
    grammar_cache_t *c = xcalloc(1, sizeof *c);
    c->vocab = v;
    c->with_masks = with_masks;
    c->max = max_entries ? max_entries : 1;
    c->e = xcalloc(c->max, sizeof *c->e);
    return c;
}

static void entry_clear(entry_t *e)
{
    grammar_unref(e->g);
    free(e->err);
    *e = (entry_t){0};
}

void grammar_cache_free(grammar_cache_t *c)
{
    if (!c) return;
    for (uint32_t i = 0; i < c->n; i++) entry_clear(&c->e[i]);
    free(c->e);
    free(c);
}

grammar_t *grammar_cache_get(grammar_cache_t *c, constraint_kind_t kind, const char *text, bool *hit, char *err,
                             size_t errlen)
{
    uint64_t key = grammar_key(c->vocab, kind, text);
    c->clock++;
    for (uint32_t i = 0; i < c->n; i++) {
        entry_t *e = &c->e[i];
        if (e->key != key) continue;
        e->used = c->clock;
        *hit = true;
        if (e->g) return grammar_ref(e->g);
        snprintf(err, errlen, "%s", e->err);
        return NULL;
    }
    *hit = false;
    grammar_t *g = grammar_compile(c->vocab, kind, text, c->with_masks, err, errlen);
    entry_t *slot;
    if (c->n < c->max) {
        slot = &c->e[c->n++];
    } else {
        slot = &c->e[0];
        for (uint32_t i = 1; i < c->n; i++)
            if (c->e[i].used < slot->used) slot = &c->e[i];
        entry_clear(slot);
    }
    *slot = (entry_t){key, g, g ? NULL : xstrdup(err), c->clock};
    return g ? grammar_ref(g) : NULL;
}
