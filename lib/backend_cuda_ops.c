/* CUDA backend ops other than matmul and experts: each one checks what the kernels assume,
 * launches them on the backend's stream (profiled under its name) and dies on a launch error. */
#include "backend_cuda_internal.h"
#include "util.h"

#include <stdlib.h>

#define OP(name, launch)              \
    do {                              \
        cu_prof_begin(c, name);       \
        CU(launch);                   \
        cu_prof_end(c);               \
    } while (0)

static float *F(bk_tensor_t t) { return t.ptr; }
static const float *const *PAGES(bk_paged_t p) { return p.table; }
_Static_assert(K_PAGE_SHIFT == BK_PAGE_SHIFT, "kernels.h and backend.h page the same way");
static int32_t *I(bk_tensor_t t) { return t.ptr; }

void cu_rmsnorm(backend_t *bk, bk_tensor_t out, bk_tensor_t x, const bk_tensor_t *w, float eps) {
    cuda_t *c = cu_of(bk);
    OP("rmsnorm", k_rmsnorm(F(out), out.ld, F(x), x.ld, w ? F(*w) : NULL, x.rows, x.cols, eps, c->stream));
}

void cu_rope(backend_t *bk, bk_tensor_t x, int head_dim, bk_tensor_t inv_freq, int64_t pos0, int64_t pos_step, bool inverse) {
    cuda_t *c = cu_of(bk);
    OP("rope", k_rope(F(x), x.ld, x.rows, x.cols, head_dim, F(inv_freq), (int)inv_freq.cols, pos0, pos_step, NULL, inverse,
                      c->stream));
}

/* Dies unless every span's rows lie in [0, rows); returns the rows of all spans. */
static int64_t span_rows(const bk_span_t *spans, int n_spans, int64_t rows, const char *op) {
    int64_t total = 0;
    for (int i = 0; i < n_spans; i++) {
        if (spans[i].r0 < 0 || spans[i].n < 0 || spans[i].r0 + spans[i].n > rows)
            die("CUDA backend: %s span of rows %lld..%lld outside %lld rows", op, (long long)spans[i].r0,
                (long long)(spans[i].r0 + spans[i].n), (long long)rows);
        total += spans[i].n;
    }
    return total;
}

/* One launch over a device list of (row, position) pairs. */
void cu_rope_spans(backend_t *bk, bk_tensor_t x, int head_dim, bk_tensor_t inv_freq, const bk_span_t *spans, int n_spans,
                   int64_t pos_step, bool inverse) {
    cuda_t *c = cu_of(bk);
    int64_t m = span_rows(spans, n_spans, x.rows, "rope"), k = 0;
    if (n_spans == 1) {
        cu_rope(bk, bk_rows(x, spans[0].r0, spans[0].n), head_dim, inv_freq, spans[0].pos0, pos_step, inverse);
        return;
    }
    if (m == 0) return;
    int64_t *rp = xmalloc((size_t)(2 * m) * sizeof *rp);
    for (int i = 0; i < n_spans; i++)
        for (int64_t r = 0; r < spans[i].n; r++) rp[2 * k] = spans[i].r0 + r, rp[2 * k + 1] = spans[i].pos0 + r * pos_step, k++;
    int64_t *d = cu_upload_table(c, rp, (size_t)(2 * m) * sizeof *rp);
    OP("rope", k_rope(F(x), x.ld, m, x.cols, head_dim, F(inv_freq), (int)inv_freq.cols, 0, 0, d, inverse, c->stream));
    cu_release_scratch(c, d);
    free(rp);
}

void cu_qat(backend_t *bk, bk_tensor_t x, qat_kind_t kind, int block) {
    cuda_t *c = cu_of(bk);
    if (block <= 0 || block > 32 || 32 % block) die("CUDA backend: QAT block %d does not divide 32", block);
    OP("qat", k_qat(F(x), x.ld, x.rows, x.cols, (int)kind, block, c->stream));
}

/* One launch (kernels/rope_qat.cu) where it takes the shape, a device table of (row, position,
 * qat) triples for several spans; else copy, rope and qat op by op (the same bits). */
