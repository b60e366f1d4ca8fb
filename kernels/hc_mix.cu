// Hyper-connection coefficients (MODEL_V41 §5.3) per row in fp32: the row's RMS over all hc
// streams scales the fn mixes, then pre, post and the Sinkhorn-projected C (the CPU
// backend's mix_row, operation for operation; the Sinkhorn steps in one warp, a lane per
// entry). coef may alias mixes.
#include "common.cuh"

#define HC_MAX 16

__global__ void hc_mix_kernel(float *coef, int64_t ldc, const float *mixes, int64_t ldm, const float *X, int64_t ldx,
                              int64_t xcols, const float *base, const float *sc, int hc, float eps, float hc_eps,
                              int iters) {
    __shared__ float red[33];
    __shared__ float m[(2 + HC_MAX) * HC_MAX], C[HC_MAX * HC_MAX];
    int nm = (2 + hc) * hc, t = threadIdx.x, hh = hc * hc;
    const float *x = X + blockIdx.x * ldx;
    float ss = 0.0f;
    if (xcols % 4 == 0 && (uintptr_t)x % 16 == 0) { /* 16-byte loads, four in flight */
        const float4 *x4 = (const float4 *)x;
        int64_t n4 = xcols >> 2;
        for (int64_t i = t; i < n4; i += 4 * blockDim.x) {
            float4 v[4];
#pragma unroll
            for (int u = 0; u < 4; u++) v[u] = i + u * blockDim.x < n4 ? x4[i + u * blockDim.x] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
            for (int u = 0; u < 4; u++) ss += v[u].x * v[u].x + v[u].y * v[u].y + v[u].z * v[u].z + v[u].w * v[u].w;
        }
    } else {
        for (int64_t i = t; i < xcols; i += blockDim.x) ss += x[i] * x[i];
    }
    ss = block_sum(ss, red);
    float inv = 1.0f / sqrtf(ss / (float)xcols + eps);
    const float *mix = mixes + blockIdx.x * ldm;
    for (int i = t; i < nm; i += blockDim.x) m[i] = mix[i] * inv;
    __syncthreads();
    float *o = coef + blockIdx.x * ldc;
    if (t < hc) { /* pre, post, and row t of C through its softmax */
        o[t] = sigmoid_dev(m[t] * sc[0] + base[t]) + hc_eps;
        o[hc + t] = 2.0f * sigmoid_dev(m[hc + t] * sc[1] + base[hc + t]);
        float *row = C + t * hc, mx = -INFINITY, s = 0.0f;
        for (int j = 0; j < hc; j++) {
            row[j] = m[2 * hc + t * hc + j] * sc[2] + base[2 * hc + t * hc + j];
            mx = fmaxf(mx, row[j]);
        }
        for (int j = 0; j < hc; j++) s += row[j] = expf(row[j] - mx);
        for (int j = 0; j < hc; j++) row[j] = row[j] / s + hc_eps;
    }
    __syncthreads();
    if (t >= 32) return;
    /* Sinkhorn in the first warp: lane t owns entries t, t + 32, ... and sums their row or
     * column in the CPU's order */
    for (int it = 0; it < iters; it++)
        for (int pass = it ? 0 : 1; pass < 2; pass++) { /* 0: rows, 1: columns */
            float v[HC_MAX * HC_MAX / 32];
#pragma unroll
            for (int q = 0; q < HC_MAX * HC_MAX / 32; q++) {
                int e = t + 32 * q, i = e / hc, j = e % hc;
                if (e >= hh) break;
                float s = 0.0f;
                for (int b = 0; b < hc; b++) s += pass ? C[b * hc + j] : C[i * hc + b];
                v[q] = C[e] / (s + hc_eps);
            }
            __syncwarp();
#pragma unroll
            for (int q = 0; q < HC_MAX * HC_MAX / 32; q++)
                if (t + 32 * q < hh) C[t + 32 * q] = v[q];
            __syncwarp();
        }
    for (int e = t; e < hh; e += 32) o[2 * hc + e] = C[e];
}

extern "C" cudaError_t k_hc_mix(float *coef, int64_t ldc, const float *mixes, int64_t ldm, const float *X, int64_t ldx,
                                int64_t rows, int64_t xcols, const float *base, const float *scale, int hc, float eps,
                                float hc_eps, int iters, cudaStream_t s) {
    if (rows <= 0) return cudaSuccess;
    if (hc > HC_MAX) return cudaErrorInvalidValue;
    hc_mix_kernel<<<(unsigned)rows, 256, 0, s>>>(coef, ldc, mixes, ldm, X, ldx, xcols, base, scale, hc, eps, hc_eps, iters);
    return DI_LAUNCHED();
}
