/* Attention of one layer (MODEL_V41 §5.4-§5.10): queries and window KV, the compressor of a
 * KV source (§5.6), the indexer of an index source (§5.7), sparse attention with sink over
 * the window and the selected pool entries, inverse RoPE, grouped output projection. */
#include "forward_internal.h"
#include "util.h"

#include <math.h>
#include <stdlib.h>

/* Pieces [0, cut) and [cut, n_pieces) of a layer from row k0 are the waves whose per-sequence
 * work may share one op call: a sequence appears once in a wave (under bounded replay its
 * head piece's window and pending rows must be written before its tail piece reads them). */
static int wave_cut(const fwd_t *f, int64_t k0) {
    int cut = 0;
    if (k0 == 0)
        while (cut < f->n_pieces && f->pieces[cut].r0 < f->k0) cut++;
    return cut;
}

/* A growing list of copies for one copy_many call. */
typedef struct {
    bk_tensor_t *dst, *src;
    int n, cap;
} copies_t;

static void copies_add(copies_t *c, bk_tensor_t dst, bk_tensor_t src) {
    if (!dst.rows) return;
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 16;
        c->dst = xrealloc(c->dst, (size_t)c->cap * sizeof *c->dst);
        c->src = xrealloc(c->src, (size_t)c->cap * sizeof *c->src);
    }
    c->dst[c->n] = dst, c->src[c->n++] = src;
}

/* Issues the list as one call and empties it. */
static void copies_run(backend_t *bk, copies_t *c) {
    if (c->n) bk->copy_many(bk, c->dst, c->src, c->n);
    c->n = 0;
}

static void copies_free(copies_t *c) { free(c->dst), free(c->src); }

/* Spans of the active pieces: their batch rows (lat: their compressor rows) at their
 * positions (lat: of their first new entry's group, in steps of the ratio). */
static int piece_spans(const fwd_t *f, int64_t k0, bool lat, int64_t ratio, bk_span_t *out) {
    int n = 0;
    for (int i = 0; i < f->n_pieces; i++) {
        const fwd_piece_t *p = &f->pieces[i];
        if (!fwd_piece_active(p, k0) || (lat && !p->g)) continue;
        out[n++] = lat ? (bk_span_t){.r0 = p->lat0, .n = p->g, .pos0 = ratio * p->j0, .qat = p->st->qat}
                       : (bk_span_t){.r0 = p->r0, .n = p->n, .pos0 = p->p0, .qat = p->st->qat};
    }
    return n;
}

/* Ratio-r grouping of one wave of pieces: each piece's pending rows and new rows
 * (pend ++ chunk) give g complete groups, laid out one piece after another in gz/gs and pooled
 * by one call into lat rows from *lb; the rest becomes the new pending rows. */
static void group_wave(fwd_t *f, int L, int64_t k0, int a, int b, int64_t *lb, copies_t *cp) {
    backend_t *bk = f->bk;
    int64_t r = f->c->layers[L].ratio, base = 0, lat_a = *lb;
    for (int i = a; i < b; i++) {
        fwd_piece_t *p = &f->pieces[i];
        if (!fwd_piece_active(p, k0)) continue;
        seq_layer_t *sl = &p->st->layers[L];
        int64_t np = sl->n_pend, g = (np + p->n) / r, used = g * r - np;
        if (g) { /* pend ++ the first `used` rows of the chunk: the groups */
            copies_add(cp, bk_rows(f->gz, base, np), bk_rows(sl->pend_z, 0, np));
            copies_add(cp, bk_rows(f->gs, base, np), bk_rows(sl->pend_s, 0, np));
            copies_add(cp, bk_rows(f->gz, base + np, used), bk_rows(f->cz, p->r0, used));
            copies_add(cp, bk_rows(f->gs, base + np, used), bk_rows(f->cs, p->r0, used));
        }
        p->lat0 = *lb, p->g = g;
        base += g * r, *lb += g;
    }
    copies_run(bk, cp);
    if (*lb > lat_a) bk->group_pool(bk, bk_rows(f->lat, lat_a, *lb - lat_a), bk_rows(f->gz, 0, base), bk_rows(f->gs, 0, base), (int)r);
    for (int i = a; i < b; i++) { /* what is left waits: appended to pend, or in its place */
        fwd_piece_t *p = &f->pieces[i];
        if (!fwd_piece_active(p, k0)) continue;
        seq_layer_t *sl = &p->st->layers[L];
        int64_t np = sl->n_pend, total = np + p->n, left = total % r, from = p->g ? p->g * r - np : 0, at = p->g ? 0 : np;
        copies_add(cp, bk_rows(sl->pend_z, at, left - at), bk_rows(f->cz, p->r0 + from, left - at));
        copies_add(cp, bk_rows(sl->pend_s, at, left - at), bk_rows(f->cs, p->r0 + from, left - at));
        sl->n_pend = (int)left;
    }
    copies_run(bk, cp);
}

