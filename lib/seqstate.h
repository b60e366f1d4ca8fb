/* The per-sequence state between forward calls: exactly what MODEL_V41.md §6.2 lists, held in
 * backend memory (window rows, pools, indexer keys, compressor pending tokens) plus a few host
 * numbers. Nothing else persists across steps: mixes, selections and candidate sets are
 * recomputed per token. DSpark context rings are not part of the forward yet.
 *
 * Per layer L:
 *   window     a ring of sliding_window rows (slot = position % window) holding the FP8-QAT'd
 *              window KV of positions [max(win_lo, win_end - window), win_end); win_lo > 0 only
 *              after bounded replay (rows below it were never computed).
 *   pool/keys  KV sources only: the compressed main-KV entries and indexer keys, n_entries rows
 *              (floor(T / ratio)), grown geometrically.
 *   pending    ratio > 1 sources: the n_pend (= T mod ratio) tokens of the open group, their
 *              compressor projections z and gate logits s.
 * Serialization: seqstate_io.h and docs/STATE.md. */
#ifndef DI_SEQSTATE_H
#define DI_SEQSTATE_H

#include "model.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    bk_tensor_t ring;                 /* window x head_dim */
    int64_t win_lo, win_end;
    bk_tensor_t pool, keys;           /* cap x head_dim, cap x index_head_dim */
    int64_t n_entries, cap;
    bk_tensor_t pend_z, pend_s;       /* (ratio - 1) x head_dim */
    int n_pend;
} seq_layer_t;

typedef struct {
    const model_t *m;
    bool qat;                         /* the QAT simulations on (the model as trained) */
    int64_t T;                        /* positions processed */
    int32_t hist[MC_MAX_NGRAM];       /* Engram history: compressed ids of T-1, T-2, ...; ENGRAM_DEAD before 0 */
    int64_t next_token;               /* the first sampled token, -1 until the sampler sets it */
    uint64_t rng[2];                  /* sampler state, opaque here */
    seq_layer_t *layers;
} seqstate_t;

seqstate_t *seqstate_new(const model_t *m, bool qat);
void seqstate_free(seqstate_t *st);

/* Room for n pool entries in KV-source layer L. */
void seqstate_reserve(seqstate_t *st, int L, int64_t n);

#endif
