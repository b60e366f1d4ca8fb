/* Prefill attention and indexer alone on DeepSeek-V4.1-Flash shapes (no model): one sequence of
 * N query rows at positions 0..N-1 (64 heads of 512, window 128, a pool of N / ratio entries,
 * top-512 selections; indexer 32 heads of 128 against N / ratio keys; pool and keys in paged
 * stores as a sequence's state holds them), inputs quantized as the
 * forward's QAT leaves them. Milliseconds per call (the best of 5 after a warm-up, synchronized)
 * in each precision; fp32 is the CUDA-core kernels, and so is bf16x3's attention
 * (lib/backend_cuda_tc.c says why).
 *
 *   attention_bench [--rows N] */
#include "backend_cuda.h"
#include "pagestore.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double ms_of(backend_t *bk, void (*fn)(void *), void *arg) {
    fn(arg); /* warm-up: module load, allocator */
    backend_cuda_sync(bk);
    double best = 1e30;
    for (int i = 0; i < 5; i++) {
        uint64_t t0 = now_ns();
        fn(arg);
        backend_cuda_sync(bk);
        double ms = (double)(now_ns() - t0) / 1e6;
        best = ms < best ? ms : best;
    }
    return best;
}

typedef struct {
    backend_t *bk;
    bk_tensor_t out, q, sink, ring, kv, sel, iq, iw, isel;
    bk_paged_t pool, keys;
    int ratio;
} job_t;

static void attention(void *p) {
    job_t *j = p;
    j->bk->attention(j->bk, j->out, j->q, j->sink, 1.0f / 22.627417f, j->ring, j->kv, 0, 128, 0, &j->pool, &j->sel);
}

static void indexer(void *p) {
    job_t *j = p;
    j->bk->indexer_topk(j->bk, j->isel, NULL, j->iq, j->iw, j->keys, 0, j->ratio, NULL, 8, 1.0f / 11.3137085f, 1.0f / 5.656854f);
}

/* A paged store of n random rows, quantized as the forward's QAT leaves them. */
static pagestore_t random_store(backend_t *bk, pagepool_t *pp, int64_t n, uint64_t seed, qat_kind_t kind, int block) {
    pagestore_t s = pagestore_new(pp);
    pagestore_reserve(&s, n);
    pagestore_sync(&s);
    bk_paged_t p = pagestore_view(&s, n);
    bk_tensor_t v;
    for (int64_t r = 0; r < n; r += v.rows) {
        bk_paged_run(p, r, n - r, &v);
        backend_cuda_fill(bk, v, -1.0f, 1.0f, seed + (uint64_t)r);
        bk->qat(bk, v, kind, block);
    }
    return s;
}

/* Selections of row i: min(512, visible) entries of the first visible = (i + 1) / ratio, -1 after. */
static int32_t *selections(int64_t n, int ratio) {
    int32_t *s = xmalloc((size_t)(n * 512) * 4);
    uint64_t x = 88172645463325252ull;
    for (int64_t i = 0; i < n; i++) {
        int64_t vis = (i + 1) / ratio, k = vis < 512 ? vis : 512;
        for (int64_t u = 0; u < 512; u++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            s[i * 512 + u] = u < k ? (int32_t)(k == vis ? u : (int64_t)(x % (uint64_t)vis)) : -1;
        }
    }
    return s;
}

int main(int argc, char **argv) {
    int64_t n = 8192;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rows") && i + 1 < argc && parse_i64(argv[i + 1], 1, 1 << 20, &n)) i++;
        else die("usage: attention_bench [--rows N]");
    }
    char err[256];
    backend_t *bk = backend_cuda_create(0, err, sizeof err);
    if (!bk) {
        printf("attention_bench: %s; nothing measured\n", err);
        return 0;
    }
    job_t j = {.bk = bk};
    j.out = bk->alloc(bk, BK_F32, n, 64 * 512), j.q = bk->alloc(bk, BK_F32, n, 64 * 512), j.sink = bk->alloc(bk, BK_F32, 1, 64);
    j.ring = bk->alloc(bk, BK_F32, 128, 512), j.kv = bk->alloc(bk, BK_F32, n, 512);
    j.iq = bk->alloc(bk, BK_F32, n, 32 * 128), j.iw = bk->alloc(bk, BK_F32, n, 32);
    j.isel = bk->alloc(bk, BK_I32, n, 512);
    bk_tensor_t all[] = {j.q, j.sink, j.ring, j.kv, j.iq, j.iw};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) backend_cuda_fill(bk, all[i], -1.0f, 1.0f, 1000 + i);
    bk->qat(bk, j.kv, QAT_FP8_UE8M0, 32);
    bk->qat(bk, j.iq, QAT_FP4_UE8M0, 32);
    pagepool_t *pool_pages = pagepool_new(bk, 512), *key_pages = pagepool_new(bk, 128);
    pagestore_t pool = random_store(bk, pool_pages, n, 2000, QAT_FP4_E4M3, 16);
    pagestore_t keys = random_store(bk, key_pages, n, 3000, QAT_FP4_UE8M0, 32);
    printf("prefill of %lld rows, V4.1-Flash shapes, ms per call:\n", (long long)n);
    printf("| op | ratio | bf16x3 | bf16x2 | bf16 | fp32 (CUDA cores) |\n|---|---|---|---|---|---|\n");
    static const cuda_precision_t precs[] = {CUDA_BF16X3, CUDA_BF16X2, CUDA_BF16, CUDA_FP32};
    for (int ratio = 1; ratio <= 2; ratio++) {
        int32_t *s = selections(n, ratio);
        j.sel = bk->alloc(bk, BK_I32, n, 512);
        bk->upload(bk, j.sel, s);
        j.pool = pagestore_view(&pool, n / ratio), j.keys = pagestore_view(&keys, n / ratio), j.ratio = ratio;
        double t[2][4];
        for (int p = 0; p < 4; p++) {
            backend_cuda_precision(bk, precs[p]);
            t[0][p] = ms_of(bk, attention, &j);
            t[1][p] = ms_of(bk, indexer, &j);
        }
        for (int op = 0; op < 2; op++)
            printf("| %s | %d | %.2f | %.2f | %.2f | %.2f |\n", op ? "indexer (scores + top-k)" : "attention", ratio, t[op][0], t[op][1],
                   t[op][2], t[op][3]);
        bk->release(bk, &j.sel);
        free(s);
    }
    bk_tensor_t *owned[] = {&j.out, &j.q, &j.sink, &j.ring, &j.kv, &j.iq, &j.iw, &j.isel};
    for (size_t i = 0; i < sizeof owned / sizeof *owned; i++) bk->release(bk, owned[i]);
    pagestore_release(&pool), pagestore_release(&keys);
    pagepool_free(pool_pages), pagepool_free(key_pages);
    bk->destroy(bk);
    return 0;
}
