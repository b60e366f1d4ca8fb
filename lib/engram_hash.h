/* Engram n-gram hashing (MODEL_V41.md §5.2): the tokenizer-derived compressed token map, the
 * per-layer hash multipliers, and the table rows a position looks up.
 *
 * The multipliers are numpy's `default_rng(10007 * layer_id).integers(0, B, size=max_ngram,
 * dtype=int64) * 2 + 1` with B = (INT64_MAX // compressed_vocab) // 2, as transformers computes
 * them; engram_multipliers reproduces numpy's SeedSequence, PCG64 and Lemire bounded integers
 * so that any config works, not only the released one. */
#ifndef DI_ENGRAM_HASH_H
#define DI_ENGRAM_HASH_H

#include "model_config.h"

#include <stddef.h>
#include <stdint.h>

#define ENGRAM_DEAD (-1) /* a history slot that blocks look-back: before the start, or an image token */

typedef struct {
    int n_layers, n_orders, n_heads;     /* Engram layers, n-gram orders (max_ngram - 1), heads */
    int max_ngram;
    int layer_ids[MC_MAX_ENGRAM];
    int64_t primes[MC_MAX_ENGRAM][(MC_MAX_NGRAM - 1) * MC_MAX_ENGRAM_HEADS];
    int64_t offsets[MC_MAX_ENGRAM][(MC_MAX_NGRAM - 1) * MC_MAX_ENGRAM_HEADS];
    uint64_t mult[MC_MAX_ENGRAM][MC_MAX_NGRAM];
    int32_t pad;                         /* compressed id of engram_pad_id */
    const uint32_t *map;                 /* token id -> compressed id, vocab entries (owned) */
    int64_t vocab;
} engram_hash_t;

/* numpy: default_rng(seed).integers(0, bound, size=n, dtype=int64) for bound > 2^32 + 1.
 * 0, or -1 if the bound is outside that range. */
int numpy_integers(uint64_t seed, int64_t bound, int n, int64_t *out);

/* The multipliers of one Engram layer. 0 or -1 (compressed vocab out of range). */
int engram_multipliers(int layer_id, int max_ngram, int64_t compressed_vocab, uint64_t *out);

/* Reads a token map file: vocab little-endian uint32 compressed ids. It must hold exactly
 * c->vocab_size entries, each below engram_compressed_vocab_size, and use exactly that many
 * distinct ids (anything else is another tokenizer's map: MODEL_V41 §5.2). On success *map is
 * malloc'd. 0, or -1 with err. */
int engram_map_load(const char *path, const model_config_t *c, uint32_t **map, char *err, size_t errlen);

/* Builds the layout for c with map (taken over; freed by engram_hash_free). 0, or -1 with err. */
int engram_hash_init(engram_hash_t *h, const model_config_t *c, uint32_t *map, char *err, size_t errlen);
void engram_hash_free(engram_hash_t *h);

/* The compressed id of a token (caller checks token < vocab). */
static inline int32_t engram_compress(const engram_hash_t *h, uint32_t token) { return (int32_t)h->map[token]; }

/* Table rows of Engram layer e for one position: ctx[s] is the compressed id at position i - s
 * (s = 0 .. max_ngram-1), ENGRAM_DEAD where there is none. Writes n_orders * n_heads rows in
 * (order, head) order, offsets included. */
void engram_rows(const engram_hash_t *h, int e, const int32_t *ctx, int32_t *rows);

#endif
