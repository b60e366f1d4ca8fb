// Expert combine: each row sums its experts' outputs in ascending expert order (as the CPU
// backend does), then the shared expert's, in fp32.
#include "common.cuh"

__global__ void moe_combine_kernel(float *out, int64_t ldo, const float *y, const int32_t *pos_of, const int32_t *idx,
                                   int64_t ldi, const float *shared, int k, int64_t D) {
    pdl_begin();
    int64_t r = blockIdx.y, d = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (d >= D) return;
    const int32_t *ix = idx + r * ldi, *po = pos_of + r * k;
    float acc = 0.0f;
    int le = -1, ls = -1; // last (expert, slot) taken
    for (int n = 0; n < k; n++) {
        int be = 0, bs = -1;
        for (int s = 0; s < k; s++) {
            int e = ix[s];
            bool after = e > le || (e == le && s > ls);
            if (po[s] >= 0 && after && (bs < 0 || e < be)) be = e, bs = s;
        }
        if (bs < 0) break;
        acc += y[(int64_t)po[bs] * D + d];
        le = be, ls = bs;
    }
    if (shared) acc += shared[r * D + d];
    out[r * ldo + d] = acc;
}

extern "C" cudaError_t k_moe_combine(float *out, int64_t ldo, const float *y, const int32_t *pos_of, const int32_t *idx,
                                     int64_t ldi, const float *shared, int64_t m, int k, int64_t D, cudaStream_t s) {
    if (m <= 0 || D <= 0) return cudaSuccess;
    return k_launch(moe_combine_kernel, dim3((unsigned)ceil_div(D, 256), (unsigned)m), 256, 0, s, out, ldo, y, pos_of, idx,
                    ldi, shared, k, D);
}
