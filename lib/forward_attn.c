/* Attention of one layer (MODEL_V41 §5.4-§5.10): queries and window KV, the compressor of a
 * KV source (§5.6), the indexer of an index source (§5.7), sparse attention with sink over
 * the window and the selected pool entries, inverse RoPE, grouped output projection. */
#include "forward_internal.h"

#include <math.h>

/* Compressor of KV-source layer L: new pool entries and indexer keys for the groups this
 * chunk completes; an incomplete group's tokens wait in the pending buffer. */
static void compress(fwd_t *f, int L, int64_t k0) {
    backend_t *bk = f->bk;
    const model_config_t *c = f->c;
    const layer_sched_t *s = &c->layers[L];
    const model_layer_t *w = &f->m->layers[L];
    seq_layer_t *sl = &f->st->layers[L];
    int64_t m = f->n - k0, r = s->ratio, j0 = sl->n_entries, g;
    float eps = (float)c->rms_norm_eps;
    bk_tensor_t xin = bk_rows(f->xin, k0, m), lat;
    if (r == 1) {
        g = m;
        lat = bk_rows(f->lat, 0, g);
        bk->matmul(bk, lat, xin, w->attn.cmp_wkv, 0);
    } else {
        int64_t np = sl->n_pend, total = np + m, left = total % r;
        g = total / r;
        bk->matmul(bk, bk_rows(f->gz, np, m), xin, w->attn.cmp_wkv, 0);
        bk->matmul(bk, bk_rows(f->gs, np, m), xin, w->attn.cmp_wgate, 0);
        if (np) {
            bk->copy(bk, bk_rows(f->gz, 0, np), bk_rows(sl->pend_z, 0, np));
            bk->copy(bk, bk_rows(f->gs, 0, np), bk_rows(sl->pend_s, 0, np));
        }
        lat = bk_rows(f->lat, 0, g);
        if (g) bk->group_pool(bk, lat, bk_rows(f->gz, 0, g * r), bk_rows(f->gs, 0, g * r), (int)r);
        if (left) {
            bk->copy(bk, bk_rows(sl->pend_z, 0, left), bk_rows(f->gz, g * r, left));
            bk->copy(bk, bk_rows(sl->pend_s, 0, left), bk_rows(f->gs, g * r, left));
        }
        sl->n_pend = (int)left;
    }
    if (!g) return;
    bk->rmsnorm(bk, lat, lat, &w->attn.cmp_norm, eps);
    seqstate_reserve(f->st, L, j0 + g);
    bk_tensor_t table = f->m->inv_freq[ROPE_COMPRESS];
    if (s->indexer_keys) { /* from the un-rotated latent */
        bk_tensor_t key = bk_rows(f->key, 0, g);
        bk->matmul(bk, key, lat, w->attn.idx_wk, 0);
        bk->rmsnorm(bk, key, key, &w->attn.idx_k_norm, eps);
        bk->rope(bk, key, c->index_head_dim, table, r * j0, r, false);
        if (f->st->qat) bk->qat(bk, key, QAT_FP4_UE8M0, 32);
        bk->copy(bk, bk_rows(sl->keys, j0, g), key);
    }
    bk_tensor_t ent = bk_rows(f->ent, 0, g);
    bk->copy(bk, ent, lat);
    bk->rope(bk, ent, c->head_dim, table, r * j0, r, false); /* entry j sits at its group's first position */
    if (f->st->qat) bk->qat(bk, ent, QAT_FP4_E4M3, 16);
    bk->copy(bk, bk_rows(sl->pool, j0, g), ent);
    sl->n_entries += g;
}

/* Indexer of index-source layer L: its selection for rows [k0, n), and the candidate blocks
 * when it is the candidate source (or restricted to them when it uses them). */
