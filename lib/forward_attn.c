/* Attention of one layer (MODEL_V41 §5.4-§5.10): queries and window KV, the compressor of a
 * KV source (§5.6), the indexer of an index source (§5.7), sparse attention with sink over
 * the window and the selected pool entries, inverse RoPE, grouped output projection. */
#include "forward_internal.h"

#include <math.h>

void fwd_qat(fwd_t *f, int64_t k0, bk_tensor_t t, qat_kind_t kind, int block, bool lat) {
    /* adjacent pieces with QAT on form one run of rows */
    int64_t a = 0, b = 0;
    for (int i = 0; i <= f->n_pieces; i++) {
        const fwd_piece_t *p = i < f->n_pieces ? &f->pieces[i] : NULL;
        if (p && lat && !p->g) continue; /* no latents: neither part of a run nor a break in one */
        bool on = p && fwd_piece_active(p, k0) && p->st->qat;
        int64_t r = p ? (lat ? p->lat0 : p->r0) : 0, len = p ? (lat ? p->g : p->n) : 0;
        if (on && b > a && r == b) {
            b += len;
            continue;
        }
        if (b > a) f->bk->qat(f->bk, bk_rows(t, a, b - a), kind, block);
        a = b = 0;
        if (on) a = r, b = r + len;
    }
}

/* Compressor of KV-source layer L: new pool entries and indexer keys for the groups each
 * piece completes; an incomplete group's tokens wait in the sequence's pending buffer. The
 * projections and the latents' norm, keys and QAT run over every row at once; the grouping
 * and the positions are per piece. */
static void compress(fwd_t *f, int L, int64_t k0) {
    backend_t *bk = f->bk;
    const model_config_t *c = f->c;
    const layer_sched_t *s = &c->layers[L];
    const model_layer_t *w = &f->m->layers[L];
    int64_t m = f->n - k0, r = s->ratio, la, lb;
    float eps = (float)c->rms_norm_eps;
    bk_tensor_t xin = bk_rows(f->xin, k0, m);
    if (r == 1) { /* every token is a group: latents in the rows' own places */
        la = k0, lb = f->n;
        bk->matmul(bk, bk_rows(f->lat, k0, m), xin, w->attn.cmp_wkv, 0);
    } else {
        la = lb = 0;
        bk->matmul(bk, bk_rows(f->cz, k0, m), xin, w->attn.cmp_wkv, 0);
        bk->matmul(bk, bk_rows(f->cs, k0, m), xin, w->attn.cmp_wgate, 0);
    }
    for (int i = 0; i < f->n_pieces; i++) {
        fwd_piece_t *p = &f->pieces[i];
        if (!fwd_piece_active(p, k0)) continue;
        seq_layer_t *sl = &p->st->layers[L];
        if (r == 1) {
            p->lat0 = p->r0, p->g = p->n;
        } else {
            int64_t np = sl->n_pend, total = np + p->n, left = total % r;
            if (np) {
                bk->copy(bk, bk_rows(f->gz, 0, np), bk_rows(sl->pend_z, 0, np));
                bk->copy(bk, bk_rows(f->gs, 0, np), bk_rows(sl->pend_s, 0, np));
            }
            bk->copy(bk, bk_rows(f->gz, np, p->n), bk_rows(f->cz, p->r0, p->n));
            bk->copy(bk, bk_rows(f->gs, np, p->n), bk_rows(f->cs, p->r0, p->n));
            p->lat0 = lb, p->g = total / r;
            if (p->g) bk->group_pool(bk, bk_rows(f->lat, lb, p->g), bk_rows(f->gz, 0, p->g * r), bk_rows(f->gs, 0, p->g * r), (int)r);
            if (left) {
                bk->copy(bk, bk_rows(sl->pend_z, 0, left), bk_rows(f->gz, p->g * r, left));
                bk->copy(bk, bk_rows(sl->pend_s, 0, left), bk_rows(f->gs, p->g * r, left));
            }
            sl->n_pend = (int)left;
            lb += p->g;
        }
        /* claim the entries now so a later piece of the same sequence numbers its own after them */
        p->j0 = sl->n_entries;
        seqstate_reserve(p->st, L, p->j0 + p->g);
        sl->n_entries += p->g;
    }
    if (lb == la) return;
    bk_tensor_t lat = bk_rows(f->lat, la, lb - la), table = f->m->inv_freq[ROPE_COMPRESS];
    bk->rmsnorm(bk, lat, lat, &w->attn.cmp_norm, eps);
    if (s->indexer_keys) { /* from the un-rotated latent */
        bk_tensor_t key = bk_rows(f->key, la, lb - la);
        bk->matmul(bk, key, lat, w->attn.idx_wk, 0);
        bk->rmsnorm(bk, key, key, &w->attn.idx_k_norm, eps);
        for (int i = 0; i < f->n_pieces; i++) {
            fwd_piece_t *p = &f->pieces[i];
            if (fwd_piece_active(p, k0) && p->g)
                bk->rope(bk, bk_rows(f->key, p->lat0, p->g), c->index_head_dim, table, r * p->j0, r, false);
        }
        fwd_qat(f, k0, f->key, QAT_FP4_UE8M0, 32, true);
    }
    bk->copy(bk, bk_rows(f->ent, la, lb - la), lat);
    for (int i = 0; i < f->n_pieces; i++) {
        fwd_piece_t *p = &f->pieces[i]; /* entry j sits at its group's first position */
        if (fwd_piece_active(p, k0) && p->g)
            bk->rope(bk, bk_rows(f->ent, p->lat0, p->g), c->head_dim, table, r * p->j0, r, false);
    }
    fwd_qat(f, k0, f->ent, QAT_FP4_E4M3, 16, true);
    for (int i = 0; i < f->n_pieces; i++) {
        fwd_piece_t *p = &f->pieces[i];
        if (!fwd_piece_active(p, k0) || !p->g) continue;
        seq_layer_t *sl = &p->st->layers[L];
        if (s->indexer_keys) bk->copy(bk, bk_rows(sl->keys, p->j0, p->g), bk_rows(f->key, p->lat0, p->g));
        bk->copy(bk, bk_rows(sl->pool, p->j0, p->g), bk_rows(f->ent, p->lat0, p->g));
    }
}

