// Router (MODEL_V41 §5.11) in fp32, one block per row: s = sqrt(softplus(u / temp)) by the
// whole block, each thread's loads all in flight at once (the bias fetched before the kernel's
// wait: it is a weight), the rank keys of s + bias into shared memory; then one warp picks the
// top-k by repeated arg-max (ties to the lower expert, NaN never chosen) without block
// barriers: each lane keeps the best of its experts, the warp takes the largest of the lanes'
// (hardware reductions on order-preserving keys), and only the lane that lost its expert looks
// again. Weights s (normalized) * scale.
#include "common.cuh"

#define RT_THREADS 128
#define RT_PER 4  // experts per thread per pass (loads in flight together)
#define RT_SCAN 16 // keys a lane reads at once when it looks for its best (E <= 512: all of them)

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

__global__ void __launch_bounds__(RT_THREADS) router_kernel(int32_t *idx, int64_t ldi, float *wt, int64_t ldw,
                                                            const float *logits, int64_t ldl, const float *bias, int E, int k,
                                                            float temp, int normalize, float scale) {
    extern __shared__ float sm[]; // s[E], the rank keys of s + bias[E] (0 once chosen), the chosen experts[k]
    float *s = sm;
    uint32_t *keys = (uint32_t *)(sm + E);
    int *sel = (int *)(keys + E);
    int tid = threadIdx.x;
    const int T = RT_THREADS;
    float b[RT_PER];
#pragma unroll
    for (int j = 0; j < RT_PER; j++) b[j] = tid + j * T < E ? __ldg(bias + tid + j * T) : 0.0f;
    pdl_begin();
    int64_t r = blockIdx.x;
    const float *u = logits + r * ldl;
    for (int base = 0; base < E; base += RT_PER * T) {
        float x[RT_PER];
#pragma unroll
        for (int j = 0; j < RT_PER; j++) {
            int e = base + tid + j * T;
            if (base && e < E) b[j] = __ldg(bias + e);
            x[j] = e < E ? u[e] : 0.0f;
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
    int32_t *ix = idx + r * ldi;
    float *w = wt + r * ldw;
    for (int t = lane; t < k; t += 32) {
        float c = sel[t] >= 0 ? s[sel[t]] : 0.0f;
        ix[t] = sel[t];
        w[t] = (normalize && k > 1 ? c / (sum + 1e-20f) : c) * scale;
    }
}

extern "C" cudaError_t k_router(int32_t *idx, int64_t ldi, float *wt, int64_t ldw, const float *logits, int64_t ldl,
                                const float *bias, int64_t rows, int E, int k, float temp, int normalize, float scale,
                                cudaStream_t s) {
    if (rows <= 0) return cudaSuccess;
    return k_launch(router_kernel, (unsigned)rows, RT_THREADS, (size_t)(2 * E + k) * sizeof(float), s, idx, ldi, wt, ldw,
                    logits, ldl, bias, E, k, temp, normalize, scale);
}