static void indexer(fwd_t *f, int L, int64_t k0) {
    backend_t *bk = f->bk;
    const model_config_t *c = f->c;
    const layer_sched_t *s = &c->layers[L];
    const model_layer_t *w = &f->m->layers[L];
    const seq_layer_t *src = &f->st->layers[s->kv_source];
    int64_t m = f->n - k0, P0 = f->p0 + k0;
    bk_tensor_t q = bk_rows(f->iq, k0, m), hw = bk_rows(f->iw, k0, m), cand = bk_rows(f->cand, k0, m);
    bk->matmul(bk, q, bk_rows(f->cq, k0, m), w->attn.idx_wq_b, 0);
    bk->rope(bk, q, c->index_head_dim, f->m->inv_freq[ROPE_COMPRESS], P0, 1, false);
    if (f->st->qat) bk->qat(bk, q, QAT_FP4_UE8M0, 32);
    bk->matmul(bk, hw, bk_rows(f->xin, k0, m), w->attn.idx_wproj, 0);
    bk->indexer_topk(bk, bk_rows(f->sel[L], k0, m), s->candidate_source ? &cand : NULL, q, hw,
                     bk_rows(src->keys, 0, src->n_entries), P0, s->ratio, s->uses_candidates ? &cand : NULL,
                     c->candidate_block_size, (float)pow(c->index_head_dim, -0.5), (float)pow(c->index_n_heads, -0.5));
}

/* Window rows of the chunk into the layer's ring (the last `window` of them). */
static void ring_write(backend_t *bk, seq_layer_t *sl, bk_tensor_t kv, int64_t P0) {
    int64_t W = sl->ring.rows, end = P0 + kv.rows, a = end - W > P0 ? end - W : P0;
    while (a < end) {
        int64_t slot = a % W, len = end - a < W - slot ? end - a : W - slot;
        bk->copy(bk, bk_rows(sl->ring, slot, len), bk_rows(kv, a - P0, len));
        a += len;
    }
}

void fwd_attention(fwd_t *f, int L, int64_t k0) {
    backend_t *bk = f->bk;
    const model_config_t *c = f->c;
    const layer_sched_t *s = &c->layers[L];
    const model_layer_t *w = &f->m->layers[L];
    seq_layer_t *sl = &f->st->layers[L];
    int64_t m = f->n - k0, P0 = f->p0 + k0, hd = c->head_dim;
    float eps = (float)c->rms_norm_eps;
    bk_tensor_t table = f->m->inv_freq[s->rope];
    bk_tensor_t xin = bk_rows(f->xin, k0, m), cq = bk_rows(f->cq, k0, m), q = bk_rows(f->q, k0, m);
    bk_tensor_t kv = bk_rows(f->kv, k0, m), o = bk_rows(f->o, k0, m), u = bk_rows(f->u, k0, m);

    bk->matmul(bk, cq, xin, w->attn.wq_a, 0);
    bk->rmsnorm(bk, cq, cq, &w->attn.q_norm, eps); /* kept: the indexer query reads it */
    bk->matmul(bk, q, cq, w->attn.wq_b, 0);
    bk->rope(bk, q, (int)hd, table, P0, 1, false);
    bk->matmul(bk, kv, xin, w->attn.wkv, 0);
    bk->rmsnorm(bk, kv, kv, &w->attn.kv_norm, eps);
    bk->rope(bk, kv, (int)hd, table, P0, 1, false);
    if (f->st->qat) bk->qat(bk, kv, QAT_FP8_UE8M0, 32);

    bk_tensor_t pool, sel;
    if (s->ratio) {
        if (s->has_compressor) compress(f, L, k0);
        if (s->has_indexer) indexer(f, L, k0);
        const seq_layer_t *src = &f->st->layers[s->kv_source];
        pool = bk_rows(src->pool, 0, src->n_entries);
        sel = bk_rows(f->sel[s->topk_source], k0, m);
    }
    if (sl->win_end < P0) sl->win_lo = P0; /* a gap (bounded replay): earlier rows were never computed */
    bk->attention(bk, o, q, w->attn.sink, (float)pow((double)hd, -0.5), sl->ring, kv, P0, c->sliding_window, sl->win_lo,
                  s->ratio ? &pool : NULL, s->ratio ? &sel : NULL);
    ring_write(bk, sl, kv, P0);
    sl->win_end = P0 + m;

    bk->rope(bk, o, (int)hd, table, P0, 1, true); /* back to the un-rotated frame */
    int64_t G = c->o_groups, R = c->o_lora_rank, gw = c->n_heads * hd / G;
    for (int64_t g = 0; g < G; g++) bk->matmul(bk, bk_cols(u, g * R, R), bk_cols(o, g * gw, gw), w->attn.wo_a, g * R);
    bk->matmul(bk, bk_rows(f->y, k0, m), u, w->attn.wo_b, 0);
}
