// Expert combine: each row sums its experts' outputs in ascending expert order (as the CPU
// backend does), then adds `add` (the shared expert's), in fp32. The row's order is found once
// per block (a thread per slot ranks it) while the added values are in flight; then each thread
// has the loads of up to MC_BATCH experts' rows in flight at once (of 4 channels when the rows
// allow 16-byte loads) and adds them in order. With X (4 streams: the model's hc_mult) the
// launch goes on to the block's hc_expand of those channels (row_ops.cuh's hc_expand_cols), one
// dependent kernel fewer in a decode layer.
#include "row_ops.cuh"

#define MC_THREADS 128
#define MC_BATCH 8

template <int V>
__global__ void __launch_bounds__(MC_THREADS) moe_combine_kernel(float *out, int64_t ldo, const float *y, const int32_t *pos_of,
                                                                 const int32_t *idx, int64_t ldi, int E, const float *add, int64_t lda,
                                                                 int k, int64_t D, float *X, int64_t ldx, const float *coef,
                                                                 int64_t ldc) {
    pdl_begin();
    extern __shared__ int order[]; // the row's valid positions in ascending (expert, slot), then their count
    int64_t r = blockIdx.y, d = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) * V;
    const int32_t *ix = idx + r * ldi, *po = pos_of ? pos_of + r * k : NULL;
    float sh[V];
    if (add && d < D) load_v<V>(add + r * lda + d, sh);
    if (k == 0 && threadIdx.x == 0) order[0] = 0;
    /* slot t's row of y: the dispatch's position, or (one row, no dispatch) the slot itself; -1: no expert */
    auto pos_at = [&](int t) { return po ? po[t] : ix[t] >= 0 && ix[t] < E ? (int)(r * k) + t : -1; };
    for (int s = threadIdx.x; s < k; s += blockDim.x) {
        int e = ix[s], p = pos_at(s), rank = 0, valid = 0;
        for (int t = 0; t < k; t++) {
            bool q = pos_at(t) >= 0;
            valid += q;
            rank += q && (ix[t] < e || (ix[t] == e && t < s));
        }
        if (p >= 0) order[rank] = p;
        if (s == 0) order[k] = valid;
    }
    __syncthreads();
    if (d >= D) return;
    float acc[V];
#pragma unroll
    for (int c = 0; c < V; c++) acc[c] = 0.0f;
    for (int n0 = 0, nv = order[k]; n0 < nv; n0 += MC_BATCH) {
        float v[MC_BATCH][V];
#pragma unroll
        for (int u = 0; u < MC_BATCH; u++)
            if (n0 + u < nv) load_v<V>(y + (int64_t)order[n0 + u] * D + d, v[u]);
#pragma unroll
        for (int u = 0; u < MC_BATCH; u++)
            if (n0 + u < nv)
#pragma unroll
                for (int c = 0; c < V; c++) acc[c] += v[u][c];
    }
    if (add)
#pragma unroll
        for (int c = 0; c < V; c++) acc[c] += sh[c];
    float *o = out + r * ldo + d;
    if constexpr (V == 4) *(float4 *)o = make_float4(acc[0], acc[1], acc[2], acc[3]);
    else o[0] = acc[0];
    if (X) hc_expand_cols<4, V>(X + r * ldx, D, d, acc, coef + r * ldc, 4);
}

extern "C" cudaError_t k_moe_combine(float *out, int64_t ldo, const float *y, const int32_t *pos_of, const int32_t *idx,
                                     int64_t ldi, int E, const float *add, int64_t lda, int64_t m, int k, int64_t D, float *X,
                                     int64_t ldx, const float *coef, int64_t ldc, cudaStream_t s) {
    if (m <= 0 || D <= 0) return cudaSuccess;
    bool vec = D % 4 == 0 && ldo % 4 == 0 && (uintptr_t)out % 16 == 0 && (uintptr_t)y % 16 == 0 &&
               (uintptr_t)add % 16 == 0 && lda % 4 == 0 && (!X || ((uintptr_t)X % 16 == 0 && ldx % 4 == 0));
    int V = vec ? 4 : 1;
    dim3 grid((unsigned)ceil_div(D, (int64_t)V * MC_THREADS), (unsigned)m);
    size_t smem = (size_t)(k + 1) * 4;
    if (vec)
        return k_launch(moe_combine_kernel<4>, grid, MC_THREADS, smem, s, out, ldo, y, pos_of, idx, ldi, E, add, lda, k, D, X, ldx,
                        coef, ldc);
    return k_launch(moe_combine_kernel<1>, grid, MC_THREADS, smem, s, out, ldo, y, pos_of, idx, ldi, E, add, lda, k, D, X, ldx,
                    coef, ldc);
}
