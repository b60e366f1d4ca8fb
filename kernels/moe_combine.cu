// Expert combine: each row sums its experts' outputs in ascending expert order (as the CPU
// backend does), then the shared expert's, in fp32. The row's order is found once per block
// (a thread per slot ranks it), so each thread's loads of y are independent of one another.
#include "common.cuh"

#define MC_THREADS 256

__global__ void __launch_bounds__(MC_THREADS) moe_combine_kernel(float *out, int64_t ldo, const float *y,
                                                                 const int32_t *pos_of, const int32_t *idx, int64_t ldi,
                                                                 const float *shared, int k, int64_t D) {
    pdl_begin();
    extern __shared__ int order[]; // the row's positions in ascending (expert, slot), then -1
    int64_t r = blockIdx.y, d = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    const int32_t *ix = idx + r * ldi, *po = pos_of + r * k;
    for (int s = threadIdx.x; s < k; s += blockDim.x) order[s] = -1;
    __syncthreads();
    for (int s = threadIdx.x; s < k; s += blockDim.x) {
        if (po[s] < 0) continue;
        int e = ix[s], rank = 0;
        for (int t = 0; t < k; t++) rank += po[t] >= 0 && (ix[t] < e || (ix[t] == e && t < s));
        order[rank] = po[s];
    }
    __syncthreads();
    if (d >= D) return;
    float acc = 0.0f;
    for (int n = 0; n < k && order[n] >= 0; n++) acc += y[(int64_t)order[n] * D + d];
    if (shared) acc += shared[r * D + d];
    out[r * ldo + d] = acc;
}

extern "C" cudaError_t k_moe_combine(float *out, int64_t ldo, const float *y, const int32_t *pos_of, const int32_t *idx,
                                     int64_t ldi, const float *shared, int64_t m, int k, int64_t D, cudaStream_t s) {
    if (m <= 0 || D <= 0) return cudaSuccess;
    return k_launch(moe_combine_kernel, dim3((unsigned)ceil_div(D, MC_THREADS), (unsigned)m), MC_THREADS, (size_t)k * 4, s,
                    out, ldo, y, pos_of, idx, ldi, shared, k, D);
}