void cu_rope_qat_spans(backend_t *bk, bk_tensor_t out, bk_tensor_t x, int head_dim, bk_tensor_t inv_freq, const bk_span_t *spans,
                       int n_spans, int64_t pos_step, qat_kind_t kind, int block) {
    cuda_t *c = cu_of(bk);
    if (out.rows != x.rows || out.cols != x.cols)
        die("CUDA backend: rope_qat of %lld x %lld into %lld x %lld", (long long)x.rows, (long long)x.cols, (long long)out.rows,
            (long long)out.cols);
    int64_t m = span_rows(spans, n_spans, x.rows, "rope_qat"), k = 0;
    if (m == 0) return;
    if (!k_rope_qat_ok(F(out), out.ld, F(x), x.ld, x.cols, head_dim, block)) {
        for (int i = 0; i < n_spans; i++) {
            bk_tensor_t o = bk_rows(out, spans[i].r0, spans[i].n);
            if (out.ptr != x.ptr) bk->copy(bk, o, bk_rows(x, spans[i].r0, spans[i].n));
            cu_rope(bk, o, head_dim, inv_freq, spans[i].pos0, pos_step, false);
            if (spans[i].qat) cu_qat(bk, o, kind, block);
        }
        return;
    }
    int half = (int)inv_freq.cols;
    if (n_spans == 1) {
        OP("rope_qat", k_rope_qat(F(out), out.ld, F(x), x.ld, m, x.cols, head_dim, F(inv_freq), half, spans[0].r0, spans[0].pos0,
                                  pos_step, spans[0].qat, NULL, (int)kind, block, c->stream));
        return;
    }
    int64_t *t = xmalloc((size_t)(3 * m) * sizeof *t);
    for (int i = 0; i < n_spans; i++)
        for (int64_t r = 0; r < spans[i].n; r++)
            t[3 * k] = spans[i].r0 + r, t[3 * k + 1] = spans[i].pos0 + r * pos_step, t[3 * k + 2] = spans[i].qat, k++;
    int64_t *d = cu_upload_table(c, t, (size_t)(3 * m) * sizeof *t);
    OP("rope_qat", k_rope_qat(F(out), out.ld, F(x), x.ld, m, x.cols, head_dim, F(inv_freq), half, 0, 0, 0, 0, d, (int)kind,
                              block, c->stream));
    cu_release_scratch(c, d);
    free(t);
}

void cu_hc_mix(backend_t *bk, bk_tensor_t coef, bk_tensor_t mixes, bk_tensor_t X, bk_tensor_t base, bk_tensor_t scale, int hc,
               float eps, float hc_eps, int iters) {
    cuda_t *c = cu_of(bk);
    cu_join_side(c);
    if (hc > 16) die("CUDA backend: hc_mult %d > 16", hc);
    OP("hc_mix", k_hc_mix(F(coef), coef.ld, F(mixes), mixes.ld, F(X), X.ld, X.rows, X.cols, F(base), F(scale), hc, eps,
                          hc_eps, iters, c->stream));
}

void cu_hc_collapse(backend_t *bk, bk_tensor_t out, bk_tensor_t X, bk_tensor_t pre, int hc) {
    cuda_t *c = cu_of(bk);
    cu_join_side(c);
    OP("hc_collapse", k_hc_collapse(F(out), out.ld, F(X), X.ld, F(pre), pre.ld, X.rows, out.cols, hc, c->stream));
}

/* Before an hc_expand of y into X: the coefficients (the side stream's) joined, the shapes checked. */
void cu_expand_check(cuda_t *c, bk_tensor_t X, bk_tensor_t y, bk_tensor_t coef, int hc) {
    cu_join_side(c);
    if (hc < 1 || hc > 16 || X.rows != y.rows || X.cols != hc * y.cols || coef.rows != y.rows || coef.cols < (2 + hc) * hc)
        die("CUDA backend: hc_expand of %lld x %lld into %lld x %lld streams (hc %d) with %lld x %lld coefficients",
            (long long)y.rows, (long long)y.cols, (long long)X.rows, (long long)X.cols, hc, (long long)coef.rows,
            (long long)coef.cols);
}

void cu_hc_expand(backend_t *bk, bk_tensor_t X, bk_tensor_t y, bk_tensor_t coef, int hc) {
    cuda_t *c = cu_of(bk);
    cu_expand_check(c, X, y, coef, hc);
    OP("hc_expand", k_hc_expand(F(X), X.ld, F(y), y.ld, F(coef), coef.ld, X.rows, y.cols, hc, c->stream));
}

