/* CPU backend: memory, the op table, and the row-wise ops (norms, RoPE, QAT, hyper-connection
 * mixing, Engram gate, compressor pooling). Attention and indexer: backend_cpu_attn.c; router
 * and experts: backend_cpu_moe.c; matmul and gathers: backend_cpu_matmul.c. */
#include "backend_cpu.h"
#include "backend_cpu_internal.h"
#include "util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

float *cpu_scratch(cpu_t *c, int worker, int slot, size_t n) {
    int i = worker * SCRATCH_SLOTS + slot;
    if (c->scratch_n[i] < n) {
        free(c->scratch[i]);
        c->scratch[i] = xmalloc(n * sizeof(float));
        c->scratch_n[i] = n;
    }
    return c->scratch[i];
}

/* ---- per-row loops ---------------------------------------------------------------------- */
typedef void (*row_fn)(const void *args, int64_t r, int worker);
typedef struct {
    row_fn fn;
    const void *args;
} rows_job_t;

static void rows_run(void *p, int64_t r0, int64_t r1, int worker) {
    rows_job_t *j = p;
    for (int64_t r = r0; r < r1; r++) j->fn(j->args, r, worker);
}

/* work: about the multiply-adds of one row */
static void for_rows(backend_t *bk, int64_t m, int64_t work, row_fn fn, const void *args) {
    rows_job_t j = {fn, args};
    tp_for(cpu_of(bk)->tp, m, cpu_grain(work), rows_run, &j);
}

/* ---- memory ----------------------------------------------------------------------------- */
static bk_tensor_t cpu_alloc(backend_t *bk, bk_dtype_t dtype, int64_t rows, int64_t cols) {
    (void)bk;
    size_t n = (size_t)(rows * cols);
    return (bk_tensor_t){xcalloc(n ? n : 1, 4), dtype, rows, cols, cols};
}

static void cpu_release(backend_t *bk, bk_tensor_t *t) {
    (void)bk;
    free(t->ptr);
    *t = (bk_tensor_t){0};
}

static void cpu_upload(backend_t *bk, bk_tensor_t dst, const void *host) {
    (void)bk;
    for (int64_t r = 0; r < dst.rows; r++)
        memcpy((char *)dst.ptr + (size_t)(r * dst.ld) * 4, (const char *)host + (size_t)(r * dst.cols) * 4, (size_t)dst.cols * 4);
}

static void cpu_download(backend_t *bk, void *host, bk_tensor_t src) {
    (void)bk;
    for (int64_t r = 0; r < src.rows; r++)
        memcpy((char *)host + (size_t)(r * src.cols) * 4, (const char *)src.ptr + (size_t)(r * src.ld) * 4, (size_t)src.cols * 4);
}

static void cpu_copy(backend_t *bk, bk_tensor_t dst, bk_tensor_t src) {
    (void)bk;
    for (int64_t r = 0; r < dst.rows; r++)
        memcpy((char *)dst.ptr + (size_t)(r * dst.ld) * 4, (const char *)src.ptr + (size_t)(r * src.ld) * 4, (size_t)dst.cols * 4);
}

static void cpu_copy_many(backend_t *bk, const bk_tensor_t *dst, const bk_tensor_t *src, int n) {
    for (int i = 0; i < n; i++) cpu_copy(bk, dst[i], src[i]);
}

static bk_weight_t *cpu_bind(backend_t *bk, const wmat_t *m) {
    (void)bk;
    bk_weight_t *w = xmalloc(sizeof *w);
    w->m = *m;
    return w;
}

static void cpu_unbind(backend_t *bk, bk_weight_t *w) {
    (void)bk;
    free(w);
}

static void cpu_destroy(backend_t *bk) {
    cpu_t *c = cpu_of(bk);
    tp_free(c->tp);
    for (int i = 0; i < c->n_workers * SCRATCH_SLOTS; i++) free(c->scratch[i]);
    for (int w = 0; w < c->n_workers; w++) sampler_free(c->samplers[w]);
    free(c->samplers);
    free(c->scratch);
    free(c->scratch_n);
    free(c);
    free(bk);
}

/* ---- rmsnorm ---------------------------------------------------------------------------- */
typedef struct {
    bk_tensor_t out, x;
    const bk_tensor_t *w;
    float eps;
} norm_args_t;

