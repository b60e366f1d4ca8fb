/* Every backend op against a straightforward reference (double precision, written from
 * backend.h and MODEL_V41.md, not from the CPU backend) on random inputs whose sizes are not
 * multiples of any tile or block; plus the properties the forward relies on: a row's result
 * does not depend on the rows batched with it or on the thread count. A new backend (CUDA) is
 * checked op by op by running these cases against it. */
#include "backend_cpu.h"
#include "testlib.h"
#include "testnum.h"
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static backend_t *bk, *bk1; /* 3 threads; 1 thread */

static bk_tensor_t put(backend_t *b, const float *v, int64_t rows, int64_t cols) {
    bk_tensor_t t = b->alloc(b, BK_F32, rows, cols);
    b->upload(b, t, v);
    return t;
}
static bk_tensor_t put_i(backend_t *b, const int32_t *v, int64_t rows, int64_t cols) {
    bk_tensor_t t = b->alloc(b, BK_I32, rows, cols);
    b->upload(b, t, v);
    return t;
}

/* max |a - ref| / max |ref|, over n values */
static double rel_err(const float *a, const double *ref, size_t n) {
    double d = 0, s = 1e-30;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs(a[i] - ref[i])), s = fmax(s, fabs(ref[i]));
    return d / s;
}

#define TOL 2e-5

/* ---- stored weights in every format: dense FP8 in 32 x 32 blocks --------------------------- */
static t_weight_t make_weight(wq_kind_t kind, int64_t rows, int64_t cols) {
    return t_weight_random(kind, rows, cols, kind == WQ_FP8 ? 32 : 1);
}

/* ---- matmul ------------------------------------------------------------------------------ */
static void test_matmul(void) {
    wq_kind_t kinds[] = {WQ_F32, WQ_BF16, WQ_FP8, WQ_FP4};
    for (size_t k = 0; k < DI_ARRAY_LEN(kinds); k++) {
        int64_t R = 77, C = 45, m = 70, row0 = 13, n_out = 50;
        t_weight_t w = make_weight(kinds[k], R, C);
        bk_weight_t *bw = bk->bind(bk, &w.m), *bw1 = bk1->bind(bk1, &w.m);
        float *x = t_rand_vec((size_t)(m * C), 1.0f);
        bk_tensor_t tx = put(bk, x, m, C), out = bk->alloc(bk, BK_F32, m, n_out);
        bk->matmul(bk, out, tx, bw, row0);
        float *got = t_download(bk, out);
        double *ref = xmalloc((size_t)(m * n_out) * 8);
        for (int64_t t = 0; t < m; t++)
            for (int64_t o = 0; o < n_out; o++) {
                double s = 0;
                for (int64_t i = 0; i < C; i++) s += (double)x[t * C + i] * w.dense[(row0 + o) * C + i];
                ref[t * n_out + o] = s;
            }
        CHECKF(rel_err(got, ref, (size_t)(m * n_out)) < TOL, "kind %d: %.3g", kinds[k], rel_err(got, ref, (size_t)(m * n_out)));
        /* one row at a time, into a column view, on one thread: the same bits */
        bk_tensor_t wide = bk1->alloc(bk1, BK_F32, 1, n_out + 7), tx1 = put(bk1, x + 3 * C, 1, C);
        bk1->matmul(bk1, bk_cols(wide, 5, n_out), tx1, bw1, row0);
        float *one = t_download(bk1, wide);
        CHECK(!memcmp(one + 5, got + 3 * n_out, (size_t)n_out * 4));
        bk->release(bk, &tx), bk->release(bk, &out), bk1->release(bk1, &wide), bk1->release(bk1, &tx1);
        bk->unbind(bk, bw), bk1->unbind(bk1, bw1);
        free(x), free(got), free(ref), free(one);
        t_weight_free(&w);
    }
}

static void test_gather(void) {
    t_weight_t w = make_weight(WQ_FP8, 50, 37);
    bk_weight_t *bw = bk->bind(bk, &w.m);
    int32_t idx[4 * 3] = {0, 49, 7, 3, 3, 3, 12, -1, 50, 22, 41, 1};
    bk_tensor_t ti = put_i(bk, idx, 4, 3), out = bk->alloc(bk, BK_F32, 4, 3 * 37);
    bk->gather(bk, out, bw, ti);
    float *got = t_download(bk, out);
    int bad = 0;
    for (int r = 0; r < 4; r++)
        for (int k = 0; k < 3; k++)
            for (int c = 0; c < 37; c++) {
                int id = idx[r * 3 + k];
                float want = id >= 0 && id < 50 ? w.dense[id * 37 + c] : 0.0f;
                bad += got[(r * 3 + k) * 37 + c] != want;
            }
    CHECK_EQ(bad, 0);
    bk->release(bk, &ti), bk->release(bk, &out), bk->unbind(bk, bw);
    free(got);
    t_weight_free(&w);
}

/* ---- row-wise ops ------------------------------------------------------------------------- */
static void test_rmsnorm(void) {
    int64_t m = 7, n = 45;
    float *x = t_rand_vec((size_t)(m * n), 3.0f), *w = t_rand_vec((size_t)n, 1.0f);
    bk_tensor_t tx = put(bk, x, m, n), tw = put(bk, w, 1, n), out = bk->alloc(bk, BK_F32, m, n);
    for (int with = 0; with < 2; with++) {
        bk->rmsnorm(bk, out, tx, with ? &tw : NULL, 1e-20f);
        float *got = t_download(bk, out);
        double ref[7 * 45];
        for (int64_t r = 0; r < m; r++) {
            double ss = 0;
            for (int64_t i = 0; i < n; i++) ss += (double)x[r * n + i] * x[r * n + i];
            for (int64_t i = 0; i < n; i++) ref[r * n + i] = x[r * n + i] / sqrt(ss / n + 1e-20) * (with ? w[i] : 1.0);
        }
        CHECK(rel_err(got, ref, (size_t)(m * n)) < TOL);
        free(got);
    }
    bk->rmsnorm(bk, tx, tx, &tw, 1e-20f); /* in place */
    float *inplace = t_download(bk, tx), *sep = t_download(bk, out);
    CHECK(!memcmp(inplace, sep, (size_t)(m * n) * 4));
    bk->release(bk, &tx), bk->release(bk, &tw), bk->release(bk, &out);
    free(x), free(w), free(inplace), free(sep);
}