void cu_hc_fill(backend_t *bk, bk_tensor_t X, bk_tensor_t pre, bk_tensor_t e, int hc) {
    cuda_t *c = cu_of(bk);
    cu_join_side(c);
    if (hc < 1 || hc > 16 || X.rows != e.rows || X.cols != hc * e.cols || pre.rows != e.rows || pre.cols < hc)
        die("CUDA backend: hc_fill of %lld x %lld into %lld x %lld streams (hc %d) with %lld x %lld weights", (long long)e.rows,
            (long long)e.cols, (long long)X.rows, (long long)X.cols, hc, (long long)pre.rows, (long long)pre.cols);
    OP("hc_fill", k_hc_fill(F(X), X.ld, F(pre), pre.ld, F(e), e.ld, X.rows, e.cols, hc, c->stream));
}

/* One launch (kernels/hc_pre.cu) where it takes the shape (decode rows), else the four ops:
 * the same bits either way. In the launch's form the coefficients (split sums, then a serial
 * tail: the fix-up and 20 Sinkhorn iterations) go to the second stream, forked here, and only
 * the normed input stays on the main one: the site's next ops need just that (the collapse
 * takes the earlier site's pre), and its hc_expand joins the coefficients back (cu_join_side). */
void cu_hc_pre(backend_t *bk, bk_tensor_t out, bk_tensor_t coef, bk_tensor_t X, const bk_weight_t *fn, bk_tensor_t base,
               bk_tensor_t scale, bk_tensor_t pre, const bk_tensor_t *norm, int hc, float eps, float hc_eps, int iters) {
    cuda_t *c = cu_of(bk);
    cu_join_side(c); /* pre may be the last site's coefficients */
    int64_t nm = (int64_t)(2 + hc) * hc;
    if (hc < 1 || hc > 16 || coef.cols != nm || X.cols != hc * out.cols || pre.cols != hc || coef.rows != X.rows ||
        out.rows != X.rows || pre.rows != X.rows)
        die("CUDA backend: hc_pre of %lld x %lld streams (hc %d) into %lld x %lld and %lld x %lld coefficients", (long long)X.rows,
            (long long)X.cols, hc, (long long)out.rows, (long long)out.cols, (long long)coef.rows, (long long)coef.cols);
    hc_pre_args_t a = {.out = F(out), .coef = F(coef), .ldo = out.ld, .ldc = coef.ld, .X = F(X), .pre = F(pre),
                       .base = F(base), .scale = F(scale), .norm = norm ? F(*norm) : NULL, .ldx = X.ld, .ldp = pre.ld,
                       .fn = fn->w, .m = X.rows, .D = out.cols, .split_k = cu_simt_split_k(c, nm, X.cols), .hc = hc,
                       .iters = iters, .eps = eps, .hc_eps = hc_eps};
    if (!k_hc_pre_ok(&a)) {
        cu_matmul(bk, coef, X, fn, 0);
        cu_hc_mix(bk, coef, coef, X, base, scale, hc, eps, hc_eps, iters);
        cu_hc_collapse(bk, out, X, pre, hc);
        cu_rmsnorm(bk, out, out, norm, eps);
        return;
    }
    a.partial = cu_scratch(c, k_hc_pre_partial_floats(&a) * sizeof(float));
    if (!c->side_on || c->in_branch) {
        a.counter = c->counters;
        OP("hc_pre", k_hc_pre(&a, c->stream));
        cu_release_scratch(c, a.partial);
        return;
    }
    a.counter = c->side_counter, a.part = K_HC_PRE_MIXES;
    cu_side_fork(c); /* X is ready */
    CU(k_hc_pre(&a, c->side));
    cu_side_end(c);
    c->side_partial = a.partial;
    a.part = K_HC_PRE_NORM;
    OP("hc_pre", k_hc_pre(&a, c->stream));
}

void cu_gather(backend_t *bk, bk_tensor_t out, const bk_weight_t *table, bk_tensor_t idx) {
    cuda_t *c = cu_of(bk);
    OP(table->host ? "gather (host table)" : "gather", k_gather(F(out), out.ld, &table->w, I(idx), idx.ld, out.rows, idx.cols,
                                                                c->stream));
}

