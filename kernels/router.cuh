// Router (MODEL_V41 §5.11) of one row by one block, in fp32: s = sqrt(softplus(u / temp)) by the
// whole block, each thread's loads all in flight at once, the rank keys of s + bias into shared
// memory; then one warp picks the top-k by repeated arg-max (ties to the lower expert, NaN never
// chosen) without block barriers: each lane keeps the best of its experts, the warp takes the
// largest of the lanes' (hardware reductions on order-preserving keys), and only the lane that
// lost its expert looks again. Weights s (normalized) * scale. router.cu's kernel and the gate
// matmul's last block (matmul_simt.cu) route with it: the same bits.
#pragma once

#include "common.cuh"

#define RT_PER 4   // experts per thread per pass (loads in flight together)
#define RT_SCAN 16 // keys a lane reads at once when it looks for its best (E <= 512: all of them)

// Shared memory route_row takes: s[E], the rank keys of s + bias[E] (0 once chosen), the chosen experts[k].
static inline size_t route_smem(int E, int k) { return (size_t)(2 * E + k) * sizeof(float); }

__device__ __forceinline__ float softplus_dev(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// Larger for a larger value (+0 for -0: they tie); 0 for none (NaN or chosen).
__device__ __forceinline__ uint32_t rank_key(float v) { return isnan(v) ? 0 : order_key(v + 0.0f); }

// The best of this lane's experts e = lane, lane + 32, ...: the largest key, the lowest expert
// (none: key 0). A chunk's keys meet pairwise in a tree (4 steps deep, not 16), the lower expert
// of each pair first, which the higher one replaces only with a larger key.
__device__ __forceinline__ void lane_best(const uint32_t *keys, int E, int lane, uint32_t *key, int *e_best) {
    uint32_t bk = 0;
    int be = 0x7fffffff;
    for (int e0 = lane; e0 < E; e0 += 32 * RT_SCAN) {
        uint32_t k[RT_SCAN];
        int ex[RT_SCAN];
#pragma unroll
        for (int u = 0; u < RT_SCAN; u++) k[u] = e0 + 32 * u < E ? keys[e0 + 32 * u] : 0, ex[u] = e0 + 32 * u;
#pragma unroll
        for (int w = 1; w < RT_SCAN; w *= 2)
#pragma unroll
            for (int u = 0; u + w < RT_SCAN; u += 2 * w)
                if (k[u + w] > k[u]) k[u] = k[u + w], ex[u] = ex[u + w];
        if (k[0] > bk) bk = k[0], be = ex[0]; /* an earlier chunk holds the lower experts */
    }
    *key = bk, *e_best = be;
}

// This thread's bias values of route_row's first pass (a weight: loaded before a kernel's wait).
__device__ __forceinline__ void route_bias_first(const float *bias, int E, float (&b)[RT_PER]) {
#pragma unroll
    for (int j = 0; j < RT_PER; j++) b[j] = threadIdx.x + j * blockDim.x < E ? __ldg(bias + threadIdx.x + j * blockDim.x) : 0.0f;
}

// Routes logits u (E of them, written by an earlier kernel or another block of this one: read
// through L2) into ix[k], w[k]. Every thread of the block calls it (sm: route_smem bytes).
__device__ __forceinline__ void route_row(int32_t *ix, float *w, const float *u, const float *bias, float (&b)[RT_PER], int E,
                                          int k, float temp, int normalize, float scale, float *sm) {
    float *s = sm;
    uint32_t *keys = (uint32_t *)(sm + E);
    int *sel = (int *)(keys + E);
    int tid = threadIdx.x, T = blockDim.x;
    for (int base = 0; base < E; base += RT_PER * T) {
        float x[RT_PER];
#pragma unroll
        for (int j = 0; j < RT_PER; j++) {
            int e = base + tid + j * T;
            if (base && e < E) b[j] = __ldg(bias + e);
            x[j] = e < E ? __ldcg(u + e) : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < RT_PER; j++) {
            int e = base + tid + j * T;
            if (e >= E) break;
            float v = sqrtf(softplus_dev(x[j] / temp));
            s[e] = v;
            keys[e] = rank_key(v + b[j]);
        }
    }
    __syncthreads();
    if (tid >= 32) return;
    int lane = tid;
    uint32_t key;
    int eb;
    lane_best(keys, E, lane, &key, &eb);
    for (int slot = 0; slot < k; slot++) {
        uint32_t top = __reduce_max_sync(0xffffffffu, key);
        int bi = (int)__reduce_min_sync(0xffffffffu, key == top ? (unsigned)eb : 0x7fffffffu);
        if (top == 0) bi = -1; /* nothing left to choose */
        if ((slot & 31) == lane) sel[slot] = bi;
        if (bi >= 0 && (bi & 31) == lane) { /* the owner drops it and looks again */
            keys[bi] = 0;
            lane_best(keys, E, lane, &key, &eb);
        }
    }
    __syncwarp();
    float sum = 0.0f;
    if (normalize && k > 1)
        for (int t = 0; t < k; t++) sum += sel[t] >= 0 ? s[sel[t]] : 0.0f;
    for (int t = lane; t < k; t += 32) {
        float c = sel[t] >= 0 ? s[sel[t]] : 0.0f;
        ix[t] = sel[t];
        w[t] = (normalize && k > 1 ? c / (sum + 1e-20f) : c) * scale;
    }
}