static void norm_row(const void *p, int64_t r, int worker) {
    (void)worker;
    const norm_args_t *a = p;
    const float *x = f32_at(a->x, r);
    float *o = f32_at(a->out, r);
    int64_t n = a->x.cols;
    float inv = 1.0f / sqrtf(cpu_dot(x, x, n) / (float)n + a->eps);
    const float *w = a->w ? a->w->ptr : NULL;
    for (int64_t i = 0; i < n; i++) o[i] = w ? w[i] * (x[i] * inv) : x[i] * inv;
}

static void cpu_rmsnorm(backend_t *bk, bk_tensor_t out, bk_tensor_t x, const bk_tensor_t *w, float eps) {
    norm_args_t a = {out, x, w, eps};
    for_rows(bk, x.rows, 2 * x.cols, norm_row, &a);
}

/* ---- rope ------------------------------------------------------------------------------- */
typedef struct {
    cpu_t *c;
    bk_tensor_t x, f;
    int head_dim;
    int64_t pos0, step;
    bool inverse;
} rope_args_t;

static void rope_row(const void *p, int64_t r, int worker) {
    const rope_args_t *a = p;
    int half = (int)a->f.cols, rd = 2 * half;
    const float *f = a->f.ptr;
    float *cosv = cpu_scratch(a->c, worker, SCRATCH_OP, (size_t)rd), *sinv = cosv + half;
    float pos = (float)(a->pos0 + r * a->step);
    for (int p2 = 0; p2 < half; p2++) {
        float ang = pos * f[p2];
        cosv[p2] = cosf(ang);
        sinv[p2] = a->inverse ? -sinf(ang) : sinf(ang);
    }
    float *row = f32_at(a->x, r);
    for (int64_t h = 0; h + a->head_dim <= a->x.cols; h += a->head_dim) {
        float *v = row + h + a->head_dim - rd;
        for (int p2 = 0; p2 < half; p2++) {
            float e = v[2 * p2], o = v[2 * p2 + 1];
            v[2 * p2] = e * cosv[p2] - o * sinv[p2];
            v[2 * p2 + 1] = e * sinv[p2] + o * cosv[p2];
        }
    }
}

static void cpu_rope(backend_t *bk, bk_tensor_t x, int head_dim, bk_tensor_t inv_freq, int64_t pos0, int64_t pos_step,
                     bool inverse) {
    rope_args_t a = {cpu_of(bk), x, inv_freq, head_dim, pos0, pos_step, inverse};
    for_rows(bk, x.rows, 2 * x.cols, rope_row, &a);
}

static void cpu_rope_spans(backend_t *bk, bk_tensor_t x, int head_dim, bk_tensor_t inv_freq, const bk_span_t *spans, int n_spans,
                           int64_t pos_step, bool inverse) {
    for (int i = 0; i < n_spans; i++)
        cpu_rope(bk, bk_rows(x, spans[i].r0, spans[i].n), head_dim, inv_freq, spans[i].pos0, pos_step, inverse);
}

/* ---- qat -------------------------------------------------------------------------------- */
typedef struct {
    bk_tensor_t x;
    qat_kind_t kind;
    int block;
} qat_args_t;

static void qat_row(const void *p, int64_t r, int worker) {
    (void)worker;
    const qat_args_t *a = p;
    qat_apply(a->kind, a->block, f32_at(a->x, r), (size_t)a->x.cols);
}

static void cpu_qat(backend_t *bk, bk_tensor_t x, qat_kind_t kind, int block) {
    qat_args_t a = {x, kind, block};
    for_rows(bk, x.rows, 8 * x.cols, qat_row, &a);
}

static void cpu_rope_qat_spans(backend_t *bk, bk_tensor_t out, bk_tensor_t x, int head_dim, bk_tensor_t inv_freq,
                               const bk_span_t *spans, int n_spans, int64_t pos_step, qat_kind_t kind, int block) {
    for (int i = 0; i < n_spans; i++) {
        bk_tensor_t o = bk_rows(out, spans[i].r0, spans[i].n);
        if (out.ptr != x.ptr) cpu_copy(bk, o, bk_rows(x, spans[i].r0, spans[i].n));
        cpu_rope(bk, o, head_dim, inv_freq, spans[i].pos0, pos_step, false);
        if (spans[i].qat) cpu_qat(bk, o, kind, block);
    }
}

/* ---- hyper-connections ------------------------------------------------------------------ */
typedef struct {
    bk_tensor_t coef, mixes, X, base, scale;
    int hc, iters;
    float eps, hc_eps;
} mix_args_t;

static float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

