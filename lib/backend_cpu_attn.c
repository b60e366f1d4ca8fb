/* CPU attention with sinks over window rows and selected pool entries, and the indexer with
 * its two-level top-k. */
#include "backend_cpu_internal.h"

#include <math.h>
#include <stdlib.h>

/* ---- attention ---------------------------------------------------------------------------- */
typedef struct {
    cpu_t *c;
    bk_tensor_t out, q, sink, ring, kv_new;
    const bk_paged_t *pool;
    const bk_tensor_t *sel;
    float scale;
    int64_t pos0, win_lo;
    int window, heads;
} attn_job_t;

static const float *window_row(const attn_job_t *j, int64_t pos) {
    return pos < j->pos0 ? f32_at(j->ring, pos % j->ring.rows) : f32_at(j->kv_new, pos - j->pos0);
}

static void attn_tasks(void *p, int64_t t0, int64_t t1, int worker) {
    const attn_job_t *j = p;
    int64_t d = j->kv_new.cols, nsel = j->sel ? j->sel->cols : 0;
    float *logit = cpu_scratch(j->c, worker, SCRATCH_OP, (size_t)(j->window + nsel));
    for (int64_t t = t0; t < t1; t++) {
        int64_t r = t / j->heads, h = t % j->heads, i = j->pos0 + r;
        int64_t lo = i - j->window + 1 > j->win_lo ? i - j->window + 1 : j->win_lo;
        const float *q = f32_at(j->q, r) + h * d, *sink = j->sink.ptr;
        const int32_t *sel = j->sel ? i32_at(*j->sel, r) : NULL;
        int n = 0;
        float mx = sink[h];
        for (int64_t pos = lo; pos <= i; pos++, n++) mx = fmaxf(mx, logit[n] = cpu_dot(q, window_row(j, pos), d) * j->scale);
        for (int64_t k = 0; k < nsel; k++)
            if (sel[k] >= 0) {
                mx = fmaxf(mx, logit[n] = cpu_dot(q, paged_row(*j->pool, sel[k]), d) * j->scale);
                n++;
            }
        float z = expf(sink[h] - mx);
        for (int u = 0; u < n; u++) z += logit[u] = expf(logit[u] - mx);
        float *o = f32_at(j->out, r) + h * d;
        for (int64_t c = 0; c < d; c++) o[c] = 0.0f;
        n = 0;
        for (int64_t pos = lo; pos <= i; pos++, n++) {
            const float *v = window_row(j, pos);
            float pu = logit[n] / z;
            for (int64_t c = 0; c < d; c++) o[c] += pu * v[c];
        }
        for (int64_t k = 0; k < nsel; k++)
            if (sel[k] >= 0) {
                const float *v = paged_row(*j->pool, sel[k]);
                float pu = logit[n++] / z;
                for (int64_t c = 0; c < d; c++) o[c] += pu * v[c];
            }
    }
}

void cpu_attention(backend_t *bk, bk_tensor_t out, bk_tensor_t q, bk_tensor_t sink, float scale, bk_tensor_t ring,
                   bk_tensor_t kv_new, int64_t pos0, int window, int64_t win_lo, const bk_paged_t *pool,
                   const bk_tensor_t *sel) {
    attn_job_t j = {cpu_of(bk), out, q, sink, ring, kv_new, pool, sel, scale, pos0, win_lo, window,
                    (int)(q.cols / kv_new.cols)};
    int64_t keys = window + (sel ? sel->cols : 0);
    tp_for(j.c->tp, q.rows * j.heads, cpu_grain(2 * keys * kv_new.cols), attn_tasks, &j);
}

void cpu_attention_spans(backend_t *bk, bk_tensor_t out, bk_tensor_t q, bk_tensor_t sink, float scale, bk_tensor_t kv_new,
                         int window, const bk_span_t *spans, int n_spans, const bk_tensor_t *sel, const bk_tensor_t *unrope) {
    for (int i = 0; i < n_spans; i++) {
        const bk_span_t *s = &spans[i];
        bk_tensor_t rsel = sel ? bk_rows(*sel, s->r0, s->n) : (bk_tensor_t){0};
        cpu_attention(bk, bk_rows(out, s->r0, s->n), bk_rows(q, s->r0, s->n), sink, scale, s->ring, bk_rows(kv_new, s->r0, s->n),
                      s->pos0, window, s->win_lo, sel ? &s->pool : NULL, sel ? &rsel : NULL);
    }
    if (unrope) bk->rope_spans(bk, out, (int)kv_new.cols, *unrope, spans, n_spans, 1, true);
}

/* ---- top-k with ties to the lower index ------------------------------------------------ */
typedef struct {
    float s;
    int32_t i;
} scored_t;

static bool better(scored_t a, scored_t b) { return a.s > b.s || (a.s == b.s && a.i < b.i); }

/* heap[0] is the worst kept entry. */
static void sift_down(scored_t *h, int n, int k) {
    for (;;) {
        int w = k, l = 2 * k + 1, r = l + 1;
        if (l < n && better(h[w], h[l])) w = l;
        if (r < n && better(h[w], h[r])) w = r;
        if (w == k) return;
        scored_t t = h[k];
        h[k] = h[w];
        h[w] = t;
        k = w;
    }
}

