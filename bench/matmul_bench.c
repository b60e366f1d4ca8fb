/* The tensor-core matmuls alone (issue 5): every dense FP8 projection of a V4.1-Flash layer
 * and the routed experts' grouped FP4 matmuls, on the shapes of an N-token prefill (default
 * 8192) or, below 33 positions, of a decode step (matmul_tcs; the BF16 head and router gate on
 * the CUDA cores, matmul_simt), in each precision of the
 * tensor-core activations, with TFLOP/s (2 m n k over the time of a call, the conversion of
 * the activations included) against the device's cuBLASLt ceilings, and GB/s (the weight
 * bytes a call reads, scales included; experts: the distinct routed ones) for decode.
 *
 *   matmul_bench [--positions N] [--reps N] [--precisions bf16,bf16x3] [--no-moe]
 *                [--shapes wq_b,wo_b,moe]   (only these rows: the names up to a space)
 *
 * Weights and activations are random (backend_cuda_random_weight, backend_cuda_fill); routing
 * draws each token's 6 distinct experts uniformly, as the random-weight model's near-uniform
 * router does. */
#include "backend_cuda.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t seed = 7;

typedef struct {
    const char *name;
    int64_t n, k;
    int groups; /* block-diagonal (wo_a): n and k per group times groups */
} shape_t;

/* A row's name up to its first space is in the comma list `only` (NULL: every row). */
static bool wanted(const char *only, const char *name) {
    if (!only) return true;
    size_t n = strcspn(name, " ");
    for (const char *p = only;; p++) {
        size_t len = strcspn(p, ",");
        if (len == n && !strncmp(p, name, n)) return true;
        p += len;
        if (!*p) return false;
    }
}

/* Bytes of an FP8 (32x32 scales) or FP4 (1x32 scales) weight. */
static double weight_bytes(bool fp4, int64_t n, int64_t k) {
    return fp4 ? n * (k / 2.0) + n * ((k + 31) / 32) : (double)n * k + ((n + 31) / 32) * ((k + 31) / 32);
}

/* Milliseconds per call of fn over reps calls, after one warm-up call. */
static double time_ms(backend_t *bk, void (*fn)(backend_t *, void *), void *ctx, int reps) {
    fn(bk, ctx);
    backend_cuda_sync(bk);
    uint64_t t0 = now_ns();
    for (int i = 0; i < reps; i++) fn(bk, ctx);
    backend_cuda_sync(bk);
    return (double)(now_ns() - t0) / 1e6 / reps;
}

typedef struct {
    bk_tensor_t out, x;
    bk_weight_t *w;
    int groups;
} dense_t;

static void run_dense(backend_t *bk, void *ctx) {
    dense_t *d = ctx;
    if (d->groups > 1) bk->matmul_grouped(bk, d->out, d->x, d->w, d->groups);
    else bk->matmul(bk, d->out, d->x, d->w, 0);
}

typedef struct {
    bk_tensor_t out, x, idx, wt;
    bk_expert_t *experts;
    int E, touched; /* experts with at least one position */
} moe_t;

static void run_moe(backend_t *bk, void *ctx) {
    moe_t *m = ctx;
    bk->moe(bk, m->out, m->x, m->idx, m->wt, m->experts, m->E, NULL, NULL, 10.0f);
}

/* bf16: a BF16 weight (the CUDA cores' matmul) instead of FP8. */
static void dense_point(backend_t *bk, const shape_t *s, bool bf16, int64_t M, int reps, const char *prec) {
    int64_t n = s->n * s->groups, kx = s->k * s->groups;
    dense_t d = {bk->alloc(bk, BK_F32, M, n), bk->alloc(bk, BK_F32, M, kx), NULL, s->groups};
    d.w = backend_cuda_random_weight(bk, bf16 ? WQ_BF16 : WQ_FP8, n, s->k, 0.05f, false, seed++);
    backend_cuda_fill(bk, d.x, -1.0f, 1.0f, seed++);
    double ms = time_ms(bk, run_dense, &d, reps), flops = 2.0 * M * n * s->k;
    printf("| %-22s | %6s | %5lld | %5lld | %5lld | %8.4f | %6.0f | %5.0f |\n", s->name, prec, (long long)M, (long long)n,
           (long long)s->k, ms, flops / (ms * 1e-3) / 1e12,
           (bf16 ? 2.0 * n * s->k : weight_bytes(false, n, s->k)) / (ms * 1e-3) / 1e9);
    bk->unbind(bk, d.w);
    bk->release(bk, &d.out), bk->release(bk, &d.x);
}

static void moe_point(backend_t *bk, moe_t *m, int64_t M, int64_t D, int64_t I, int reps, const char *prec) {
    backend_cuda_profile(bk, true);
    double ms = time_ms(bk, run_moe, m, reps), flops = 3 * 2.0 * M * 6 * D * I;
    printf("| %-22s | %6s | %5lld | %5lld | %5lld | %8.4f | %6.0f | %5.0f |\n", "moe (routed experts)", prec, (long long)M * 6,
           (long long)I, (long long)D, ms, flops / (ms * 1e-3) / 1e12, m->touched * 3 * weight_bytes(true, I, D) / (ms * 1e-3) / 1e9);
    printf("per op of those %d + 1 calls (ms per call; 'moe experts' = the three grouped matmuls):\n", reps);
    backend_cuda_profile_report(bk, stdout, reps + 1);
    backend_cuda_profile(bk, false);
}

