// Router (MODEL_V41 §5.11) in fp32, one block per row: s = sqrt(softplus(u / temp)), the top-k
// of s + bias by repeated arg-max (ties to the lower expert), weights s (normalized) * scale.
#include "common.cuh"

#define RT_THREADS 128

__device__ __forceinline__ float softplus_dev(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

__device__ __forceinline__ bool better(float v, int i, float bv, int bi) { return bi < 0 || v > bv || (v == bv && i < bi); }

__global__ void router_kernel(int32_t *idx, int64_t ldi, float *wt, int64_t ldw, const float *logits, int64_t ldl,
                              const float *bias, int E, int k, float temp, int normalize, float scale) {
    pdl_begin();
    extern __shared__ float sm[]; // s[E], v[E]
    __shared__ float wv[RT_THREADS / 32];
    __shared__ int wi[RT_THREADS / 32];
    float *s = sm, *v = sm + E;
    int64_t r = blockIdx.x;
    const float *u = logits + r * ldl;
    int32_t *ix = idx + r * ldi;
    float *w = wt + r * ldw;
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        s[e] = sqrtf(softplus_dev(u[e] / temp));
        v[e] = s[e] + bias[e];
    }
    __syncthreads();
    for (int slot = 0; slot < k; slot++) {
        float bv = 0.0f;
        int bi = -1;
        for (int e = threadIdx.x; e < E; e += blockDim.x) {
            bool used = false;
            for (int t = 0; t < slot; t++) used |= ix[t] == e;
            if (!used && !isnan(v[e]) && better(v[e], e, bv, bi)) bv = v[e], bi = e;
        }
        for (int o = 16; o; o >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (oi >= 0 && better(ov, oi, bv, bi)) bv = ov, bi = oi;
        }
        if ((threadIdx.x & 31) == 0) wv[threadIdx.x >> 5] = bv, wi[threadIdx.x >> 5] = bi;
        __syncthreads();
        if (threadIdx.x == 0) {
            bv = wv[0], bi = wi[0];
            for (int q = 1; q < RT_THREADS / 32; q++)
                if (wi[q] >= 0 && better(wv[q], wi[q], bv, bi)) bv = wv[q], bi = wi[q];
            ix[slot] = bi;
            w[slot] = bi >= 0 ? s[bi] : 0.0f;
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        if (normalize && k > 1) {
            float sum = 0.0f;
            for (int t = 0; t < k; t++) sum += w[t];
            for (int t = 0; t < k; t++) w[t] /= sum + 1e-20f;
        }
        for (int t = 0; t < k; t++) w[t] *= scale;
    }
}

extern "C" cudaError_t k_router(int32_t *idx, int64_t ldi, float *wt, int64_t ldw, const float *logits, int64_t ldl,
                                const float *bias, int64_t rows, int E, int k, float temp, int normalize, float scale,
                                cudaStream_t s) {
    if (rows <= 0) return cudaSuccess;
    return k_launch(router_kernel, (unsigned)rows, RT_THREADS, (size_t)2 * E * sizeof(float), s, idx, ldi, wt, ldw, logits,
                    ldl, bias, E, k, temp, normalize, scale);
}
