// Compressor pooling (MODEL_V41 §5.6): out[j][d] = sum over the ratio rows of group j of
// softmax_rows(s)[.][d] * z[.][d], in fp32.
#include "common.cuh"

__global__ void group_pool_kernel(float *out, int64_t ldo, const float *z, int64_t ldz, const float *sc, int64_t lds,
                                  int64_t d, int R) {
    pdl_begin();
    int64_t j = blockIdx.y, c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (c >= d) return;
    float mx = -INFINITY, sum = 0.0f, v = 0.0f;
    for (int i = 0; i < R; i++) mx = fmaxf(mx, sc[(j * R + i) * lds + c]);
    for (int i = 0; i < R; i++) sum += expf(sc[(j * R + i) * lds + c] - mx);
    for (int i = 0; i < R; i++) v += z[(j * R + i) * ldz + c] * (expf(sc[(j * R + i) * lds + c] - mx) / sum);
    out[j * ldo + c] = v;
}

extern "C" cudaError_t k_group_pool(float *out, int64_t ldo, const float *z, int64_t ldz, const float *sc, int64_t lds,
                                    int64_t groups, int64_t d, int ratio, cudaStream_t s) {
    if (groups <= 0 || d <= 0) return cudaSuccess;
    return k_launch(group_pool_kernel, dim3((unsigned)ceil_div(d, 128), (unsigned)groups), 128, 0, s, out, ldo, z, ldz, sc,
                    lds, d, ratio);
}