void cu_engram_gate(backend_t *bk, bk_tensor_t X, bk_tensor_t kv, bk_tensor_t qk, int hc, float eps) {
    cuda_t *c = cu_of(bk);
    cu_join_side(c);
    OP("engram_gate", k_engram_gate(F(X), X.ld, F(kv), kv.ld, F(qk), qk.ld, X.rows, qk.cols, hc, eps, c->stream));
}

void cu_group_pool(backend_t *bk, bk_tensor_t out, bk_tensor_t z, bk_tensor_t s, int ratio) {
    cuda_t *c = cu_of(bk);
    OP("group_pool", k_group_pool(F(out), out.ld, F(z), z.ld, F(s), s.ld, out.rows, out.cols, ratio, c->stream));
}

static bool vec_ok(const void *p, int64_t ld) { return (uintptr_t)p % 16 == 0 && ld % 4 == 0; }
static bool paged_vec_ok(bk_paged_t p) { return p.cols % 4 == 0; } /* pages start 16-byte aligned (backend.h) */

/* One launch for every span: the one span's rows through the scalar fields, several through a
 * device table of rows. */
static void attention_simt(backend_t *bk, bk_tensor_t out, bk_tensor_t q, bk_tensor_t sink, float scale, bk_tensor_t kv_new,
                           int window, const bk_span_t *spans, int n_spans, const bk_tensor_t *sel,
                           const bk_tensor_t *unrope) {
    cuda_t *c = cu_of(bk);
    int d = (int)kv_new.cols;
    if (d > 512) die("CUDA backend: attention head_dim %d > 512", d);
    int64_t m = span_rows(spans, n_spans, q.rows, "attention");
    if (m == 0) return;
    attn_args_t a = {
        .out = F(out), .ldo = out.ld, .q = F(q), .ldq = q.ld, .sink = F(sink), .scale = scale, .ld_kv = kv_new.ld,
        .window = window, .sel = sel ? I(*sel) : NULL, .ld_sel = sel ? sel->ld : 0, .n_sel = sel ? sel->cols : 0,
        .m = m, .heads = (int)(q.cols / d), .d = d, .splits = 1,
    };
    a.vec = d % 4 == 0 && vec_ok(q.ptr, q.ld) && vec_ok(kv_new.ptr, kv_new.ld);
    attn_row_t *rows = NULL;
    if (n_spans == 1) { /* rows 0.. of views at the span */
        const bk_span_t *s = &spans[0];
        a.out += s->r0 * out.ld, a.q += s->r0 * q.ld, a.kv_new = F(kv_new) + s->r0 * kv_new.ld;
        if (a.sel) a.sel += s->r0 * sel->ld;
        a.ring = F(s->ring), a.ld_ring = s->ring.ld, a.ring_rows = s->ring.rows, a.pos0 = s->pos0, a.win_lo = s->win_lo;
        if (sel) a.pool = PAGES(s->pool), a.ld_pool = s->pool.cols, a.pool_rows = s->pool.rows;
        a.vec = a.vec && vec_ok(s->ring.ptr, s->ring.ld) && (!sel || paged_vec_ok(s->pool));
    } else {
        rows = xmalloc((size_t)m * sizeof *rows);
        int64_t k = 0;
        for (int i = 0; i < n_spans; i++) {
            const bk_span_t *s = &spans[i];
            a.vec = a.vec && vec_ok(s->ring.ptr, s->ring.ld) && (!sel || paged_vec_ok(s->pool));
            for (int64_t r = 0; r < s->n; r++)
                rows[k++] = (attn_row_t){F(s->ring), s->ring.ld, s->ring.rows, F(kv_new) + s->r0 * kv_new.ld, s->pos0, s->win_lo,
                                         sel ? PAGES(s->pool) : NULL, sel ? s->pool.cols : 0, sel ? s->pool.rows : 0, s->r0 + r,
                                         s->pos0 + r};
        }
        a.rows = cu_upload_table(c, rows, (size_t)m * sizeof *rows);
    }
    /* few query rows: cut each row's keys into ranges (of 32 or more) so that about four blocks
     * per SM run; counted for the longest span alone, so that a decode row is cut the same
     * way whatever it is batched with (its numbers do not change) */
    int64_t span_max = 1;
    for (int i = 0; i < n_spans; i++) span_max = spans[i].n > span_max ? spans[i].n : span_max;
    int64_t blocks = span_max * ((a.heads + 15) / 16), keys = window + a.n_sel;
    int64_t want = (4 * c->sms + blocks - 1) / blocks, most = (keys + 31) / 32;
    a.splits = (int)(want < most ? want : most);
    if (a.splits < 1) a.splits = 1;
    if (a.splits > 256) a.splits = 256; /* the merge kernel's limit */
    bool merge_turns = unrope && a.splits > 1 && d % 4 == 0; /* the merge turns the output back */
    if (merge_turns) a.unrope = F(*unrope), a.unrope_half = (int)unrope->cols;
    void *po = NULL, *pml = NULL;
    if (a.splits > 1) {
        po = cu_scratch(c, (size_t)(a.splits * a.m * a.heads * d) * 4);
        pml = cu_scratch(c, (size_t)(a.splits * a.m * a.heads * 2) * 4);
        a.part_o = po, a.part_ml = pml;
    }
    OP("attention", k_attention(&a, c->stream));
    if (po) cu_release_scratch(c, po), cu_release_scratch(c, pml);
    if (rows) cu_release_scratch(c, (void *)a.rows);
    free(rows);
    if (unrope && !merge_turns) cu_rope_spans(bk, out, d, *unrope, spans, n_spans, 1, true);
}

