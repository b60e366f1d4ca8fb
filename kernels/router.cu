// Router (MODEL_V41 §5.11) in fp32, one block per row: s = sqrt(softplus(u / temp)) by the
// whole block (every load of the row in flight at once), then one warp picks the top-k of
// s + bias by repeated arg-max (ties to the lower expert, NaN never chosen) without block
// barriers: each lane keeps the best of its experts, the warp takes the largest of the lanes'
// (hardware reductions on order-preserving keys), and only the lane that lost its expert looks
// again. Weights s (normalized) * scale.
#include "common.cuh"

#define RT_THREADS 128

__device__ __forceinline__ float softplus_dev(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// Larger for a larger value (+0 for -0: they tie); 0 for none (NaN or chosen).
__device__ __forceinline__ uint32_t rank_key(float v) { return isnan(v) ? 0 : order_key(v + 0.0f); }

// The best of this lane's experts e = lane, lane + 32, ...: the largest key, the lowest expert.
__device__ __forceinline__ void lane_best(const float *v, int E, int lane, uint32_t *key, int *e_best) {
    uint32_t bk = 0;
    int be = 0x7fffffff;
#pragma unroll 4
    for (int e = lane; e < E; e += 32) {
        uint32_t k = rank_key(v[e]);
        if (k > bk) bk = k, be = e; /* ascending e: an equal key keeps the lower expert */
    }
    *key = bk, *e_best = be;
}

__global__ void __launch_bounds__(RT_THREADS) router_kernel(int32_t *idx, int64_t ldi, float *wt, int64_t ldw,
                                                            const float *logits, int64_t ldl, const float *bias, int E, int k,
                                                            float temp, int normalize, float scale) {
    pdl_begin();
    extern __shared__ float sm[]; // s[E], v[E] (NaN once chosen), the chosen s[k]
    float *s = sm, *v = sm + E, *chosen = v + E;
    int64_t r = blockIdx.x;
    const float *u = logits + r * ldl;
#pragma unroll 4
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        float x = sqrtf(softplus_dev(u[e] / temp));
        s[e] = x;
        v[e] = x + bias[e];
    }
    __syncthreads();
    if (threadIdx.x >= 32) return;
    int lane = threadIdx.x;
    int32_t *ix = idx + r * ldi;
    uint32_t key;
    int eb;
    lane_best(v, E, lane, &key, &eb);
    for (int slot = 0; slot < k; slot++) {
        uint32_t top = __reduce_max_sync(0xffffffffu, key);
        int bi = (int)__reduce_min_sync(0xffffffffu, key == top ? (unsigned)eb : 0x7fffffffu);
        if (top == 0) bi = -1; /* nothing left to choose */
        if (lane == 0) ix[slot] = bi, chosen[slot] = bi >= 0 ? s[bi] : 0.0f;
        if (bi >= 0 && (bi & 31) == lane) { /* the owner drops it and looks again */
            v[bi] = __int_as_float(0x7FC00000);
            lane_best(v, E, lane, &key, &eb);
        }
    }
    __syncwarp();
    if (lane == 0) {
        float *w = wt + r * ldw, sum = 0.0f;
        if (normalize && k > 1)
            for (int t = 0; t < k; t++) sum += chosen[t];
        for (int t = 0; t < k; t++) w[t] = (normalize && k > 1 ? chosen[t] / (sum + 1e-20f) : chosen[t]) * scale;
    }
}

extern "C" cudaError_t k_router(int32_t *idx, int64_t ldi, float *wt, int64_t ldw, const float *logits, int64_t ldl,
                                const float *bias, int64_t rows, int E, int k, float temp, int normalize, float scale,
                                cudaStream_t s) {
    if (rows <= 0) return cudaSuccess;
    return k_launch(router_kernel, (unsigned)rows, RT_THREADS, (size_t)(2 * E + k) * sizeof(float), s, idx, ldi, wt, ldw,
                    logits, ldl, bias, E, k, temp, normalize, scale);
}