/* Indexer of index-source layer L: its selection for rows [k0, n), and the candidate blocks
 * when it is the candidate source (or restricted to them when it uses them). */
static void indexer(fwd_t *f, int L, int64_t k0) {
    backend_t *bk = f->bk;
    const model_config_t *c = f->c;
    const layer_sched_t *s = &c->layers[L];
    const model_layer_t *w = &f->m->layers[L];
    int64_t m = f->n - k0;
    bk->matmul(bk, bk_rows(f->iq, k0, m), bk_rows(f->cq, k0, m), w->attn.idx_wq_b, 0);
    for (int i = 0; i < f->n_pieces; i++) {
        const fwd_piece_t *p = &f->pieces[i];
        if (fwd_piece_active(p, k0))
            bk->rope(bk, bk_rows(f->iq, p->r0, p->n), c->index_head_dim, f->m->inv_freq[ROPE_COMPRESS], p->p0, 1, false);
    }
    fwd_qat(f, k0, f->iq, QAT_FP4_UE8M0, 32, false);
    bk->matmul(bk, bk_rows(f->iw, k0, m), bk_rows(f->xin, k0, m), w->attn.idx_wproj, 0);
    for (int i = 0; i < f->n_pieces; i++) {
        const fwd_piece_t *p = &f->pieces[i];
        if (!fwd_piece_active(p, k0)) continue;
        const seq_layer_t *src = &p->st->layers[s->kv_source];
        bk_tensor_t cand = bk_rows(f->cand, p->r0, p->n);
        bk->indexer_topk(bk, bk_rows(f->sel[L], p->r0, p->n), s->candidate_source ? &cand : NULL, bk_rows(f->iq, p->r0, p->n),
                         bk_rows(f->iw, p->r0, p->n), bk_rows(src->keys, 0, src->n_entries), p->p0, s->ratio,
                         s->uses_candidates ? &cand : NULL, c->candidate_block_size, (float)pow(c->index_head_dim, -0.5),
                         (float)pow(c->index_n_heads, -0.5));
    }
}

