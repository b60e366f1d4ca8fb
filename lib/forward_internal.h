/* The forward's per-chunk working set, shared by forward.c (blocks, MoE, head) and
 * forward_attn.c (attention, compressor, indexer). All tensors have one row per chunk token;
 * a layer that runs on the tail only (bounded replay) uses rows [k0, n). */
#ifndef DI_FORWARD_INTERNAL_H
#define DI_FORWARD_INTERNAL_H

#include "forward.h"

/* A run of one sequence's rows in the batch. A sequence's chunk is one piece, or two under
 * bounded replay when the chunk straddles the replay start: its head (positions the later
 * decoder layers skip) and its tail. All head pieces come first, so the rows the later decoder
 * layers run on are [k0, n) and every per-row op works on one contiguous range. Pieces of one
 * sequence are in position order, and per-sequence work (RoPE, compressor groups, indexer,
 * attention, window writes) visits pieces in array order. */
typedef struct {
    seqstate_t *st;
    int64_t r0, n;                  /* batch rows */
    int64_t p0;                     /* position of row r0 */
    int64_t lat0, g, j0;            /* compressor of the current layer: rows in lat, groups, first new entry */
} fwd_piece_t;

typedef struct {
    const model_t *m;
    const model_config_t *c;
    backend_t *bk;
    int64_t n;                      /* batch rows */
    fwd_piece_t *pieces;
    int n_pieces;
    int64_t k0;                     /* rows [0, k0) are head pieces: later decoder layers skip them */
    bk_tensor_t X, coefA, coefF;    /* streams; attention-site and FFN-site mixes */
    bk_tensor_t xc, xin, y, ysh;    /* collapse, normed block input, block output, shared expert (D wide) */
    bk_tensor_t cq, q, kv, o, u;    /* attention: q_norm(wq_a x), heads, window KV, output, grouped */
    bk_tensor_t iq, iw;             /* indexer query and head weights */
    bk_tensor_t cz, cs, gz, gs, lat, key, ent; /* compressor: projections of every row, one group run, latents */
    bk_tensor_t *sel;               /* per index-source layer: n x index_topk selections */
    bk_tensor_t cand;               /* n x candidate_topk_blocks */
    bk_tensor_t ids, erows, eR, ekv; /* token ids, Engram rows, gathered table rows, wkv output */
    bk_tensor_t rlog, ridx, rwt;    /* router */
    bk_tensor_t work;               /* one allocation; the tensors above (and sel's) are views into it */
} fwd_t;

/* The pieces a layer runs on from row k0: all of them, or the tail pieces. */
static inline bool fwd_piece_active(const fwd_piece_t *p, int64_t k0) { return p->r0 >= k0; }

/* Attention block of layer L for batch rows [k0, n): reads f->xin, writes f->y, updates each
 * piece's window, pool, keys and pending state. */
void fwd_attention(fwd_t *f, int L, int64_t k0, const bk_expand_t *expand);

#endif
