/* CPU router (sqrt-softplus scores, biased top-k selection, unbiased weights) and expert
 * compute: each expert runs its projections on the rows routed to it (threaded inside the
 * matmuls); every row then sums its experts in ascending expert order and adds the shared
 * expert's output (mlp) last, as transformers does. */
#include "backend_cpu_internal.h"
#include "util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static float softplusf(float x) { return x > 20.0f ? x : log1pf(expf(x)); } /* torch's threshold 20 */

typedef struct {
    bk_tensor_t idx, wt, logits, bias;
    float temp, scale;
    bool normalize;
} router_job_t;

static void router_rows(void *p, int64_t r0, int64_t r1, int worker) {
    (void)worker;
    const router_job_t *j = p;
    int64_t E = j->logits.cols, k = j->idx.cols;
    const float *bias = j->bias.ptr;
    for (int64_t r = r0; r < r1; r++) {
        const float *u = f32_at(j->logits, r);
        int32_t *idx = i32_at(j->idx, r);
        float *wt = f32_at(j->wt, r);
        for (int64_t s = 0; s < k; s++) { /* k is small: repeated arg-max, ties to the lower id */
            int32_t best = -1;
            float bv = 0.0f;
            for (int64_t e = 0; e < E; e++) {
                bool used = false;
                for (int64_t t = 0; t < s && !used; t++) used = idx[t] == e;
                if (used) continue;
                float v = sqrtf(softplusf(u[e] / j->temp)) + bias[e];
                if (best < 0 || v > bv) best = (int32_t)e, bv = v;
            }
            idx[s] = best;
            wt[s] = sqrtf(softplusf(u[best] / j->temp));
        }
        if (j->normalize && k > 1) {
            float sum = 0.0f;
            for (int64_t s = 0; s < k; s++) sum += wt[s];
            for (int64_t s = 0; s < k; s++) wt[s] /= sum + 1e-20f;
        }
        for (int64_t s = 0; s < k; s++) wt[s] *= j->scale;
    }
}

void cpu_router(backend_t *bk, bk_tensor_t idx, bk_tensor_t wt, bk_tensor_t logits, bk_tensor_t bias, float temp,
                bool normalize, float scale) {
    router_job_t j = {idx, wt, logits, bias, temp, scale, normalize};
    tp_for(cpu_of(bk)->tp, logits.rows, cpu_grain(logits.cols * idx.cols * 4), router_rows, &j);
}

/* One expert on n gathered rows: y = w2 . (act(w1 x, w3 x) * weight). */
static void expert_rows(cpu_t *c, const bk_expert_t *ex, const float *x, int64_t n, int64_t D, int64_t I,
                        const float *weight, float limit, float *h1, float *h3, float *y) {
    cpu_matmul(c, h1, I, x, D, n, &ex->w1->m, 0, I);
    cpu_matmul(c, h3, I, x, D, n, &ex->w3->m, 0, I);
    for (int64_t r = 0; r < n; r++)
        for (int64_t i = 0; i < I; i++) {
            float g = h1[r * I + i], u = h3[r * I + i];
            if (limit > 0) {
                g = fminf(g, limit);
                u = fminf(fmaxf(u, -limit), limit);
            }
            float a = g / (1.0f + expf(-g)) * u;
            h1[r * I + i] = weight ? weight[r] * a : a;
        }
    cpu_matmul(c, y, D, h1, I, n, &ex->w2->m, 0, D);
}

void cpu_moe(backend_t *bk, bk_tensor_t out, bk_tensor_t x, bk_tensor_t idx, bk_tensor_t wt, const bk_expert_t *experts,
             int n_experts, const bk_tensor_t *add, const bk_expand_t *expand, float limit) {
    cpu_t *c = cpu_of(bk);
    int64_t m = x.rows, D = x.cols, k = idx.cols, I = experts[0].w1->m.rows;
    float *xs = xmalloc((size_t)(m * D) * 4), *ws = xmalloc((size_t)m * 4);
    float *h1 = xmalloc((size_t)(m * I) * 4), *h3 = xmalloc((size_t)(m * I) * 4);
    float *ys = xmalloc((size_t)(m * D) * 4), *acc = xcalloc((size_t)(m * D), 4);
    int64_t *rows = xmalloc((size_t)m * sizeof *rows);
    for (int e = 0; e < n_experts; e++) {
        int64_t n = 0;
        for (int64_t r = 0; r < m; r++)
            for (int64_t s = 0; s < k; s++)
                if (i32_at(idx, r)[s] == e) {
                    memcpy(xs + n * D, f32_at(x, r), (size_t)D * 4);
                    ws[n] = f32_at(wt, r)[s];
                    rows[n++] = r;
                }
        if (!n) continue;
        expert_rows(c, &experts[e], xs, n, D, I, ws, limit, h1, h3, ys);
        for (int64_t t = 0; t < n; t++)
            for (int64_t d = 0; d < D; d++) acc[rows[t] * D + d] += ys[t * D + d];
    }
    for (int64_t r = 0; r < m; r++) {
        float *o = f32_at(out, r);
        for (int64_t d = 0; d < D; d++) o[d] = acc[r * D + d] + (add ? f32_at(*add, r)[d] : 0.0f);
    }
    free(xs), free(ws), free(h1), free(h3), free(ys), free(acc), free(rows);
    if (expand) bk->hc_expand(bk, expand->X, out, expand->coef, expand->hc);
}

void cpu_mlp(backend_t *bk, bk_tensor_t out, bk_tensor_t x, const bk_expert_t *expert, float limit) {
    cpu_t *c = cpu_of(bk);
    int64_t m = x.rows, D = x.cols, I = expert->w1->m.rows;
    float *xs = xmalloc((size_t)(m * D) * 4), *h1 = xmalloc((size_t)(m * I) * 4), *h3 = xmalloc((size_t)(m * I) * 4);
    float *ys = xmalloc((size_t)(m * D) * 4);
    for (int64_t r = 0; r < m; r++) memcpy(xs + r * D, f32_at(x, r), (size_t)D * 4);
    expert_rows(c, expert, xs, m, D, I, NULL, limit, h1, h3, ys);
    for (int64_t r = 0; r < m; r++) memcpy(f32_at(out, r), ys + r * D, (size_t)D * 4);
    free(xs), free(h1), free(h3), free(ys);
}