static void test_rope(void) {
    int64_t m = 5, hd = 40, heads = 3, half = 8;
    float *x = t_rand_vec((size_t)(m * heads * hd), 1.0f), f[8];
    for (int p = 0; p < half; p++) f[p] = powf(0.37f, (float)p);
    bk_tensor_t tx = put(bk, x, m, heads * hd), tf = put(bk, f, 1, half);
    bk->rope(bk, tx, (int)hd, tf, 1000, 3, false);
    float *got = t_download(bk, tx);
    double *ref = xmalloc((size_t)(m * heads * hd) * 8);
    for (int64_t r = 0; r < m; r++)
        for (int64_t h = 0; h < heads; h++)
            for (int64_t c = 0; c < hd; c++) {
                const float *v = x + r * heads * hd + h * hd;
                int64_t k = c - (hd - 2 * half);
                double out = v[c];
                if (k >= 0) {
                    double ang = (double)((float)(1000 + 3 * r) * f[k / 2]), cs = cos(ang), sn = sin(ang);
                    double e = v[c - (k & 1)], o = v[c - (k & 1) + 1];
                    out = k & 1 ? e * sn + o * cs : e * cs - o * sn;
                }
                ref[(r * heads + h) * hd + c] = out;
            }
    CHECK(rel_err(got, ref, (size_t)(m * heads * hd)) < TOL);
    bk->rope(bk, tx, (int)hd, tf, 1000, 3, true); /* the inverse undoes it */
    float *back = t_download(bk, tx);
    double *orig = xmalloc((size_t)(m * heads * hd) * 8);
    for (int64_t i = 0; i < m * heads * hd; i++) orig[i] = x[i];
    CHECK(rel_err(back, orig, (size_t)(m * heads * hd)) < 1e-6);
    bk->release(bk, &tx), bk->release(bk, &tf);
    free(x), free(got), free(ref), free(back), free(orig);
}