static void mix_row(const void *p, int64_t r, int worker) {
    (void)worker;
    const mix_args_t *a = p;
    int hc = a->hc, nm = (2 + hc) * hc;
    const float *x = f32_at(a->X, r), *base = a->base.ptr, *sc = a->scale.ptr;
    int64_t n = a->X.cols;
    float inv = 1.0f / sqrtf(cpu_dot(x, x, n) / (float)n + a->eps);
    float m[(2 + 16) * 16]; /* the config bounds hc_mult by 16 */
    const float *mix = f32_at(a->mixes, r);
    for (int i = 0; i < nm; i++) m[i] = mix[i] * inv;
    float *o = f32_at(a->coef, r);
    for (int k = 0; k < hc; k++) {
        o[k] = sigmoidf(m[k] * sc[0] + base[k]) + a->hc_eps;
        o[hc + k] = 2.0f * sigmoidf(m[hc + k] * sc[1] + base[hc + k]);
    }
    float *C = o + 2 * hc;
    for (int i = 0; i < hc; i++) { /* softmax over b of row a = i */
        float mx = -INFINITY, s = 0.0f;
        for (int j = 0; j < hc; j++) {
            C[i * hc + j] = m[2 * hc + i * hc + j] * sc[2] + base[2 * hc + i * hc + j];
            mx = fmaxf(mx, C[i * hc + j]);
        }
        for (int j = 0; j < hc; j++) s += C[i * hc + j] = expf(C[i * hc + j] - mx);
        for (int j = 0; j < hc; j++) C[i * hc + j] = C[i * hc + j] / s + a->hc_eps;
    }
    for (int it = 0; it < a->iters; it++) {
        if (it) /* rows: sum over b */
            for (int i = 0; i < hc; i++) {
                float s = 0.0f;
                for (int j = 0; j < hc; j++) s += C[i * hc + j];
                for (int j = 0; j < hc; j++) C[i * hc + j] /= s + a->hc_eps;
            }
        for (int j = 0; j < hc; j++) { /* columns: sum over a */
            float s = 0.0f;
            for (int i = 0; i < hc; i++) s += C[i * hc + j];
            for (int i = 0; i < hc; i++) C[i * hc + j] /= s + a->hc_eps;
        }
    }
}

static void cpu_hc_mix(backend_t *bk, bk_tensor_t coef, bk_tensor_t mixes, bk_tensor_t X, bk_tensor_t base, bk_tensor_t scale,
                       int hc, float eps, float hc_eps, int iters) {
    mix_args_t a = {coef, mixes, X, base, scale, hc, iters, eps, hc_eps};
    for_rows(bk, X.rows, X.cols + 64 * hc * hc * iters, mix_row, &a);
}

typedef struct {
    cpu_t *c;
    bk_tensor_t out, X, pre, y, coef;
    int hc;
} hc_args_t;

static void collapse_row(const void *p, int64_t r, int worker) {
    (void)worker;
    const hc_args_t *a = p;
    int64_t D = a->out.cols;
    const float *x = f32_at(a->X, r), *w = f32_at(a->pre, r);
    float *o = f32_at(a->out, r);
    for (int64_t d = 0; d < D; d++) {
        float s = 0.0f;
        for (int k = 0; k < a->hc; k++) s += w[k] * x[k * D + d];
        o[d] = s;
    }
}

static void cpu_hc_collapse(backend_t *bk, bk_tensor_t out, bk_tensor_t X, bk_tensor_t pre, int hc) {
    hc_args_t a = {.out = out, .X = X, .pre = pre, .hc = hc};
    for_rows(bk, X.rows, X.cols, collapse_row, &a);
}

static void expand_row(const void *p, int64_t r, int worker) {
    const hc_args_t *a = p;
    int hc = a->hc;
    int64_t D = a->y.cols;
    float *x = f32_at(a->X, r);
    const float *y = f32_at(a->y, r), *post = f32_at(a->coef, r) + hc, *C = post + hc;
    float *old = cpu_scratch(a->c, worker, SCRATCH_OP, (size_t)(hc * D));
    memcpy(old, x, (size_t)(hc * D) * 4);
    for (int b = 0; b < hc; b++)
        for (int64_t d = 0; d < D; d++) {
            float s = 0.0f;
            for (int i = 0; i < hc; i++) s += C[i * hc + b] * old[i * D + d];
            x[b * D + d] = post[b] * y[d] + s;
        }
}

