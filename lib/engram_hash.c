/* Engram hash constants and row ids; numpy's generator reimplemented from its published
 * algorithms (SeedSequence mixing, PCG64 XSL-RR, Lemire's bounded integers). */
#include "engram_hash.h"
#include "util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- numpy SeedSequence (pool of 4 uint32 words) --------------------------------------- */
#define SS_POOL 4

static uint32_t ss_hashmix(uint32_t v, uint32_t *hc) {
    v ^= *hc;
    *hc *= 0x931e8875u;
    v *= *hc;
    return v ^ (v >> 16);
}

static uint32_t ss_mix(uint32_t x, uint32_t y) {
    uint32_t r = 0xca01f9ddu * x - 0x4973f715u * y;
    return r ^ (r >> 16);
}

/* seed_seq.generate_state(n64, uint64) for an integer entropy. */
static void seed_sequence(uint64_t entropy, uint64_t *out, int n64) {
    uint32_t words[2];
    int nw = 0;
    do {
        words[nw++] = (uint32_t)entropy;
        entropy >>= 32;
    } while (entropy);
    uint32_t pool[SS_POOL], hc = 0x43b0d7e5u;
    for (int i = 0; i < SS_POOL; i++) pool[i] = ss_hashmix(i < nw ? words[i] : 0, &hc);
    for (int s = 0; s < SS_POOL; s++)
        for (int d = 0; d < SS_POOL; d++)
            if (s != d) pool[d] = ss_mix(pool[d], ss_hashmix(pool[s], &hc));
    uint32_t hb = 0x8b51f9ddu;
    for (int i = 0; i < 2 * n64; i++) {
        uint32_t v = pool[i % SS_POOL] ^ hb;
        hb *= 0x58f38dedu;
        v *= hb;
        v ^= v >> 16;
        if (i & 1) out[i / 2] |= (uint64_t)v << 32;
        else out[i / 2] = v;
    }
}

/* --- PCG64 (128-bit LCG, XSL-RR output) ------------------------------------------------- */
typedef unsigned __int128 u128;
typedef struct {
    u128 state, inc;
} pcg64_t;

static const u128 PCG_MULT = ((u128)0x2360ed051fc65da4ull << 64) | 0x4385df649fccf645ull;

static uint64_t pcg64_next(pcg64_t *g) {
    g->state = g->state * PCG_MULT + g->inc;
    uint64_t x = (uint64_t)(g->state >> 64) ^ (uint64_t)g->state;
    unsigned rot = (unsigned)(g->state >> 122);
    return (x >> rot) | (x << ((64 - rot) & 63));
}

static void pcg64_seed(pcg64_t *g, uint64_t seed) {
    uint64_t v[4];
    seed_sequence(seed, v, 4);
    u128 s = ((u128)v[0] << 64) | v[1], i = ((u128)v[2] << 64) | v[3];
    g->state = 0;
    g->inc = (i << 1) | 1;
    pcg64_next(g);
    g->state += s;
    pcg64_next(g);
}

int numpy_integers(uint64_t seed, int64_t bound, int n, int64_t *out) {
    if (bound - 1 <= (int64_t)0xFFFFFFFF) return -1; /* numpy takes a 32-bit path there */
    pcg64_t g;
    pcg64_seed(&g, seed);
    uint64_t excl = (uint64_t)bound; /* values in [0, bound) */
    for (int k = 0; k < n; k++) {
        u128 m = (u128)pcg64_next(&g) * excl;
        uint64_t left = (uint64_t)m;
        if (left < excl) {
            uint64_t threshold = (UINT64_MAX - (excl - 1)) % excl;
            while (left < threshold) {
                m = (u128)pcg64_next(&g) * excl;
                left = (uint64_t)m;
            }
        }
        out[k] = (int64_t)(m >> 64);
    }
    return 0;
}

int engram_multipliers(int layer_id, int max_ngram, int64_t compressed_vocab, uint64_t *out) {
    if (compressed_vocab < 1 || layer_id < 0 || max_ngram > MC_MAX_NGRAM) return -1;
    int64_t bound = (INT64_MAX / compressed_vocab) / 2, r[MC_MAX_NGRAM];
    if (numpy_integers(10007ull * (uint64_t)layer_id, bound, max_ngram, r)) return -1;
    for (int s = 0; s < max_ngram; s++) out[s] = 2 * (uint64_t)r[s] + 1;
    return 0;
}

