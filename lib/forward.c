/* The forward over a chunk: embedding, Engram rows, the blocks layer by layer (mHC sites,
 * attention, MoE), and the head. */
#include "forward_internal.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void chunk_alloc(fwd_t *f) {
    backend_t *bk = f->bk;
    const model_config_t *c = f->c;
    int64_t n = f->n, D = c->hidden_size, hc = c->hc_mult, nm = (2 + hc) * hc, hd = c->head_dim;
    int64_t maxr = 1;
    for (int L = 0; L < c->n_layers; L++) maxr = c->layers[L].ratio > maxr ? c->layers[L].ratio : maxr;
#define A(t, rows, cols) f->t = bk->alloc(bk, BK_F32, rows, cols)
    A(X, n, hc * D);
    A(coefA, n, nm);
    A(coefF, n, nm);
    A(xc, n, D);
    A(xin, n, D);
    A(y, n, D);
    A(cq, n, c->q_lora_rank);
    A(q, n, c->n_heads * hd);
    A(kv, n, hd);
    A(o, n, c->n_heads * hd);
    A(u, n, c->o_groups * c->o_lora_rank);
    A(iq, n, c->index_n_heads * c->index_head_dim);
    A(iw, n, c->index_n_heads);
    A(gz, n + maxr, hd);
    A(gs, n + maxr, hd);
    A(lat, n, hd);
    A(key, n, c->index_head_dim);
    A(ent, n, hd);
    A(rlog, n, c->n_routed_experts);
    A(rwt, n, c->n_experts_per_tok);
#undef A
    f->ridx = bk->alloc(bk, BK_I32, n, c->n_experts_per_tok);
    f->ids = bk->alloc(bk, BK_I32, n, 1);
    f->cand = bk->alloc(bk, BK_I32, n, c->candidate_topk_blocks);
    f->sel = xcalloc((size_t)c->n_layers, sizeof *f->sel);
    for (int L = 0; L < c->n_layers; L++)
        if (c->layers[L].has_indexer) f->sel[L] = bk->alloc(bk, BK_I32, n, c->index_topk);
    if (c->n_engram) {
        int64_t R = (int64_t)(c->engram_max_ngram - 1) * c->engram_n_heads;
        f->erows = bk->alloc(bk, BK_I32, n, c->n_engram * R);
        f->eR = bk->alloc(bk, BK_F32, n, R * c->engram_head_dim);
        f->ekv = bk->alloc(bk, BK_F32, n, (hc + 1) * D);
    }
}

static void chunk_free(fwd_t *f) {
    backend_t *bk = f->bk;
    bk_tensor_t *ts[] = {&f->X, &f->coefA, &f->coefF, &f->xc, &f->xin, &f->y, &f->cq, &f->q, &f->kv, &f->o, &f->u,
                         &f->iq, &f->iw, &f->gz, &f->gs, &f->lat, &f->key, &f->ent, &f->rlog, &f->rwt, &f->ridx,
                         &f->ids, &f->cand, &f->erows, &f->eR, &f->ekv};
    for (size_t i = 0; i < DI_ARRAY_LEN(ts); i++)
        if (ts[i]->ptr) bk->release(bk, ts[i]);
    for (int L = 0; L < f->c->n_layers; L++)
        if (f->sel[L].ptr) bk->release(bk, &f->sel[L]);
    free(f->sel);
}

/* Token ids and the Engram rows of every chunk position (hashing is host integer work). */
static void inputs(fwd_t *f, const uint32_t *ids) {
    backend_t *bk = f->bk;
    const engram_hash_t *h = &f->m->engram;
    int64_t n = f->n;
    int32_t *tok = xmalloc((size_t)n * 4);
    for (int64_t k = 0; k < n; k++) tok[k] = (int32_t)ids[k];
    bk->upload(bk, f->ids, tok);
    if (h->n_layers) {
        int R = h->n_orders * h->n_heads;
        int32_t *rows = xmalloc((size_t)(n * h->n_layers * R) * 4), ctx[MC_MAX_NGRAM];
        for (int64_t k = 0; k < n; k++) {
            for (int s = 0; s < h->max_ngram; s++)
                ctx[s] = k - s >= 0 ? engram_compress(h, ids[k - s]) : f->st->hist[s - k - 1];
            for (int e = 0; e < h->n_layers; e++) engram_rows(h, e, ctx, rows + (k * h->n_layers + e) * R);
        }
        bk->upload(bk, f->erows, rows);
        free(rows);
    }
    free(tok);
}