static void heap_offer(scored_t *h, int *n, int cap, scored_t v) {
    if (*n < cap) {
        int k = (*n)++;
        h[k] = v;
        while (k && better(h[(k - 1) / 2], h[k])) {
            scored_t t = h[k];
            h[k] = h[(k - 1) / 2];
            h[(k - 1) / 2] = t;
            k = (k - 1) / 2;
        }
    } else if (cap && better(v, h[0])) {
        h[0] = v;
        sift_down(h, *n, 0);
    }
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Writes the kept ids ascending into out[0..cap), -1 padded. */
static void heap_emit(scored_t *h, int n, int32_t *out, int64_t cap) {
    for (int k = 0; k < n; k++) out[k] = h[k].i;
    qsort(out, (size_t)n, sizeof *out, cmp_i32);
    for (int64_t k = n; k < cap; k++) out[k] = -1;
}

/* ---- indexer ---------------------------------------------------------------------------- */
typedef struct {
    cpu_t *c;
    bk_tensor_t sel, q, w;
    bk_paged_t keys;
    const bk_tensor_t *blocks_out, *blocks_in;
    int64_t pos0;
    int ratio, block_size;
    float q_scale, w_scale;
} idx_job_t;

static void idx_rows(void *p, int64_t r0, int64_t r1, int worker) {
    const idx_job_t *j = p;
    int64_t di = j->keys.cols, heads = j->w.cols, K = j->sel.cols, bs = j->block_size;
    int64_t nvis_max = (j->pos0 + r1) / j->ratio;
    if (nvis_max > j->keys.rows) nvis_max = j->keys.rows;
    int64_t KB = j->blocks_out ? j->blocks_out->cols : 0;
    float *score = cpu_scratch(j->c, worker, SCRATCH_OP, (size_t)(nvis_max + 1 + heads)), *dots = score + nvis_max + 1;
    scored_t *heap = (scored_t *)cpu_scratch(j->c, worker, SCRATCH_OP2, (size_t)(2 * (K > KB ? K : KB) + 2));
    for (int64_t r = r0; r < r1; r++) {
        int64_t nvis = (j->pos0 + r + 1) / j->ratio;
        if (nvis > j->keys.rows) nvis = j->keys.rows;
        const float *q = f32_at(j->q, r), *w = f32_at(j->w, r);
        for (int64_t e = 0; e < nvis; e++) {
            const float *k = paged_row(j->keys, e);
            int64_t h = 0;
            for (; h + 4 <= heads; h += 4) cpu_dot4(q + h * di, q + (h + 1) * di, q + (h + 2) * di, q + (h + 3) * di, k, di, dots + h, 1);
            for (; h < heads; h++) dots[h] = cpu_dot(q + h * di, k, di);
            float s = 0.0f;
            for (h = 0; h < heads; h++) s += (dots[h] > 0.0f ? dots[h] : 0.0f) * j->q_scale * (w[h] * j->w_scale);
            score[e] = s;
        }
        if (j->blocks_out) { /* level 1: candidate blocks, the newest pinned */
            int64_t nb = (nvis + bs - 1) / bs;
            int n = 0;
            for (int64_t b = 0; b < nb; b++) {
                float m = -INFINITY;
                for (int64_t e = b * bs; e < nvis && e < (b + 1) * bs; e++) m = fmaxf(m, score[e]);
                if (b == nb - 1) m = INFINITY;
                if (m > -INFINITY) heap_offer(heap, &n, (int)KB, (scored_t){m, (int32_t)b});
            }
            heap_emit(heap, n, i32_at(*j->blocks_out, r), KB);
        }
        if (j->blocks_in) { /* level 2: entries outside the candidate blocks do not compete */
            const int32_t *allow = i32_at(*j->blocks_in, r);
            int64_t a = 0, na = j->blocks_in->cols;
            for (int64_t e = 0; e < nvis; e++) {
                int32_t b = (int32_t)(e / bs);
                while (a < na && allow[a] >= 0 && allow[a] < b) a++;
                if (!(a < na && allow[a] == b)) score[e] = -INFINITY;
            }
        }
        int n = 0;
        for (int64_t e = 0; e < nvis; e++)
            if (score[e] > -INFINITY) heap_offer(heap, &n, (int)K, (scored_t){score[e], (int32_t)e});
        heap_emit(heap, n, i32_at(j->sel, r), K);
    }
}

void cpu_indexer_topk(backend_t *bk, bk_tensor_t sel, const bk_tensor_t *blocks_out, bk_tensor_t q, bk_tensor_t w,
                      bk_paged_t keys, int64_t pos0, int ratio, const bk_tensor_t *blocks_in, int block_size,
                      float q_scale, float w_scale) {
    idx_job_t j = {cpu_of(bk), sel, q, w, keys, blocks_out, blocks_in, pos0, ratio, block_size, q_scale, w_scale};
    int64_t visible = keys.rows < (pos0 + sel.rows) / ratio ? keys.rows : (pos0 + sel.rows) / ratio;
    tp_for(j.c->tp, sel.rows, cpu_grain(visible * q.cols + 1), idx_rows, &j);
}

void cpu_indexer_spans(backend_t *bk, bk_tensor_t sel, const bk_tensor_t *blocks_out, bk_tensor_t q, bk_tensor_t w,
                       const bk_span_t *spans, int n_spans, int ratio, const bk_tensor_t *blocks_in, int block_size,
                       float q_scale, float w_scale) {
    for (int i = 0; i < n_spans; i++) {
        const bk_span_t *s = &spans[i];
        bk_tensor_t bo = blocks_out ? bk_rows(*blocks_out, s->r0, s->n) : (bk_tensor_t){0};
        bk_tensor_t bi = blocks_in ? bk_rows(*blocks_in, s->r0, s->n) : (bk_tensor_t){0};
        cpu_indexer_topk(bk, bk_rows(sel, s->r0, s->n), blocks_out ? &bo : NULL, bk_rows(q, s->r0, s->n), bk_rows(w, s->r0, s->n),
                         s->keys, s->pos0, ratio, blocks_in ? &bi : NULL, block_size, q_scale, w_scale);
    }
}