/* Copies of src's rows into rows j0.. of a paged store, cut at its page ends. */
static void copies_to_pages(copies_t *cp, const pagestore_t *dst, int64_t j0, bk_tensor_t src) {
    bk_tensor_t v;
    for (int64_t k = 0; k < src.rows; k += v.rows) {
        pagestore_run(dst, j0 + k, src.rows - k, &v);
        copies_add(cp, v, bk_rows(src, k, v.rows));
    }
}

/* Compressor of KV-source layer L: new pool entries and indexer keys for the groups each
 * piece completes; an incomplete group's tokens wait in the sequence's pending buffer. The
 * projections, the latents' norm, keys, RoPE and QAT run over every row at once; the grouping
 * once per wave. */
static void compress(fwd_t *f, int L, int64_t k0) {
    backend_t *bk = f->bk;
    const model_config_t *c = f->c;
    const layer_sched_t *s = &c->layers[L];
    const model_layer_t *w = &f->m->layers[L];
    int64_t m = f->n - k0, r = s->ratio, la, lb;
    float eps = (float)c->rms_norm_eps;
    bk_tensor_t xin = bk_rows(f->xin, k0, m);
    copies_t cp = {0};
    if (r == 1) { /* every token is a group: latents in the rows' own places */
        la = k0, lb = f->n;
        bk->matmul(bk, bk_rows(f->lat, k0, m), xin, w->attn.cmp_wkv, 0);
        for (int i = 0; i < f->n_pieces; i++)
            if (fwd_piece_active(&f->pieces[i], k0)) f->pieces[i].lat0 = f->pieces[i].r0, f->pieces[i].g = f->pieces[i].n;
    } else {
        la = lb = 0;
        bk->matmul(bk, bk_rows(f->cz, k0, m), xin, w->attn.cmp_wkv, 0);
        bk->matmul(bk, bk_rows(f->cs, k0, m), xin, w->attn.cmp_wgate, 0);
        int cut = wave_cut(f, k0);
        group_wave(f, L, k0, 0, cut, &lb, &cp);
        group_wave(f, L, k0, cut, f->n_pieces, &lb, &cp);
    }
    for (int i = 0; i < f->n_pieces; i++) {
        fwd_piece_t *p = &f->pieces[i]; /* claim the entries now: a later piece of the same sequence numbers its own after them */
        if (!fwd_piece_active(p, k0)) continue;
        seq_layer_t *sl = &p->st->layers[L];
        p->j0 = sl->n_entries;
        seqstate_reserve(p->st, L, p->j0 + p->g);
        sl->n_entries += p->g;
    }
    if (lb == la) {
        copies_free(&cp);
        return;
    }
    bk_span_t *spans = xmalloc((size_t)(f->n_pieces + 1) * sizeof *spans);
    int ns = piece_spans(f, k0, true, r, spans); /* entry j sits at its group's first position */
    bk_tensor_t lat = bk_rows(f->lat, la, lb - la), table = f->m->inv_freq[ROPE_COMPRESS];
    bk->rmsnorm(bk, lat, lat, &w->attn.cmp_norm, eps);
    if (s->indexer_keys) { /* from the un-rotated latent */
        bk_tensor_t key = bk_rows(f->key, la, lb - la);
        bk->matmul(bk, key, lat, w->attn.idx_wk, 0);
        bk->rmsnorm(bk, key, key, &w->attn.idx_k_norm, eps);
        bk->rope_qat_spans(bk, f->key, f->key, c->index_head_dim, table, spans, ns, r, QAT_FP4_UE8M0, 32);
    }
    bk->rope_qat_spans(bk, f->ent, f->lat, c->head_dim, table, spans, ns, r, QAT_FP4_E4M3, 16); /* the entries: the latents turned */
    for (int i = 0; i < f->n_pieces; i++) {
        fwd_piece_t *p = &f->pieces[i];
        if (!fwd_piece_active(p, k0) || !p->g) continue;
        seq_layer_t *sl = &p->st->layers[L];
        if (s->indexer_keys) copies_to_pages(&cp, &sl->keys, p->j0, bk_rows(f->key, p->lat0, p->g));
        copies_to_pages(&cp, &sl->pool, p->j0, bk_rows(f->ent, p->lat0, p->g));
    }
    copies_run(bk, &cp);
    copies_free(&cp);
    free(spans);
}