/* QAT written from MODEL_V41 §4 in double: the grids by nearest value, ties to the even code. */
static double e4m3_round(double v) {
    double a = fabs(v);
    int e;
    frexp(a, &e);
    double q = ldexp(1.0, (e - 1 < -6 ? -6 : e - 1) - 3), u = a / q, fl = floor(u);
    double r = u - fl > 0.5 || (u - fl == 0.5 && fmod(fl, 2) != 0) ? fl + 1 : fl;
    return copysign(fmin(r * q, 448.0), v);
}
static double e2m1_round(double v) {
    static const double vals[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
    double a = fabs(v), best = 0;
    int bi = 0;
    for (int i = 0; i < 8; i++)
        if (fabs(a - vals[i]) < fabs(a - best) || (fabs(a - vals[i]) == fabs(a - best) && !(i & 1) && (bi & 1))) best = vals[i], bi = i;
    return copysign(best, v);
}
static double pow2_ceil(double t) { return ldexp(1.0, (int)ceil(log2(t))); }

static void qat_ref(qat_kind_t kind, int block, const float *x, double *out, int n) {
    for (int b = 0; b < n; b += block) {
        double amax = 0;
        for (int i = 0; i < block; i++) amax = fmax(amax, fabs(x[b + i]));
        double s = kind == QAT_FP8_UE8M0 ? pow2_ceil(fmax(amax, 1e-4) / 448) : kind == QAT_FP4_UE8M0 ? pow2_ceil(fmax(amax, 6 * 0x1p-126) / 6)
                 : e4m3_round(fmax(amax, 6 * 0x1p-9) / 6);
        for (int i = 0; i < block; i++) {
            double q = x[b + i] / s;
            if (kind == QAT_FP8_UE8M0) out[b + i] = e4m3_round(fmax(fmin(q, 448), -448)) * s;
            else {
                float qf = (float)x[b + i] / (float)s; /* the division is fp32 in the contract */
                out[b + i] = e2m1_round(fmax(fmin(qf, 6), -6)) * s;
            }
        }
    }
}

static void test_qat(void) {
    struct {
        qat_kind_t kind;
        int block;
    } kinds[] = {{QAT_FP8_UE8M0, 32}, {QAT_FP4_UE8M0, 32}, {QAT_FP4_E4M3, 16}};
    for (size_t k = 0; k < DI_ARRAY_LEN(kinds); k++) {
        int m = 6, n = 96;
        float *x = t_rand_vec((size_t)(m * n), 1.0f);
        for (int i = 0; i < n; i++) x[n + i] *= 1e-6f;          /* below the amax clamps */
        for (int i = 0; i < 32; i++) x[2 * n + i] = 0.0f;       /* an all-zero block */
        for (int i = 0; i < n; i++) x[3 * n + i] *= 3000.0f;    /* large */
        /* exact ties: amax 6 (FP4) or 448 (FP8) makes the scale 1 */
        static const float fp4_ties[] = {6, 0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, -0.25f, -0.75f, -5.0f};
        static const float fp8_ties[] = {448, 1.0625f, 1.1875f, 0.01171875f, -1.0625f, 240.0f, 0x1p-10f, 3 * 0x1p-10f, 0x1p-9f};
        const float *ties = kinds[k].kind == QAT_FP8_UE8M0 ? fp8_ties : fp4_ties;
        size_t nt = kinds[k].kind == QAT_FP8_UE8M0 ? DI_ARRAY_LEN(fp8_ties) : DI_ARRAY_LEN(fp4_ties);
        for (size_t i = 0; i < (size_t)kinds[k].block; i++) x[4 * n + i] = i < nt ? ties[i] : 0.0f;
        bk_tensor_t t = put(bk, x, m, n);
        bk->qat(bk, t, kinds[k].kind, kinds[k].block);
        float *got = t_download(bk, t);
        double *ref = xmalloc((size_t)(m * n) * 8);
        qat_ref(kinds[k].kind, kinds[k].block, x, ref, m * n);
        int bad = 0;
        for (int i = 0; i < m * n; i++) bad += got[i] != (float)ref[i];
        CHECKF(bad == 0, "qat kind %d: %d values differ from the reference", kinds[k].kind, bad);
        /* quantizing twice changes nothing (what makes the packed state lossless) */
        bk->qat(bk, t, kinds[k].kind, kinds[k].block);
        float *again = t_download(bk, t);
        CHECK(!memcmp(again, got, (size_t)(m * n) * 4));
        bk->release(bk, &t);
        free(x), free(got), free(ref), free(again);
    }
    /* tie expectations spelled out */
    float v[16] = {6, 0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
    qat_apply(QAT_FP4_E4M3, 16, v, 16);
    CHECK(v[1] == 0 && v[2] == 1 && v[3] == 1 && v[4] == 2 && v[5] == 2 && v[6] == 4 && v[7] == 4);
}

/* ---- hyper-connections --------------------------------------------------------------------- */
static void hc_case(int iters) {
    int hc = 4, D = 37, nm = (2 + hc) * hc, m = 3;
    float *X = t_rand_vec((size_t)(m * hc * D), 2.0f), *mixes = t_rand_vec((size_t)(m * nm), 5.0f);
    float *base = t_rand_vec((size_t)nm, 0.5f), *scale = t_rand_vec(3, 1.0f);
    float eps = 1e-20f, he = 1e-6f;
    bk_tensor_t tX = put(bk, X, m, hc * D), tm = put(bk, mixes, m, nm), tb = put(bk, base, 1, nm), ts = put(bk, scale, 1, 3);
    bk_tensor_t coef = bk->alloc(bk, BK_F32, m, nm);
    bk->hc_mix(bk, coef, tm, tX, tb, ts, hc, eps, he, iters);
    float *got = t_download(bk, coef);
    double ref[3 * 24];
    for (int r = 0; r < m; r++) {
        double ss = 0, mm[24], C[4][4];
        for (int i = 0; i < hc * D; i++) ss += (double)X[r * hc * D + i] * X[r * hc * D + i];
        for (int i = 0; i < nm; i++) mm[i] = mixes[r * nm + i] / sqrt(ss / (hc * D) + eps);
        double *o = ref + r * nm;
        for (int k = 0; k < hc; k++) {
            o[k] = 1 / (1 + exp(-(mm[k] * scale[0] + base[k]))) + he;
            o[hc + k] = 2 / (1 + exp(-(mm[hc + k] * scale[1] + base[hc + k])));
        }
        for (int a = 0; a < hc; a++) {
            double mx = -INFINITY, s = 0;
            for (int b = 0; b < hc; b++) mx = fmax(mx, C[a][b] = mm[2 * hc + a * hc + b] * scale[2] + base[2 * hc + a * hc + b]);
            for (int b = 0; b < hc; b++) s += C[a][b] = exp(C[a][b] - mx);
            for (int b = 0; b < hc; b++) C[a][b] = C[a][b] / s + he;
        }
        for (int it = 0; it < iters; it++) {
            for (int a = 0; a < hc && it; a++) {
                double s = 0;
                for (int b = 0; b < hc; b++) s += C[a][b];
                for (int b = 0; b < hc; b++) C[a][b] /= s + he;
            }
            for (int b = 0; b < hc; b++) {
                double s = 0;
                for (int a = 0; a < hc; a++) s += C[a][b];
                for (int a = 0; a < hc; a++) C[a][b] /= s + he;
            }
        }
        for (int a = 0; a < hc; a++)
            for (int b = 0; b < hc; b++) o[2 * hc + a * hc + b] = C[a][b];
    }
    CHECK(rel_err(got, ref, (size_t)(m * nm)) < TOL);
    /* collapse with the pre columns, expand, fill */
    bk_tensor_t out = bk->alloc(bk, BK_F32, m, D), y = put(bk, X, m, D);
    bk->hc_collapse(bk, out, tX, bk_cols(coef, 0, hc), hc);
    float *col = t_download(bk, out);
    double cref[3 * 37];
    for (int r = 0; r < m; r++)
        for (int d = 0; d < D; d++) {
            double s = 0;
            for (int k = 0; k < hc; k++) s += (double)got[r * nm + k] * X[r * hc * D + k * D + d];
            cref[r * D + d] = s;
        }
    CHECK(rel_err(col, cref, (size_t)(m * D)) < TOL);
    bk->hc_expand(bk, tX, y, coef, hc);
    float *ex = t_download(bk, tX);
    double *eref = xmalloc((size_t)(m * hc * D) * 8);
    for (int r = 0; r < m; r++)
        for (int b = 0; b < hc; b++)
            for (int d = 0; d < D; d++) {
                double s = (double)got[r * nm + hc + b] * X[r * D + d];
                for (int a = 0; a < hc; a++) s += (double)got[r * nm + 2 * hc + a * hc + b] * X[r * hc * D + a * D + d];
                eref[r * hc * D + b * D + d] = s;
            }
    CHECK(rel_err(ex, eref, (size_t)(m * hc * D)) < TOL);
    bk->hc_fill(bk, tX, bk_cols(coef, 1, hc), y, hc);
    float *fill = t_download(bk, tX), *pre = t_download(bk, coef);
    int bad = 0;
    for (int r = 0; r < m; r++)
        for (int k = 0; k < hc; k++) bad += memcmp(fill + r * hc * D + k * D, X + r * D, (size_t)D * 4) != 0;
    CHECK_EQ(bad, 0);
    for (int r = 0; r < m; r++) /* the weights (1, 0, .., 0) at columns 1 .. hc, the rest of the row as it was */
        for (int j = 0; j < nm; j++) bad += pre[r * nm + j] != (j == 1 ? 1.0f : j > 1 && j <= hc ? 0.0f : got[r * nm + j]);
    CHECK_EQ(bad, 0);
    free(pre);
    bk_tensor_t *ts_[] = {&tX, &tm, &tb, &ts, &coef, &out, &y};
    for (size_t i = 0; i < DI_ARRAY_LEN(ts_); i++) bk->release(bk, ts_[i]);
    free(X), free(mixes), free(base), free(scale), free(got), free(col), free(ex), free(eref), free(fill);
}

static void test_hc(void) {
    hc_case(1); /* unconverged: every normalization step shows */
    hc_case(3);
    hc_case(20);
}

/* The fused pre step equals the ops it stands for, bit for bit (the forward's numbers): mixes
 * from an F32 weight with more rows than the mixes, pre as a view of a wider tensor, with and
 * without the norm's weight. */
static void hc_pre_case(int hc, int64_t D, int64_t m, bool with_norm) {
    int64_t nm = (2 + hc) * hc;
    t_weight_t fn = make_weight(WQ_F32, nm + 3, hc * D);
    bk_weight_t *bw = bk->bind(bk, &fn.m);
    float *X = t_rand_vec((size_t)(m * hc * D), 2.0f), *base = t_rand_vec((size_t)nm, 0.5f), *scale = t_rand_vec(3, 0.05f);
    float *pre = t_rand_vec((size_t)(m * (hc + 5)), 1.0f), *norm = t_rand_vec((size_t)D, 1.0f);
    bk_tensor_t tX = put(bk, X, m, hc * D), tb = put(bk, base, 1, nm), ts = put(bk, scale, 1, 3), tp = put(bk, pre, m, hc + 5);
    bk_tensor_t tn = put(bk, norm, 1, D), pv = bk_cols(tp, 2, hc);
    bk_tensor_t coef = bk->alloc(bk, BK_F32, m, nm), out = bk->alloc(bk, BK_F32, m, D);
    bk_tensor_t coef2 = bk->alloc(bk, BK_F32, m, nm), xc = bk->alloc(bk, BK_F32, m, D), out2 = bk->alloc(bk, BK_F32, m, D);
    bk->hc_pre(bk, out, coef, tX, bw, tb, ts, pv, with_norm ? &tn : NULL, hc, 1e-20f, 1e-6f, 20);
    bk->matmul(bk, coef2, tX, bw, 0);
    bk->hc_mix(bk, coef2, coef2, tX, tb, ts, hc, 1e-20f, 1e-6f, 20);
    bk->hc_collapse(bk, xc, tX, pv, hc);
    bk->rmsnorm(bk, out2, xc, with_norm ? &tn : NULL, 1e-20f);
    float *c1 = t_download(bk, coef), *c2 = t_download(bk, coef2), *o1 = t_download(bk, out), *o2 = t_download(bk, out2);
    CHECKF(!memcmp(c1, c2, (size_t)(m * nm) * 4), "hc %d D %lld m %lld: coefficients differ from the ops'", hc, (long long)D, (long long)m);
    CHECKF(!memcmp(o1, o2, (size_t)(m * D) * 4), "hc %d D %lld m %lld: input differs from the ops'", hc, (long long)D, (long long)m);
    bk_tensor_t *ts_[] = {&tX, &tb, &ts, &tp, &tn, &coef, &out, &coef2, &xc, &out2};
    for (size_t i = 0; i < DI_ARRAY_LEN(ts_); i++) bk->release(bk, ts_[i]);
    bk->unbind(bk, bw);
    t_weight_free(&fn);
    free(X), free(base), free(scale), free(pre), free(norm), free(c1), free(c2), free(o1), free(o2);
}

static void test_hc_pre(void) {
    hc_pre_case(4, 37, 3, true);
    hc_pre_case(4, 1000, 1, true);
    hc_pre_case(4, 1000, 70, false);
    hc_pre_case(3, 64, 5, true);
}

static void test_engram_gate(void) {
    int hc = 4, D = 37, m = 3;
    float *X = t_rand_vec((size_t)(m * hc * D), 1.0f), *kv = t_rand_vec((size_t)(m * (hc + 1) * D), 1.0f), *qk = t_rand_vec((size_t)(hc * D), 1.5f);
    for (int d = 0; d < D; d++) kv[D + d] = -X[D + d] / (qk[D + d] != 0 ? qk[D + d] : 1); /* a strongly negative dot */
    bk_tensor_t tX = put(bk, X, m, hc * D), tkv = put(bk, kv, m, (hc + 1) * D), tqk = put(bk, qk, hc, D);
    bk->engram_gate(bk, tX, tkv, tqk, hc, 1e-20f);
    float *got = t_download(bk, tX);
    double *ref = xmalloc((size_t)(m * hc * D) * 8);
    for (int r = 0; r < m; r++)
        for (int k = 0; k < hc; k++) {
            const float *h = X + r * hc * D + k * D, *key = kv + r * (hc + 1) * D + k * D, *V = kv + r * (hc + 1) * D + hc * D;
            double dot = 0, sh = 0, sk = 0;
            for (int d = 0; d < D; d++) dot += (double)h[d] * qk[k * D + d] * key[d], sh += (double)h[d] * h[d], sk += (double)key[d] * key[d];
            dot = dot / sqrt(sh / D + 1e-20) / sqrt(sk / D + 1e-20) / sqrt((double)D);
            double g = 1 / (1 + exp(-copysign(sqrt(fmax(fabs(dot), 1e-6)), dot)));
            for (int d = 0; d < D; d++) ref[r * hc * D + k * D + d] = h[d] + g * V[d];
        }
    CHECK(rel_err(got, ref, (size_t)(m * hc * D)) < TOL);
    bk->release(bk, &tX), bk->release(bk, &tkv), bk->release(bk, &tqk);
    free(X), free(kv), free(qk), free(got), free(ref);
}

static void test_group_pool(void) {
    for (int ratio = 1; ratio <= 3; ratio++) {
        int g = 5, d = 37;
        float *z = t_rand_vec((size_t)(g * ratio * d), 1.0f), *s = t_rand_vec((size_t)(g * ratio * d), 4.0f);
        bk_tensor_t tz = put(bk, z, g * ratio, d), ts = put(bk, s, g * ratio, d), out = bk->alloc(bk, BK_F32, g, d);
        bk->group_pool(bk, out, tz, ts, ratio);
        float *got = t_download(bk, out);
        double ref[5 * 37];
        for (int j = 0; j < g; j++)
            for (int c = 0; c < d; c++) {
                double sum = 0, v = 0;
                for (int i = 0; i < ratio; i++) sum += exp(s[(j * ratio + i) * d + c]);
                for (int i = 0; i < ratio; i++) v += z[(j * ratio + i) * d + c] * exp(s[(j * ratio + i) * d + c]) / sum;
                ref[j * d + c] = v;
            }
        CHECK(rel_err(got, ref, (size_t)(g * d)) < TOL);
        bk->release(bk, &tz), bk->release(bk, &ts), bk->release(bk, &out);
        free(z), free(s), free(got);
    }
}

/* ---- attention ---------------------------------------------------------------------------- */
static void test_attention(void) {
    int H = 3, d = 40, W = 5, m = 4, npool = 150, K = 4; /* the pool: three pages */
    int64_t pos0 = 12;
    float *q = t_rand_vec((size_t)(m * H * d), 1.0f), *ring = t_rand_vec((size_t)(W * d), 1.0f), *kv = t_rand_vec((size_t)(m * d), 1.0f);
    float *pool = t_rand_vec((size_t)(npool * d), 1.0f), *sink = t_rand_vec((size_t)H, 2.0f);
    int32_t sel[4 * 4] = {0, 67, 149, -1, -1, -1, -1, -1, 2, 64, 130, 63, 1, 127, -1, -1};
    bk_tensor_t tq = put(bk, q, m, H * d), tr = put(bk, ring, W, d), tk = put(bk, kv, m, d);
    t_paged_t tp = t_paged(bk, pool, npool, d);
    bk_tensor_t ts = put(bk, sink, 1, H), tsel = put_i(bk, sel, m, K), out = bk->alloc(bk, BK_F32, m, H * d);
    float scale = 1.0f / sqrtf((float)d);
    for (int variant = 0; variant < 3; variant++) {
        int64_t win_lo = variant == 1 ? 11 : 0; /* 1: a replay start inside the window */
        bool with_pool = variant != 2;
        bk->attention(bk, out, tq, ts, scale, tr, tk, pos0, W, win_lo, with_pool ? &tp.v : NULL, with_pool ? &tsel : NULL);
        float *got = t_download(bk, out);
        double *ref = xmalloc((size_t)(m * H * d) * 8);
        for (int r = 0; r < m; r++)
            for (int h = 0; h < H; h++) {
                const float *keys[16];
                int n = 0;
                int64_t i = pos0 + r, lo = i - W + 1 > win_lo ? i - W + 1 : win_lo;
                for (int64_t p = lo; p <= i; p++) keys[n++] = p < pos0 ? ring + (p % W) * d : kv + (p - pos0) * d;
                for (int k = 0; with_pool && k < K; k++)
                    if (sel[r * K + k] >= 0) keys[n++] = pool + sel[r * K + k] * d;
                double l[16], mx = sink[h], z;
                for (int u = 0; u < n; u++) {
                    l[u] = 0;
                    for (int c = 0; c < d; c++) l[u] += (double)q[(r * H + h) * d + c] * keys[u][c];
                    l[u] *= scale;
                    mx = fmax(mx, l[u]);
                }
                z = exp(sink[h] - mx);
                for (int u = 0; u < n; u++) z += exp(l[u] - mx);
                for (int c = 0; c < d; c++) {
                    double o = 0;
                    for (int u = 0; u < n; u++) o += exp(l[u] - mx) / z * keys[u][c];
                    ref[(r * H + h) * d + c] = o;
                }
            }
        CHECKF(rel_err(got, ref, (size_t)(m * H * d)) < TOL, "variant %d: %.3g", variant, rel_err(got, ref, (size_t)(m * H * d)));
        free(got), free(ref);
    }
    bk_tensor_t *all[] = {&tq, &tr, &tk, &ts, &tsel, &out};
    for (size_t i = 0; i < DI_ARRAY_LEN(all); i++) bk->release(bk, all[i]);
    t_paged_free(&tp);
    free(q), free(ring), free(kv), free(pool), free(sink);
}

/* ---- indexer and two-level top-k ----------------------------------------------------------- */
typedef struct {
    double s;
    int i;
} cand_t;
static int by_score(const void *a, const void *b) {
    const cand_t *x = a, *y = b;
    if (x->s != y->s) return x->s > y->s ? -1 : 1;
    return x->i - y->i;
}
static int by_id(const void *a, const void *b) { return *(const int32_t *)a - *(const int32_t *)b; }

/* top-k of scores[0..n) above -inf, ties to the lower index, ascending ids, -1 padded */
static void ref_topk(const double *scores, int n, int k, int32_t *out) {
    cand_t c[256];
    int nc = 0;
    for (int i = 0; i < n; i++)
        if (scores[i] > -INFINITY) c[nc++] = (cand_t){scores[i], i};
    qsort(c, (size_t)nc, sizeof *c, by_score);
    int kk = nc < k ? nc : k;
    for (int i = 0; i < kk; i++) out[i] = c[i].i;
    qsort(out, (size_t)kk, sizeof *out, by_id);
    for (int i = kk; i < k; i++) out[i] = -1;
}

static void test_indexer(void) {
    int Hi = 3, di = 32, nk = 150, K = 5, KB = 3, bs = 4, m = 6; /* the keys: three pages */
    float *q = t_rand_vec((size_t)(m * Hi * di), 1.0f), *w = t_rand_vec((size_t)(m * Hi), 1.0f), *keys = t_rand_vec((size_t)(nk * di), 1.0f);
    for (int c = 0; c < di; c++) keys[9 * di + c] = keys[4 * di + c]; /* two identical keys: a tie */
    float qs = 1.0f / sqrtf((float)di), ws = 1.0f / sqrtf((float)Hi);
    bk_tensor_t tq = put(bk, q, m, Hi * di), tw = put(bk, w, m, Hi);
    t_paged_t tk = t_paged(bk, keys, nk, di);
    bk_tensor_t sel = bk->alloc(bk, BK_I32, m, K), blocks = bk->alloc(bk, BK_I32, m, KB), sel2 = bk->alloc(bk, BK_I32, m, K);
    int64_t pos0s[] = {0, 20, 30, 140};
    int ratios[] = {1, 2, 1, 1};
    for (int v = 0; v < 4; v++) {
        int64_t pos0 = pos0s[v];
        int ratio = ratios[v];
        bk->indexer_topk(bk, sel, &blocks, tq, tw, tk.v, pos0, ratio, NULL, bs, qs, ws); /* candidate source */
        bk->indexer_topk(bk, sel2, NULL, tq, tw, tk.v, pos0, ratio, &blocks, bs, qs, ws); /* restricted user */
        int32_t got[6 * 5], gotb[6 * 3], got2[6 * 5];
        bk->download(bk, got, sel);
        bk->download(bk, gotb, blocks);
        bk->download(bk, got2, sel2);
        int bad = 0;
        for (int r = 0; r < m; r++) {
            int nvis = (int)((pos0 + r + 1) / ratio);
            if (nvis > nk) nvis = nk;
            double sc[160], bsc[48];
            for (int j = 0; j < nvis; j++) {
                double s = 0;
                for (int h = 0; h < Hi; h++) {
                    double dot = 0;
                    for (int c = 0; c < di; c++) dot += (double)q[(r * Hi + h) * di + c] * keys[j * di + c];
                    s += fmax(dot, 0) * qs * w[r * Hi + h] * ws;
                }
                sc[j] = s;
            }
            int nb = (nvis + bs - 1) / bs;
            for (int b = 0; b < nb; b++) {
                bsc[b] = -INFINITY;
                for (int j = b * bs; j < nvis && j < (b + 1) * bs; j++) bsc[b] = fmax(bsc[b], sc[j]);
            }
            if (nb) bsc[nb - 1] = INFINITY; /* the newest block is pinned */
            int32_t want[8], wantb[8], want2[8];
            ref_topk(sc, nvis, K, want);
            ref_topk(bsc, nb, KB, wantb);
            for (int j = 0; j < nvis; j++) {
                bool kept = false;
                for (int b = 0; b < KB; b++) kept |= wantb[b] == j / bs;
                if (!kept) sc[j] = -INFINITY;
            }
            ref_topk(sc, nvis, K, want2);
            bad += memcmp(want, got + r * K, (size_t)K * 4) != 0;
            bad += memcmp(wantb, gotb + r * KB, (size_t)KB * 4) != 0;
            bad += memcmp(want2, got2 + r * K, (size_t)K * 4) != 0;
        }
        CHECKF(bad == 0, "case %d: %d rows differ", v, bad);
    }
    bk_tensor_t *all[] = {&tq, &tw, &sel, &blocks, &sel2};
    for (size_t i = 0; i < DI_ARRAY_LEN(all); i++) bk->release(bk, all[i]);
    t_paged_free(&tk);
    free(q), free(w), free(keys);
}

/* ---- router and experts ------------------------------------------------------------------- */
static void test_router(void) {
    int m = 5, E = 9, k = 3;
    float *u = t_rand_vec((size_t)(m * E), 3.0f), *bias = t_rand_vec((size_t)E, 0.5f);
    u[0] = u[1] = 30.0f; /* softplus over its threshold, and a tie */
    bias[0] = bias[1] = 0.0f;
    bk_tensor_t tu = put(bk, u, m, E), tb = put(bk, bias, 1, E), idx = bk->alloc(bk, BK_I32, m, k), wt = bk->alloc(bk, BK_F32, m, k);
    for (int norm = 0; norm < 2; norm++) {
        bk->router(bk, idx, wt, tu, tb, 1.0f, norm, 1.5f);
        int32_t gi[5 * 3];
        float gw[5 * 3];
        bk->download(bk, gi, idx);
        bk->download(bk, gw, wt);
        int bad = 0;
        double wref[5 * 3];
        for (int r = 0; r < m; r++) {
            double s[9];
            bool used[9] = {0};
            for (int e = 0; e < E; e++) s[e] = sqrt(log1p(exp((double)u[r * E + e])));
            double sum = 0;
            for (int j = 0; j < k; j++) {
                int best = -1;
                for (int e = 0; e < E; e++)
                    if (!used[e] && (best < 0 || s[e] + bias[e] > s[best] + bias[best])) best = e;
                used[best] = true;
                bad += gi[r * k + j] != best;
                wref[r * k + j] = s[best];
                sum += s[best];
            }
            for (int j = 0; j < k; j++) wref[r * k + j] = (norm ? wref[r * k + j] / sum : wref[r * k + j]) * 1.5;
        }
        CHECK_EQ(bad, 0);
        CHECK(rel_err(gw, wref, (size_t)(m * k)) < TOL);
    }
    bk->release(bk, &tu), bk->release(bk, &tb), bk->release(bk, &idx), bk->release(bk, &wt);
    free(u), free(bias);
}

static void test_moe(void) {
    int m = 5, D = 37, I = 19, E = 4, k = 2;
    t_weight_t w[4][3], sh[3];
    bk_expert_t ex[4], shared;
    for (int e = 0; e < E; e++) {
        wq_kind_t kind = e % 2 ? WQ_FP4 : WQ_F32;
        w[e][0] = make_weight(kind, I, D), w[e][1] = make_weight(kind, D, I), w[e][2] = make_weight(kind, I, D);
        ex[e] = (bk_expert_t){bk->bind(bk, &w[e][0].m), bk->bind(bk, &w[e][1].m), bk->bind(bk, &w[e][2].m)};
    }
    sh[0] = make_weight(WQ_FP8, I, D), sh[1] = make_weight(WQ_FP8, D, I), sh[2] = make_weight(WQ_FP8, I, D);
    shared = (bk_expert_t){bk->bind(bk, &sh[0].m), bk->bind(bk, &sh[1].m), bk->bind(bk, &sh[2].m)};
    float *x = t_rand_vec((size_t)(m * D), 2.0f), wt[5 * 2] = {0.5f, 1.0f, 0.25f, 0.75f, 1.5f, 0.1f, 1, 1, 0.3f, 0.2f};
    int32_t idx[5 * 2] = {0, 3, 1, 2, 3, 1, 2, 0, 1, 3};
    bk_tensor_t tx = put(bk, x, m, D), ti = put_i(bk, idx, m, k), tw = put(bk, wt, m, k), out = bk->alloc(bk, BK_F32, m, D);
    bk_tensor_t ys = bk->alloc(bk, BK_F32, m, D);
    for (int lim = 0; lim < 2; lim++) { /* the shared expert through mlp, added by moe */
        float limit = lim ? 0.7f : 0.0f;
        bk->mlp(bk, ys, tx, &shared, limit);
        bk->moe(bk, out, tx, ti, tw, ex, E, &ys, NULL, limit);
        float *got = t_download(bk, out);
        double ref[5 * 37] = {0};
        for (int r = 0; r < m; r++)
            for (int j = 0; j <= k; j++) {
                t_weight_t *e = j < k ? w[idx[r * k + j]] : sh;
                double a[19], weight = j < k ? wt[r * k + j] : 1.0;
                for (int i = 0; i < I; i++) {
                    double g = 0, up = 0;
                    for (int c = 0; c < D; c++) g += (double)e[0].dense[i * D + c] * x[r * D + c], up += (double)e[2].dense[i * D + c] * x[r * D + c];
                    if (limit > 0) g = fmin(g, limit), up = fmax(fmin(up, limit), -limit);
                    a[i] = g / (1 + exp(-g)) * up * weight;
                }
                for (int c = 0; c < D; c++) {
                    double y = 0;
                    for (int i = 0; i < I; i++) y += e[1].dense[c * I + i] * a[i];
                    ref[r * D + c] += y;
                }
            }
        CHECKF(rel_err(got, ref, (size_t)(m * D)) < TOL, "limit %g: %.3g", limit, rel_err(got, ref, (size_t)(m * D)));
        free(got);
    }
    for (int e = 0; e < E; e++)
        for (int j = 0; j < 3; j++) t_weight_free(&w[e][j]);
    for (int j = 0; j < 3; j++) t_weight_free(&sh[j]);
    for (int e = 0; e < E; e++) bk->unbind(bk, ex[e].w1), bk->unbind(bk, ex[e].w2), bk->unbind(bk, ex[e].w3);
    bk->unbind(bk, shared.w1), bk->unbind(bk, shared.w2), bk->unbind(bk, shared.w3);
    bk->release(bk, &tx), bk->release(bk, &ti), bk->release(bk, &tw), bk->release(bk, &out), bk->release(bk, &ys);
    free(x);
}

/* ---- memory ops ---------------------------------------------------------------------------- */
static void test_views_and_copy(void) {
    float *a = t_rand_vec(6 * 10, 1.0f);
    bk_tensor_t t = put(bk, a, 6, 10), u = bk->alloc(bk, BK_F32, 3, 4);
    bk->copy(bk, u, bk_cols(bk_rows(t, 2, 3), 5, 4));
    float got[12];
    bk->download(bk, got, u);
    int bad = 0;
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 4; c++) bad += got[r * 4 + c] != a[(2 + r) * 10 + 5 + c];
    CHECK_EQ(bad, 0);
    bk->release(bk, &t), bk->release(bk, &u);
    free(a);
}


/* ---- the batched forms: one call over many sequences' rows == the single-sequence ops ---------- */
static bool same_f32(backend_t *b, bk_tensor_t x, bk_tensor_t y) {
    float *u = t_download(b, x), *v = t_download(b, y);
    bool same = !memcmp(u, v, (size_t)(x.rows * x.cols) * 4);
    free(u), free(v);
    return same;
}

static void test_batched_forms(void) {
    /* matmul_grouped: each group as matmul on the views */
    t_weight_t w = make_weight(WQ_FP8, 3 * 20, 24);
    bk_weight_t *bw = bk->bind(bk, &w.m);
    float *x = t_rand_vec(5 * 72, 1.0f);
    bk_tensor_t tx = put(bk, x, 5, 72), g1 = bk->alloc(bk, BK_F32, 5, 60), g2 = bk->alloc(bk, BK_F32, 5, 60);
    bk->matmul_grouped(bk, g1, tx, bw, 3);
    for (int g = 0; g < 3; g++) bk->matmul(bk, bk_cols(g2, g * 20, 20), bk_cols(tx, g * 24, 24), bw, g * 20);
    CHECK(same_f32(bk, g1, g2));
    float *got = t_download(bk, g1);
    double ref1 = 0; /* and it is the block-diagonal product: row 4, output 47 (group 2) */
    for (int i = 0; i < 24; i++) ref1 += (double)x[4 * 72 + 48 + i] * w.dense[47 * 24 + i];
    CHECKF(fabs(got[4 * 60 + 47] - ref1) <= 1e-5 * fmax(1.0, fabs(ref1)), "grouped %g vs %g", got[4 * 60 + 47], ref1);
    bk->release(bk, &tx), bk->release(bk, &g1), bk->release(bk, &g2), bk->unbind(bk, bw);
    free(x), free(got);
    t_weight_free(&w);

    /* rope_spans: two sequences' rows at their positions; row 2 belongs to none */
    int64_t hd = 40, half = 8;
    float f[8], *y = t_rand_vec(6 * 2 * 40, 1.0f);
    for (int p = 0; p < half; p++) f[p] = powf(0.37f, (float)p);
    bk_tensor_t tf = put(bk, f, 1, half), a = put(bk, y, 6, 2 * hd), b = put(bk, y, 6, 2 * hd);
    bk_span_t sp[2] = {{.r0 = 0, .n = 2, .pos0 = 500}, {.r0 = 3, .n = 3, .pos0 = 7}};
    bk->rope_spans(bk, a, (int)hd, tf, sp, 2, 3, false);
    for (int i = 0; i < 2; i++) bk->rope(bk, bk_rows(b, sp[i].r0, sp[i].n), (int)hd, tf, sp[i].pos0, 3, false);
    CHECK(same_f32(bk, a, b));
    float *ay = t_download(bk, a);
    CHECK(!memcmp(ay + 2 * 2 * hd, y + 2 * 2 * hd, (size_t)(2 * hd) * 4));
    /* rope_qat_spans: copy, rope_spans and qat (the spans with qat) op by op; row 2 untouched */
    bk_tensor_t o = bk->alloc(bk, BK_F32, 6, 2 * hd), c = put(bk, y, 6, 2 * hd), ref = put(bk, y, 6, 2 * hd);
    bk->copy(bk, o, c);
    sp[0].qat = true;
    bk->rope_qat_spans(bk, o, c, (int)hd, tf, sp, 2, 3, QAT_FP4_E4M3, 16);
    bk->rope_spans(bk, ref, (int)hd, tf, sp, 2, 3, false);
    bk->qat(bk, bk_rows(ref, sp[0].r0, sp[0].n), QAT_FP4_E4M3, 16);
    CHECK(same_f32(bk, o, ref));
    CHECK(!same_f32(bk, o, a)); /* the first span was quantized */
    bk->release(bk, &o), bk->release(bk, &c), bk->release(bk, &ref);
    bk->release(bk, &tf), bk->release(bk, &a), bk->release(bk, &b);
    free(y), free(ay);

    /* attention_spans and indexer_spans: two sequences, each its ring, pool, keys and position */
    int H = 3, d = 32, W = 4, m = 5, K = 3, Hi = 2;
    float *q = t_rand_vec((size_t)(m * H * d), 1.0f), *kv = t_rand_vec((size_t)(m * d), 1.0f), *sink = t_rand_vec((size_t)H, 1.0f);
    float *iq = t_rand_vec((size_t)(m * Hi * d), 1.0f), *iw = t_rand_vec((size_t)(m * Hi), 1.0f);
    int32_t sel[5 * 3] = {0, 2, -1, 1, 5, 6, 3, 3, -1, 0, 1, 2, 4, -1, -1};
    bk_tensor_t tq = put(bk, q, m, H * d), tk = put(bk, kv, m, d), ts = put(bk, sink, 1, H), tsel = put_i(bk, sel, m, K);
    bk_tensor_t tiq = put(bk, iq, m, Hi * d), tiw = put(bk, iw, m, Hi), rings[2];
    t_paged_t pools[2];
    for (int i = 0; i < 2; i++) {
        float *r = t_rand_vec((size_t)(W * d), 1.0f), *pl = t_rand_vec((size_t)(7 * d), 1.0f);
        rings[i] = put(bk, r, W, d), pools[i] = t_paged(bk, pl, 7, d);
        free(r), free(pl);
    }
    bk_paged_t keys1 = pools[1].v;
    keys1.rows = 5;
    bk_span_t as[2] = {{.r0 = 0, .n = 2, .pos0 = 9, .ring = rings[0], .pool = pools[0].v, .keys = pools[0].v, .win_lo = 0},
                       {.r0 = 3, .n = 2, .pos0 = 13, .ring = rings[1], .pool = pools[1].v, .keys = keys1, .win_lo = 12}};
    for (int with_pool = 0; with_pool < 2; with_pool++) {
        float *nan = xmalloc((size_t)(m * H * d) * 4);
        for (int i = 0; i < m * H * d; i++) nan[i] = NAN;
        bk_tensor_t o1 = put(bk, nan, m, H * d), o2 = put(bk, nan, m, H * d);
        bk->attention_spans(bk, o1, tq, ts, 0.2f, tk, W, as, 2, with_pool ? &tsel : NULL, NULL);
        for (int i = 0; i < 2; i++) {
            bk_tensor_t rs = bk_rows(tsel, as[i].r0, as[i].n);
            bk->attention(bk, bk_rows(o2, as[i].r0, as[i].n), bk_rows(tq, as[i].r0, as[i].n), ts, 0.2f, as[i].ring,
                          bk_rows(tk, as[i].r0, as[i].n), as[i].pos0, W, as[i].win_lo, with_pool ? &as[i].pool : NULL,
                          with_pool ? &rs : NULL);
        }
        float *u = t_download(bk, o1), *v = t_download(bk, o2);
        int bad = 0;
        for (int i = 0; i < m * H * d; i++) bad += !(u[i] == v[i] || (isnan(u[i]) && isnan(v[i])));
        CHECK_EQ(bad, 0);
        CHECK(isnan(u[2 * H * d]) && !isnan(u[0]) && !isnan(u[4 * H * d])); /* row 2 is in no span */
        bk->release(bk, &o1), bk->release(bk, &o2);
        free(nan), free(u), free(v);
    }
    bk_tensor_t s1 = bk->alloc(bk, BK_I32, m, 2), s2 = bk->alloc(bk, BK_I32, m, 2), b1 = bk->alloc(bk, BK_I32, m, 2),
                b2 = bk->alloc(bk, BK_I32, m, 2);
    bk->indexer_spans(bk, s1, &b1, tiq, tiw, as, 2, 2, NULL, 2, 0.3f, 0.5f);
    for (int i = 0; i < 2; i++) {
        bk_tensor_t bb = bk_rows(b2, as[i].r0, as[i].n);
        bk->indexer_topk(bk, bk_rows(s2, as[i].r0, as[i].n), &bb, bk_rows(tiq, as[i].r0, as[i].n), bk_rows(tiw, as[i].r0, as[i].n),
                         as[i].keys, as[i].pos0, 2, NULL, 2, 0.3f, 0.5f);
    }
    CHECK(same_f32(bk, s1, s2) && same_f32(bk, b1, b2));
    bk_tensor_t *all[] = {&tq, &tk, &ts, &tsel, &tiq, &tiw, &rings[0], &rings[1], &s1, &s2, &b1, &b2};
    for (size_t i = 0; i < DI_ARRAY_LEN(all); i++) bk->release(bk, all[i]);
    t_paged_free(&pools[0]), t_paged_free(&pools[1]);
    free(q), free(kv), free(sink), free(iq), free(iw);

    /* copy_many: as the copies one by one */
    float *z = t_rand_vec(8 * 6, 1.0f);
    bk_tensor_t src = put(bk, z, 8, 6), d1 = bk->alloc(bk, BK_F32, 5, 4), d2 = bk->alloc(bk, BK_F32, 5, 4);
    bk_tensor_t dst[3] = {bk_rows(d1, 0, 2), bk_cols(bk_rows(d1, 2, 3), 1, 3), bk_rows(d1, 4, 0)};
    bk_tensor_t from[3] = {bk_cols(bk_rows(src, 5, 2), 2, 4), bk_cols(bk_rows(src, 0, 3), 0, 3), bk_rows(src, 0, 0)};
    bk_tensor_t dst2[3] = {bk_rows(d2, 0, 2), bk_cols(bk_rows(d2, 2, 3), 1, 3), bk_rows(d2, 4, 0)};
    bk->copy_many(bk, dst, from, 3);
    for (int i = 0; i < 3; i++) bk->copy(bk, dst2[i], from[i]);
    CHECK(same_f32(bk, d1, d2));
    bk->release(bk, &src), bk->release(bk, &d1), bk->release(bk, &d2);
    free(z);
}

int main(void) {
    bk = backend_cpu_create(3);
    bk1 = backend_cpu_create(1);
    RUN(test_matmul);
    RUN(test_gather);
    RUN(test_rmsnorm);
    RUN(test_rope);
    RUN(test_qat);
    RUN(test_hc);
    RUN(test_hc_pre);
    RUN(test_engram_gate);
    RUN(test_group_pool);
    RUN(test_attention);
    RUN(test_indexer);
    RUN(test_router);
    RUN(test_moe);
    RUN(test_views_and_copy);
    RUN(test_batched_forms);
    bk->destroy(bk);
    bk1->destroy(bk1);
    return t_finish();
}