/* --- token map and layout ---------------------------------------------------------------- */
#define FAIL(...) do { snprintf(err, errlen, __VA_ARGS__); return -1; } while (0)

int engram_map_load(const char *path, const model_config_t *c, uint32_t **map, char *err, size_t errlen) {
    size_t len;
    char *raw = read_file(path, &len);
    if (!raw) FAIL("engram token map %s: %s", path, strerror(errno));
    if (len != (size_t)c->vocab_size * 4) {
        free(raw);
        FAIL("engram token map %s: %zu bytes, expected %lld (vocab_size uint32 ids)", path, len, (long long)c->vocab_size * 4);
    }
    int64_t vc = c->engram_compressed_vocab;
    uint32_t *m = xmalloc(len);
    uint8_t *seen = xcalloc((size_t)vc, 1);
    int64_t distinct = 0;
    for (int64_t t = 0; t < c->vocab_size; t++) {
        const uint8_t *p = (const uint8_t *)raw + 4 * t;
        m[t] = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        if (m[t] >= (uint64_t)vc) {
            snprintf(err, errlen, "engram token map %s: token %lld maps to %u, not below engram_compressed_vocab_size %lld",
                     path, (long long)t, m[t], (long long)vc);
            free(raw), free(m), free(seen);
            return -1;
        }
        distinct += !seen[m[t]];
        seen[m[t]] = 1;
    }
    free(raw);
    free(seen);
    if (distinct != vc) {
        free(m);
        FAIL("engram token map %s uses %lld distinct ids but engram_compressed_vocab_size is %lld: a map of another tokenizer",
             path, (long long)distinct, (long long)vc);
    }
    *map = m;
    return 0;
}

int engram_hash_init(engram_hash_t *h, const model_config_t *c, uint32_t *map, char *err, size_t errlen) {
    memset(h, 0, sizeof *h);
    h->map = map;
    h->vocab = c->vocab_size;
    h->n_layers = c->n_engram;
    h->max_ngram = c->engram_max_ngram;
    h->n_orders = c->engram_max_ngram - 1;
    h->n_heads = c->engram_n_heads;
    if (engram_primes(c, h->primes)) FAIL("engram layout out of bounds");
    for (int e = 0; e < h->n_layers; e++) {
        h->layer_ids[e] = c->engram_layers[e];
        int64_t total = 0;
        for (int k = 0; k < h->n_orders * h->n_heads; k++) {
            h->offsets[e][k] = total;
            total += h->primes[e][k];
        }
        if (total > INT32_MAX) FAIL("engram layer %d: %lld table rows exceed the int32 row ids", c->engram_layers[e], (long long)total);
        if (engram_multipliers(c->engram_layers[e], h->max_ngram, c->engram_compressed_vocab, h->mult[e]))
            FAIL("engram_compressed_vocab_size %lld is out of range for the hash multipliers", (long long)c->engram_compressed_vocab);
    }
    if (c->engram_pad_id < 0 || c->engram_pad_id >= c->vocab_size) FAIL("engram_pad_token_id %d is not a token", c->engram_pad_id);
    h->pad = (int32_t)map[c->engram_pad_id];
    return 0;
}

void engram_hash_free(engram_hash_t *h) {
    free((void *)h->map);
    h->map = NULL;
}

void engram_rows(const engram_hash_t *h, int e, const int32_t *ctx, int32_t *rows) {
    bool blocked = false;
    uint64_t hash = 0;
    for (int s = 0; s < h->max_ngram; s++) {
        blocked = blocked || ctx[s] == ENGRAM_DEAD;
        uint64_t prod = (uint64_t)(blocked ? h->pad : ctx[s]) * h->mult[e][s];
        hash = s ? hash ^ prod : prod;
        if (s == 0) continue;
        for (int j = 0; j < h->n_heads; j++) {
            int k = (s - 1) * h->n_heads + j;
            rows[k] = (int32_t)(hash % (uint64_t)h->primes[e][k] + (uint64_t)h->offsets[e][k]);
        }
    }
}