/* Indexer of index-source layer L: its selection for rows [k0, n), and the candidate blocks
 * when it is the candidate source (or restricted to them when it uses them). Its queries and
 * head weights are made while fwd_attention's branch (the compressor's keys) may still run. */
static void indexer(fwd_t *f, int L, int64_t k0) {
    backend_t *bk = f->bk;
    const model_config_t *c = f->c;
    const layer_sched_t *s = &c->layers[L];
    const model_layer_t *w = &f->m->layers[L];
    int64_t m = f->n - k0;
    bk_span_t *spans = xmalloc((size_t)(f->n_pieces + 1) * sizeof *spans);
    int ns = piece_spans(f, k0, false, 1, spans);
    /* the head weights here, not on the branch: its compressor chain is the longer line (run 217) */
    bk->matmul(bk, bk_rows(f->iw, k0, m), bk_rows(f->xin, k0, m), w->attn.idx_wproj, 0);
    bk->matmul(bk, bk_rows(f->iq, k0, m), bk_rows(f->cq, k0, m), w->attn.idx_wq_b, 0);
    bk->rope_qat_spans(bk, f->iq, f->iq, c->index_head_dim, f->m->inv_freq[ROPE_COMPRESS], spans, ns, 1, QAT_FP4_UE8M0, 32);
    bk->branch_join(bk); /* the keys come from the compressor's branch */
    for (int i = 0, k = 0; i < f->n_pieces; i++) {
        const fwd_piece_t *p = &f->pieces[i];
        if (!fwd_piece_active(p, k0)) continue;
        spans[k++].keys = seqstate_keys(p->st, s->kv_source, p->st->layers[s->kv_source].n_entries);
    }
    bk->indexer_spans(bk, f->sel[L], s->candidate_source ? &f->cand : NULL, f->iq, f->iw, spans, ns, s->ratio,
                      s->uses_candidates ? &f->cand : NULL, c->candidate_block_size, (float)pow(c->index_head_dim, -0.5),
                      (float)pow(c->index_n_heads, -0.5));
    free(spans);
}

/* Window rows of a piece into the layer's ring (the last `window` of them). */
static void ring_write(copies_t *cp, seq_layer_t *sl, bk_tensor_t kv, int64_t P0) {
    int64_t W = sl->ring.rows, end = P0 + kv.rows, a = end - W > P0 ? end - W : P0;
    while (a < end) {
        int64_t slot = a % W, len = end - a < W - slot ? end - a : W - slot;
        copies_add(cp, bk_rows(sl->ring, slot, len), bk_rows(kv, a - P0, len));
        a += len;
    }
}

/* Whether piece i's window row can go into its ring before the attention reads the ring: one row
 * at position P overwrites position P - window, which none of this layer's queries reads, unless
 * the sequence's head piece is in the layer too (its last query reads that position). Written
 * early, on the branch beside the query, the copy leaves the chain from the attention to wo_a. */
static bool ring_write_early(const fwd_t *f, int i, int64_t k0) {
    const fwd_piece_t *p = &f->pieces[i];
    if (p->n != 1) return false;
    int heads = wave_cut(f, k0); /* the head pieces, in the layer only at k0 = 0 */
    for (int h = 0; h < heads; h++)
        if (h != i && f->pieces[h].st == p->st) return false;
    return true;
}

/* The window rows of the active pieces that ring_write_early allows (early) or the others. */
static void ring_writes(fwd_t *f, int L, int64_t k0, int a, int b, bool early, copies_t *cp) {
    for (int i = a; i < b; i++) {
        const fwd_piece_t *p = &f->pieces[i];
        if (fwd_piece_active(p, k0) && ring_write_early(f, i, k0) == early)
            ring_write(cp, &p->st->layers[L], bk_rows(f->kv, p->r0, p->n), p->p0);
    }
    copies_run(f->bk, cp);
}

/* RoPE over the rows of every active piece, at the piece's positions. */
static void rope_pieces(fwd_t *f, int64_t k0, bk_tensor_t t, bk_tensor_t table) {
    bk_span_t *spans = xmalloc((size_t)(f->n_pieces + 1) * sizeof *spans);
    int ns = piece_spans(f, k0, false, 1, spans);
    f->bk->rope_spans(f->bk, t, f->c->head_dim, table, spans, ns, 1, false);
    free(spans);
}

