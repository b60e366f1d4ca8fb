/* The forward over a chunk: embedding, Engram rows, the blocks layer by layer (mHC sites,
 * attention, MoE), and the head. */
#include "forward_internal.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The chunk's tensors are views into one allocation, each at a 512-byte boundary as the
 * backends' own allocations are: one zero fill instead of one per tensor (in a captured decode
 * step each was a memset node before the first kernel). The price: an overrun from one tensor
 * into the next is no longer an error to compute-sanitizer or ASan (the op tests, which
 * allocate each tensor alone, still catch it). */
typedef struct {
    bk_tensor_t base; /* ptr NULL: only counting */
    int64_t used;     /* elements laid out so far */
} carver_t;

static bk_tensor_t carve(carver_t *cv, bk_dtype_t dtype, int64_t rows, int64_t cols) {
    bk_tensor_t t = {cv->base.ptr ? (char *)cv->base.ptr + (size_t)cv->used * 4 : NULL, dtype, rows, cols, cols};
    cv->used += (rows * cols + 127) / 128 * 128;
    return t;
}

static void chunk_layout(fwd_t *f, carver_t *cv) {
    const model_config_t *c = f->c;
    int64_t n = f->n, D = c->hidden_size, hc = c->hc_mult, nm = (2 + hc) * hc, hd = c->head_dim;
    int64_t maxr = 1;
    for (int L = 0; L < c->n_layers; L++) maxr = c->layers[L].ratio > maxr ? c->layers[L].ratio : maxr;
#define A(t, rows, cols) f->t = carve(cv, BK_F32, rows, cols)
    A(X, n, hc * D);
    A(coefA, n, nm);
    A(coefF, n, nm);
    A(xc, n, D);
    A(xin, n, D);
    A(y, n, D);
    A(ysh, n, D);
    A(cq, n, c->q_lora_rank);
    A(q, n, c->n_heads * hd);
    A(kv, n, hd);
    A(o, n, c->n_heads * hd);
    A(u, n, c->o_groups * c->o_lora_rank);
    A(iq, n, c->index_n_heads * c->index_head_dim);
    A(iw, n, c->index_n_heads);
    A(cz, n, hd);
    A(cs, n, hd);
    A(gz, n + f->n_pieces * maxr, hd); /* every piece's pending rows and new rows, in groups */
    A(gs, n + f->n_pieces * maxr, hd);
    A(lat, n, hd);
    A(key, n, c->index_head_dim);
    A(ent, n, hd);
    A(rlog, n, c->n_routed_experts);
    A(rwt, n, c->n_experts_per_tok);
#undef A
    f->ridx = carve(cv, BK_I32, n, c->n_experts_per_tok);
    f->cand = carve(cv, BK_I32, n, c->candidate_topk_blocks);
    for (int L = 0; L < c->n_layers; L++)
        if (c->layers[L].has_indexer) f->sel[L] = carve(cv, BK_I32, n, c->index_topk);
    int64_t ER = c->n_engram * (int64_t)(c->engram_max_ngram - 1) * c->engram_n_heads;
    bk_tensor_t tokens = carve(cv, BK_I32, n, 1 + ER); /* a row's id, then its Engram rows */
    if (tokens.ptr) f->ids = bk_cols(tokens, 0, 1), f->erows = bk_cols(tokens, 1, ER); /* not in the counting pass */
    if (c->n_engram) {
        int64_t R = (int64_t)(c->engram_max_ngram - 1) * c->engram_n_heads;
        f->eR = carve(cv, BK_F32, n, R * c->engram_head_dim);
        f->ekv = carve(cv, BK_F32, n, (hc + 1) * D);
    }
}

static void chunk_alloc(fwd_t *f) {
    f->sel = xcalloc((size_t)f->c->n_layers, sizeof *f->sel);
    carver_t count = {0};
    chunk_layout(f, &count);
    f->work = f->bk->alloc(f->bk, BK_F32, 1, count.used);
    carver_t cv = {.base = f->work};
    chunk_layout(f, &cv);
}

static void chunk_free(fwd_t *f) {
    f->bk->release(f->bk, &f->work);
    free(f->sel);
}

/* Where a sequence's chunk sits in the batch: its first `head` tokens (positions the later
 * decoder layers skip) at rows hr.., the rest at rows tr... */
typedef struct {
    int64_t head, hr, tr;
} seq_rows_t;

static int64_t row_of(const seq_rows_t *r, int64_t k) { return k < r->head ? r->hr + k : r->tr + k - r->head; }

