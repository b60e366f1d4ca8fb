#include "testnum.h"
#include "util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

void t_seed(uint64_t seed) { rng_state = seed; }

uint64_t t_rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

float t_unif(void) { return (float)((double)(t_rnd() >> 11) / 9007199254740992.0 * 2.0 - 1.0); }

float *t_rand_vec(size_t n, float scale) {
    float *v = xmalloc(n * 4 + 4);
    for (size_t i = 0; i < n; i++) v[i] = t_unif() * scale;
    return v;
}

t_weight_t t_weight_random(wq_kind_t kind, int64_t rows, int64_t cols, int block_rows) {
    t_weight_t w = {.m = {.kind = kind, .rows = rows, .cols = cols, .block_rows = block_rows, .block_cols = 32}};
    size_t n = (size_t)(rows * cols);
    if (kind == WQ_F32 || kind == WQ_BF16) {
        w.data = xmalloc(n * 4);
        for (size_t i = 0; i < n; i++) {
            float v = t_unif() * 0.5f;
            if (kind == WQ_F32) memcpy(w.data + 4 * i, &v, 4);
            else {
                uint16_t h = f32_to_bf16(v);
                memcpy(w.data + 2 * i, &h, 2);
            }
        }
    } else {
        size_t row_bytes = kind == WQ_FP8 ? (size_t)cols : (size_t)(cols + 1) / 2, nb = row_bytes * (size_t)rows;
        size_t ns = wmat_scale_count(rows, cols, block_rows, 32);
        w.data = xmalloc(nb);
        for (size_t i = 0; i < nb; i++) {
            uint8_t b = (uint8_t)t_rnd();
            w.data[i] = kind == WQ_FP8 && (b & 0x7F) == 0x7F ? b ^ 1 : b;
        }
        w.scale = xmalloc(ns);
        for (size_t i = 0; i < ns; i++) w.scale[i] = (uint8_t)(118 + t_rnd() % 8);
    }
    w.m.data = w.data;
    w.m.scale = w.scale;
    w.dense = xmalloc(n * 4);
    wmat_rows(&w.m, 0, rows, w.dense);
    return w;
}

void t_weight_free(t_weight_t *w) { free(w->data), free(w->scale), free(w->dense); }

float *t_download(backend_t *b, bk_tensor_t t) {
    float *v = xmalloc((size_t)(t.rows * t.cols) * 4 + 4);
    b->download(b, v, t);
    return v;
}

t_paged_t t_paged(backend_t *b, const float *host, int64_t rows, int64_t cols) {
    t_paged_t p = {.pp = pagepool_new(b, cols)};
    int64_t pages = (rows + BK_PAGE_ROWS - 1) / BK_PAGE_ROWS, spare = pages + 3;
    pagestore_t *tmp = xcalloc((size_t)spare, sizeof *tmp);
    for (int64_t k = 0; k < spare; k++) tmp[k] = pagestore_new(p.pp), pagestore_reserve(&tmp[k], 1);
    for (int64_t k = 0; k < spare; k++) { /* back in a random order: the store below takes them so */
        int64_t i = k + (int64_t)(t_rnd() % (uint64_t)(spare - k));
        pagestore_t t = tmp[i];
        tmp[i] = tmp[k], tmp[k] = t;
        pagestore_release(&tmp[k]);
    }
    free(tmp);
    p.s = pagestore_new(p.pp);
    pagestore_reserve(&p.s, rows);
    pagestore_sync(&p.s);
    float *nan_rows = xmalloc((size_t)(pages * BK_PAGE_ROWS * cols + 1) * 4);
    for (int64_t i = 0; i < pages * BK_PAGE_ROWS * cols; i++) nan_rows[i] = NAN;
    pagestore_upload(&p.s, 0, pages * BK_PAGE_ROWS, nan_rows);
    pagestore_upload(&p.s, 0, rows, host);
    free(nan_rows);
    p.v = pagestore_view(&p.s, rows);
    return p;
}

void t_paged_free(t_paged_t *p) {
    pagestore_release(&p->s);
    pagepool_free(p->pp);
    *p = (t_paged_t){0};
}

double t_max_err(const float *a, const float *b, size_t n) {
    double d = 0, s = 1e-30;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]) != isnan(b[i])) return INFINITY;
        d = fmax(d, fabs((double)a[i] - b[i])), s = fmax(s, fabs((double)b[i]));
    }
    return d / s;
}

double t_rel_l2(const float *a, const float *b, size_t n) {
    double d = 0, s = 1e-30;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i])) return INFINITY;
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), s += (double)b[i] * b[i];
    }
    return sqrt(d / s);
}

int t_argmax(const float *a, int n) {
    int k = 0;
    for (int v = 1; v < n; v++) k = a[v] > a[k] ? v : k;
    return k;
}
