// Engram write (MODEL_V41 §5.2), in fp32: per row and stream k, the gate from the normalized
// dot of the stream, qk and the key, then X_k += g * V. One block of 1024 threads per (row,
// stream): a decode step's four blocks are its whole grid.
#include "common.cuh"

__global__ void engram_gate_kernel(float *X, int64_t ldx, const float *kv, int64_t ldkv, const float *qk, int64_t ldqk,
                                   int64_t D, int hc, float eps) {
    pdl_begin();
    __shared__ float red[33];
    int64_t r = blockIdx.y;
    int k = blockIdx.x;
    float *h = X + r * ldx + k * D;
    const float *key = kv + r * ldkv + k * D, *V = kv + r * ldkv + hc * D, *w = qk + k * ldqk;
    float dot = 0.0f, sh = 0.0f, sk = 0.0f;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
        dot += h[d] * w[d] * key[d];
        sh += h[d] * h[d];
        sk += key[d] * key[d];
    }
    dot = block_sum(dot, red);
    sh = block_sum(sh, red);
    sk = block_sum(sk, red);
    float scale = (float)(1.0 / sqrt((double)D));
    float rstd = (1.0f / sqrtf(sh / (float)D + eps)) * (1.0f / sqrtf(sk / (float)D + eps));
    dot = dot * rstd * scale;
    float g = sigmoid_dev(copysignf(sqrtf(fmaxf(fabsf(dot), 1e-6f)), dot));
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) h[d] += g * V[d];
}

extern "C" cudaError_t k_engram_gate(float *X, int64_t ldx, const float *kv, int64_t ldkv, const float *qk, int64_t ldqk,
                                     int64_t rows, int64_t D, int hc, float eps, cudaStream_t s) {
    if (rows <= 0) return cudaSuccess;
    return k_launch(engram_gate_kernel, dim3((unsigned)hc, (unsigned)rows), 1024, 0, s, X, ldx, kv, ldkv, qk, ldqk, D, hc, eps);
}