static void block(fwd_t *f, int L, int64_t k0) {
    backend_t *bk = f->bk;
    const model_config_t *c = f->c;
    const model_layer_t *w = &f->m->layers[L];
    int64_t m = f->n - k0, hc = c->hc_mult;
    float eps = (float)c->rms_norm_eps, hc_eps = (float)c->hc_eps;
    bk_tensor_t X = bk_rows(f->X, k0, m), cA = bk_rows(f->coefA, k0, m), cF = bk_rows(f->coefF, k0, m);
    bk_tensor_t xc = bk_rows(f->xc, k0, m), xin = bk_rows(f->xin, k0, m), y = bk_rows(f->y, k0, m);
    int e = c->layers[L].engram;
    if (e >= 0) { /* Engram write, before anything else in the block */
        int64_t R = (int64_t)(c->engram_max_ngram - 1) * c->engram_n_heads;
        bk_tensor_t eR = bk_rows(f->eR, k0, m), ekv = bk_rows(f->ekv, k0, m);
        bk->gather(bk, eR, w->engram.table, bk_cols(bk_rows(f->erows, k0, m), e * R, R));
        bk->matmul(bk, ekv, eR, w->engram.wkv, 0);
        bk->engram_gate(bk, X, ekv, w->engram.qk, (int)hc, eps);
    }
    /* attention site: its mixes from the block input, its input collapsed with the previous
     * FFN site's pre (single-pass mHC) */
    bk->matmul(bk, cA, X, w->hc_attn_fn, 0);
    bk->hc_mix(bk, cA, cA, X, w->hc_attn_base, w->hc_attn_scale, (int)hc, eps, hc_eps, c->hc_sinkhorn_iters);
    bk->hc_collapse(bk, xc, X, bk_cols(cF, 0, hc), (int)hc);
    bk->rmsnorm(bk, xin, xc, &w->attn_norm, eps);
    fwd_attention(f, L, k0);
    bk->hc_expand(bk, X, y, cA, (int)hc);
    /* FFN site: input collapsed with the attention site's pre */
    bk->matmul(bk, cF, X, w->hc_ffn_fn, 0);
    bk->hc_mix(bk, cF, cF, X, w->hc_ffn_base, w->hc_ffn_scale, (int)hc, eps, hc_eps, c->hc_sinkhorn_iters);
    bk->hc_collapse(bk, xc, X, bk_cols(cA, 0, hc), (int)hc);
    bk->rmsnorm(bk, xin, xc, &w->ffn_norm, eps);
    bk_tensor_t rlog = bk_rows(f->rlog, k0, m), ridx = bk_rows(f->ridx, k0, m), rwt = bk_rows(f->rwt, k0, m);
    bk->matmul(bk, rlog, xin, w->ffn.gate, 0);
    bk->router(bk, ridx, rwt, rlog, w->ffn.bias, (float)c->gate_temp, c->norm_topk_prob, (float)c->routed_scaling_factor);
    bk->moe(bk, y, xin, ridx, rwt, w->ffn.experts, c->n_routed_experts, &w->ffn.shared, (float)c->swiglu_limit);
    bk->hc_expand(bk, X, y, cF, (int)hc);
}

/* First chunk row layer L runs on: later decoder layers skip positions before decoder_from. */
static int64_t first_row(const fwd_t *f, int L, int64_t decoder_from) {
    if (L <= f->c->first_decoder_layer || decoder_from <= f->p0) return 0;
    return decoder_from - f->p0 < f->n ? decoder_from - f->p0 : f->n;
}