/* Window rows of a piece into the layer's ring (the last `window` of them). */
static void ring_write(backend_t *bk, seq_layer_t *sl, bk_tensor_t kv, int64_t P0) {
    int64_t W = sl->ring.rows, end = P0 + kv.rows, a = end - W > P0 ? end - W : P0;
    while (a < end) {
        int64_t slot = a % W, len = end - a < W - slot ? end - a : W - slot;
        bk->copy(bk, bk_rows(sl->ring, slot, len), bk_rows(kv, a - P0, len));
        a += len;
    }
}

/* RoPE over the rows of every active piece, at the piece's positions. */
static void rope_pieces(fwd_t *f, int64_t k0, bk_tensor_t t, bk_tensor_t table, bool inverse) {
    for (int i = 0; i < f->n_pieces; i++) {
        const fwd_piece_t *p = &f->pieces[i];
        if (fwd_piece_active(p, k0)) f->bk->rope(f->bk, bk_rows(t, p->r0, p->n), f->c->head_dim, table, p->p0, 1, inverse);
    }
}

void fwd_attention(fwd_t *f, int L, int64_t k0) {
    backend_t *bk = f->bk;
    const model_config_t *c = f->c;
    const layer_sched_t *s = &c->layers[L];
    const model_layer_t *w = &f->m->layers[L];
    int64_t m = f->n - k0, hd = c->head_dim;
    float eps = (float)c->rms_norm_eps;
    bk_tensor_t table = f->m->inv_freq[s->rope];
    bk_tensor_t xin = bk_rows(f->xin, k0, m), cq = bk_rows(f->cq, k0, m), q = bk_rows(f->q, k0, m);
    bk_tensor_t kv = bk_rows(f->kv, k0, m), u = bk_rows(f->u, k0, m);

    bk->matmul(bk, cq, xin, w->attn.wq_a, 0);
    bk->rmsnorm(bk, cq, cq, &w->attn.q_norm, eps); /* kept: the indexer query reads it */
    bk->matmul(bk, q, cq, w->attn.wq_b, 0);
    rope_pieces(f, k0, f->q, table, false);
    bk->matmul(bk, kv, xin, w->attn.wkv, 0);
    bk->rmsnorm(bk, kv, kv, &w->attn.kv_norm, eps);
    rope_pieces(f, k0, f->kv, table, false);
    fwd_qat(f, k0, f->kv, QAT_FP8_UE8M0, 32, false);

    if (s->ratio && s->has_compressor) compress(f, L, k0);
    if (s->ratio && s->has_indexer) indexer(f, L, k0);
    for (int i = 0; i < f->n_pieces; i++) {
        const fwd_piece_t *p = &f->pieces[i];
        if (!fwd_piece_active(p, k0)) continue;
        seq_layer_t *sl = &p->st->layers[L];
        bk_tensor_t pool, sel, pkv = bk_rows(f->kv, p->r0, p->n);
        if (s->ratio) {
            const seq_layer_t *src = &p->st->layers[s->kv_source];
            pool = bk_rows(src->pool, 0, src->n_entries);
            sel = bk_rows(f->sel[s->topk_source], p->r0, p->n);
        }
        if (sl->win_end < p->p0) sl->win_lo = p->p0; /* a gap (bounded replay): earlier rows were never computed */
        bk->attention(bk, bk_rows(f->o, p->r0, p->n), bk_rows(f->q, p->r0, p->n), w->attn.sink, (float)pow((double)hd, -0.5),
                      sl->ring, pkv, p->p0, c->sliding_window, sl->win_lo, s->ratio ? &pool : NULL, s->ratio ? &sel : NULL);
        ring_write(bk, sl, pkv, p->p0);
        sl->win_end = p->p0 + p->n;
    }
    rope_pieces(f, k0, f->o, table, true); /* back to the un-rotated frame */
    bk_tensor_t o = bk_rows(f->o, k0, m);
    int64_t G = c->o_groups, R = c->o_lora_rank, gw = c->n_heads * hd / G;
    for (int64_t g = 0; g < G; g++) bk->matmul(bk, bk_cols(u, g * R, R), bk_cols(o, g * gw, gw), w->attn.wo_a, g * R);
    bk->matmul(bk, bk_rows(f->y, k0, m), u, w->attn.wo_b, 0);
}