/* Every batch row's token id and Engram table rows, uploaded as one copy: in a replayed
 * decode step a second upload before the first Engram layer joined every stream and left the
 * device idle ~15 us (run 214). The hashes are host integer work per token, done before the
 * first launch (run 165: at most ~1 ms of an 8k prefill when deferred). */
static void upload_tokens(fwd_t *f, const fwd_seq_t *seqs, int n_seqs, const seq_rows_t *rows_of) {
    const engram_hash_t *h = &f->m->engram;
    int64_t cols = 1 + f->erows.cols, R = h->n_orders * h->n_heads;
    int32_t *tok = xmalloc((size_t)(f->n * cols) * 4), ctx[MC_MAX_NGRAM];
    for (int i = 0; i < n_seqs; i++) {
        const uint32_t *ids = seqs[i].ids;
        for (int64_t k = 0; k < seqs[i].n; k++) {
            int32_t *row = tok + row_of(&rows_of[i], k) * cols;
            row[0] = (int32_t)ids[k];
            if (!f->c->n_engram) continue;
            for (int s = 0; s < h->max_ngram; s++)
                ctx[s] = k - s >= 0 ? engram_compress(h, ids[k - s]) : seqs[i].st->hist[s - k - 1];
            for (int e = 0; e < h->n_layers; e++) engram_rows(h, e, ctx, row + 1 + e * R);
        }
    }
    f->bk->upload(f->bk, bk_cols(f->ids, 0, cols), tok);
    free(tok);
}

static void block(fwd_t *f, int L, int64_t k0) {
    backend_t *bk = f->bk;
    const model_config_t *c = f->c;
    const model_layer_t *w = &f->m->layers[L];
    int64_t m = f->n - k0, hc = c->hc_mult;
    float eps = (float)c->rms_norm_eps, hc_eps = (float)c->hc_eps;
    bk_tensor_t X = bk_rows(f->X, k0, m), cA = bk_rows(f->coefA, k0, m), cF = bk_rows(f->coefF, k0, m);
    bk_tensor_t xin = bk_rows(f->xin, k0, m), y = bk_rows(f->y, k0, m);
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
    bk->hc_pre(bk, xin, cA, X, w->hc_attn_fn, w->hc_attn_base, w->hc_attn_scale, bk_cols(cF, 0, hc), &w->attn_norm, (int)hc, eps,
               hc_eps, c->hc_sinkhorn_iters);
    fwd_attention(f, L, k0, &(bk_expand_t){X, cA, (int)hc}); /* its output expanded into the streams */
    /* FFN site: input collapsed with the attention site's pre */
    bk->hc_pre(bk, xin, cF, X, w->hc_ffn_fn, w->hc_ffn_base, w->hc_ffn_scale, bk_cols(cA, 0, hc), &w->ffn_norm, (int)hc, eps,
               hc_eps, c->hc_sinkhorn_iters);
    bk_tensor_t rlog = bk_rows(f->rlog, k0, m), ridx = bk_rows(f->ridx, k0, m), rwt = bk_rows(f->rwt, k0, m);
    bk_tensor_t ysh = bk_rows(f->ysh, k0, m);
    bk->branch_begin(bk); /* the shared expert alongside the router and the routed experts */
    bk->mlp(bk, ysh, xin, &w->ffn.shared, (float)c->swiglu_limit);
    bk->branch_end(bk);
    bk->gate_router(bk, ridx, rwt, rlog, xin, w->ffn.gate, w->ffn.bias, (float)c->gate_temp, c->norm_topk_prob,
                    (float)c->routed_scaling_factor);
    bk->moe(bk, y, xin, ridx, rwt, w->ffn.experts, c->n_routed_experts, &ysh, &(bk_expand_t){X, cF, (int)hc},
            (float)c->swiglu_limit);
}

/* The head over the wanted rows: runs of batch rows collapsed into consecutive rows of xc,
 * the norm, then vocab-wide logits in blocks of HEAD_BLOCK rows, each row downloaded to its
 * destination or picked from. */
enum { HEAD_BLOCK = 64 }; /* rows of vocab-wide logits in flight */

typedef struct {
    int64_t row;
    float *dst;
    const bk_pick_t *pick; /* instead of dst: the backend picks the token */
} head_row_t;

/* The k (<= HEAD_BLOCK) rows of a block of logits: runs of picked rows go to the pick op, the
 * others are downloaded to their destinations. */