/* Long spans (prefill) on the tensor cores, the others on the CUDA cores. */
void cu_attention_spans(backend_t *bk, bk_tensor_t out, bk_tensor_t q, bk_tensor_t sink, float scale, bk_tensor_t kv_new,
                        int window, const bk_span_t *spans, int n_spans, const bk_tensor_t *sel, const bk_tensor_t *unrope) {
    bk_span_t *rest = xmalloc((size_t)(n_spans + 1) * sizeof *rest);
    int n_rest = cu_attention_tc(bk, out, q, sink, scale, kv_new, window, spans, n_spans, sel, unrope, rest);
    attention_simt(bk, out, q, sink, scale, kv_new, window, rest, n_rest, sel, unrope);
    free(rest);
}

void cu_attention(backend_t *bk, bk_tensor_t out, bk_tensor_t q, bk_tensor_t sink, float scale, bk_tensor_t ring,
                  bk_tensor_t kv_new, int64_t pos0, int window, int64_t win_lo, const bk_paged_t *pool,
                  const bk_tensor_t *sel) {
    bk_span_t s = {.r0 = 0, .n = q.rows, .pos0 = pos0, .ring = ring, .pool = pool ? *pool : (bk_paged_t){0}, .win_lo = win_lo};
    cu_attention_spans(bk, out, q, sink, scale, kv_new, window, &s, 1, pool ? sel : NULL, NULL);
}

