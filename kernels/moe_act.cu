// Expert activation: h = weight * silu(min(g, limit)) * clamp(u, -limit, limit), fp32.
#include "common.cuh"

__global__ void moe_act_kernel(float *h, const float *g, const float *u, const float *wpos, int64_t P, int64_t I,
                               float limit) {
    pdl_begin();
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= P * I) return;
    float a = moe_act_dev(g[i], u[i], limit);
    h[i] = wpos ? wpos[i / I] * a : a;
}

extern "C" cudaError_t k_moe_act(float *h, const float *g, const float *u, const float *wpos, int64_t P, int64_t I,
                                 float limit, cudaStream_t s) {
    if (P * I <= 0) return cudaSuccess;
    return k_launch(moe_act_kernel, (unsigned)ceil_div(P * I, 256), 256, 0, s, h, g, u, wpos, P, I, limit);
}
