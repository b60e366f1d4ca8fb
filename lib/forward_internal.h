/* The forward's per-chunk working set, shared by forward.c (blocks, MoE, head) and
 * forward_attn.c (attention, compressor, indexer). All tensors have one row per chunk token;
 * a layer that runs on the tail only (bounded replay) uses rows [k0, n). */
#ifndef DI_FORWARD_INTERNAL_H
#define DI_FORWARD_INTERNAL_H

#include "forward.h"

typedef struct {
    seqstate_t *st;
    const model_t *m;
    const model_config_t *c;
    backend_t *bk;
    int64_t n, p0;                  /* chunk rows, position of row 0 */
    bk_tensor_t X, coefA, coefF;    /* streams; attention-site and FFN-site mixes */
    bk_tensor_t xc, xin, y;         /* collapse, normed block input, block output (D wide) */
    bk_tensor_t cq, q, kv, o, u;    /* attention: q_norm(wq_a x), heads, window KV, output, grouped */
    bk_tensor_t iq, iw;             /* indexer query and head weights */
    bk_tensor_t cz, cs, gz, gs, lat, key, ent; /* compressor */
    bk_tensor_t *sel;               /* per index-source layer: n x index_topk selections */
    bk_tensor_t cand;               /* n x candidate_topk_blocks */
    bk_tensor_t ids, erows, eR, ekv; /* token ids, Engram rows, gathered table rows, wkv output */
    bk_tensor_t rlog, ridx, rwt;    /* router */
} fwd_t;

/* Attention block of layer L for chunk rows [k0, n): reads f->xin, writes f->y, updates the
 * layer's window, pool, keys and pending state. */
void fwd_attention(fwd_t *f, int L, int64_t k0);

#endif
