/* Per-thread scratch of encoding: made on a thread's first encode, freed when the thread
 * exits or the tokenizer is freed. It keeps the hot loop free of allocations (work arrays grown
 * to the longest word) and holds the word cache. */
#include "tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

#define CACHE_SLOTS (1u << 16)
#define CACHE_MAX_WORD 128 /* longer words are rare and not worth the arena space */
#define CACHE_ARENA_BYTES (4u << 20)
#define CACHE_ARENA_IDS (1u << 20)

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

void tok_scratch_reserve(tok_scratch_t *s, size_t len)
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

void tok_scratch_trim(tok_scratch_t *s)
{
    if (s->cap > SCRATCH_KEEP) scratch_release(s);
}

/* ---- word cache ---------------------------------------------------------------------- */

uint64_t tok_word_hash(const uint8_t *p, size_t len)
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

const uint32_t *tok_cache_find(const tok_scratch_t *s, uint64_t h, const uint8_t *word, size_t len, size_t *n)
{
    if (len > CACHE_MAX_WORD) return NULL;
    const cache_slot_t *c = &s->slots[h & (CACHE_SLOTS - 1)];
    if (c->hash != h || c->word_len != len || memcmp(s->words + c->word_off, word, len)) return NULL;
    *n = c->nids;
    return s->ids + c->ids_off;
}

void tok_cache_put(tok_scratch_t *s, uint64_t h, const uint8_t *word, size_t len, const uint32_t *ids, size_t n)
{
    if (len > CACHE_MAX_WORD) return;
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
