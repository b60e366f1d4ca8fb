/* BPE over byte-level symbols: the merge table, the merge loop of one word, and the
 * per-thread scratch that keeps the loop free of allocations (work arrays, a word cache). */
#include "tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

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

/* ---- per-thread scratch -------------------------------------------------------------- */

/* Word cache: direct-mapped, a colliding word replaces the old one. Words and their ids live
 * in two arenas that are emptied (with the table) when full, so memory stays bounded. */
#define CACHE_SLOTS (1u << 16)
#define CACHE_MAX_WORD 128
#define CACHE_ARENA_BYTES (4u << 20)
#define CACHE_ARENA_IDS (1u << 20)

typedef struct {
    uint64_t hash; /* 0 = empty */
    uint32_t word_off, ids_off;
    uint16_t word_len, nids;
} cache_slot_t;

struct tok_scratch {
    struct tok_scratch *next, *prev;
    const tokenizer_t *owner;
    pcre2_match_data *match;
    pcre2_match_context *match_context;

    /* BPE work arrays, grown to the longest word seen. */
    size_t cap;
    uint32_t *sym;       /* id of the symbol that starts at this byte */
    uint32_t *next_sym;  /* start of the following symbol, or len */
    uint32_t *prev_sym;  /* start of the preceding symbol, or UINT32_MAX */
    uint32_t *pair_rank; /* rank of the pair (this symbol, next), UINT32_MAX if none */
    uint32_t *pair_id;   /* what that pair merges into */
    uint64_t *heap;      /* candidate merges, rank << 32 | start, smallest first */

    cache_slot_t *slots;
    uint8_t *words;
    uint32_t *ids;
    uint32_t words_len, ids_len;
};

/* Work arrays past this many bytes are given back after the word, so one huge request does
 * not pin hundreds of MiB in every thread that served it. */
#define SCRATCH_KEEP (1u << 16)

static void scratch_release(tok_scratch_t *s)
{
    free(s->sym);
    free(s->next_sym);
    free(s->prev_sym);
    free(s->pair_rank);
    free(s->pair_id);
    free(s->heap);
    s->sym = s->next_sym = s->prev_sym = s->pair_rank = s->pair_id = NULL;
    s->heap = NULL;
    s->cap = 0;
}

static void scratch_destroy(tok_scratch_t *s)
{
    pcre2_match_data_free(s->match);
    pcre2_match_context_free(s->match_context);
    scratch_release(s);
    free(s->slots);
    free(s->words);
    free(s->ids);
    free(s);
}

static void scratch_unlink(tok_scratch_t *s)
{
    tokenizer_t *t = (tokenizer_t *)s->owner;
    if (s->prev) s->prev->next = s->next;
    else t->scratches = s->next;
    if (s->next) s->next->prev = s->prev;
}

/* pthread key destructor: a thread that used the tokenizer exits. */
static void scratch_thread_exit(void *p)
{
    tok_scratch_t *s = p;
    tokenizer_t *t = (tokenizer_t *)s->owner;
    pthread_mutex_lock(&t->scratch_lock);
    scratch_unlink(s);
    pthread_mutex_unlock(&t->scratch_lock);
    scratch_destroy(s);
}

void tok_scratch_init(tokenizer_t *t)
{
    pthread_mutex_init(&t->scratch_lock, NULL);
    if (pthread_key_create(&t->scratch_key, scratch_thread_exit)) die("tokenizer: out of thread keys");
}

tok_scratch_t *tok_scratch_get(const tokenizer_t *t)
{
    tok_scratch_t *s = pthread_getspecific(t->scratch_key);
    if (s) return s;
    s = xcalloc(1, sizeof *s);
    s->owner = t;
    s->match = pcre2_match_data_create(1, NULL);
    s->match_context = pcre2_match_context_create(NULL);
    if (!s->match || !s->match_context) die("out of memory creating PCRE2 match data");
    s->slots = xcalloc(CACHE_SLOTS, sizeof *s->slots);
    s->words = xmalloc(CACHE_ARENA_BYTES);
    s->ids = xmalloc(CACHE_ARENA_IDS * sizeof *s->ids);
    tokenizer_t *mt = (tokenizer_t *)t;
    pthread_mutex_lock(&mt->scratch_lock);
    s->next = mt->scratches;
    if (s->next) s->next->prev = s;
    mt->scratches = s;
    pthread_mutex_unlock(&mt->scratch_lock);
    pthread_setspecific(t->scratch_key, s);
    return s;
}