/* Sparse attention of one wave of pieces in one call (its output turned back from RoPE's frame),
 * then their window writes (those not written early). */
static void attend_wave(fwd_t *f, int L, int64_t k0, int a, int b, bk_span_t *spans, copies_t *cp) {
    backend_t *bk = f->bk;
    const model_config_t *c = f->c;
    const layer_sched_t *s = &c->layers[L];
    const model_layer_t *w = &f->m->layers[L];
    int ns = 0;
    for (int i = a; i < b; i++) {
        const fwd_piece_t *p = &f->pieces[i];
        if (!fwd_piece_active(p, k0)) continue;
        seq_layer_t *sl = &p->st->layers[L];
        if (sl->win_end < p->p0) sl->win_lo = p->p0; /* a gap (bounded replay): earlier rows were never computed */
        bk_span_t sp = {.r0 = p->r0, .n = p->n, .pos0 = p->p0, .ring = sl->ring, .win_lo = sl->win_lo};
        if (s->ratio) sp.pool = seqstate_pool(p->st, s->kv_source, p->st->layers[s->kv_source].n_entries);
        spans[ns++] = sp;
    }
    if (!ns) return;
    bk->attention_spans(bk, f->o, f->q, w->attn.sink, (float)pow((double)c->head_dim, -0.5), f->kv, c->sliding_window, spans, ns,
                        s->ratio ? &f->sel[s->topk_source] : NULL, &f->m->inv_freq[s->rope]);
    ring_writes(f, L, k0, a, b, false, cp);
    for (int i = a; i < b; i++)
        if (fwd_piece_active(&f->pieces[i], k0)) f->pieces[i].st->layers[L].win_end = f->pieces[i].p0 + f->pieces[i].n;
}

void fwd_attention(fwd_t *f, int L, int64_t k0, const bk_expand_t *expand) {
    backend_t *bk = f->bk;
    const model_config_t *c = f->c;
    const layer_sched_t *s = &c->layers[L];
    const model_layer_t *w = &f->m->layers[L];
    int64_t m = f->n - k0;
    float eps = (float)c->rms_norm_eps;
    bk_tensor_t table = f->m->inv_freq[s->rope];
    bk_tensor_t xin = bk_rows(f->xin, k0, m), cq = bk_rows(f->cq, k0, m), q = bk_rows(f->q, k0, m);
    bk_tensor_t kv = bk_rows(f->kv, k0, m), u = bk_rows(f->u, k0, m);

    copies_t cp = {0};
    bk->branch_begin(bk); /* the window KV and the compressor alongside the query */
    bk->matmul(bk, kv, xin, w->attn.wkv, 0);
    bk->rmsnorm(bk, kv, kv, &w->attn.kv_norm, eps);
    bk_span_t *spans = xmalloc((size_t)(f->n_pieces + 1) * sizeof *spans);
    bk->rope_qat_spans(bk, f->kv, f->kv, c->head_dim, table, spans, piece_spans(f, k0, false, 1, spans), 1, QAT_FP8_UE8M0, 32);
    ring_writes(f, L, k0, 0, f->n_pieces, true, &cp);
    if (s->ratio && s->has_compressor) compress(f, L, k0);
    bk->branch_end(bk);
    for (int i = 0; s->ratio && s->has_compressor && i < f->n_pieces; i++) /* the new pages' addresses, for the ops */
        if (fwd_piece_active(&f->pieces[i], k0)) seqstate_sync(f->pieces[i].st, L);
    bk->matmul(bk, cq, xin, w->attn.wq_a, 0);
    bk->rmsnorm(bk, cq, cq, &w->attn.q_norm, eps); /* kept: the indexer query reads it */
    bk->matmul(bk, q, cq, w->attn.wq_b, 0);
    rope_pieces(f, k0, f->q, table);
    if (s->ratio && s->has_indexer) indexer(f, L, k0); /* joins the branch before reading keys */
    bk->branch_join(bk);
    int cut = wave_cut(f, k0);
    attend_wave(f, L, k0, 0, cut, spans, &cp);
    attend_wave(f, L, k0, cut, f->n_pieces, spans, &cp);
    copies_free(&cp);
    free(spans);
    bk->matmul_grouped(bk, u, bk_rows(f->o, k0, m), w->attn.wo_a, (int)c->o_groups);
    bk->matmul_expand(bk, bk_rows(f->y, k0, m), u, w->attn.wo_b, expand);
}