static void head(fwd_t *f, int64_t r0, int64_t nr, float *logits) {
    backend_t *bk = f->bk;
    const model_config_t *c = f->c;
    bk_tensor_t xc = bk_rows(f->xc, r0, nr), cF = bk_rows(f->coefF, r0, nr);
    bk->hc_collapse(bk, xc, bk_rows(f->X, r0, nr), bk_cols(cF, 0, c->hc_mult), c->hc_mult);
    bk->rmsnorm(bk, xc, xc, &f->m->norm, (float)c->rms_norm_eps);
    enum { BLOCK = 64 }; /* rows of vocab-wide logits in flight */
    bk_tensor_t out = bk->alloc(bk, BK_F32, nr < BLOCK ? nr : BLOCK, c->vocab_size);
    for (int64_t r = 0; r < nr; r += BLOCK) {
        int64_t k = nr - r < BLOCK ? nr - r : BLOCK;
        bk->matmul(bk, bk_rows(out, 0, k), bk_rows(xc, r, k), f->m->head, 0);
        bk->download(bk, logits + (size_t)r * (size_t)c->vocab_size, bk_rows(out, 0, k));
    }
    bk->release(bk, &out);
}

int forward_prefill(seqstate_t *st, const uint32_t *ids, int64_t n, int64_t decoder_from, fwd_logits_t want,
                    float *logits, int64_t *n_logits, char *err, size_t errlen) {
    const model_t *m = st->m;
    const model_config_t *c = &m->cfg;
    if (n_logits) *n_logits = 0;
    for (int64_t k = 0; k < n; k++)
        if (ids[k] >= (uint64_t)c->vocab_size) {
            snprintf(err, errlen, "token id %u at position %lld is outside the vocabulary (%lld)", ids[k],
                     (long long)(st->T + k), (long long)c->vocab_size);
            return -1;
        }
    if (n <= 0) return 0;
    fwd_t f = {.st = st, .m = m, .c = c, .bk = m->bk, .n = n, .p0 = st->T};
    backend_t *bk = f.bk;
    chunk_alloc(&f);
    inputs(&f, ids);
    bk->gather(bk, f.xc, m->embed, f.ids);
    bk->hc_fill(bk, f.X, f.xc, c->hc_mult);
    float *one_hot = xcalloc((size_t)(n * f.coefF.cols), 4); /* block 0 reads stream 0 */
    for (int64_t k = 0; k < n; k++) one_hot[k * f.coefF.cols] = 1.0f;
    bk->upload(bk, f.coefF, one_hot);
    free(one_hot);
    for (int L = 0; L < c->n_layers; L++) {
        int64_t k0 = first_row(&f, L, decoder_from);
        if (k0 < n) block(&f, L, k0);
    }
    int64_t r0 = first_row(&f, c->n_layers - 1, decoder_from);
    if (want != FWD_LOGITS_NONE && r0 < n) {
        if (want == FWD_LOGITS_LAST) r0 = n - 1;
        head(&f, r0, n - r0, logits);
        if (n_logits) *n_logits = n - r0;
    }
    chunk_free(&f);
    /* Engram history: the newest max_ngram - 1 compressed ids */
    int32_t hist[MC_MAX_NGRAM];
    for (int s = 0; s < MC_MAX_NGRAM; s++)
        hist[s] = s < n ? (m->engram.map ? engram_compress(&m->engram, ids[n - 1 - s]) : 0) : st->hist[s - n];
    memcpy(st->hist, hist, sizeof hist);
    st->T += n;
    return 0;
}

int forward_step(seqstate_t *st, uint32_t id, float *logits, char *err, size_t errlen) {
    return forward_prefill(st, &id, 1, -1, logits ? FWD_LOGITS_LAST : FWD_LOGITS_NONE, logits, NULL, err, errlen);
}

int forward_prompt(seqstate_t *st, const uint32_t *ids, int64_t n, int64_t replay, int64_t chunk, fwd_logits_t want,
                   float *logits, int64_t *n_logits, char *err, size_t errlen) {
    int64_t from = replay < 0 ? -1 : st->T + n - replay, rows = 0;
    if (chunk <= 0) chunk = FWD_DEFAULT_CHUNK;
    for (int64_t p = 0; p < n; p += chunk) {
        int64_t k = n - p < chunk ? n - p : chunk, got = 0;
        bool last = p + k == n;
        fwd_logits_t w = want == FWD_LOGITS_ALL ? want : (last ? want : FWD_LOGITS_NONE);
        float *out = logits ? logits + (size_t)rows * (size_t)st->m->cfg.vocab_size : NULL;
        if (forward_prefill(st, ids + p, k, from, w, out, &got, err, errlen)) return -1;
        rows += got;
    }
    if (n_logits) *n_logits = rows;
    return 0;
}