int main(int argc, char **argv) {
    int64_t M = 8192, reps = 10;
    bool moe = true;
    const char *precs = "bf16,bf16x3", *only = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--positions") && v && parse_i64(v, 1, 1 << 16, &M)) i++;
        else if (!strcmp(a, "--reps") && v && parse_i64(v, 1, 1000, &reps)) i++;
        else if (!strcmp(a, "--precisions") && v) precs = argv[++i];
        else if (!strcmp(a, "--no-moe")) moe = false;
        else if (!strcmp(a, "--shapes") && v) only = argv[++i];
        else die("unknown or bad argument %s (see the comment at the top of bench/matmul_bench.c)", a);
    }
    char err[256];
    backend_t *bk = backend_cuda_create(0, err, sizeof err);
    if (!bk) {
        printf("matmul_bench: %s; nothing measured\n", err);
        return 0;
    }
    cuda_ceilings_t ceil;
    backend_cuda_ceilings(bk, 8192, &ceil);
    printf("device: %s, %d SMs; cuBLASLt 8192^3: bf16 %.0f TFLOP/s, FP8 %.0f TFLOP/s\n\n", ceil.name, ceil.sms,
           ceil.bf16_flops / 1e12, ceil.fp8_flops / 1e12);
    static const shape_t shapes[] = {
        {"wq_a", 1280, 5120, 1},     {"wq_b", 32768, 1280, 1},      {"wkv", 512, 5120, 1},
        {"wo_a (8 groups)", 1024, 4096, 8}, {"wo_b", 5120, 8192, 1}, {"indexer wq_b", 4096, 1280, 1},
        {"shared w1 / w3", 2304, 5120, 1}, {"shared w2", 5120, 2304, 1}, {"engram wkv", 25600, 6144, 1},
    };
    static const shape_t bf16_shapes[] = {{"head (bf16)", 129280, 5120, 1}, {"router gate (bf16)", 384, 5120, 1}};
    int64_t E = 384, D = 5120, I = 2304, K = 6;
    moe_t mo = {0};
    moe = moe && wanted(only, "moe");
    if (moe) { /* expert weights, random routing */
        mo.E = (int)E;
        mo.experts = xcalloc((size_t)E, sizeof *mo.experts);
        for (int e = 0; e < E; e++)
            mo.experts[e] = (bk_expert_t){backend_cuda_random_weight(bk, WQ_FP4, I, D, 0.05f, false, seed++),
                                          backend_cuda_random_weight(bk, WQ_FP4, D, I, 0.05f, false, seed++),
                                          backend_cuda_random_weight(bk, WQ_FP4, I, D, 0.05f, false, seed++)};
        int32_t *idx = xmalloc((size_t)(M * K) * 4);
        float *wt = xmalloc((size_t)(M * K) * 4);
        uint64_t r = 88172645463325252ull;
        for (int64_t t = 0; t < M; t++)
            for (int s = 0; s < K; s++) {
                bool dup;
                do {
                    r ^= r << 13, r ^= r >> 7, r ^= r << 17;
                    idx[t * K + s] = (int32_t)(r % (uint64_t)E);
                    dup = false;
                    for (int u = 0; u < s; u++) dup |= idx[t * K + u] == idx[t * K + s];
                } while (dup);
                wt[t * K + s] = 1.0f / K;
            }
        bool *hit = xcalloc((size_t)E, 1);
        for (int64_t i = 0; i < M * K; i++) mo.touched += !hit[idx[i]], hit[idx[i]] = true;
        free(hit);
        mo.x = bk->alloc(bk, BK_F32, M, D), mo.out = bk->alloc(bk, BK_F32, M, D);
        mo.idx = bk->alloc(bk, BK_I32, M, K), mo.wt = bk->alloc(bk, BK_F32, M, K);
        backend_cuda_fill(bk, mo.x, -1.0f, 1.0f, seed++);
        bk->upload(bk, mo.idx, idx);
        bk->upload(bk, mo.wt, wt);
        free(idx), free(wt);
    }
    printf("| matmul | activations | m | n | k | ms | TFLOP/s | GB/s |\n|---|---|---|---|---|---|---|---|\n");
    char *copy = xstrdup(precs), *save = NULL;
    for (char *p = strtok_r(copy, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        cuda_precision_t pr = !strcmp(p, "bf16x3") ? CUDA_BF16X3
                              : !strcmp(p, "bf16x2") ? CUDA_BF16X2
                              : !strcmp(p, "bf16")   ? CUDA_BF16
                              : !strcmp(p, "fp8")    ? CUDA_FP8
                                                     : CUDA_FP32;
        if (pr == CUDA_FP32) die("--precisions takes bf16, bf16x2, bf16x3 and fp8");
        backend_cuda_precision(bk, pr);
        for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
            if (wanted(only, shapes[i].name)) dense_point(bk, &shapes[i], false, M, (int)reps, p);
        for (size_t i = 0; i < sizeof bf16_shapes / sizeof *bf16_shapes; i++)
            if (wanted(only, bf16_shapes[i].name)) dense_point(bk, &bf16_shapes[i], true, M, (int)reps, p);
        if (moe) moe_point(bk, &mo, M, D, I, (int)(reps < 5 ? reps : 5), p);
    }
    free(copy);
    if (moe) {
        for (int e = 0; e < E; e++)
            bk->unbind(bk, mo.experts[e].w1), bk->unbind(bk, mo.experts[e].w2), bk->unbind(bk, mo.experts[e].w3);
        free(mo.experts);
        bk->release(bk, &mo.x), bk->release(bk, &mo.out), bk->release(bk, &mo.idx), bk->release(bk, &mo.wt);
    }
    bk->destroy(bk);
    return 0;
}
