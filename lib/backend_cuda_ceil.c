/* The device's ceilings for the benchmark, measured rather than taken from a datasheet: a
 * large device-to-device copy (bytes read + written), and cuBLASLt dense GEMMs in bf16 and in
 * FP8 e4m3 (per-tensor scales: the fastest FP8 form the library has on sm_90) on random data,
 * median of timed repeats after warm-up. */
#include "backend_cuda_internal.h"
#include "util.h"

#include <cublasLt.h>
#include <stdlib.h>
#include <string.h>

#define REPEATS 20

static void cublas_check(cublasStatus_t s, const char *what) {
    if (s != CUBLAS_STATUS_SUCCESS) die("cuBLASLt error %d in %s", (int)s, what);
}
#define LT(call) cublas_check((call), #call)

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Median milliseconds of REPEATS timed calls of fn after 3 untimed ones. */
static double median_ms(cuda_t *c, void (*fn)(void *), void *arg) {
    cudaEvent_t ev[REPEATS + 1];
    for (int i = 0; i <= REPEATS; i++) CU(cudaEventCreate(&ev[i]));
    for (int i = 0; i < 3; i++) fn(arg);
    CU(cudaEventRecord(ev[0], c->stream));
    for (int i = 0; i < REPEATS; i++) {
        fn(arg);
        CU(cudaEventRecord(ev[i + 1], c->stream));
    }
    CU(cudaEventSynchronize(ev[REPEATS]));
    float ms[REPEATS];
    for (int i = 0; i < REPEATS; i++) CU(cudaEventElapsedTime(&ms[i], ev[i], ev[i + 1]));
    for (int i = 0; i <= REPEATS; i++) CU(cudaEventDestroy(ev[i]));
    qsort(ms, REPEATS, sizeof *ms, cmp_float);
    return ms[REPEATS / 2];
}

typedef struct {
    cuda_t *c;
    void *dst, *src;
    size_t bytes;
} copy_arg_t;

static void do_copy(void *p) {
    copy_arg_t *a = p;
    CU(cudaMemcpyAsync(a->dst, a->src, a->bytes, cudaMemcpyDeviceToDevice, a->c->stream));
}

typedef struct {
    cuda_t *c;
    cublasLtHandle_t lt;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
    void *a, *b, *d, *ws;
    size_t ws_bytes;
} gemm_arg_t;

static void do_gemm(void *p) {
    gemm_arg_t *g = p;
    float one = 1.0f, zero = 0.0f;
    LT(cublasLtMatmul(g->lt, g->op, &one, g->a, g->la, g->b, g->lb, &zero, g->d, g->ld, g->d, g->ld, &g->algo, g->ws,
                      g->ws_bytes, g->c->stream));
}

/* D (bf16, n x n) = A^T B with A, B n x n of type t; FLOP/s. */
static double gemm_rate(cuda_t *c, cublasLtHandle_t lt, cudaDataType_t t, int n) {
    gemm_arg_t g = {.c = c, .lt = lt, .ws_bytes = (size_t)64 << 20};
    size_t elem = t == CUDA_R_16BF ? 2 : 1, bytes = (size_t)n * (size_t)n * elem;
    g.a = cu_scratch(c, bytes), g.b = cu_scratch(c, bytes), g.d = cu_scratch(c, (size_t)n * (size_t)n * 2);
    g.ws = cu_scratch(c, g.ws_bytes);
    uint8_t *scale = cu_scratch(c, (size_t)n * (size_t)n / 1024 + 64);
    int kind = t == CUDA_R_16BF ? KW_BF16 : KW_FP8;
    CU(k_random_weight(g.a, scale, kind, n, n, 32, 32, 1.0f, 1, c->stream));
    CU(k_random_weight(g.b, scale, kind, n, n, 32, 32, 1.0f, 2, c->stream));
    LT(cublasLtMatmulDescCreate(&g.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    LT(cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT(cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    LT(cublasLtMatrixLayoutCreate(&g.la, t, n, n, n));
    LT(cublasLtMatrixLayoutCreate(&g.lb, t, n, n, n));
    LT(cublasLtMatrixLayoutCreate(&g.ld, CUDA_R_16BF, n, n, n));
    cublasLtMatmulPreference_t pref;
    LT(cublasLtMatmulPreferenceCreate(&pref));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &g.ws_bytes, sizeof g.ws_bytes));
    cublasLtMatmulHeuristicResult_t h;
    int found = 0;
    LT(cublasLtMatmulAlgoGetHeuristic(lt, g.op, g.la, g.lb, g.ld, g.ld, pref, 1, &h, &found));
    double rate = 0;
    if (found) {
        g.algo = h.algo;
        rate = 2.0 * n * (double)n * n / (median_ms(c, do_gemm, &g) * 1e-3);
    }
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(g.la), cublasLtMatrixLayoutDestroy(g.lb), cublasLtMatrixLayoutDestroy(g.ld);
    cublasLtMatmulDescDestroy(g.op);
    cu_release_scratch(c, g.a), cu_release_scratch(c, g.b), cu_release_scratch(c, g.d), cu_release_scratch(c, g.ws);
    cu_release_scratch(c, scale);
    return rate;
}

void backend_cuda_ceilings(backend_t *bk, int gemm_size, cuda_ceilings_t *out) {
    cuda_t *c = cu_of(bk);
    cu_direct_begin(c); /* timed with events around each call */
    memset(out, 0, sizeof *out);
    struct cudaDeviceProp p;
    CU(cudaGetDeviceProperties(&p, c->device));
    snprintf(out->name, sizeof out->name, "%s", p.name);
    out->sms = p.multiProcessorCount;
    out->mem_bytes = (double)p.totalGlobalMem;
    out->gemm_size = gemm_size;
    copy_arg_t cp = {c, NULL, NULL, (size_t)2 << 30}; /* 2 GiB each way: far beyond the L2 */
    cp.src = cu_scratch(c, cp.bytes), cp.dst = cu_scratch(c, cp.bytes);
    CU(k_fill_uniform(cp.src, 1 << 20, (int64_t)(cp.bytes / 4) >> 20, 1 << 20, -1.0f, 1.0f, 3, c->stream));
    out->copy_bytes_s = 2.0 * (double)cp.bytes / (median_ms(c, do_copy, &cp) * 1e-3);
    cu_release_scratch(c, cp.src), cu_release_scratch(c, cp.dst);
    cublasLtHandle_t lt;
    LT(cublasLtCreate(&lt));
    out->bf16_flops = gemm_rate(c, lt, CUDA_R_16BF, gemm_size);
    out->fp8_flops = gemm_rate(c, lt, CUDA_R_8F_E4M3, gemm_size);
    LT(cublasLtDestroy(lt));
    CU(cudaStreamSynchronize(c->stream));
    cu_direct_end(c);
}