void tok_scratch_free_all(tokenizer_t *t)
{
    pthread_key_delete(t->scratch_key);
    while (t->scratches) {
        tok_scratch_t *s = t->scratches;
        t->scratches = s->next;
        scratch_destroy(s);
    }
    pthread_mutex_destroy(&t->scratch_lock);
}

pcre2_match_data *tok_scratch_match_data(tok_scratch_t *s)
{
    return s->match;
}

pcre2_match_context *tok_scratch_match_context(tok_scratch_t *s)
{
    return s->match_context;
}

static void scratch_reserve(tok_scratch_t *s, size_t len)
{
    if (len <= s->cap) return;
    size_t cap = s->cap ? s->cap : 64;
    while (cap < len) cap *= 2;
    s->sym = xrealloc(s->sym, cap * sizeof *s->sym);
    s->next_sym = xrealloc(s->next_sym, cap * sizeof *s->next_sym);
    s->prev_sym = xrealloc(s->prev_sym, cap * sizeof *s->prev_sym);
    s->pair_rank = xrealloc(s->pair_rank, cap * sizeof *s->pair_rank);
    s->pair_id = xrealloc(s->pair_id, cap * sizeof *s->pair_id);
    s->heap = xrealloc(s->heap, 2 * cap * sizeof *s->heap); /* each merge pushes at most 2 */
    s->cap = cap;
}

/* ---- word cache ---------------------------------------------------------------------- */

static uint64_t word_hash(const uint8_t *p, size_t len)
{
    uint64_t h = 0x243F6A8885A308D3ull ^ len;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t v;
        memcpy(&v, p + i, 8);
        h = (h ^ v) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
    }
    uint64_t tail = 0;
    memcpy(&tail, p + i, len - i);
    h = (h ^ tail) * 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 29;
    return h | 1; /* never 0, the empty mark */
}

static const cache_slot_t *cache_find(const tok_scratch_t *s, uint64_t h, const uint8_t *word, size_t len)
{
    const cache_slot_t *c = &s->slots[h & (CACHE_SLOTS - 1)];
    if (c->hash == h && c->word_len == len && !memcmp(s->words + c->word_off, word, len)) return c;
    return NULL;
}

static void cache_put(tok_scratch_t *s, uint64_t h, const uint8_t *word, size_t len, const uint32_t *ids,
                      size_t n)
{
    if (s->words_len + len > CACHE_ARENA_BYTES || s->ids_len + n > CACHE_ARENA_IDS) {
        memset(s->slots, 0, CACHE_SLOTS * sizeof *s->slots);
        s->words_len = s->ids_len = 0;
    }
    cache_slot_t *c = &s->slots[h & (CACHE_SLOTS - 1)];
    *c = (cache_slot_t){h, s->words_len, s->ids_len, (uint16_t)len, (uint16_t)n};
    memcpy(s->words + s->words_len, word, len);
    memcpy(s->ids + s->ids_len, ids, n * sizeof *ids);
    s->words_len += (uint32_t)len;
    s->ids_len += (uint32_t)n;
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
    scratch_reserve(s, len);
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
    uint64_t h = 0;
    if (len <= CACHE_MAX_WORD) {
        h = word_hash(word, len);
        const cache_slot_t *c = cache_find(s, h, word, len);
        if (c) {
            ids_append(out, s->ids + c->ids_off, c->nids);
            return;
        }
    }
    size_t n = bpe_merge(t, s, word, (uint32_t)len);
    ids_append(out, s->sym, n);
    if (len <= CACHE_MAX_WORD) cache_put(s, h, word, len, s->sym, n);
    if (s->cap > SCRATCH_KEEP) scratch_release(s);
}