/* One launch per kernel for every span (scores, block scores, mask, top-k), as attention. */
void cu_indexer_spans(backend_t *bk, bk_tensor_t sel, const bk_tensor_t *blocks_out, bk_tensor_t q, bk_tensor_t w,
                      const bk_span_t *spans, int n_spans, int ratio, const bk_tensor_t *blocks_in, int block_size,
                      float q_scale, float w_scale) {
    cuda_t *c = cu_of(bk);
    int64_t m = span_rows(spans, n_spans, sel.rows, "indexer"), nk_max = 0, heads = w.cols;
    if (m == 0) return;
    if (ratio <= 0) die("CUDA backend: indexer ratio %d", ratio);
    if (heads < 1 || heads > K_IX_MAX_HEADS)
        die("CUDA backend: indexer of %lld heads (1 to %d)", (long long)heads, K_IX_MAX_HEADS);
    int64_t di = spans[0].keys.cols;
    ix_args_t a = {.q = F(q), .w = F(w), .ldq = q.ld, .ldw = w.ld, .m = m, .heads = (int)heads, .di = (int)di, .ratio = ratio,
                   .q_scale = q_scale, .w_scale = w_scale};
    a.vec = di % 4 == 0 && vec_ok(q.ptr, q.ld);
    for (int i = 0; i < n_spans; i++) {
        if (spans[i].keys.cols != di || di * heads != q.cols) die("CUDA backend: indexer keys of %lld columns for queries of %lld",
                                                                  (long long)spans[i].keys.cols, (long long)q.cols);
        if (spans[i].n && spans[i].keys.rows > nk_max) nk_max = spans[i].keys.rows;
        a.vec = a.vec && paged_vec_ok(spans[i].keys);
    }
    int64_t r0 = 0; /* one span: rows r0.. of the row tensors through the scalar fields */
    ix_row_t *rows = NULL;
    if (n_spans == 1) {
        r0 = spans[0].r0;
        a.q += r0 * q.ld, a.w += r0 * w.ld;
        a.keys = PAGES(spans[0].keys), a.ldk = spans[0].keys.cols, a.nk = spans[0].keys.rows, a.pos0 = spans[0].pos0;
    } else {
        rows = xmalloc((size_t)m * sizeof *rows);
        int64_t k = 0;
        for (int i = 0; i < n_spans; i++)
            for (int64_t r = 0; r < spans[i].n; r++)
                rows[k++] = (ix_row_t){PAGES(spans[i].keys), spans[i].keys.cols, spans[i].keys.rows, spans[i].r0 + r, spans[i].pos0 + r};
        a.rows = cu_upload_table(c, rows, (size_t)m * sizeof *rows);
    }
    a.nk_max = nk_max;
    cu_prof_begin(c, "indexer");
    a.scores = cu_scratch(c, (size_t)(m * (nk_max ? nk_max : 1)) * 4);
    float *bs = NULL;
    if (!cu_indexer_tc(c, &a, q, w, spans, n_spans)) cu_indexer_rows(c, &a);
    /* Level 1 (the candidate blocks) reads the scores as the selection does: on the side stream
     * beside it (at 32k both take ~11 us, run 214), unless the selection reads candidates too. */
    bool beside = blocks_out && !blocks_in && c->side_on && !c->in_branch;
    if (blocks_out) {
        int64_t nb = (nk_max + block_size - 1) / block_size;
        bs = cu_scratch(c, (size_t)(m * (nb ? nb : 1)) * 4);
        if (beside) cu_side_fork(c);
        CU(k_topk(I(*blocks_out) + r0 * blocks_out->ld, blocks_out->ld, (int)blocks_out->cols, bs, nb, &a, block_size, NULL, 0,
                  0, 0, beside ? c->side : c->stream));
        if (beside) cu_side_end(c);
    }
    const int32_t *cand = blocks_in ? I(*blocks_in) + r0 * blocks_in->ld : NULL; /* level 2: masked in the top-k's launch */
    CU(k_topk(I(sel) + r0 * sel.ld, sel.ld, (int)sel.cols, a.scores, nk_max, &a, 0, cand, blocks_in ? blocks_in->ld : 0,
              blocks_in ? blocks_in->cols : 0, block_size, c->stream));
    if (beside) cu_join_side(c); /* the candidates before any op reads them; the scratch after */
    cu_prof_end(c);
    cu_release_scratch(c, a.scores);
    if (bs) cu_release_scratch(c, bs);
    if (rows) cu_release_scratch(c, (void *)a.rows);
    free(rows);
}

void cu_indexer_topk(backend_t *bk, bk_tensor_t sel, const bk_tensor_t *blocks_out, bk_tensor_t q, bk_tensor_t w,
                     bk_paged_t keys, int64_t pos0, int ratio, const bk_tensor_t *blocks_in, int block_size, float q_scale,
                     float w_scale) {
    bk_span_t s = {.r0 = 0, .n = sel.rows, .pos0 = pos0, .keys = keys};
    cu_indexer_spans(bk, sel, blocks_out, q, w, &s, 1, ratio, blocks_in, block_size, q_scale, w_scale);
}

void cu_router(backend_t *bk, bk_tensor_t idx, bk_tensor_t wt, bk_tensor_t logits, bk_tensor_t bias, float temp,
               bool normalize, float scale) {
    cuda_t *c = cu_of(bk);
    OP("router", k_router(I(idx), idx.ld, F(wt), wt.ld, F(logits), logits.ld, F(bias), logits.rows, (int)logits.cols,
                          (int)idx.cols, temp, normalize, scale, c->stream));
}