static void head_deliver(fwd_t *f, bk_tensor_t out, const head_row_t *want, int64_t k, sampler_t *scratch) {
    backend_t *bk = f->bk;
    bk_pick_t run[HEAD_BLOCK];
    for (int64_t i = 0, j; i < k; i = j) {
        if (!want[i].pick) {
            bk->download(bk, want[i].dst, bk_rows(out, i, 1));
            j = i + 1;
            continue;
        }
        for (j = i; j < k && want[j].pick; j++) run[j - i] = *want[j].pick;
        bk->pick(bk, bk_rows(out, i, j - i), run, (int)(j - i), scratch);
    }
}

static void head(fwd_t *f, const head_row_t *want, int64_t nw, sampler_t *scratch) {
    backend_t *bk = f->bk;
    const model_config_t *c = f->c;
    for (int64_t a = 0, b; a < nw; a = b) {
        for (b = a + 1; b < nw && want[b].row == want[b - 1].row + 1;) b++;
        int64_t r = want[a].row;
        bk->hc_collapse(bk, bk_rows(f->xc, a, b - a), bk_rows(f->X, r, b - a), bk_cols(bk_rows(f->coefF, r, b - a), 0, c->hc_mult),
                        c->hc_mult);
    }
    bk_tensor_t xc = bk_rows(f->xc, 0, nw);
    bk->rmsnorm(bk, xc, xc, &f->m->norm, (float)c->rms_norm_eps);
    bk_tensor_t out = bk->alloc(bk, BK_F32, nw < HEAD_BLOCK ? nw : HEAD_BLOCK, c->vocab_size);
    for (int64_t r = 0; r < nw; r += HEAD_BLOCK) {
        int64_t k = nw - r < HEAD_BLOCK ? nw - r : HEAD_BLOCK;
        bk->matmul(bk, bk_rows(out, 0, k), bk_rows(xc, r, k), f->m->head, 0);
        head_deliver(f, out, want + r, k, scratch);
    }
    bk->release(bk, &out);
}

/* Checks the batch before anything changes: token ids, one model, each state once. */
static int check_batch(const fwd_seq_t *seqs, int n_seqs, char *err, size_t errlen) {
    for (int i = 0; i < n_seqs; i++) {
        const seqstate_t *st = seqs[i].st;
        int64_t V = st->m->cfg.vocab_size;
        if (st->m != seqs[0].st->m) return snprintf(err, errlen, "a batch mixes states of two models"), -1;
        for (int j = 0; j < i; j++)
            if (seqs[j].st == st) return snprintf(err, errlen, "a state appears twice in one batch"), -1;
        for (int64_t k = 0; k < seqs[i].n; k++)
            if (seqs[i].ids[k] >= (uint64_t)V) {
                snprintf(err, errlen, "token id %u at position %lld is outside the vocabulary (%lld)", seqs[i].ids[k],
                         (long long)(st->T + k), (long long)V);
                return -1;
            }
    }
    return 0;
}

