// RMSNorm per row in fp32: out = w * (x / sqrt(mean(x^2) + eps)); out may be x. Rows of up to
// 8192 aligned columns are read once with 16-byte loads and kept in registers (a decode row is
// one block's work, so the loads must all be in flight at once).
#include "row_ops.cuh"

__global__ void rmsnorm_kernel(float *out, int64_t ldo, const float *x, int64_t ldx, const float *w, int64_t cols,
                               float eps) {
    pdl_begin();
    __shared__ float red[33];
    const float *xr = x + blockIdx.x * ldx;
    float *o = out + blockIdx.x * ldo;
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) ss += xr[i] * xr[i];
    ss = block_sum(ss, red);
    float inv = rms_scale(ss, cols, eps);
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) o[i] = w ? w[i] * (xr[i] * inv) : xr[i] * inv;
}

__global__ void rmsnorm_vec_kernel(float *out, int64_t ldo, const float *x, int64_t ldx, const float *w, int cols, float eps) {
    float4 g[RN_VEC];
    rmsnorm_vec_weights(g, w, cols, blockDim.x);
    pdl_begin();
    __shared__ float red[33];
    const float4 *xr = (const float4 *)(x + blockIdx.x * ldx);
    rmsnorm_vec_row((float4 *)(out + blockIdx.x * ldo), g, cols, eps, blockDim.x, red, [&](int i) { return xr[i]; });
}

extern "C" cudaError_t k_rmsnorm(float *out, int64_t ldo, const float *x, int64_t ldx, const float *w, int64_t rows,
                                 int64_t cols, float eps, cudaStream_t s) {
    if (rows <= 0) return cudaSuccess;
    if (rmsnorm_vec_ok(out, ldo, x, ldx, w, cols))
        return k_launch(rmsnorm_vec_kernel, (unsigned)rows, rmsnorm_vec_threads(cols), 0, s, out, ldo, x, ldx, w, (int)cols, eps);
    int threads = cols >= 1024 ? 512 : cols >= 256 ? 256 : 128;
    return k_launch(rmsnorm_kernel, (unsigned)rows, threads, 0, s, out, ldo, x, ldx, w, cols, eps);
}
