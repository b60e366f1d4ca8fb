/* Prefill attention and indexer scores on the tensor cores (kernels/attention_tc.cu,
 * kernels/indexer_tc.cu): spans of at least TC_MIN_ROWS rows, when the precision allows (attention:
 * bf16 and bf16x2; indexer: every mode but fp32) and the shapes fit; shorter spans (decode) stay
 * on the CUDA-core attention and take the indexer's row kernel (kernels/indexer_tc_rows.cu, the
 * tensor cores too but no store). The path is chosen per
 * span from its length alone, so a row's numbers do not depend on what it is batched with. The
 * keys a launch of long spans reads (window rows, pool rows, indexer keys) are first split once
 * into bf16 pieces (kernels/bf16_pieces.cu). */
#include "backend_cuda_internal.h"
#include "util.h"

#include <stdlib.h>

#define TC_MIN_ROWS 32

/* bf16 pieces of the tensor-core operands; 0: fp32 mode, no tensor cores. */
static int tc_pieces(const cuda_t *c) {
    switch (c->precision) {
    case CUDA_BF16X3: return 3;
    case CUDA_BF16X2: return 2;
    case CUDA_BF16:
    case CUDA_FP8: return 1;
    default: return 0;
    }
}

/* The attention's pieces: bf16x3 stays on the CUDA cores. On the tensor cores its outputs differ
 * from the CPU's by a few ulps more than a reordered fp32 sum does, which flipped a routing
 * decision of test_forward_cuda's tiny-a model (the same flip follows from absolute noise of 2^-22
 * on the attention outputs on the CPU), and bf16x3 must give the CPU's numbers. */
static int attn_pieces(const cuda_t *c) { return c->precision == CUDA_BF16X3 ? 0 : tc_pieces(c); }

static bool aligned16(const void *p, int64_t ld) { return (uintptr_t)p % 16 == 0 && ld % 4 == 0; }

/* The segment of rows [0, p.rows) of a paged store, to store rows dst0.. (read through its table). */
static piece_seg_t paged_seg(bk_paged_t p, int64_t dst0) { return (piece_seg_t){NULL, p.cols, p.rows, 0, 0, dst0, p.table}; }

/* The segments' rows as bf16 pieces in a new store (scratch, released by the caller). */
static void make_store(cuda_t *c, const piece_seg_t *segs, int n, int64_t rows, int cols, int pieces, uint16_t **store,
                       uint8_t **inexact) {
    int64_t most = 0;
    int vec = 1;
    for (int i = 0; i < n; i++) {
        most = segs[i].rows > most ? segs[i].rows : most;
        vec = vec && aligned16(segs[i].src, segs[i].ld);
    }
    *store = cu_scratch(c, (size_t)(rows * cols * pieces) * 2);
    *inexact = cu_scratch(c, (size_t)rows);
    piece_seg_t *d = cu_upload_table(c, segs, (size_t)n * sizeof *segs);
    pieces_args_t a = {*store, *inexact, rows, cols, pieces, vec, d, n, most};
    CU(k_bf16_pieces(&a, c->stream));
    cu_release_scratch(c, d);
}

int cu_attention_tc(backend_t *bk, bk_tensor_t out, bk_tensor_t q, bk_tensor_t sink, float scale, bk_tensor_t kv_new,
                    int window, const bk_span_t *spans, int n_spans, const bk_tensor_t *sel, const bk_tensor_t *unrope,
                    bk_span_t *rest) {
    cuda_t *c = cu_of(bk);
    int d = (int)kv_new.cols, pieces = attn_pieces(c), heads = d > 0 ? (int)(q.cols / d) : 0, n_rest = 0, nt = 0, ns = 0;
    bool on = pieces && d > 0 && q.cols == (int64_t)heads * d && k_attention_tc_ok(heads, d);
    attn_tc_span_t *ts = xmalloc((size_t)(n_spans + 1) * sizeof *ts);
    bk_span_t *taken = xmalloc((size_t)(n_spans + 1) * sizeof *taken);
    piece_seg_t *segs = xmalloc((size_t)(3 * n_spans + 1) * sizeof *segs);
    int64_t m = 0, rows = 0;
    for (int i = 0; i < n_spans; i++) {
        const bk_span_t *s = &spans[i];
        if (!on || s->n < TC_MIN_ROWS) {
            rest[n_rest++] = *s;
            continue;
        }
        if (s->r0 < 0 || s->r0 + s->n > q.rows)
            die("CUDA backend: attention span of rows %lld..%lld outside %lld rows", (long long)s->r0, (long long)(s->r0 + s->n),
                (long long)q.rows);
        /* the store: window positions wstart .. pos0 + n - 1 (ring, then kv_new), then the pool */
        int64_t first = s->pos0 - window + 1 > s->win_lo ? s->pos0 - window + 1 : s->win_lo;
        int64_t wstart = first < 0 ? 0 : first > s->pos0 ? s->pos0 : first, prev = s->pos0 - wstart;
        int64_t wrows = prev + s->n, prows = sel ? s->pool.rows : 0;
        taken[nt] = *s;
        ts[nt++] = (attn_tc_span_t){m, s->r0, s->n, s->pos0, s->win_lo, wstart, rows, rows + wrows, prows};
        if (prev) {
            if (s->ring.rows <= 0 || s->ring.cols != d) die("CUDA backend: attention needs %lld ring rows of %d", (long long)prev, d);
            segs[ns++] = (piece_seg_t){s->ring.ptr, s->ring.ld, prev, s->ring.rows, wstart, rows, NULL};
        }
        segs[ns++] = (piece_seg_t){(const float *)kv_new.ptr + s->r0 * kv_new.ld, kv_new.ld, s->n, 0, 0, rows + prev, NULL};
        if (prows) {
            if (s->pool.cols != d) die("CUDA backend: attention pool of %lld columns for head_dim %d", (long long)s->pool.cols, d);
            segs[ns++] = paged_seg(s->pool, rows + wrows);
        }
        rows += wrows + prows, m += s->n;
    }
    if (nt) {
        cu_prof_begin(c, "attention");
        uint16_t *store;
        uint8_t *inexact;
        make_store(c, segs, ns, rows, d, pieces, &store, &inexact);
        attn_tc_args_t a = {
            .out = out.ptr, .ldo = out.ld, .q = q.ptr, .ldq = q.ld, .sink = sink.ptr, .scale = scale,
            .sel = sel ? sel->ptr : NULL, .ld_sel = sel ? sel->ld : 0, .n_sel = sel ? sel->cols : 0,
            .store = store, .inexact = inexact, .store_rows = rows, .spans = cu_upload_table(c, ts, (size_t)nt * sizeof *ts),
            .n_spans = nt, .m = m, .window = window, .heads = heads, .d = d, .pieces = pieces,
            .vec = aligned16(q.ptr, q.ld) && aligned16(out.ptr, out.ld),
        };
        CU(k_attention_tc(&a, c->stream));
        cu_prof_end(c);
        cu_release_scratch(c, (void *)a.spans), cu_release_scratch(c, store), cu_release_scratch(c, inexact);
        if (unrope) cu_rope_spans(bk, out, d, *unrope, taken, nt, 1, true);
    }
    free(ts), free(taken), free(segs);
    return n_rest;
}