int forward_batch_pick(fwd_seq_t *seqs, int n_seqs, sampler_t *scratch, char *err, size_t errlen) {
    for (int i = 0; i < n_seqs; i++) seqs[i].n_logits = 0;
    if (check_batch(seqs, n_seqs, err, errlen)) return -1;
    /* lay out rows: every head piece first, then every tail piece */
    seq_rows_t *rows = xcalloc((size_t)n_seqs + 1, sizeof *rows);
    fwd_piece_t *pieces = xcalloc(2 * (size_t)n_seqs + 1, sizeof *pieces);
    int np = 0;
    int64_t n = 0, k0 = 0;
    for (int i = 0; i < n_seqs; i++) {
        int64_t from = seqs[i].decoder_from, T = seqs[i].st->T, len = seqs[i].n;
        rows[i].head = from < 0 || from <= T ? 0 : from - T < len ? from - T : len;
        rows[i].hr = n;
        if (rows[i].head) pieces[np++] = (fwd_piece_t){.st = seqs[i].st, .r0 = n, .n = rows[i].head, .p0 = T};
        n += rows[i].head;
    }
    k0 = n;
    for (int i = 0; i < n_seqs; i++) {
        int64_t len = seqs[i].n - rows[i].head;
        rows[i].tr = n;
        if (len > 0) pieces[np++] = (fwd_piece_t){.st = seqs[i].st, .r0 = n, .n = len, .p0 = seqs[i].st->T + rows[i].head};
        n += len;
    }
    if (n == 0) {
        free(rows), free(pieces);
        return 0;
    }
    const model_t *m = seqs[0].st->m;
    const model_config_t *c = &m->cfg;
    fwd_t f = {.m = m, .c = c, .bk = m->bk, .n = n, .pieces = pieces, .n_pieces = np, .k0 = k0};
    backend_t *bk = f.bk;
    chunk_alloc(&f);
    upload_tokens(&f, seqs, n_seqs, rows);
    bk->gather(bk, f.xc, m->embed, f.ids);
    bk->hc_fill(bk, f.X, bk_cols(f.coefF, 0, c->hc_mult), f.xc, c->hc_mult); /* block 0 reads stream 0 */
    for (int L = 0; L < c->n_layers; L++) {
        int64_t from = L <= c->first_decoder_layer ? 0 : k0;
        if (from >= n) continue;
        block(&f, L, from);
    }
    /* logits: the tail rows (ALL) or the last row (LAST) of each sequence whose chunk reaches the decoder */
    head_row_t *want = xmalloc((size_t)(n + 1) * sizeof *want);
    int64_t nw = 0, V = c->vocab_size;
    for (int i = 0; i < n_seqs; i++) {
        int64_t tail = seqs[i].n - rows[i].head;
        if (seqs[i].want == FWD_LOGITS_NONE || tail <= 0) continue;
        int64_t first = seqs[i].want == FWD_LOGITS_ALL ? 0 : tail - 1;
        const bk_pick_t *pick = seqs[i].want == FWD_LOGITS_LAST ? seqs[i].pick : NULL;
        for (int64_t k = first; k < tail; k++)
            want[nw++] = (head_row_t){rows[i].tr + k, pick ? NULL : seqs[i].logits + (size_t)(k - first) * (size_t)V, pick};
        seqs[i].n_logits = tail - first;
    }
    if (nw) head(&f, want, nw, scratch);
    free(want);
    chunk_free(&f);
    /* Engram history: the newest max_ngram - 1 compressed ids */
    for (int i = 0; i < n_seqs; i++) {
        seqstate_t *st = seqs[i].st;
        const uint32_t *ids = seqs[i].ids;
        int64_t len = seqs[i].n;
        int32_t hist[MC_MAX_NGRAM];
        for (int s = 0; s < MC_MAX_NGRAM; s++)
            hist[s] = s < len ? (m->engram.map ? engram_compress(&m->engram, ids[len - 1 - s]) : 0) : st->hist[s - len];
        memcpy(st->hist, hist, sizeof hist);
        st->T += len;
    }
    free(rows), free(pieces);
    return 0;
}

int forward_batch(fwd_seq_t *seqs, int n_seqs, char *err, size_t errlen) {
    for (int i = 0; i < n_seqs; i++)
        if (seqs[i].pick) die("forward_batch: picks go through forward_batch_pick");
    return forward_batch_pick(seqs, n_seqs, NULL, err, errlen);
}

int forward_prefill(seqstate_t *st, const uint32_t *ids, int64_t n, int64_t decoder_from, fwd_logits_t want,
                    float *logits, int64_t *n_logits, char *err, size_t errlen) {
    fwd_seq_t s = {st, ids, n > 0 ? n : 0, decoder_from, want, logits, 0, NULL};
    int rc = forward_batch(&s, 1, err, errlen);
    if (n_logits) *n_logits = s.n_logits;
    return rc;
}

int forward_step(seqstate_t *st, uint32_t id, float *logits, char *err, size_t errlen) {
    return forward_prefill(st, &id, 1, -1, logits ? FWD_LOGITS_LAST : FWD_LOGITS_NONE, logits, NULL, err, errlen);
}

int forward_step_batch(seqstate_t *const *sts, const uint32_t *ids, int n, float *logits, char *err, size_t errlen) {
    fwd_seq_t *s = xcalloc((size_t)n + 1, sizeof *s);
    for (int i = 0; i < n; i++)
        s[i] = (fwd_seq_t){sts[i], ids + i, 1, -1, logits ? FWD_LOGITS_LAST : FWD_LOGITS_NONE,
                           logits ? logits + (size_t)i * (size_t)sts[i]->m->cfg.vocab_size : NULL, 0, NULL};
    int rc = forward_batch(s, n, err, errlen);
    free(s);
    return rc;
}

int forward_step_batch_pick(seqstate_t *const *sts, const uint32_t *ids, int n, const bk_pick_t *picks, sampler_t *scratch,
                            char *err, size_t errlen) {
    fwd_seq_t *s = xcalloc((size_t)n + 1, sizeof *s);
    for (int i = 0; i < n; i++) s[i] = (fwd_seq_t){sts[i], ids + i, 1, -1, FWD_LOGITS_LAST, NULL, 0, &picks[i]};
    int rc = forward_batch_pick(s, n, scratch, err, errlen);
    free(s);
    return rc;
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
