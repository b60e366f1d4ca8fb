// Hyper-connection coefficients (MODEL_V41 §5.3) per row in fp32: the row's RMS over all hc
// streams scales the fn mixes, then pre, post and the Sinkhorn-projected C (the CPU
// backend's mix_row, operation for operation; the Sinkhorn steps in one warp, a lane per
// entry). coef may alias mixes. A decode row is one block's work, so the block is wide and
// issues every load of the row (and its mixes) before it adds any: one memory round trip.
#include "common.cuh"

#define HC_MAX 16
#define HC_THREADS 1024
#define HC_VEC 8 // 16-byte loads per thread in flight: 128 KB per pass of the block

static_assert(HC_THREADS >= (2 + HC_MAX) * HC_MAX, "a thread per mix");

// Sinkhorn on C (hc x hc in shared memory) in the first warp: lane t owns entries t, t + 32, ...
// and sums their row or column in the CPU's order. HC: hc when known at compile time, else 0.
template <int HC> __device__ __forceinline__ void sinkhorn(float *C, int hc_rt, float hc_eps, int iters) {
    const int hc = HC ? HC : hc_rt, Q = HC ? (HC * HC + 31) / 32 : HC_MAX * HC_MAX / 32;
    int t = threadIdx.x, rows[Q], cols[Q];
#pragma unroll
    for (int q = 0; q < Q; q++) rows[q] = (t + 32 * q) / hc * hc, cols[q] = (t + 32 * q) % hc;
    for (int it = 0; it < iters; it++)
        for (int pass = it ? 0 : 1; pass < 2; pass++) { /* 0: rows, 1: columns */
            float v[Q];
#pragma unroll
            for (int q = 0; q < Q; q++) {
                int e = t + 32 * q;
                if (e >= hc * hc) break;
                float s = 0.0f;
#pragma unroll
                for (int b = 0; b < (HC ? HC : HC_MAX); b++) {
                    if (!HC && b >= hc) break;
                    s += pass ? C[b * hc + cols[q]] : C[rows[q] + b];
                }
                v[q] = C[e] / (s + hc_eps);
            }
            __syncwarp();
#pragma unroll
            for (int q = 0; q < Q; q++)
                if (t + 32 * q < hc * hc) C[t + 32 * q] = v[q];
            __syncwarp();
        }
}

__global__ void __launch_bounds__(HC_THREADS) hc_mix_kernel(float *coef, int64_t ldc, const float *mixes, int64_t ldm,
                                                            const float *X, int64_t ldx, int64_t xcols, const float *base,
                                                            const float *sc, int hc, float eps, float hc_eps, int iters) {
    pdl_begin();
    __shared__ float red[33];
    __shared__ float m[(2 + HC_MAX) * HC_MAX], C[HC_MAX * HC_MAX];
    int nm = (2 + hc) * hc, t = threadIdx.x, hh = hc * hc;
    const float *x = X + blockIdx.x * ldx;
    float mix = t < nm ? mixes[blockIdx.x * ldm + t] : 0.0f; /* loaded with the row */
    float ss = 0.0f;
    if (xcols % 4 == 0 && (uintptr_t)x % 16 == 0) {
        const float4 *x4 = (const float4 *)x;
        int64_t n4 = xcols >> 2;
        for (int64_t i = t; i < n4; i += HC_VEC * blockDim.x) {
            float4 v[HC_VEC];
#pragma unroll
            for (int u = 0; u < HC_VEC; u++) v[u] = i + u * blockDim.x < n4 ? x4[i + u * blockDim.x] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
            for (int u = 0; u < HC_VEC; u++) ss += v[u].x * v[u].x + v[u].y * v[u].y + v[u].z * v[u].z + v[u].w * v[u].w;
        }
    } else {
        for (int64_t i = t; i < xcols; i += blockDim.x) ss += x[i] * x[i];
    }
    ss = block_sum(ss, red);
    float inv = 1.0f / sqrtf(ss / (float)xcols + eps);
    if (t < nm) m[t] = mix * inv;
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
    if (hc == 4) sinkhorn<4>(C, hc, hc_eps, iters); /* the model's hc_mult */
    else sinkhorn<0>(C, hc, hc_eps, iters);
    for (int e = t; e < hh; e += 32) o[2 * hc + e] = C[e];
}

extern "C" cudaError_t k_hc_mix(float *coef, int64_t ldc, const float *mixes, int64_t ldm, const float *X, int64_t ldx,
                                int64_t rows, int64_t xcols, const float *base, const float *scale, int hc, float eps,
                                float hc_eps, int iters, cudaStream_t s) {
    if (rows <= 0) return cudaSuccess;
    if (hc > HC_MAX) return cudaErrorInvalidValue;
    return k_launch(hc_mix_kernel, (unsigned)rows, HC_THREADS, 0, s, coef, ldc, mixes, ldm, X, ldx, xcols, base, scale, hc,
                    eps, hc_eps, iters);
}
