/* BPE over byte-level symbols: the merge table and the merge loop of one word. */
#include "tokenizer_internal.h"

#include <stdlib.h>

/* ---- merge table: (left, right) -> (rank, merged id) -------------------------------- */

static inline uint64_t pair_key(uint32_t left, uint32_t right)
{
    return ((uint64_t)left << 32 | right) + 1;
}

static inline size_t pair_slot(uint64_t key, size_t mask)
{
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & mask;
}

void merge_table_init(merge_table_t *m, size_t count)
{
    size_t size = 16;
    while (size < 2 * count) size *= 2; /* load factor at most 1/2 */
    m->slots = xcalloc(size, sizeof *m->slots);
    m->mask = size - 1;
}

bool merge_table_put(merge_table_t *m, uint32_t left, uint32_t right, uint32_t rank, uint32_t id)
{
    uint64_t key = pair_key(left, right);
    size_t i = pair_slot(key, m->mask);
    while (m->slots[i].key) {
        if (m->slots[i].key == key) return false;
        i = (i + 1) & m->mask;
    }
    m->slots[i] = (merge_entry_t){key, rank, id};
    return true;
}

static inline const merge_entry_t *merge_table_get(const merge_table_t *m, uint32_t left, uint32_t right)
{
    uint64_t key = pair_key(left, right);
    size_t i = pair_slot(key, m->mask);
    while (m->slots[i].key) {
        if (m->slots[i].key == key) return &m->slots[i];
        i = (i + 1) & m->mask;
    }
    return NULL;
}

void merge_table_free(merge_table_t *m)
{
    free(m->slots);
    m->slots = NULL;
}

/* ---- the merge loop ------------------------------------------------------------------ */

static void heap_push(uint64_t *heap, size_t *n, uint64_t v)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (heap[parent] <= v) break;
        heap[i] = heap[parent];
        i = parent;
    }
    heap[i] = v;
}

static uint64_t heap_pop(uint64_t *heap, size_t *n)
{
    uint64_t top = heap[0], last = heap[--*n];
    size_t i = 0, count = *n;
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= count) break;
        if (child + 1 < count && heap[child + 1] < heap[child]) child++;
        if (last <= heap[child]) break;
        heap[i] = heap[child];
        i = child;
    }
    if (count) heap[i] = last;
    return top;
}

/* Looks up the pair that starts at `at` and queues it if it merges. */
static void queue_pair(const tokenizer_t *t, tok_scratch_t *s, uint32_t at, uint32_t len, size_t *nheap)
{
    uint32_t right = s->next_sym[at];
    const merge_entry_t *e = right < len ? merge_table_get(&t->merges, s->sym[at], s->sym[right]) : NULL;
    if (!e) {
        s->pair_rank[at] = UINT32_MAX;
        return;
    }
    s->pair_rank[at] = e->rank;
    s->pair_id[at] = e->id;
    heap_push(s->heap, nheap, (uint64_t)e->rank << 32 | at);
}

/* HF's Word::merge_all without dropout: repeatedly apply the lowest-ranked merge, the
 * leftmost one among equal ranks. Symbols are named by the offset of their first byte, so
 * "leftmost" is the smaller offset; a queued candidate is stale once its pair changed. */
static size_t bpe_merge(const tokenizer_t *t, tok_scratch_t *s, const uint8_t *word, uint32_t len)
{
    tok_scratch_reserve(s, len);
    for (uint32_t i = 0; i < len; i++) {
        s->sym[i] = t->byte_id[word[i]];
        s->next_sym[i] = i + 1;
        s->prev_sym[i] = i - 1; /* UINT32_MAX for the first */
    }
    size_t nheap = 0, nsym = len;
    for (uint32_t i = 0; i < len; i++) queue_pair(t, s, i, len, &nheap);
    while (nheap) {
        uint64_t top = heap_pop(s->heap, &nheap);
        uint32_t at = (uint32_t)top, rank = (uint32_t)(top >> 32);
        if (s->pair_rank[at] != rank) continue; /* stale: the pair at `at` changed */
        uint32_t gone = s->next_sym[at];
        s->sym[at] = s->pair_id[at];
        s->pair_rank[gone] = UINT32_MAX;
        s->next_sym[at] = s->next_sym[gone];
        if (s->next_sym[at] < len) s->prev_sym[s->next_sym[at]] = at;
        nsym--;
        if (s->prev_sym[at] != UINT32_MAX) queue_pair(t, s, s->prev_sym[at], len, &nheap);
        queue_pair(t, s, at, len, &nheap);
    }
    /* Compact the surviving symbols to the front of sym[]. */
    size_t n = 0;
    for (uint32_t i = 0; i < len; i = s->next_sym[i]) s->sym[n++] = s->sym[i];
    return nsym;
}

void tok_bpe_word(const tokenizer_t *t, tok_scratch_t *s, const uint8_t *word, size_t len, ids_t *out)
{
    if (len == 1) {
        ids_push(out, t->byte_id[word[0]]);
        return;
    }
    uint64_t h = tok_word_hash(word, len);
    size_t n;
    const uint32_t *cached = tok_cache_find(s, h, word, len, &n);
    if (cached) {
        ids_append(out, cached, n);
        return;
    }
    n = bpe_merge(t, s, word, (uint32_t)len);
    ids_append(out, s->sym, n);
    tok_cache_put(s, h, word, len, s->sym, n);
    tok_scratch_trim(s);
}
