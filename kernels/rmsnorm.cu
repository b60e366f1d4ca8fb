// RMSNorm per row in fp32: out = w * (x / sqrt(mean(x^2) + eps)); out may be x.
#include "common.cuh"

__global__ void rmsnorm_kernel(float *out, int64_t ldo, const float *x, int64_t ldx, const float *w, int64_t cols,
                               float eps) {
    __shared__ float red[33];
    const float *xr = x + blockIdx.x * ldx;
    float *o = out + blockIdx.x * ldo;
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) ss += xr[i] * xr[i];
    ss = block_sum(ss, red);
    float inv = 1.0f / sqrtf(ss / (float)cols + eps);
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) o[i] = w ? w[i] * (xr[i] * inv) : xr[i] * inv;
}

extern "C" cudaError_t k_rmsnorm(float *out, int64_t ldo, const float *x, int64_t ldx, const float *w, int64_t rows,
                                 int64_t cols, float eps, cudaStream_t s) {
    if (rows <= 0) return cudaSuccess;
    int threads = cols >= 1024 ? 512 : cols >= 256 ? 256 : 128;
    rmsnorm_kernel<<<(unsigned)rows, threads, 0, s>>>(out, ldo, x, ldx, w, cols, eps);
    return DI_LAUNCHED();
}
