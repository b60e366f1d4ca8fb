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
 *              (floor(T / ratio)) in paged stores (pagestore.h): they grow a page at a time
 *              from the model's page pools and give their pages back when the sequence ends.
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
    pagestore_t pool, keys;           /* rows of head_dim, of index_head_dim (indexer-key layers) */
    int64_t n_entries;
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

/* Room for n pool entries (and indexer keys) in KV-source layer L: host work (a branch may do
 * it), the rows writable at once through the stores (pagestore_run), read by the ops after
 * seqstate_sync. */
void seqstate_reserve(seqstate_t *st, int L, int64_t n);
/* Layer L's page tables brought up to date in backend memory (not inside a branch). */
void seqstate_sync(seqstate_t *st, int L);
/* The ops' views of layer L's first n pool entries and indexer keys (synced). */
bk_paged_t seqstate_pool(const seqstate_t *st, int L, int64_t n);
bk_paged_t seqstate_keys(const seqstate_t *st, int L, int64_t n);

#endif