static void cpu_hc_expand(backend_t *bk, bk_tensor_t X, bk_tensor_t y, bk_tensor_t coef, int hc) {
    hc_args_t a = {.c = cpu_of(bk), .X = X, .y = y, .coef = coef, .hc = hc};
    for_rows(bk, X.rows, X.cols * (hc + 1), expand_row, &a);
}

static void cpu_matmul_expand(backend_t *bk, bk_tensor_t out, bk_tensor_t x, const bk_weight_t *w, const bk_expand_t *expand) {
    bk->matmul(bk, out, x, w, 0);
    cpu_hc_expand(bk, expand->X, out, expand->coef, expand->hc);
}

static void cpu_gate_router(backend_t *bk, bk_tensor_t idx, bk_tensor_t wt, bk_tensor_t logits, bk_tensor_t x,
                            const bk_weight_t *gate, bk_tensor_t bias, float temp, bool normalize, float scale) {
    bk->matmul(bk, logits, x, gate, 0);
    cpu_router(bk, idx, wt, logits, bias, temp, normalize, scale);
}

/* The ops themselves, one after another: the numbers of the unfused forward. */
static void cpu_hc_pre(backend_t *bk, bk_tensor_t out, bk_tensor_t coef, bk_tensor_t X, const bk_weight_t *fn, bk_tensor_t base,
                       bk_tensor_t scale, bk_tensor_t pre, const bk_tensor_t *norm, int hc, float eps, float hc_eps, int iters) {
    cpu_matmul_op(bk, coef, X, fn, 0);
    cpu_hc_mix(bk, coef, coef, X, base, scale, hc, eps, hc_eps, iters);
    cpu_hc_collapse(bk, out, X, pre, hc);
    cpu_rmsnorm(bk, out, out, norm, eps);
}

static void fill_row(const void *p, int64_t r, int worker) {
    (void)worker;
    const hc_args_t *a = p;
    int64_t D = a->y.cols;
    for (int k = 0; k < a->hc; k++) memcpy(f32_at(a->X, r) + k * D, f32_at(a->y, r), (size_t)D * 4);
    float *pre = f32_at(a->pre, r);
    for (int k = 0; k < a->hc; k++) pre[k] = k == 0 ? 1.0f : 0.0f;
}

static void cpu_hc_fill(backend_t *bk, bk_tensor_t X, bk_tensor_t pre, bk_tensor_t e, int hc) {
    hc_args_t a = {.X = X, .y = e, .pre = pre, .hc = hc};
    for_rows(bk, X.rows, X.cols, fill_row, &a);
}

/* ---- Engram gate -------------------------------------------------------------------------- */
typedef struct {
    bk_tensor_t X, kv, qk;
    int hc;
    float eps;
} eg_args_t;

static void engram_row(const void *p, int64_t r, int worker) {
    (void)worker;
    const eg_args_t *a = p;
    int64_t D = a->qk.cols;
    float *x = f32_at(a->X, r);
    const float *kv = f32_at(a->kv, r), *V = kv + a->hc * D;
    float scale = (float)(1.0 / sqrt((double)D));
    for (int k = 0; k < a->hc; k++) {
        float *h = x + k * D;
        const float *key = kv + k * D, *w = f32_at(a->qk, k);
        float acc[8] = {0};
        int64_t d = 0;
        for (; d + 8 <= D; d += 8)
            for (int l = 0; l < 8; l++) acc[l] += h[d + l] * w[d + l] * key[d + l];
        float dot = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
        for (; d < D; d++) dot += h[d] * w[d] * key[d];
        float rstd = (1.0f / sqrtf(cpu_dot(h, h, D) / (float)D + a->eps)) * (1.0f / sqrtf(cpu_dot(key, key, D) / (float)D + a->eps));
        dot = dot * rstd * scale;
        float g = sigmoidf(copysignf(sqrtf(fmaxf(fabsf(dot), 1e-6f)), dot));
        for (d = 0; d < D; d++) h[d] += g * V[d];
    }
}

static void cpu_engram_gate(backend_t *bk, bk_tensor_t X, bk_tensor_t kv, bk_tensor_t qk, int hc, float eps) {
    eg_args_t a = {X, kv, qk, hc, eps};
    for_rows(bk, X.rows, 4 * X.cols, engram_row, &a);
}

/* ---- compressor pooling ------------------------------------------------------------------- */
typedef struct {
    cpu_t *c;
    bk_tensor_t out, z, s;
    int ratio;
} pool_args_t;

