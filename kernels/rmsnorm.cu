// RMSNorm per row in fp32: out = w * (x / sqrt(mean(x^2) + eps)); out may be x. Rows of up to
// 8192 aligned columns are read once with 16-byte loads and kept in registers (a decode row is
// one block's work, so the loads must all be in flight at once).
#include "common.cuh"

#define RN_VEC 4 // float4s per thread held in registers: 512 threads x 16 columns

__global__ void rmsnorm_kernel(float *out, int64_t ldo, const float *x, int64_t ldx, const float *w, int64_t cols,
                               float eps) {
    pdl_begin();
    __shared__ float red[33];
    const float *xr = x + blockIdx.x * ldx;
    float *o = out + blockIdx.x * ldo;
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) ss += xr[i] * xr[i];
    ss = block_sum(ss, red);
    float inv = 1.0f / sqrtf(ss / (float)cols + eps);
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) o[i] = w ? w[i] * (xr[i] * inv) : xr[i] * inv;
}

__global__ void rmsnorm_vec_kernel(float *out, int64_t ldo, const float *x, int64_t ldx, const float *w, int cols, float eps) {
    pdl_begin();
    __shared__ float red[33];
    const float4 *xr = (const float4 *)(x + blockIdx.x * ldx);
    float4 *o = (float4 *)(out + blockIdx.x * ldo), v[RN_VEC];
    int n4 = cols >> 2;
    float ss = 0.0f;
#pragma unroll
    for (int u = 0; u < RN_VEC; u++) {
        int i = threadIdx.x + u * blockDim.x;
        v[u] = i < n4 ? xr[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int u = 0; u < RN_VEC; u++) ss += v[u].x * v[u].x + v[u].y * v[u].y + v[u].z * v[u].z + v[u].w * v[u].w;
    ss = block_sum(ss, red);
    float inv = 1.0f / sqrtf(ss / (float)cols + eps);
#pragma unroll
    for (int u = 0; u < RN_VEC; u++) {
        int i = threadIdx.x + u * blockDim.x;
        if (i >= n4) break;
        float4 g = w ? ((const float4 *)w)[i] : make_float4(1.0f, 1.0f, 1.0f, 1.0f), r;
        r.x = w ? g.x * (v[u].x * inv) : v[u].x * inv, r.y = w ? g.y * (v[u].y * inv) : v[u].y * inv;
        r.z = w ? g.z * (v[u].z * inv) : v[u].z * inv, r.w = w ? g.w * (v[u].w * inv) : v[u].w * inv;
        o[i] = r;
    }
}

extern "C" cudaError_t k_rmsnorm(float *out, int64_t ldo, const float *x, int64_t ldx, const float *w, int64_t rows,
                                 int64_t cols, float eps, cudaStream_t s) {
    if (rows <= 0) return cudaSuccess;
    bool vec = cols % 4 == 0 && cols <= 4 * RN_VEC * 512 && (uintptr_t)x % 16 == 0 && (uintptr_t)out % 16 == 0 &&
               (!w || (uintptr_t)w % 16 == 0) && ldx % 4 == 0 && ldo % 4 == 0;
    if (vec) {
        int threads = cols >= 4 * RN_VEC * 256 ? 512 : cols >= 4 * RN_VEC * 128 ? 256 : 128;
        return k_launch(rmsnorm_vec_kernel, (unsigned)rows, threads, 0, s, out, ldo, x, ldx, w, (int)cols, eps);
    }
    int threads = cols >= 1024 ? 512 : cols >= 256 ? 256 : 128;
    return k_launch(rmsnorm_kernel, (unsigned)rows, threads, 0, s, out, ldo, x, ldx, w, cols, eps);
}