void cu_indexer_rows(cuda_t *c, const ix_args_t *a) {
    int pieces = tc_pieces(c);
    if (pieces && k_indexer_tc_rows_ok(a)) CU(k_indexer_tc_rows(a, pieces, c->stream));
    else CU(k_indexer_score(a, c->stream));
}

bool cu_indexer_tc(cuda_t *c, const ix_args_t *a, bk_tensor_t q, bk_tensor_t w, const bk_span_t *spans, int n_spans) {
    int pieces = tc_pieces(c), nt = 0, ns = 0, nc = 0;
    if (!pieces || !k_indexer_tc_ok(a->heads, a->di)) return false;
    for (int i = 0; i < n_spans && !nt; i++) nt += spans[i].n >= TC_MIN_ROWS;
    if (!nt) return false;
    int rb = k_indexer_tc_rows_per_block(a->heads);
    ix_tc_span_t *ts = xmalloc((size_t)n_spans * sizeof *ts);
    piece_seg_t *segs = xmalloc((size_t)n_spans * sizeof *segs);
    copy_desc_t *cps = xmalloc((size_t)n_spans * sizeof *cps);
    int64_t *cp_from = xmalloc((size_t)n_spans * sizeof *cp_from); /* the side buffer's first row of each copy */
    ix_row_t *short_rows = NULL;
    int64_t b = 0, rows = 0, blocks = 0, m_short = 0;
    nt = 0;
    for (int i = 0; i < n_spans; i++) {
        const bk_span_t *s = &spans[i];
        if (s->n >= TC_MIN_ROWS) {
            ts[nt++] = (ix_tc_span_t){b, s->r0, s->n, s->pos0, s->keys.rows, rows, blocks};
            if (s->keys.rows) segs[ns++] = paged_seg(s->keys, rows);
            rows += s->keys.rows, blocks += (s->n + rb - 1) / rb;
        } else if (s->n) { /* scored on the CUDA cores into rows m_short.. of a side buffer, then copied */
            short_rows = xrealloc(short_rows, (size_t)(m_short + s->n) * sizeof *short_rows);
            for (int64_t r = 0; r < s->n; r++)
                short_rows[m_short + r] = (ix_row_t){s->keys.table, s->keys.cols, s->keys.rows, s->r0 + r, s->pos0 + r};
            cp_from[nc] = m_short;
            cps[nc++] = (copy_desc_t){a->scores + b * a->nk_max, NULL, a->nk_max, a->nk_max, s->n, a->nk_max};
            m_short += s->n;
        }
        b += s->n;
    }
    uint16_t *store;
    uint8_t *inexact;
    make_store(c, segs, ns, rows, a->di, pieces, &store, &inexact);
    ix_tc_args_t t = {.scores = a->scores, .nk_max = a->nk_max, .q = q.ptr, .w = w.ptr, .ldq = q.ld, .ldw = w.ld,
                      .store = store, .inexact = inexact, .store_rows = rows,
                      .spans = cu_upload_table(c, ts, (size_t)nt * sizeof *ts), .n_spans = nt, .heads = a->heads, .di = a->di,
                      .ratio = a->ratio, .pieces = pieces, .q_scale = a->q_scale, .w_scale = a->w_scale};
    CU(k_indexer_tc(&t, blocks, c->stream));
    cu_release_scratch(c, (void *)t.spans), cu_release_scratch(c, store), cu_release_scratch(c, inexact);
    if (m_short) {
        ix_args_t sa = *a;
        sa.q = q.ptr, sa.w = w.ptr, sa.m = m_short;
        sa.scores = cu_scratch(c, (size_t)(m_short * a->nk_max) * 4);
        sa.rows = cu_upload_table(c, short_rows, (size_t)m_short * sizeof *short_rows);
        cu_indexer_rows(c, &sa);
        for (int i = 0; i < nc; i++) cps[i].src = sa.scores + cp_from[i] * a->nk_max;
        cu_copy_descs(c, cps, nc);
        cu_release_scratch(c, sa.scores), cu_release_scratch(c, (void *)sa.rows);
    }
    free(ts), free(segs), free(cps), free(cp_from), free(short_rows);
    return true;
}