static void pool_row(const void *p, int64_t j, int worker) {
    const pool_args_t *a = p;
    float *o = f32_at(a->out, j), *e = cpu_scratch(a->c, worker, SCRATCH_OP, (size_t)a->ratio);
    int R = a->ratio;
    for (int64_t d = 0; d < a->out.cols; d++) {
        float mx = -INFINITY, sum = 0.0f;
        for (int i = 0; i < R; i++) mx = fmaxf(mx, f32_at(a->s, j * R + i)[d]);
        for (int i = 0; i < R; i++) sum += e[i] = expf(f32_at(a->s, j * R + i)[d] - mx);
        float v = 0.0f;
        for (int i = 0; i < R; i++) v += f32_at(a->z, j * R + i)[d] * (e[i] / sum);
        o[d] = v;
    }
}

static void cpu_group_pool(backend_t *bk, bk_tensor_t out, bk_tensor_t z, bk_tensor_t s, int ratio) {
    pool_args_t a = {cpu_of(bk), out, z, s, ratio};
    for_rows(bk, out.rows, 8 * out.cols * ratio, pool_row, &a);
}

/* The reference: the host sampler on each row, rows spread over the workers (worker 0 takes
 * the caller's scratch, the others their own). */
typedef struct {
    cpu_t *c;
    bk_tensor_t logits;
    const bk_pick_t *rows;
    sampler_t *scratch;
} pick_args_t;

static void pick_row(const void *p, int64_t i, int worker) {
    const pick_args_t *a = p;
    const bk_pick_t *r = &a->rows[i];
    sampler_t *s = worker ? a->c->samplers[worker] : a->scratch;
    *r->token = sampler_pick(s, r->sp, f32_at(a->logits, i), r->position, r->mask, r->lp);
}

static void cpu_pick(backend_t *bk, bk_tensor_t logits, const bk_pick_t *rows, int n, sampler_t *scratch) {
    cpu_t *c = cpu_of(bk);
    if (c->sampler_vocab != logits.cols) {
        for (int w = 1; w < c->n_workers; w++) sampler_free(c->samplers[w]), c->samplers[w] = sampler_new(logits.cols);
        c->sampler_vocab = logits.cols;
    }
    pick_args_t a = {c, logits, rows, scratch};
    for_rows(bk, n, 16 * logits.cols, pick_row, &a);
}

/* branch_begin/end/join: the CPU runs every op in issue order, which any branch allows. */
static void cpu_in_order(backend_t *bk) { (void)bk; }

backend_t *backend_cpu_create(int threads) {
    if (threads <= 0) threads = tp_default_threads();
    cpu_t *c = xcalloc(1, sizeof *c);
    c->tp = tp_create(threads);
    c->n_workers = tp_size(c->tp);
    c->scratch = xcalloc((size_t)c->n_workers * SCRATCH_SLOTS, sizeof *c->scratch);
    c->scratch_n = xcalloc((size_t)c->n_workers * SCRATCH_SLOTS, sizeof *c->scratch_n);
    c->samplers = xcalloc((size_t)c->n_workers, sizeof *c->samplers);
    backend_t *bk = xcalloc(1, sizeof *bk);
    *bk = (backend_t){
        .name = "cpu", .impl = c,
        .alloc = cpu_alloc, .release = cpu_release, .upload = cpu_upload, .download = cpu_download,
        .copy = cpu_copy, .copy_many = cpu_copy_many, .bind = cpu_bind, .unbind = cpu_unbind, .destroy = cpu_destroy,
        .matmul = cpu_matmul_op, .matmul_grouped = cpu_matmul_grouped, .matmul_expand = cpu_matmul_expand, .rmsnorm = cpu_rmsnorm, .rope = cpu_rope, .rope_spans = cpu_rope_spans, .qat = cpu_qat,
        .rope_qat_spans = cpu_rope_qat_spans,
        .hc_mix = cpu_hc_mix, .hc_collapse = cpu_hc_collapse, .hc_expand = cpu_hc_expand, .hc_fill = cpu_hc_fill,
        .hc_pre = cpu_hc_pre,
        .gather = cpu_gather, .engram_gate = cpu_engram_gate,
        .group_pool = cpu_group_pool, .attention = cpu_attention, .attention_spans = cpu_attention_spans,
        .indexer_topk = cpu_indexer_topk, .indexer_spans = cpu_indexer_spans,
        .router = cpu_router, .gate_router = cpu_gate_router, .mlp = cpu_mlp, .moe = cpu_moe, .pick = cpu_pick,
        .branch_begin = cpu_in_order, .branch_end = cpu_in_order, .branch_join = cpu_in_order,
    };
    return bk;
}
